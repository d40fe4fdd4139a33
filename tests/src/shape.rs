//! The fleet-scale shape the control-plane benchmarks share: 1000 services × 30
//! endpoints, one EndpointSlice per service as the API server prints it.

use std::{fmt::Write as _, net::Ipv4Addr};

/// Services.
pub const SERVICES: usize = 1000;
/// Endpoints per service.
pub const ENDPOINTS: usize = 30;
/// When every slice was created: long ago, so nothing fades after a cold sync.
pub const CREATED: &str = "2026-11-01T08:00:00Z";

/// Address of a service's endpoint.
pub fn backend(service: usize, endpoint: usize) -> Ipv4Addr {
    let n = (service * ENDPOINTS + endpoint + 1) as u32;
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + n)
}

/// A service's VIP.
pub fn vip(service: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, (service >> 8) as u8, (service & 0xff) as u8)
}

/// A uid-shaped string, deterministic per input.
fn uid(a: usize, b: usize) -> String {
    format!(
        "{a:08x}-{b:04x}-4{:03x}-8{:03x}-{:012x}",
        b % 4096,
        a % 4096,
        a * 31 + b
    )
}

/// One service's EndpointSlice as the API server prints it. `shift` replaces the
/// address of endpoint 0 (an endpoint change).
pub fn slice_yaml(s: usize, shift: Option<Ipv4Addr>) -> String {
    let name = format!("svc-{s}");
    let mut y = String::with_capacity(16 * 1024);
    y.push_str("addressType: IPv4\napiVersion: discovery.k8s.io/v1\nendpoints:\n");
    for e in 0..ENDPOINTS {
        let addr = if e == 0 {
            shift.unwrap_or(backend(s, e))
        } else {
            backend(s, e)
        };
        let _ = write!(
            y,
            "- addresses:\n  - {addr}\n  conditions:\n    ready: true\n    serving: true\n    terminating: false\n  nodeName: node-{node}\n  targetRef:\n    kind: Pod\n    name: {name}-7d9f8b6c5-{e:05}\n    namespace: bench\n    uid: {uid}\n  zone: zone-{zone}\n",
            node = (s + e) % 50,
            uid = uid(s, e),
            zone = ["a", "b", "c"][e % 3],
        );
    }
    let _ = write!(
        y,
        "kind: EndpointSlice\nmetadata:\n  annotations:\n    endpoints.kubernetes.io/last-change-trigger-time: \"{CREATED}\"\n  creationTimestamp: \"{CREATED}\"\n  generateName: {name}-\n  generation: 3\n  labels:\n    endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io\n    kubernetes.io/service-name: {name}\n  name: {name}-x7k2p\n  namespace: bench\n  ownerReferences:\n  - apiVersion: v1\n    blockOwnerDeletion: true\n    controller: true\n    kind: Service\n    name: {name}\n    uid: {uid}\n  resourceVersion: \"{rv}\"\n  uid: {uid2}\nports:\n- name: http\n  port: 80\n  protocol: TCP\n",
        uid = uid(s, 9999),
        uid2 = uid(s, 8888),
        rv = 100_000 + s,
    );
    y
}

/// [`slice_yaml`] as JSON (what an etcd key or `kubectl -o json` holds).
pub fn slice_json(s: usize, shift: Option<Ipv4Addr>) -> String {
    let value: serde_json::Value =
        serde_saphyr::from_str(&slice_yaml(s, shift)).expect("generated YAML");
    serde_json::to_string(&value).expect("JSON")
}
