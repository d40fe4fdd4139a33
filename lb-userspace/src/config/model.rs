//! The configuration schema. Field docs are the reference for operators.

use std::{fmt, net::Ipv4Addr};

use serde::Deserialize;
use toml::Spanned;

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
    /// How the XDP program attaches (default `native`).
    #[serde(default)]
    pub xdp_mode: XdpMode,
    /// Seed of the flow hash; every node of a fleet must use the same one so that all
    /// pick the same backend for a flow (default 0x5eed).
    #[serde(default = "default_hash_seed")]
    pub hash_seed: u32,
}

fn default_hash_seed() -> u32 {
    0x5eed
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
    /// The virtual IPv4 address clients connect to.
    pub vip: Ipv4Addr,
    /// Destination port.
    pub port: u16,
    /// `tcp` (default) or `udp`.
    #[serde(default)]
    pub protocol: Protocol,
    /// How packets reach the backend (default `dsr`).
    #[serde(default)]
    pub mode: ForwardingModeConfig,
    /// Backends; an empty list drops the service's traffic (counted).
    #[serde(default)]
    pub backends: Vec<BackendConfig>,
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
}

/// One backend of a service.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// The backend's IPv4 address, on a network the node's interface reaches.
    pub address: Ipv4Addr,
}
