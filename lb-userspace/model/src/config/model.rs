//! The configuration schema. Field docs are the reference for operators.

use std::{fmt, net::IpAddr};

use serde::{Deserialize, Serialize};
use toml::Spanned;

pub use super::duration_text::DurationText;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Node settings (`[node]`).
    pub node: NodeConfig,
    /// Services (`[[service]]`), each a VIP, port and protocol with its backends.
    #[serde(default)]
    pub service: Vec<Spanned<ServiceConfig>>,
}

/// `[node]`: where and how the data plane runs.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// The interface VIP traffic arrives on; the XDP program attaches here.
    pub interface: String,
    /// Where the data plane runs (default `xdp`): `tc` attaches its TC twin on
    /// ingress (TCX) instead, for interfaces where XDP cannot attach or another
    /// program owns the XDP hook.
    #[serde(default)]
    pub hook: Hook,
    /// How the XDP program attaches (default `native`; not used with `hook = "tc"`).
    #[serde(default)]
    pub xdp_mode: XdpMode,
    /// Seed of the flow hash; every node of a fleet must use the same one so that all
    /// pick the same backend for a flow (default 0x5eed).
    #[serde(default = "default_hash_seed")]
    pub hash_seed: u32,
    /// Directory on a bpf filesystem where maps and the XDP link are pinned, so the data
    /// plane (with its conntrack) keeps forwarding while lbd restarts (default
    /// `/sys/fs/bpf/lb`; lbd mounts bpffs at /sys/fs/bpf if nothing is mounted there).
    /// An empty string disables pinning: the data plane then lives only as long as lbd.
    #[serde(default = "default_pin_path")]
    pub pin_path: String,
    /// Answer pings to `dsr` and `nat` VIP addresses from XDP (default true; the node
    /// does not hold those addresses, so otherwise nobody answers).
    #[serde(default = "default_true")]
    pub answer_ping: bool,
    /// Source addresses for `nat` services: at most one IPv4 and one IPv6 address, held
    /// by this node on `interface` (so backends can resolve it). Use addresses the node
    /// does not open connections from: its replies are taken over by XDP.
    #[serde(default)]
    pub nat_addresses: Vec<IpAddr>,
    /// Source ports for `nat` services (default 20000-59999). Each backend address and
    /// port has the whole range to itself.
    #[serde(default)]
    pub nat_ports: PortRange,
    /// Established `dsr` flows the data plane can pin (default 1048576): one LRU
    /// shared by every CPU; when full, the least recently used established flow goes
    /// (its next packet is then forwarded by the table, like Katran's). Only a flow's
    /// second packet enters it, so spoofed SYNs and datagrams never evict from it.
    #[serde(default = "default_conntrack_entries")]
    pub conntrack_entries: u32,
    /// Half-open flows (a SYN, or one UDP datagram, and nothing since; default
    /// 262144), shared by all CPUs: buckets of four (`lb_common::halfopen`), their
    /// count rounded up to a power of two. A new flow takes a free way of its bucket,
    /// else the one written longest ago, so a half-open flow stays while fewer than
    /// four newer ones land in its bucket.
    #[serde(default = "default_embryonic_entries")]
    pub embryonic_entries: u32,
    /// `nat` flows the node can hold (default 262144): each takes one entry in each of
    /// the two `nat` maps (plain hashes, never evicted). When full, new `nat` flows are
    /// dropped (`drop_nat_table_full`); established ones are untouched.
    #[serde(default = "default_nat_entries")]
    pub nat_entries: u32,
    /// How long a `nat` flow holds its port, by TCP state (`[node.nat_timeouts]`).
    #[serde(default)]
    pub nat_timeouts: super::flows::NatTimeoutsConfig,
    /// Where lbd keeps state that must survive restarts (fade-in start times); default
    /// `/var/lib/lbd`. An empty string keeps it in memory only.
    #[serde(default = "default_state_dir")]
    pub state_dir: String,
    /// A directory of Kubernetes EndpointSlice documents (YAML or JSON, several per file
    /// allowed), watched for changes; services take backends from it with
    /// `endpoint_slices`. Empty (the default) means none.
    #[serde(default)]
    pub endpointslice_dir: String,
    /// Unix socket of the admin API that `lbctl` talks to (JSON over HTTP, mode 0600,
    /// default `/run/lbd/admin.sock`). An empty string disables it.
    #[serde(default = "default_admin_socket")]
    pub admin_socket: String,
    /// Where Prometheus scrapes `/metrics` (default `127.0.0.1:9470`; keep it on a
    /// loopback or management address). An empty string disables it.
    #[serde(default = "default_metrics_address")]
    pub metrics_address: String,
    /// Services and EndpointSlices from an etcd prefix, for fleets of nodes fed from
    /// one source of truth (`[node.etcd]`); none by default.
    #[serde(default)]
    pub etcd: Option<EtcdConfig>,
    /// The HTTP proxy of `l7` services: limits and timeouts (`[node.l7]`).
    #[serde(default)]
    pub l7: super::L7Config,
    /// The access log of `l7` services (`[node.access_log]`): `enabled`, `format`
    /// (`text` or `json`), `file` (default stderr), `strip_query`.
    #[serde(default)]
    pub access_log: super::AccessLogConfig,
    /// Outer headers of `ipip` and `gue` services (`[node.tunnel]`): `source_v4`,
    /// `source_v6` (address blocks whose host bits vary per flow; default the route's
    /// own source), `gue_port` (default 6080).
    #[serde(default)]
    pub tunnel: super::TunnelSettings,
}

/// `[node.etcd]`: where the fleet's services and endpoints live.
///
/// Keys: `<prefix>/services/<name>` holds a service as JSON (the schema of a
/// `[[service]]` table); `<prefix>/endpointslices/<service>/<slice>` holds a
/// Kubernetes EndpointSlice as JSON.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EtcdConfig {
    /// Client URLs, e.g. `["https://10.0.0.5:2379"]`.
    pub endpoints: Vec<String>,
    /// The key prefix (default `/lb`).
    #[serde(default = "default_etcd_prefix")]
    pub prefix: String,
    /// User for etcd authentication (empty: none).
    #[serde(default)]
    pub username: String,
    /// File holding the user's password (read at start; never logged).
    #[serde(default)]
    pub password_file: String,
    /// CA certificate (PEM) to verify the servers: enables TLS.
    #[serde(default)]
    pub ca_file: String,
    /// Client certificate (PEM) for mutual TLS, with `key_file`.
    #[serde(default)]
    pub cert_file: String,
    /// Client key (PEM) for mutual TLS.
    #[serde(default)]
    pub key_file: String,
}

fn default_conntrack_entries() -> u32 {
    lb_common::maps::CONNTRACK_ENTRIES
}

fn default_embryonic_entries() -> u32 {
    lb_common::maps::EMBRYONIC_ENTRIES
}

fn default_nat_entries() -> u32 {
    lb_common::maps::NAT_ENTRIES
}

fn default_etcd_prefix() -> String {
    "/lb".into()
}

fn default_admin_socket() -> String {
    "/run/lbd/admin.sock".into()
}

fn default_metrics_address() -> String {
    "127.0.0.1:9470".into()
}

fn default_state_dir() -> String {
    "/var/lib/lbd".into()
}

/// An inclusive port range, `{ first = 20000, last = 59999 }`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port (inclusive).
    pub last: u16,
}

impl Default for PortRange {
    fn default() -> Self {
        Self {
            first: 20000,
            last: 59999,
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_pin_path() -> String {
    "/sys/fs/bpf/lb".into()
}

impl NodeConfig {
    /// The pin directory, if pinning is enabled.
    pub fn pin_dir(&self) -> Option<&std::path::Path> {
        (!self.pin_path.is_empty()).then(|| std::path::Path::new(&self.pin_path))
    }
}

fn default_hash_seed() -> u32 {
    0x5eed
}

/// The hook the data plane's programs run on.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Hook {
    /// XDP (`lb_xdp`), before the kernel allocates an skb: fastest.
    #[default]
    Xdp,
    /// TC ingress (`lb_tc`), on the skb: any interface, other XDP programs
    /// unaffected; GRO-merged packets are steered whole.
    Tc,
}

impl Hook {
    /// The name the config and the status use.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Xdp => "xdp",
            Self::Tc => "tc",
        }
    }
}

/// XDP attach mode.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// In the driver, before an skb exists: fastest; needs driver support.
    #[default]
    Native,
    /// After skb allocation: works on any interface, slower.
    Generic,
}

/// `[[service]]`: one VIP, port and protocol.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// Unique name, used in logs, metrics and the CLI.
    pub name: String,
    /// The virtual address (IPv4 or IPv6) clients connect to.
    pub vip: IpAddr,
    /// Destination port, or `"all"` for every port of the VIP (an exact-port service
    /// on the same VIP wins over an all-ports one).
    pub port: PortSpec,
    /// `tcp` (default) or `udp`.
    #[serde(default)]
    pub protocol: Protocol,
    /// How packets reach the backend (default `dsr`).
    #[serde(default)]
    pub mode: ForwardingModeConfig,
    /// Backends; an empty list drops the service's new flows (counted).
    #[serde(default)]
    pub backends: Vec<BackendConfig>,
    /// Maglev table size: a prime above the backend count; more slots give a more even
    /// spread at 2 bytes each (default: the smallest of 251, 509, 1021, … 131071 that is
    /// at least 100 × the backend count).
    #[serde(default)]
    pub table_size: Option<u32>,
    /// Slow start for new and recovered backends (`[service.fade_in]`); none by default.
    #[serde(default)]
    pub fade_in: Option<FadeInConfig>,
    /// Active health checks (`[service.health_check]`); none by default (every backend
    /// counts as healthy).
    #[serde(default)]
    pub health_check: Option<HealthCheckConfig>,
    /// Take backends from the EndpointSlices of a Kubernetes Service (instead of
    /// `backends`): `{ namespace = "shop", service = "web", port = "http" }`.
    #[serde(default)]
    pub endpoint_slices: Option<EndpointSlicesConfig>,
    /// `l7` only: routes in skipper's eskip syntax, inline. Without `routes` and
    /// `routes_file`, every request goes round robin to the service's backends.
    #[serde(default)]
    pub routes: Option<String>,
    /// `l7` only: a file of eskip routes (relative to the config file's directory),
    /// watched: an edit that does not compile keeps the running routes.
    #[serde(default)]
    pub routes_file: Option<String>,
}

/// `endpoint_slices`: which Kubernetes Service port feeds this service.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EndpointSlicesConfig {
    /// Namespace (default `default`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The Service's name (the slices' `kubernetes.io/service-name` label).
    pub service: String,
    /// The Service port's name (default `""`, an unnamed port).
    #[serde(default)]
    pub port: String,
}

fn default_namespace() -> String {
    "default".into()
}

/// `[service.health_check]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckConfig {
    /// `tcp` (connect) or `http` (GET `path`, status in range); default `tcp`.
    #[serde(default)]
    pub kind: HealthCheckKind,
    /// Port probed on each backend's address (default: the service port; required for
    /// all-ports services).
    #[serde(default)]
    pub port: Option<u16>,
    /// `http`: the request path (default `/`).
    #[serde(default = "default_health_path")]
    pub path: String,
    /// `http`: accepted status, or none for any of 200-399.
    #[serde(default)]
    pub expect_status: Option<u16>,
    /// Time between probes (default 2s).
    #[serde(default = "default_interval")]
    pub interval: DurationText,
    /// Time a probe may take (default 1s).
    #[serde(default = "default_timeout")]
    pub timeout: DurationText,
    /// Consecutive successes to become healthy again (default 2).
    #[serde(default = "default_rise")]
    pub rise: u32,
    /// Consecutive failures to become unhealthy (default 3).
    #[serde(default = "default_fall")]
    pub fall: u32,
}

/// Health check kind.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HealthCheckKind {
    /// TCP connect.
    #[default]
    Tcp,
    /// HTTP GET.
    Http,
}

fn default_health_path() -> String {
    "/".into()
}

fn default_interval() -> DurationText {
    DurationText::Millis(2000)
}

fn default_timeout() -> DurationText {
    DurationText::Millis(1000)
}

fn default_rise() -> u32 {
    2
}

fn default_fall() -> u32 {
    3
}

/// `[service.fade_in]`: `w_eff = w · max(min_weight, (age/window)^exponent)`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FadeInConfig {
    /// Ramp length, e.g. `"30s"`, `"3m"`, `"1m30s"`.
    pub window: DurationText,
    /// Ramp shape (default 1, linear; like skipper's `fadeIn` exponent).
    #[serde(default = "default_exponent")]
    pub exponent: f64,
    /// Floor of the fraction, in (0, 1] (default 0.05).
    #[serde(default = "default_min_weight")]
    pub min_weight: f64,
}

// The floats are validated finite, so equality is reflexive.
impl Eq for FadeInConfig {}

fn default_exponent() -> f64 {
    1.0
}

fn default_min_weight() -> f64 {
    0.05
}

/// A service's port: one port, or all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortSpec {
    /// One destination port (1-65535).
    Port(u16),
    /// Every port of the VIP.
    All,
}

impl PortSpec {
    /// The port as the data plane keys it (0 = all ports).
    pub const fn key_port(self) -> u16 {
        match self {
            PortSpec::Port(p) => p,
            PortSpec::All => 0,
        }
    }
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortSpec::Port(p) => write!(f, "{p}"),
            PortSpec::All => f.write_str("all"),
        }
    }
}

impl<'de> Deserialize<'de> for PortSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = PortSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a port number 1-65535 or \"all\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<PortSpec, E> {
                match u16::try_from(v) {
                    Ok(p) if p > 0 => Ok(PortSpec::Port(p)),
                    _ => Err(E::custom(format!(
                        "port {v} is out of range: use 1-65535 or \"all\""
                    ))),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<PortSpec, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PortSpec, E> {
                if v == "all" {
                    Ok(PortSpec::All)
                } else {
                    Err(E::custom(format!(
                        "port {v:?}: use a number 1-65535 or \"all\""
                    )))
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Transport protocol of a service.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP.
    #[default]
    Tcp,
    /// UDP.
    Udp,
}

impl Protocol {
    /// IP protocol number.
    pub const fn number(self) -> u8 {
        match self {
            Protocol::Tcp => lb_common::maps::proto::TCP,
            Protocol::Udp => lb_common::maps::proto::UDP,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        })
    }
}

/// Forwarding mode of a service.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ForwardingModeConfig {
    /// L2 direct server return: backends hold the VIP and reply to clients directly.
    #[default]
    Dsr,
    /// One-arm full NAT: the node rewrites destination and source (to a
    /// `node.nat_addresses` address) and translates replies back; backends need nothing.
    Nat,
    /// Passed to the node's stack for the agent's HTTP proxy.
    L7,
    /// Encapsulated DSR in IP (IPv4 or IPv6, the backend's family; `[node.tunnel]`):
    /// backends anywhere routable, which strip it with `lbd decap` and reply to the
    /// client directly, seeing its address.
    Ipip,
    /// Encapsulated DSR in UDP (GUE, to `node.tunnel.gue_port`), the flow's hash in
    /// the source port: for networks that spread or filter by UDP ports.
    Gue,
}

/// One backend of a service.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// The backend's address, reachable from the node's interface; in `dsr` mode of
    /// the VIP's family (the packet is not rewritten above layer 2).
    pub address: IpAddr,
    /// Relative share of new flows (default 1, at most 10000). 0 drains the backend:
    /// no new flows, established ones continue.
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}
