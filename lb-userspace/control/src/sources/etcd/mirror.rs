//! The node's copy of the etcd prefix, parsed key by key.
//!
//! Pure: fed [`EtcdMessage`]s by the watcher (or by tests), it holds the services and
//! EndpointSlices found under the prefix. A value that does not parse is reported
//! with its key and treated as absent — not as its previous good value — so every
//! node that saw the same revision holds the same state whatever it saw before, and
//! builds byte-identical tables.

use std::collections::{BTreeMap, BTreeSet};

use super::EtcdMessage;
use lb_model::{config::ServiceConfig, endpointslice::ServiceKey, endpointslice::Slice};

/// What one key holds.
#[derive(Clone, Debug)]
enum Entry {
    Service(Box<ServiceConfig>),
    Slices(Vec<Slice>),
    /// Not usable; why.
    Rejected(String),
    /// Under the prefix but not a key we read.
    Other,
}

/// What a message changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MirrorChange {
    /// A service key changed (value, validity, presence).
    pub services: bool,
    /// The Kubernetes services (namespace, name) whose slices changed.
    pub slices: BTreeSet<ServiceKey>,
}

impl MirrorChange {
    /// Whether anything relevant changed.
    pub fn any(&self) -> bool {
        self.services || !self.slices.is_empty()
    }

    /// Adds everything `other` changed.
    pub fn merge(&mut self, other: Self) {
        self.services |= other.services;
        self.slices.extend(other.slices);
    }

    /// Records that `entry` appeared or went away.
    fn note(&mut self, entry: &Entry) {
        match entry {
            Entry::Service(_) => self.services = true,
            Entry::Slices(slices) => self.slices.extend(
                slices
                    .iter()
                    .map(|s| (s.namespace.clone(), s.service.clone())),
            ),
            // A rejected key may be a service or a slice: what it was before is
            // noted separately, and a rejected service counts as a change.
            Entry::Rejected(_) => self.services = true,
            Entry::Other => {}
        }
    }
}

/// The mirrored prefix.
#[derive(Debug)]
pub struct EtcdMirror {
    prefix: String,
    /// Raw values, to skip re-parsing what a re-list returns unchanged.
    raw: BTreeMap<String, Vec<u8>>,
    entries: BTreeMap<String, Entry>,
    /// The etcd revision the mirror reflects (0 before the first list).
    pub revision: i64,
    /// Why the connection is down, while it is.
    pub down: Option<String>,
}

impl EtcdMirror {
    /// An empty mirror of `prefix` (no trailing `/`).
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            raw: BTreeMap::new(),
            entries: BTreeMap::new(),
            revision: 0,
            down: None,
        }
    }

    /// Applies one message; returns whether services or slices changed.
    pub fn apply(&mut self, msg: EtcdMessage) -> bool {
        self.apply_tracked(msg).any()
    }

    /// Applies one message; returns what changed.
    pub fn apply_tracked(&mut self, msg: EtcdMessage) -> MirrorChange {
        let mut change = MirrorChange::default();
        match msg {
            EtcdMessage::Snapshot { revision, kvs } => {
                self.down = None;
                self.revision = revision;
                let keep: std::collections::HashSet<&str> =
                    kvs.iter().map(|(k, _)| k.as_str()).collect();
                let gone: Vec<String> = self
                    .raw
                    .keys()
                    .filter(|k| !keep.contains(k.as_str()))
                    .cloned()
                    .collect();
                for key in gone {
                    self.delete(&key, &mut change);
                }
                for (key, value) in kvs {
                    self.put(key, value, &mut change);
                }
            }
            EtcdMessage::Changes { revision, changes } => {
                self.down = None;
                self.revision = revision;
                for (key, value) in changes {
                    match value {
                        Some(v) => self.put(key, v, &mut change),
                        None => self.delete(&key, &mut change),
                    }
                }
            }
            EtcdMessage::Down { error } => self.down = Some(error),
        }
        change
    }

    fn put(&mut self, key: String, value: Vec<u8>, change: &mut MirrorChange) {
        if self.raw.get(&key) == Some(&value) {
            return;
        }
        let entry = self.parse(&key, &value);
        if let Entry::Rejected(why) = &entry {
            tracing::error!(
                source = "etcd",
                key = %key,
                error = %why,
                "etcd key refused, ignored until it changes"
            );
        }
        self.raw.insert(key.clone(), value);
        change.note(&entry);
        if let Some(old) = self.entries.insert(key, entry) {
            change.note(&old);
        }
    }

    fn delete(&mut self, key: &str, change: &mut MirrorChange) {
        self.raw.remove(key);
        if let Some(old) = self.entries.remove(key) {
            change.note(&old);
        }
    }

    fn parse(&self, key: &str, value: &[u8]) -> Entry {
        let Some(rest) = key
            .strip_prefix(&self.prefix)
            .and_then(|r| r.strip_prefix('/'))
        else {
            return Entry::Other;
        };
        if let Some(name) = rest.strip_prefix("services/") {
            return match serde_json::from_slice::<ServiceConfig>(value) {
                Ok(svc) if svc.name != name => Entry::Rejected(format!(
                    "the service is named {:?}, the key says {name:?}",
                    svc.name
                )),
                Ok(svc) => Entry::Service(Box::new(svc)),
                Err(e) => Entry::Rejected(format!("not a service: {e}")),
            };
        }
        if rest.starts_with("endpointslices/") {
            let text = match std::str::from_utf8(value) {
                Ok(t) => t,
                Err(_) => return Entry::Rejected("not UTF-8".into()),
            };
            return match lb_model::endpointslice::parse(text) {
                Ok(parsed) => Entry::Slices(parsed.slices),
                Err(e) => Entry::Rejected(e.to_string()),
            };
        }
        Entry::Other
    }

    /// Services, in key order (so every node sees the same order).
    pub fn services(&self) -> impl Iterator<Item = (&str, &ServiceConfig)> {
        self.entries.iter().filter_map(|(k, e)| match e {
            Entry::Service(s) => Some((k.as_str(), s.as_ref())),
            _ => None,
        })
    }

    /// EndpointSlices, in key order.
    pub fn slices(&self) -> impl Iterator<Item = &Slice> + Clone {
        self.entries.values().flat_map(|e| match e {
            Entry::Slices(s) => s.as_slice(),
            _ => &[],
        })
    }

    /// Keys whose value was rejected, with why.
    pub fn rejected(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().filter_map(|(k, e)| match e {
            Entry::Rejected(why) => Some((k.as_str(), why.as_str())),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SVC: &str =
        r#"{"name":"web","vip":"198.18.100.1","port":80,"backends":[{"address":"198.18.0.11"}]}"#;
    const SLICE: &str = r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"web-1","namespace":"default","labels":{"kubernetes.io/service-name":"web"}},"addressType":"IPv4","endpoints":[{"addresses":["198.18.0.12"]}],"ports":[{"name":"http","port":80}]}"#;

    fn kv(k: &str, v: &str) -> (String, Vec<u8>) {
        (k.to_owned(), v.as_bytes().to_vec())
    }

    #[test]
    fn snapshot_then_changes() {
        let mut m = EtcdMirror::new("/lb");
        assert!(m.apply(EtcdMessage::Snapshot {
            revision: 5,
            kvs: vec![
                kv("/lb/services/web", SVC),
                kv("/lb/endpointslices/web/web-1", SLICE),
                kv("/lb/notes", "hello"),
            ],
        }));
        assert_eq!(m.revision, 5);
        assert_eq!(
            m.services().map(|(k, _)| k).collect::<Vec<_>>(),
            ["/lb/services/web"]
        );
        assert_eq!(m.slices().count(), 1);
        // The same snapshot again (a re-list): nothing changed.
        assert!(!m.apply(EtcdMessage::Snapshot {
            revision: 6,
            kvs: vec![
                kv("/lb/services/web", SVC),
                kv("/lb/endpointslices/web/web-1", SLICE),
                kv("/lb/notes", "hello"),
            ],
        }));
        // A key we do not read changes nothing either.
        assert!(!m.apply(EtcdMessage::Changes {
            revision: 7,
            changes: vec![("/lb/notes".into(), None)],
        }));
        assert!(m.apply(EtcdMessage::Changes {
            revision: 8,
            changes: vec![("/lb/endpointslices/web/web-1".into(), None)],
        }));
        assert_eq!((m.revision, m.slices().count()), (8, 0));
        // A re-list that lacks a key deletes it.
        assert!(m.apply(EtcdMessage::Snapshot {
            revision: 9,
            kvs: vec![],
        }));
        assert_eq!(m.services().count(), 0);
    }

    #[test]
    fn bad_values_are_reported_by_key_and_count_as_absent() {
        let mut m = EtcdMirror::new("/lb");
        m.apply(EtcdMessage::Snapshot {
            revision: 1,
            kvs: vec![kv("/lb/services/web", SVC)],
        });
        assert!(m.apply(EtcdMessage::Changes {
            revision: 2,
            changes: vec![
                ("/lb/services/web".into(), Some(b"{not json".to_vec())),
                ("/lb/services/api".into(), Some(SVC.as_bytes().to_vec()),),
            ],
        }));
        assert_eq!(m.services().count(), 0, "web is broken, api is misnamed");
        let rejected: Vec<(&str, &str)> = m.rejected().collect();
        assert_eq!(rejected.len(), 2);
        assert!(rejected[0].0 == "/lb/services/api" && rejected[0].1.contains("named \"web\""));
        assert!(rejected[1].0 == "/lb/services/web" && rejected[1].1.starts_with("not a service"));
        m.apply(EtcdMessage::Down {
            error: "connection refused".into(),
        });
        assert_eq!(m.down.as_deref(), Some("connection refused"));
        assert_eq!(m.revision, 2, "the last good revision stays");
    }
}
