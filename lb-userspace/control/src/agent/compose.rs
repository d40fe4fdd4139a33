//! The services lbd runs: the config file's plus those from etcd.

use std::collections::HashSet;

use crate::{
    sources::etcd::EtcdMirror, sources::slicedir::Discovered, sources::slicedir::SliceDir,
};
use lb_model::{config::ValidConfig, config::check_service};

/// The file's services, then etcd's in key order (the same order on every node). An
/// etcd service is checked like a file one; one whose name or VIP is already taken is
/// left out, and so is one with a `routes_file`: a value every node reads alike cannot
/// name a file of one node (nor make lbd read whatever file a writer to etcd likes). Returns the config and the etcd keys left out, with why.
pub fn compose(
    file: &ValidConfig,
    etcd: Option<&EtcdMirror>,
) -> (ValidConfig, Vec<(String, String)>) {
    let mut config = file.clone();
    let mut rejected = Vec::new();
    let Some(etcd) = etcd else {
        return (config, rejected);
    };
    let mut names: HashSet<String> = config.services.iter().map(|s| s.name.clone()).collect();
    let mut vips: HashSet<_> = config
        .services
        .iter()
        .map(|s| (s.vip, s.port, s.protocol))
        .collect();
    for (key, svc) in etcd.services() {
        if svc.routes_file.is_some() {
            rejected.push((
                key.to_owned(),
                "routes_file: a service from etcd cannot name a file on the node; give its routes inline (routes)".to_owned(),
            ));
            continue;
        }
        if let Err((field, problem)) = check_service(svc, &file.node, lb_l7::check_routes) {
            rejected.push((key.to_owned(), format!("{field}: {problem}")));
            continue;
        }
        if names.contains(&svc.name) {
            rejected.push((
                key.to_owned(),
                format!("service name {:?} is already used", svc.name),
            ));
            continue;
        }
        if !vips.insert((svc.vip, svc.port, svc.protocol)) {
            rejected.push((
                key.to_owned(),
                format!(
                    "{}:{}/{} is already served by another service",
                    svc.vip, svc.port, svc.protocol
                ),
            ));
            continue;
        }
        names.insert(svc.name.clone());
        config.services.push(svc.clone());
    }
    if config.services.len() > lb_common::maps::MAX_SERVICES as usize {
        for svc in config
            .services
            .drain(lb_common::maps::MAX_SERVICES as usize..)
        {
            rejected.push((
                svc.name,
                format!("more than {} services", lb_common::maps::MAX_SERVICES),
            ));
        }
    }
    (config, rejected)
}

/// Backends and creation times from the slice directory and etcd together.
pub fn discover(dir: Option<&SliceDir>, etcd: Option<&EtcdMirror>) -> Discovered {
    let from_dir = dir.into_iter().flat_map(SliceDir::held);
    let from_etcd = etcd.into_iter().flat_map(EtcdMirror::slices);
    crate::sources::slicedir::discovered_from(from_dir.chain(from_etcd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{sources::etcd::EtcdMessage, sources::slicedir::Discovered};
    use lb_test_rng::{Rng as _, RngExt as _};

    #[test]
    fn etcd_services_follow_the_files_and_clashes_are_left_out() {
        let file = lb_model::config::parse(
            "[node]\ninterface = \"eth0\"\n[node.etcd]\nendpoints = [\"http://e:2379\"]\n[[service]]\nname = \"web\"\nvip = \"198.18.100.1\"\nport = 80\nbackends = [{ address = \"198.18.0.11\" }]\n",
            "t",
lb_l7::check_routes,
        )
        .expect("valid");
        let svc = |name: &str, port: u16| {
            format!("{{\"name\":\"{name}\",\"vip\":\"198.18.100.1\",\"port\":{port},\"backends\":[{{\"address\":\"198.18.0.12\"}}]}}").into_bytes()
        };
        let mut mirror = EtcdMirror::new("/lb");
        mirror.apply(EtcdMessage::Snapshot {
            revision: 3,
            kvs: vec![
                ("/lb/services/web".into(), svc("web", 81)),
                ("/lb/services/b".into(), svc("b", 80)),
                ("/lb/services/a".into(), svc("a", 82)),
                ("/lb/services/c".into(), svc("c", 0)),
            ],
        });
        let (config, rejected) = compose(&file, Some(&mirror));
        let names: Vec<&str> = config.services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["web", "a"], "file first, then etcd in key order");
        let why: Vec<String> = rejected.iter().map(|(k, w)| format!("{k}: {w}")).collect();
        assert!(
            why[0].starts_with("/lb/services/b: 198.18.100.1:80/tcp is already served"),
            "{why:?}"
        );
        assert!(
            why.iter()
                .any(|w| w.starts_with("/lb/services/web: service name \"web\" is already used")),
            "{why:?}"
        );
        assert_eq!(why.len(), 2, "{why:?}");
        let bad: Vec<&str> = mirror.rejected().map(|(k, _)| k).collect();
        assert_eq!(bad, ["/lb/services/c"], "port 0 does not even parse");
    }

    /// An etcd value is the same for every node: it cannot name a file on one of
    /// them. A `routes_file` service from etcd is refused with its key; inline routes
    /// are fine.
    #[test]
    fn etcd_services_may_not_name_local_files() {
        let file = lb_model::config::parse(
            "[node]\ninterface = \"eth0\"\n[node.etcd]\nendpoints = [\"http://e:2379\"]\n",
            "t",
            lb_l7::check_routes,
        )
        .expect("valid");
        let l7 = |name: &str, extra: &str| {
            format!("{{\"name\":\"{name}\",\"vip\":\"198.18.100.1\",\"port\":80,\"mode\":\"l7\",\"backends\":[{{\"address\":\"198.18.0.12\"}}]{extra}}}").into_bytes()
        };
        let mut mirror = EtcdMirror::new("/lb");
        mirror.apply(EtcdMessage::Snapshot {
            revision: 3,
            kvs: vec![
                (
                    "/lb/services/site".into(),
                    l7("site", ",\"routes_file\":\"/etc/passwd\""),
                ),
                (
                    "/lb/services/ok".into(),
                    l7("ok", ",\"routes\":\"r: * -> <roundRobin>;\""),
                ),
            ],
        });
        let (config, rejected) = compose(&file, Some(&mirror));
        let names: Vec<&str> = config.services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ok"], "{rejected:?}");
        assert_eq!(rejected.len(), 1, "{rejected:?}");
        assert_eq!(rejected[0].0, "/lb/services/site");
        assert!(
            rejected[0]
                .1
                .starts_with("routes_file: a service from etcd cannot name a file"),
            "{rejected:?}"
        );
    }

    /// A slice of Service `default/svc-<svc>` named `<name>` with endpoints from `bits`.
    fn slice(svc: u64, name: u64, bits: u64) -> Vec<u8> {
        let eps: Vec<String> = (0..6)
            .filter(|i| bits >> i & 1 == 1)
            .map(|i| {
                let ready = bits >> (8 + i) & 1 == 1;
                format!(
                    "{{\"addresses\":[\"198.18.1.{i}\"],\"conditions\":{{\"ready\":{ready},\"serving\":true,\"terminating\":{}}}}}",
                    !ready
                )
            })
            .collect();
        format!(
            "{{\"apiVersion\":\"discovery.k8s.io/v1\",\"kind\":\"EndpointSlice\",\"metadata\":{{\"name\":\"s{name}\",\"namespace\":\"default\",\"labels\":{{\"kubernetes.io/service-name\":\"svc-{svc}\"}}}},\"addressType\":\"IPv4\",\"endpoints\":[{}],\"ports\":[{{\"name\":\"http\",\"port\":{}}}]}}",
            eps.join(","),
            80 + bits % 2
        )
        .into_bytes()
    }

    /// Refreshing only the services a message touched gives exactly what rebuilding
    /// every endpoint set gives, through 2000 random puts (also moving a slice key to
    /// another service), deletes, bad values and re-lists.
    #[test]
    fn refreshing_touched_services_equals_rebuilding_all() {
        let mut mirror = EtcdMirror::new("/lb");
        let mut incremental = Discovered::default();
        let mut rng = lb_test_rng::seeded("refreshing_touched_services_equals_rebuilding_all");
        let mut held: Vec<(String, Vec<u8>)> = Vec::new();
        // Steps that ended with backends: the comparison must have had something to
        // compare (the last step may legitimately leave none).
        let mut with_backends = 0;
        for step in 0..2000 {
            let r = rng.next_u64();
            let key = format!("/lb/endpointslices/k{}", r % 12);
            let msg = match r >> 8 & 7 {
                0 => EtcdMessage::Changes {
                    revision: step,
                    changes: vec![(key, None)],
                },
                1 => EtcdMessage::Changes {
                    revision: step,
                    changes: vec![(key, Some(b"{broken".to_vec()))],
                },
                // A re-list that lost some keys.
                2 => {
                    held.retain(|_| !rng.random_ratio(1, 3));
                    EtcdMessage::Snapshot {
                        revision: step,
                        kvs: held.clone(),
                    }
                }
                _ => EtcdMessage::Changes {
                    revision: step,
                    changes: vec![(key, Some(slice(r >> 16 & 3, r % 12, r >> 20)))],
                },
            };
            if let EtcdMessage::Changes { changes, .. } = &msg {
                for (k, v) in changes {
                    held.retain(|(hk, _)| hk != k);
                    if let Some(v) = v {
                        held.push((k.clone(), v.clone()));
                    }
                }
            }
            let change = mirror.apply_tracked(msg);
            incremental.refresh(&change.slices, mirror.slices());
            assert_eq!(incremental, discover(None, Some(&mirror)), "step {step}");
            with_backends += usize::from(!incremental.backends.is_empty());
        }
        assert!(
            with_backends >= 500,
            "only {with_backends} of 2000 steps had backends"
        );
    }
}
