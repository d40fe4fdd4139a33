//! Changes of the services themselves: a reloaded config file, and what etcd's watcher
//! reports. Each recomposes the running config (file + etcd) and reconciles once.

use std::{sync::Arc, time::SystemTime};

use lb_model::{
    config::ValidConfig,
    dataplane::{ApplyReport, MapOps},
};

use super::{Agent, AgentError, Host, compose, reconcile::save_starts};
use crate::sources::{
    etcd::{EtcdMessage, EtcdMirror, mirror::MirrorChange},
    slicedir::SliceDir,
};

impl<D: MapOps, H: Host> Agent<D, H> {
    /// Moves the data plane to `config`: changed services are swapped atomically,
    /// removed ones deleted, new backends' neighbours kept resolved. Established flows
    /// keep their backends — also flows to a backend that was removed (connection
    /// draining), which is why removed backends keep their neighbour entries until
    /// shutdown. Node settings (`interface` and `xdp_mode` need a re-attach, the flow
    /// tables are sized when loaded) are kept as they are until lbd restarts, with a
    /// warning.
    ///
    /// # Errors
    /// A data-plane failure; services before the failing one are already updated, and
    /// the next tick retries with the new config.
    pub fn reload(&mut self, mut config: ValidConfig) -> Result<ApplyReport, AgentError> {
        if config.node != self.desired.config.node {
            tracing::warn!(
                source = "config",
                "node settings changed; they take effect on restart (the running ones are kept)"
            );
            config.node = self.desired.config.node.clone();
            config.flow_tables = self.desired.config.flow_tables;
        }
        let file = config;
        let (config, rejected) = compose::compose(&file, self.etcd.as_ref());
        // The new config is the desired state from now on, whether or not the data
        // plane takes it at once: a failed apply is retried toward it.
        self.set_config(config);
        self.file = file;
        self.note_rejected(rejected);
        let weighted = self.weighted_now(SystemTime::now());
        save_starts(&mut self.starts);
        self.reprogram(weighted, "reload")
    }

    /// Applies what the etcd watcher reported (in order) and, if services or slices
    /// changed, reprograms once. Returns the report if it reprogrammed.
    ///
    /// # Errors
    /// A data-plane failure; the next tick retries.
    pub fn etcd_apply(
        &mut self,
        messages: Vec<EtcdMessage>,
        now: SystemTime,
    ) -> Result<Option<ApplyReport>, AgentError> {
        let Some(mirror) = self.etcd.as_mut() else {
            return Ok(None);
        };
        let mut changed = MirrorChange::default();
        let mut synced = false;
        for msg in messages {
            synced |= matches!(msg, EtcdMessage::Snapshot { .. });
            match &msg {
                EtcdMessage::Down { error } if mirror.down.is_none() => {
                    tracing::error!(
                        source = "etcd",
                        revision = mirror.revision,
                        error = %error,
                        "etcd source degraded, keeping the last state"
                    );
                }
                EtcdMessage::Snapshot { revision, .. }
                    if mirror.down.is_some() || mirror.revision == 0 =>
                {
                    tracing::info!(
                        source = "etcd",
                        prefix = self
                            .file
                            .node
                            .etcd
                            .as_ref()
                            .map_or("", |e| e.prefix.as_str()),
                        revision,
                        "etcd listed"
                    );
                }
                _ => {}
            }
            changed.merge(mirror.apply_tracked(msg));
        }
        if synced {
            self.programmer.keep_unlisted(false);
            self.starts.hold(false);
        }
        if !changed.any() && !synced {
            return Ok(None);
        }
        if changed.services || synced {
            let (config, rejected) = compose::compose(&self.file, self.etcd.as_ref());
            self.set_config(config);
            self.note_rejected(rejected);
        }
        // Only the Kubernetes services whose slices changed get new endpoint sets.
        let dir = self.slices.as_ref().into_iter().flat_map(SliceDir::held);
        let etcd = self.etcd.iter().flat_map(EtcdMirror::slices);
        self.desired
            .discovered
            .refresh(&changed.slices, dir.chain(etcd));
        self.cache.configured = None;
        let weighted = self.weighted_now(now);
        save_starts(&mut self.starts);
        self.reprogram(weighted, "etcd").map(Some)
    }

    fn set_config(&mut self, config: ValidConfig) {
        self.desired.config = Arc::new(config);
        self.cache.configured = None;
    }

    fn note_rejected(&mut self, rejected: Vec<(String, String)>) {
        for (key, why) in &rejected {
            if !self.etcd_rejected.iter().any(|(k, w)| k == key && w == why) {
                tracing::error!(source = "etcd", key = %key, error = %why, "etcd service ignored");
            }
        }
        self.etcd_rejected = rejected;
    }
}
