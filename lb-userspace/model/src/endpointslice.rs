//! Kubernetes `discovery.k8s.io/v1` EndpointSlice documents → backends per service port.
//!
//! Follows the semantics kube-proxy implements (shared/testdata/endpointslices/
//! schema-notes.md):
//! - accepted: `discovery.k8s.io/v1` `EndpointSlice` objects, alone, in multi-document
//!   YAML, in an `EndpointSliceList` (items without kind/apiVersion) or a kubectl `List`;
//!   everything else is ignored with a reason;
//! - addressType `IPv4`/`IPv6` only (FQDN and unknown types ignored, never sniffed);
//! - the slice's service is `(namespace, kubernetes.io/service-name label)`; no label, no
//!   service;
//! - only an endpoint's first address is used (as kube-proxy does), canonicalised;
//! - conditions: nil `ready` and nil `serving` mean true, nil `terminating` false; ready
//!   endpoints take new flows, serving+terminating ones only drain — unless a service
//!   port has no ready endpoint, then they take new flows too (kube-proxy's fallback);
//! - ports: name defaults to `""`, protocol to `TCP`; a nil, zero or out-of-range port is
//!   unusable, and a slice without usable ports gives no backends;
//! - duplicates (same address and port across slices) keep the non-terminating copy;
//! - a document that is a `discovery.k8s.io/v1` `EndpointSlice` but does not fit its
//!   schema (a `creationTimestamp` that is not RFC 3339, a port that is not a number,
//!   …) refuses the whole file with the document's field and line: the API server
//!   would not have stored it, and taking the rest of the file would silently drop
//!   that slice's endpoints.

use std::{collections::BTreeMap, net::IpAddr, time::SystemTime};

use serde::Deserialize;

/// A backend's state from its conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EndpointState {
    /// Ready: new and existing flows.
    Ready,
    /// Serving but terminating: existing flows only (new ones only as a fallback).
    Draining,
}

/// One usable endpoint of a slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The first address, canonical.
    pub addr: IpAddr,
    /// Its state.
    pub state: EndpointState,
}

/// One usable port of a slice.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlicePort {
    /// Port name (`""` when unnamed): the join key to the Service's port.
    pub name: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The target port.
    pub port: u16,
}

/// An accepted EndpointSlice, reduced to what backends are built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    /// Namespace (`default` when absent).
    pub namespace: String,
    /// The `kubernetes.io/service-name` label.
    pub service: String,
    /// The slice's own name.
    pub name: String,
    /// Whether the addresses are IPv6.
    pub ipv6: bool,
    /// `metadata.creationTimestamp`, when present and valid (a fade-in input).
    pub created: Option<SystemTime>,
    /// Usable ports.
    pub ports: Vec<SlicePort>,
    /// Usable endpoints (excluded ones dropped).
    pub endpoints: Vec<Endpoint>,
}

/// A document that was not ingested, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ignored {
    /// 0-based index of the document in its file (items of a list count separately).
    pub index: usize,
    /// Why.
    pub reason: String,
}

/// A file's contents: accepted slices and ignored documents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Accepted slices.
    pub slices: Vec<Slice>,
    /// Ignored documents.
    pub ignored: Vec<Ignored>,
}

/// Why a file of EndpointSlices was refused as a whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SliceError {
    /// Not YAML or JSON.
    #[error("{message}")]
    Syntax {
        /// The YAML parser's message, with its line and column.
        message: String,
    },
    /// A `discovery.k8s.io/v1` `EndpointSlice` that does not fit the schema.
    #[error("document {document}: malformed EndpointSlice: {message}")]
    Malformed {
        /// 0-based index of the document in the file (a list counts once).
        document: usize,
        /// The field, what is wrong with it, and its line and column where known.
        message: String,
    },
}

/// Parses a file of one or more YAML or JSON documents.
///
/// # Errors
/// [`SliceError`]: text that is not YAML/JSON at all, or a malformed EndpointSlice,
/// with the location.
pub fn parse(text: &str) -> Result<Parsed, SliceError> {
    // JSON (`kubectl get -o json`, what an API client or etcd holds): a JSON reader
    // allocates only for the fields kept. Any failure falls through to the YAML
    // reader, which reads JSON too and reports precisely.
    if text.trim_start().starts_with(['{', '['])
        && let Some(docs) = typed_json(text)
    {
        return Ok(from_typed(docs));
    }
    // Fast path: every document straight into the fields we read, the rest skipped
    // without being built (a tenth of the allocations). A file with any document
    // that does not fit those types — ignored or malformed ones, bad YAML — is read
    // again as generic values, which gives the precise per-document reasons.
    match typed_yaml(text) {
        Some(docs) => Ok(from_typed(docs)),
        None => parse_generic(text),
    }
}

/// Every JSON document of `text` as a [`RawDoc`], or `None` if any does not fit.
fn typed_json(text: &str) -> Option<Vec<Option<RawDoc>>> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Option<RawDoc>>()
        .collect::<Result<_, _>>()
        .ok()
}

/// Every YAML document of `text` as a [`RawDoc`], or `None` if any does not fit.
fn typed_yaml(text: &str) -> Option<Vec<Option<RawDoc>>> {
    serde_yaml::Deserializer::from_str(text)
        .map(Option::<RawDoc>::deserialize)
        .collect::<Result<_, _>>()
        .ok()
}

/// [`parse`] for documents that all fit [`RawDoc`].
fn from_typed(docs: Vec<Option<RawDoc>>) -> Parsed {
    let mut out = Parsed::default();
    let mut index = 0;
    for doc in docs.into_iter().flatten() {
        match doc.kind.as_deref() {
            Some(list @ ("EndpointSliceList" | "List")) => {
                let inherit = (list == "EndpointSliceList")
                    .then(|| ("EndpointSlice".to_owned(), doc.api_version.clone()));
                for item in doc.items.unwrap_or_default() {
                    let (kind, api) = match &inherit {
                        Some((k, a)) => (Some(k.clone()), a.clone()),
                        None => (item.kind.clone(), item.api_version.clone()),
                    };
                    let taken: Result<(), std::convert::Infallible> =
                        accept_raw(kind, api, || Ok(item.into_slice()), index, &mut out);
                    let Ok(()) = taken;
                    index += 1;
                }
            }
            _ => {
                let (kind, api) = (doc.kind.clone(), doc.api_version.clone());
                let taken: Result<(), std::convert::Infallible> =
                    accept_raw(kind, api, || Ok(doc.into_slice()), index, &mut out);
                let Ok(()) = taken;
                index += 1;
            }
        }
    }
    out
}

/// [`parse`] through generic values: slower, but reports each document on its own.
fn parse_generic(text: &str) -> Result<Parsed, SliceError> {
    let mut out = Parsed::default();
    let mut index = 0;
    for (document, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = serde_yaml::Value::deserialize(doc).map_err(|e| SliceError::Syntax {
            message: e.to_string(),
        })?;
        if value.is_null() {
            continue; // an empty document (e.g. a trailing `---`)
        }
        let kind = str_field(&value, "kind");
        let api = str_field(&value, "apiVersion");
        match kind.as_deref() {
            Some("EndpointSliceList") | Some("List") => {
                let items = match value {
                    serde_yaml::Value::Mapping(mut m) => match m.remove("items") {
                        Some(serde_yaml::Value::Sequence(items)) => items,
                        _ => Vec::new(),
                    },
                    _ => Vec::new(),
                };
                for item in items {
                    // EndpointSliceList items carry no TypeMeta: they inherit the list's.
                    let inherit = if kind.as_deref() == Some("EndpointSliceList") {
                        Some(("EndpointSlice".to_owned(), api.clone()))
                    } else {
                        None
                    };
                    accept(item, inherit, index, &mut out)
                        .map_err(|e| malformed(text, document, e))?;
                    index += 1;
                }
            }
            _ => {
                accept(value, None, index, &mut out).map_err(|e| malformed(text, document, e))?;
                index += 1;
            }
        }
    }
    Ok(out)
}

/// The error for document `document` of `text`, which holds a malformed slice that
/// failed with `error`. Generic values carry no positions, so the document is read
/// again straight from the text, which gives the field's path and line.
fn malformed(text: &str, document: usize, error: serde_yaml::Error) -> SliceError {
    let located = serde_yaml::Deserializer::from_str(text)
        .nth(document)
        .and_then(|doc| RawDoc::deserialize(doc).err());
    SliceError::Malformed {
        document,
        message: located.unwrap_or(error).to_string(),
    }
}

fn str_field(v: &serde_yaml::Value, key: &str) -> Option<String> {
    v.get(key).and_then(|s| s.as_str()).map(str::to_owned)
}

/// A document as the fast path reads it: type fields, a list's items, and the slice
/// fields of [`RawSlice`] (kept flat: `#[serde(flatten)]` would buffer everything).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDoc {
    kind: Option<String>,
    api_version: Option<String>,
    items: Option<Vec<RawDoc>>,
    #[serde(default)]
    metadata: RawMeta,
    address_type: Option<String>,
    endpoints: Option<Vec<RawEndpoint>>,
    ports: Option<Vec<RawPort>>,
}

impl RawDoc {
    fn into_slice(self) -> RawSlice {
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
struct RawSlice {
    #[serde(default)]
    metadata: RawMeta,
    address_type: Option<String>,
    #[serde(default)]
    endpoints: Option<Vec<RawEndpoint>>,
    #[serde(default)]
    ports: Option<Vec<RawPort>>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMeta {
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<BTreeMap<String, Option<String>>>,
    /// Read as a time right here, so that a bad one refuses the document with its
    /// path and line.
    #[serde(default, deserialize_with = "creation_time")]
    creation_timestamp: Option<SystemTime>,
}

/// `metadata.creationTimestamp`: RFC 3339, or null. Parsed inside the string visitor,
/// so that the YAML reader attaches the field's own path and line to an error.
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
struct RawEndpoint {
    #[serde(default)]
    addresses: Option<Vec<String>>,
    #[serde(default)]
    conditions: Option<RawConditions>,
}

#[derive(Default, Deserialize)]
struct RawConditions {
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
}

#[derive(Deserialize)]
struct RawPort {
    name: Option<String>,
    protocol: Option<String>,
    port: Option<serde_yaml::Value>,
}

const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";

/// Takes the document by value: deserializing moves out of it instead of copying a
/// whole tree per slice.
///
/// # Errors
/// The document is an EndpointSlice that does not fit the schema.
fn accept(
    value: serde_yaml::Value,
    inherit: Option<(String, Option<String>)>,
    index: usize,
    out: &mut Parsed,
) -> Result<(), serde_yaml::Error> {
    let (kind, api) = match inherit {
        Some((k, a)) => (Some(k), a),
        None => (str_field(&value, "kind"), str_field(&value, "apiVersion")),
    };
    accept_raw(kind, api, || serde_yaml::from_value(value), index, out)
}

/// Checks the type fields, then takes the slice `read` gives (or records why it is
/// not ours).
///
/// # Errors
/// What `read` failed with: the document is an EndpointSlice that does not fit.
fn accept_raw<E>(
    kind: Option<String>,
    api: Option<String>,
    read: impl FnOnce() -> Result<RawSlice, E>,
    index: usize,
    out: &mut Parsed,
) -> Result<(), E> {
    let ignore = |out: &mut Parsed, reason: String| {
        out.ignored.push(Ignored { index, reason });
        Ok(())
    };
    if kind.as_deref() != Some("EndpointSlice") {
        return ignore(out, format!("kind {kind:?} is not EndpointSlice"));
    }
    if api.as_deref() != Some("discovery.k8s.io/v1") {
        return ignore(
            out,
            format!("apiVersion {api:?} is not discovery.k8s.io/v1"),
        );
    }
    let raw = read()?;
    let name = raw.metadata.name.clone().unwrap_or_default();
    let ipv6 = match raw.address_type.as_deref() {
        Some("IPv4") => false,
        Some("IPv6") => true,
        other => {
            return ignore(
                out,
                format!("slice {name:?}: addressType {other:?} is not IPv4 or IPv6"),
            );
        }
    };
    let service = raw
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SERVICE_NAME).cloned().flatten())
        .filter(|s| !s.is_empty());
    let Some(service) = service else {
        return ignore(
            out,
            format!("slice {name:?}: no {LABEL_SERVICE_NAME} label"),
        );
    };
    let ports = raw
        .ports
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| {
            let port = p.port.as_ref().and_then(serde_yaml::Value::as_i64)?;
            let port = u16::try_from(port).ok().filter(|&p| p > 0)?;
            Some(SlicePort {
                name: p.name.unwrap_or_default(),
                protocol: p.protocol.unwrap_or_else(|| "TCP".into()),
                port,
            })
        })
        .collect();
    let endpoints = raw
        .endpoints
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            let first = e.addresses.as_ref()?.first()?;
            let addr: IpAddr = first.parse().ok()?;
            let addr = canonical(addr);
            if addr.is_ipv6() != ipv6 {
                return None;
            }
            let c = e.conditions.unwrap_or_default();
            let (ready, serving, terminating) = (
                c.ready.unwrap_or(true),
                c.serving.unwrap_or(true),
                c.terminating.unwrap_or(false),
            );
            let state = if ready {
                EndpointState::Ready
            } else if serving && terminating {
                EndpointState::Draining
            } else {
                return None;
            };
            Some(Endpoint { addr, state })
        })
        .collect();
    out.slices.push(Slice {
        namespace: raw.metadata.namespace.unwrap_or_else(|| "default".into()),
        service,
        name,
        ipv6,
        created: raw.metadata.creation_timestamp,
        ports,
        endpoints,
    });
    Ok(())
}

/// IPv4-mapped IPv6 addresses as IPv4; everything else as parsed (already canonical).
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// A backend of one service port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortBackend {
    /// Address.
    pub addr: IpAddr,
    /// Target port.
    pub port: u16,
    /// State.
    pub state: EndpointState,
}

/// `(namespace, service)`.
pub type ServiceKey = (String, String);
/// `(port name, protocol)`.
pub type PortKey = (String, String);

/// Backends per service port, per service.
pub type ServiceBackends = BTreeMap<ServiceKey, BTreeMap<PortKey, Vec<PortBackend>>>;

/// Every service's backends, per service port, from a set of slices.
pub fn backends<'a>(slices: impl IntoIterator<Item = &'a Slice>) -> ServiceBackends {
    type States = BTreeMap<(IpAddr, u16), EndpointState>;
    let mut out: BTreeMap<ServiceKey, BTreeMap<PortKey, States>> = BTreeMap::new();
    for slice in slices {
        let service = out
            .entry((slice.namespace.clone(), slice.service.clone()))
            .or_default();
        for port in &slice.ports {
            let set = service
                .entry((port.name.clone(), port.protocol.clone()))
                .or_default();
            for ep in &slice.endpoints {
                let state = set.entry((ep.addr, port.port)).or_insert(ep.state);
                // A duplicate keeps the non-terminating copy.
                *state = (*state).min(ep.state);
            }
        }
    }
    out.into_iter()
        .map(|(svc, ports)| {
            let ports = ports
                .into_iter()
                .map(|(k, set)| {
                    let list = set
                        .into_iter()
                        .map(|((addr, port), state)| PortBackend { addr, port, state })
                        .collect();
                    (k, list)
                })
                .collect();
            (svc, ports)
        })
        .collect()
}

/// The backends that take new flows: the ready ones, or if there are none the draining
/// ones (kube-proxy's fallback).
pub fn for_new_flows(list: &[PortBackend]) -> Vec<&PortBackend> {
    let ready: Vec<&PortBackend> = list
        .iter()
        .filter(|b| b.state == EndpointState::Ready)
        .collect();
    if ready.is_empty() {
        list.iter()
            .filter(|b| b.state == EndpointState::Draining)
            .collect()
    } else {
        ready
    }
}

#[cfg(test)]
mod tests;
