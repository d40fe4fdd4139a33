//! The fuzz entry functions; see the module above.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::{
    agent::compose, agent::discover, agent::service_specs_with, sources::etcd::EtcdMessage,
    sources::etcd::EtcdMirror,
};
use lb_l7::{
    balance::EndpointSpec, balance::Pick, balance::Registry, routes, routes::Backend,
    routes::Exchange, routes::RequestInfo, routes::RouteTable, routes::filter,
    routes::template::Template,
};
use lb_model::{
    config, dataplane::Programmer, dataplane::memory::MemoryDataplane, endpointslice, units,
};

/// Text lbd would read: the bytes as UTF-8, or nothing (every reader of ours takes
/// `&str` and refuses other bytes before parsing).
fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// A file of EndpointSlice documents (the watched directory; etcd slice values).
pub fn endpointslice(data: &[u8]) {
    let Some(text) = text(data) else { return };
    match endpointslice::parse(text) {
        Ok(parsed) => {
            for slice in &parsed.slices {
                assert!(
                    slice
                        .endpoints
                        .iter()
                        .all(|e| e.addr.is_ipv6() == slice.ipv6)
                );
                assert!(slice.ports.iter().all(|p| p.port > 0));
            }
            for ports in endpointslice::backends(&parsed.slices).values() {
                for list in ports.values() {
                    let _ = endpointslice::for_new_flows(list);
                }
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// The node config every etcd value is read against: etcd, a slice directory's
/// worth of services, NAT addresses so `nat` services can be valid.
const ETCD_NODE: &str = "[node]\ninterface = \"eth0\"\nnat_addresses = [\"198.18.0.3\", \"2001:db8::3\"]\n[node.etcd]\nendpoints = [\"http://198.18.0.5:2379\"]\n";

/// One etcd value, put both as a service and as an EndpointSlice, then everything a
/// node does with it: the mirror, service composition (checks, inline routes), the
/// specs and programming them into an in-memory data plane.
pub fn etcd_value(data: &[u8]) {
    let Ok(file) = config::parse(ETCD_NODE, "fuzz.toml", lb_l7::check_routes) else {
        unreachable!("the fixed node config is valid")
    };
    let mut mirror = EtcdMirror::new("/lb");
    mirror.apply(EtcdMessage::Snapshot {
        revision: 1,
        kvs: vec![
            ("/lb/services/fuzz".into(), data.to_vec()),
            ("/lb/endpointslices/fuzz/one".into(), data.to_vec()),
        ],
    });
    let (composed, rejected) = compose(&file, Some(&mirror));
    for (key, why) in mirror
        .rejected()
        .chain(rejected.iter().map(|(k, w)| (k.as_str(), w.as_str())))
    {
        assert!(key.starts_with("/lb/") && !why.is_empty());
    }
    let discovered = discover(None, Some(&mirror));
    let specs = service_specs_with(&composed, &discovered);
    let mut dataplane = MemoryDataplane::default();
    let _ = Programmer::default().apply(&mut dataplane, &specs, Instant::now());
}

/// A config file (`--check-config`, SIGHUP).
pub fn config_toml(data: &[u8]) {
    let Some(text) = text(data) else { return };
    match config::parse(text, "fuzz.toml", lb_l7::check_routes) {
        Ok(valid) => {
            assert!(valid.node.l7.limits().is_ok(), "validated limits");
            let specs = crate::agent::service_specs(&valid);
            let mut dataplane = MemoryDataplane::default();
            let _ = Programmer::default().apply(&mut dataplane, &specs, Instant::now());
        }
        Err(e) => {
            let e = e.to_string();
            assert!(e.starts_with("fuzz.toml:"), "errors name the file: {e}");
        }
    }
}

/// Route text (inline `routes`, a `routes_file`, `lbctl routes`), compiled, then a
/// few requests through the first route that matches, as the proxy handles them.
pub fn eskip(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let registry = Registry::default();
    let now = SystemTime::now();
    let service = [EndpointSpec {
        authority: "198.18.0.11:80".into(),
        weight: 1,
        created: None,
    }];
    let cx = routes::Context {
        registry: &registry,
        service_endpoints: &service,
        previous: None,
        now,
    };
    let table = match RouteTable::parse(text, &cx) {
        Ok(table) => table,
        Err(e) => {
            // Every error points into the text: a line it has (or the one after the
            // last, for an unexpected end), a column from 1.
            let lines = text.split('\n').count();
            for p in e.problems() {
                let pos = p.pos();
                assert!(
                    (1..=lines + 1).contains(&pos.line) && pos.column >= 1,
                    "{p} is outside the text"
                );
            }
            return;
        }
    };
    let headers = http::HeaderMap::new();
    for target in ["/", "/a/b/c?x=1&y", "/%e9?q=%"] {
        let Ok(uri) = target.parse::<http::Uri>() else {
            continue;
        };
        let view = routes::predicate::RequestView {
            query: uri.query().unwrap_or(""),
            ..routes::predicate::RequestView::new(
                &http::Method::GET,
                uri.path(),
                "shop.example",
                &headers,
            )
        };
        let Some(route) = table.find(&view) else {
            continue;
        };
        let Ok(routing) = routes::path::routing_path(uri.path()) else {
            continue;
        };
        let info = RequestInfo {
            method: "GET",
            scheme: "http",
            host: "shop.example",
            headers: &headers,
            path: uri.path(),
            query: uri.query().unwrap_or(""),
            routing_path: &routing,
            peer: std::net::IpAddr::from([198, 18, 0, 1]),
            trusted: false,
        };
        let mut ex = Exchange::default();
        filter::on_request(&route.filters, &mut ex, &info);
        let (mut status, mut out) = (http::StatusCode::OK, http::HeaderMap::new());
        filter::on_response(&route.filters, &ex, &info, &mut status, &mut out);
        if let Backend::Pool(pool) = &route.backend {
            let key = ex.key_hash(info.peer);
            let set = pool.set.load();
            if let Some(i) = pool.balancer.pick(&set, &Pick { now, key }) {
                assert!(i < set.len());
            }
        }
    }
}

/// A duration string (config fields, `fadeIn`).
pub fn duration(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let Ok(nanos) = units::duration::parse_nanos(text) else {
        return;
    };
    // The same value written in nanoseconds reads back the same.
    assert_eq!(
        units::duration::parse_nanos(&format!("{nanos}ns")),
        Ok(nanos)
    );
    match units::parse_duration(text) {
        Ok(d) => assert_eq!(i64::try_from(d.as_nanos()), Ok(nanos)),
        Err(units::DurationError::Negative { .. }) => assert!(nanos < 0),
        Err(e) => panic!("{text:?}: {nanos} ns, then {e}"),
    }
    if !text.starts_with(['-', '+']) {
        assert_eq!(
            units::duration::parse_nanos(&format!("-{text}")),
            Ok(nanos.wrapping_neg())
        );
    }
}

/// An RFC 3339 string (`creationTimestamp`, `endpointCreated`) and, from the first
/// eight bytes, a number of Unix seconds (`endpointCreated(…, n)`).
pub fn timestamp(data: &[u8]) {
    if let Some(text) = text(data)
        && let Ok(t) = units::parse_rfc3339(text)
    {
        // Any accepted time is far enough from the ends for arithmetic.
        let _ = t.duration_since(UNIX_EPOCH);
        assert!(
            t.checked_add(std::time::Duration::from_secs(86_400))
                .is_some()
        );
    }
    if let Some(bytes) = data.first_chunk::<8>() {
        let seconds = f64::from_le_bytes(*bytes);
        if let Ok(t) = units::from_unix_seconds(seconds) {
            let since = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64());
            assert!(since.is_ok_and(|s| (s - seconds).abs() <= seconds * 1e-9 + 1e-6));
        }
    }
}

/// A template (`consistentHashKey`, the header filters, `setPath`), applied to a
/// request: whatever the text, applying it twice gives the same output.
pub fn key_template(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let template = Template::new(text, |name| {
        (name == "id").then_some(routes::params::ParamRef::Segment(0))
    });
    let mut headers = http::HeaderMap::new();
    headers.insert("x-user", http::HeaderValue::from_static("alice"));
    headers.insert("cookie", http::HeaderValue::from_static("s=1; t=\"2\""));
    let info = RequestInfo {
        method: "GET",
        scheme: "http",
        host: "shop.example",
        headers: &headers,
        path: "/a%20b",
        query: "id=7&x&q=%zz",
        routing_path: "/a",
        peer: std::net::IpAddr::from([198, 18, 0, 1]),
        trusted: true,
    };
    let ex = Exchange::default();
    let values = info.values(&ex, None);
    assert_eq!(
        template.apply(&values),
        template.apply(&values),
        "deterministic"
    );
}

/// A backend's answer to the proxy's own HTTP/1.1 client: the response head parser and
/// the chunked decoder, fed in pieces as reads bring them (see
/// `lb_l7::proxy::fuzz_backend_response`: the first byte picks the method and the
/// piece size; the outcome must not depend on the pieces).
pub fn h1_response(data: &[u8]) {
    lb_l7::proxy::fuzz_backend_response(data);
}

/// A client's bytes to the proxy's own HTTP/1.x server: the request head parser and
/// the request body decoding, fed in pieces as reads bring them, pipelined requests
/// included (see `lb_l7::proxy::fuzz_client_request`: the first byte picks the head
/// limits and the piece size; the outcome must not depend on the pieces, and every
/// head must agree with its own fields).
pub fn h1_request(data: &[u8]) {
    lb_l7::proxy::fuzz_client_request(data);
}
