//! The fields of an EndpointSlice document that backends are built from, as serde
//! reads them from JSON and YAML alike. Everything else is tolerated and skipped
//! unread; a field we read that does not fit refuses the document.

use std::{collections::BTreeMap, time::SystemTime};

use serde::{Deserialize, de::IgnoredAny};

/// A document as the fast paths read it: type fields, a list's items, and the slice
/// fields of [`RawSlice`] (kept flat: `#[serde(flatten)]` would buffer everything).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawDoc {
    pub(super) kind: Option<String>,
    pub(super) api_version: Option<String>,
    pub(super) items: Option<Vec<RawDoc>>,
    #[serde(default)]
    metadata: RawMeta,
    address_type: Option<String>,
    endpoints: Option<Vec<RawEndpoint>>,
    ports: Option<Vec<RawPort>>,
}

impl RawDoc {
    pub(super) fn into_slice(self) -> RawSlice {
        RawSlice {
            metadata: self.metadata,
            address_type: self.address_type,
            endpoints: self.endpoints,
            ports: self.ports,
        }
    }
}

/// The fields we read; everything else is tolerated and ignored.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawSlice {
    #[serde(default)]
    pub(super) metadata: RawMeta,
    pub(super) address_type: Option<String>,
    #[serde(default)]
    pub(super) endpoints: Option<Vec<RawEndpoint>>,
    #[serde(default)]
    pub(super) ports: Option<Vec<RawPort>>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawMeta {
    pub(super) name: Option<String>,
    pub(super) namespace: Option<String>,
    pub(super) labels: Option<BTreeMap<String, Option<String>>>,
    /// Read as a time right here, so that a bad one refuses the document with its
    /// path and line.
    #[serde(default, deserialize_with = "creation_time")]
    pub(super) creation_timestamp: Option<SystemTime>,
}

/// `metadata.creationTimestamp`: RFC 3339, or null. Parsed inside the string visitor,
/// so that the reader attaches the field's own line to an error.
fn creation_time<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
    struct Time;
    impl serde::de::Visitor<'_> for Time {
        type Value = SystemTime;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an RFC 3339 time")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<SystemTime, E> {
            crate::units::parse_rfc3339(text).map_err(E::custom)
        }
    }
    struct MaybeTime;
    impl<'de> serde::de::Visitor<'de> for MaybeTime {
        type Value = Option<SystemTime>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an RFC 3339 time or null")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(Time).map(Some)
        }
    }
    d.deserialize_option(MaybeTime)
}

#[derive(Deserialize)]
pub(super) struct RawEndpoint {
    #[serde(default)]
    pub(super) addresses: Option<Vec<String>>,
    #[serde(default)]
    pub(super) conditions: Option<RawConditions>,
}

#[derive(Default, Deserialize)]
pub(super) struct RawConditions {
    pub(super) ready: Option<bool>,
    pub(super) serving: Option<bool>,
    pub(super) terminating: Option<bool>,
}

#[derive(Deserialize)]
pub(super) struct RawPort {
    pub(super) name: Option<String>,
    pub(super) protocol: Option<String>,
    #[serde(default)]
    pub(super) port: PortNumber,
}

/// A port's `port` as written: an integer that fits `i64`, or nothing. Anything else —
/// null, a string, a float, an integer beyond `i64`, a list — makes the port unusable
/// rather than the document malformed, as for kube-proxy, which skips such ports
/// (`13-apimachinery-fuzz-fixture.json` has them).
#[derive(Default)]
pub(super) struct PortNumber(pub(super) Option<i64>);

impl<'de> Deserialize<'de> for PortNumber {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Number;
        impl<'de> serde::de::Visitor<'de> for Number {
            type Value = Option<i64>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a port number")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Some(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(i64::try_from(v).ok())
            }
            fn visit_i128<E>(self, v: i128) -> Result<Self::Value, E> {
                Ok(i64::try_from(v).ok())
            }
            fn visit_u128<E>(self, v: u128) -> Result<Self::Value, E> {
                Ok(i64::try_from(v).ok())
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_bytes<E>(self, _: &[u8]) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_some<D: serde::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<Self::Value, D::Error> {
                d.deserialize_any(self)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                s: A,
            ) -> Result<Self::Value, A::Error> {
                serde::de::Visitor::visit_seq(IgnoredAny, s).map(|_| None)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                m: A,
            ) -> Result<Self::Value, A::Error> {
                serde::de::Visitor::visit_map(IgnoredAny, m).map(|_| None)
            }
        }
        d.deserialize_any(Number).map(PortNumber)
    }
}
