//! Label sets (structs deriving `EncodeLabelSet`) and label values of the exposition.
//!
//! A value that names a kind of thing is an enum, written by its `as_str`; the data
//! plane's own enums ([`XdpAction`], [`Reason`]) are wrapped so their labels are the
//! names `lb-common` defines. Free text (service names, VIPs, locations) is a
//! [`Shared`] string: allocated once per scrape, cloned by reference count into every
//! series that carries it.

use std::{fmt::Write as _, net::IpAddr, sync::Arc};

use lb_common::{Reason, XdpAction};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

/// Implements `EncodeLabelValue` for a type with `fn as_str(&self) -> &'static str`.
macro_rules! label_value_by_name {
    ($($ty:ty),+) => {$(
        impl EncodeLabelValue for $ty {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
                encoder.write_str(self.as_str())
            }
        }
    )+};
}

/// The `verdict` label: what the XDP program did with the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Verdict(pub XdpAction);

impl Verdict {
    /// `pass`, `tx`, `redirect` or `drop`.
    pub const fn as_str(&self) -> &'static str {
        self.0.as_str()
    }
}

/// The `reason` label of a verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Why(pub Reason);

impl Why {
    /// The reason's snake_case name (`no_route`, `nat_reply`, `forwarded` …).
    pub const fn as_str(&self) -> &'static str {
        self.0.as_str()
    }
}

/// A flow table of the data plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowTable {
    /// Established `dsr` flows (`node.conntrack_entries`).
    Established,
    /// Half-open flows (`node.embryonic_entries`).
    Embryonic,
    /// `nat` ports in use (`node.nat_entries`).
    Nat,
}

impl FlowTable {
    /// `established`, `embryonic` or `nat`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            FlowTable::Established => "established",
            FlowTable::Embryonic => "embryonic",
            FlowTable::Nat => "nat",
        }
    }
}

/// How a `nat` flow ended when its port was released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Release {
    /// Both FINs.
    Fin,
    /// A RST.
    Rst,
    /// A timeout.
    Timeout,
}

impl Release {
    /// `fin`, `rst` or `timeout`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Release::Fin => "fin",
            Release::Rst => "rst",
            Release::Timeout => "timeout",
        }
    }
}

/// The class of an HTTP status code, in the order of
/// [`lb_l7::stats::L7ServiceStats::responses`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatusClass {
    /// 1xx.
    Informational,
    /// 2xx.
    Success,
    /// 3xx.
    Redirection,
    /// 4xx.
    ClientError,
    /// 5xx.
    ServerError,
}

impl StatusClass {
    /// Every class, in the order of `L7ServiceStats::responses`.
    pub const ALL: [StatusClass; 5] = [
        StatusClass::Informational,
        StatusClass::Success,
        StatusClass::Redirection,
        StatusClass::ClientError,
        StatusClass::ServerError,
    ];

    /// `1xx` … `5xx`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            StatusClass::Informational => "1xx",
            StatusClass::Success => "2xx",
            StatusClass::Redirection => "3xx",
            StatusClass::ClientError => "4xx",
            StatusClass::ServerError => "5xx",
        }
    }
}

label_value_by_name!(Verdict, Why, FlowTable, Release, StatusClass);

/// Free text shared by many series: one allocation per scrape, cloned by reference
/// count.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shared(Arc<str>);

impl From<&str> for Shared {
    fn from(s: &str) -> Self {
        Self(s.into())
    }
}

impl EncodeLabelValue for Shared {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(&self.0)
    }
}

/// A backend's address, formatted straight into the label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Addr(pub IpAddr);

impl EncodeLabelValue for Addr {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        write!(encoder, "{}", self.0)
    }
}

/// `lbd_xdp_verdicts_total`: the action and why.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct VerdictLabels {
    /// What the program did.
    pub verdict: Verdict,
    /// Why.
    pub reason: Why,
}

/// `lbd_flow_table_*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TableLabels {
    /// Which table.
    pub table: FlowTable,
}

/// `lbd_nat_released_total`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReleaseLabels {
    /// How the flow ended.
    pub reason: Release,
}

/// A service: `lbd_vip_*`, `lbd_table_size`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ServiceLabels {
    /// Its name.
    pub service: Shared,
    /// `addr:port/proto`.
    pub vip: Shared,
}

/// `lbd_table_info`: a service and the digest of its table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TableInfoLabels {
    /// The service.
    #[prometheus(flatten)]
    pub service: ServiceLabels,
    /// 16 hex digits.
    pub digest: Shared,
}

/// A backend of a service: `lbd_backend_*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct BackendLabels {
    /// The service.
    #[prometheus(flatten)]
    pub service: ServiceLabels,
    /// The backend's address.
    pub backend: Addr,
}

/// A source of services or endpoints: `lbd_source_*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SourceLabels {
    /// `config`, `endpointslices`, `etcd` or `routes`.
    pub kind: Shared,
    /// The file, directory or etcd endpoints and prefix.
    pub location: Shared,
}

/// `lbd_build_info`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct BuildLabels {
    /// lbd's version.
    pub version: Shared,
}

/// An `l7` service: `lbd_l7_*_total{service}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct L7ServiceLabels {
    /// Its name.
    pub service: Shared,
}

/// `lbd_l7_responses_total`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResponseLabels {
    /// The service.
    pub service: Shared,
    /// The status class.
    pub code: StatusClass,
}

/// A backend endpoint of the proxy: `lbd_l7_endpoint_*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct EndpointLabels {
    /// `host:port`.
    pub endpoint: Shared,
}
