//! The services lbd runs: the config file's plus those from etcd.

use std::collections::HashSet;

use crate::{
    config::{ValidConfig, check_service},
    sources::{etcd::EtcdMirror, slicedir::Discovered, slicedir::SliceDir},
};

/// The file's services, then etcd's in key order (the same order on every node). An
/// etcd service is checked like a file one; one whose name or VIP is already taken is
/// left out. Returns the config and the etcd keys left out, with why.
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
        if let Err((field, problem)) = check_service(svc, &file.node) {
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
