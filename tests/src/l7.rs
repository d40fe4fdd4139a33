//! The in-process L7 test bed: a namespace with the VIP and backend addresses on its
//! loopback, services built from routes and endpoints, and a proxy with given limits.
//! Shared by the proxy tests so each file states only what it checks.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use lb_l7::{
    accesslog::AccessLog, balance::EndpointSpec, proxy::L7Config, proxy::Proxy, proxy::ServiceInput,
};

use crate::{Netns, http::EchoBackend, is_root};

/// The address every test service listens on.
pub const VIP: &str = "198.18.0.1";

/// A namespace with the VIP and backend addresses 198.18.0.11-19 (and the client
/// addresses 198.18.0.20-29) on its loopback.
pub fn namespace() -> Netns {
    assert!(is_root(), "this test needs root (network namespaces)");
    let ns = Netns::new("l7");
    ns.ip(&["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
    for i in 11..30 {
        ns.ip(&["addr", "add", &format!("198.18.0.{i}/32"), "dev", "lo"]);
    }
    ns
}

/// Backend `i`'s address: 198.18.0.(11 + i).
pub fn backend_addr(i: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::from([198, 18, 0, 11 + i]), port)
}

/// Client address `i`: 198.18.0.(20 + i), for tests that care who connects.
pub fn client_addr(i: u8) -> IpAddr {
    IpAddr::from([198, 18, 0, 20 + i])
}

/// A service on the VIP at `port` with `routes` (the default route without) and
/// `endpoints`.
pub fn service(
    name: &str,
    port: u16,
    routes: Option<&str>,
    endpoints: Vec<EndpointSpec>,
) -> ServiceInput {
    ServiceInput {
        name: name.into(),
        listen: SocketAddr::new(VIP.parse().expect("vip"), port),
        routes: routes.map(Arc::from),
        routes_origin: format!("service {name} routes"),
        endpoints,
    }
}

/// An endpoint with `weight`.
pub fn endpoint(addr: SocketAddr, weight: u32) -> EndpointSpec {
    EndpointSpec {
        authority: addr.to_string(),
        weight,
        created: None,
    }
}

/// A proxy with two workers and `config`'s limits.
pub fn proxy_with(config: &L7Config, log: Option<AccessLog>) -> Proxy {
    let limits = config.limits().expect("valid limits");
    Proxy::start(limits, 2, log, true).expect("proxy starts")
}

/// A proxy with `config` serving service "svc" on port 80 over one echo backend.
pub fn one_backend_proxy(rt: &tokio::runtime::Runtime, config: &L7Config) -> (Proxy, EchoBackend) {
    let b = rt.block_on(EchoBackend::start(backend_addr(0, 80), "b"));
    let mut proxy = proxy_with(config, None);
    let errors = proxy.apply(&[service("svc", 80, None, vec![endpoint(b.addr, 1)])]);
    assert!(errors.is_empty(), "{errors:?}");
    (proxy, b)
}

/// `http://VIP:port/path`.
pub fn url(port: u16, path: &str) -> String {
    format!("http://{VIP}:{port}{path}")
}

/// The VIP at `port` as a socket address.
pub fn vip(port: u16) -> SocketAddr {
    SocketAddr::new(VIP.parse().expect("vip"), port)
}

/// A two-thread runtime for the clients and backends.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}
