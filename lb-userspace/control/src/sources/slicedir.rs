//! A watched directory of EndpointSlice files.
//!
//! Every `*.yaml`, `*.yml` and `*.json` file is parsed; a file that fails to parse is
//! reported with its path and keeps contributing what it held before (the last good
//! state keeps running); a removed file stops contributing. Rescanning is cheap when
//! nothing changed: only modification times and sizes are compared.
//!
//! After the first scan, a changed or new file is read only once it was last modified
//! [`SETTLE`] ago or more (it keeps what it held until then): a writer that truncates
//! and then writes leaves a cut file in between, and YAML cut at a line boundary can
//! parse, as a slice with fewer endpoints than it has.

use std::{
    collections::{BTreeMap, HashMap},
    io::Read,
    net::IpAddr,
    path::{Path, PathBuf},
    time::SystemTime,
};

use lb_model::{
    endpointslice::{Parsed, ServiceBackends, ServiceKey, Slice, backends, parse},
    filestamp::{SETTLE, modified_before},
};

/// What a file looked like when last read.
type Stamp = (SystemTime, u64);

/// The parsed contents of a directory.
#[derive(Debug)]
pub struct SliceDir {
    dir: PathBuf,
    files: BTreeMap<PathBuf, (Stamp, Parsed)>,
    /// Files whose current content was rejected, with why (for `lbctl status`).
    rejected: BTreeMap<PathBuf, String>,
    /// Why the directory itself could not be read at the last scan.
    unreadable: Option<String>,
    /// Whether a scan has run: the first reads every file as it is.
    scanned: bool,
}

/// Backends and creation times discovered from slices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Discovered {
    /// Backends per service port, per service.
    pub backends: ServiceBackends,
    /// The latest creation time of a slice holding each backend (a fade-in input),
    /// per service then address (so a lookup per backend needs no owned key).
    pub created: HashMap<ServiceKey, HashMap<IpAddr, SystemTime>>,
}

impl SliceDir {
    /// A directory not scanned yet.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            files: BTreeMap::new(),
            rejected: BTreeMap::new(),
            unreadable: None,
            scanned: false,
        }
    }

    /// Rereads files that changed (and have settled, after the first scan), appeared
    /// or disappeared. Returns whether anything did.
    pub fn scan(&mut self) -> bool {
        self.scan_at(SystemTime::now())
    }

    /// [`SliceDir::scan`] as of `now` (the agent's tick: a file counts as settled by
    /// the clock the tick runs on).
    pub fn scan_at(&mut self, now: SystemTime) -> bool {
        let first = !std::mem::replace(&mut self.scanned, true);
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(
                    source = "endpointslices",
                    path = %self.dir.display(),
                    error = %e,
                    "cannot read the EndpointSlice directory, keeping what it held"
                );
                self.unreadable = Some(e.to_string());
                return false;
            }
        };
        self.unreadable = None;
        let mut seen = std::collections::HashSet::new();
        // One buffer for every file of the scan: a cold start reads thousands.
        let mut text = String::new();
        let mut changed = false;
        for entry in entries.flatten() {
            let path = entry.path();
            if !is_slice_file(&path) {
                continue;
            }
            let Some(stamp) = std::fs::metadata(&path)
                .ok()
                .and_then(|m| Some((m.modified().ok()?, m.len())))
            else {
                continue;
            };
            seen.insert(path.clone());
            if self.files.get(&path).is_some_and(|(s, _)| *s == stamp)
                || !(first || modified_before(stamp.0, now, SETTLE))
            {
                continue;
            }
            text.clear();
            let parsed = std::fs::File::open(&path)
                .and_then(|mut f| f.read_to_string(&mut text))
                .map_err(|e| e.to_string())
                .and_then(|_| parse(&text).map_err(|e| e.to_string()));
            match parsed {
                Ok(parsed) => {
                    for ignored in &parsed.ignored {
                        tracing::debug!(
                            source = "endpointslices",
                            file = %path.display(),
                            document = ignored.index,
                            reason = %ignored.reason,
                            "document ignored"
                        );
                    }
                    self.rejected.remove(&path);
                    self.files.insert(path, (stamp, parsed));
                    changed = true;
                }
                Err(e) => {
                    tracing::error!(
                        source = "endpointslices",
                        file = %path.display(),
                        error = %e,
                        "EndpointSlice file refused, keeping what it held before"
                    );
                    self.rejected.insert(path.clone(), e);
                    // Remember the stamp so the same broken content is reported once.
                    let previous = self.files.remove(&path).map(|(_, p)| p).unwrap_or_default();
                    self.files.insert(path, (stamp, previous));
                }
            }
        }
        let before = self.files.len();
        self.files.retain(|path, _| seen.contains(path));
        self.rejected.retain(|path, _| seen.contains(path));
        changed | (self.files.len() != before)
    }

    /// What is wrong with the directory now, if anything: unreadable, or files whose
    /// current content was rejected (their last good content stays in use).
    pub fn problem(&self) -> Option<String> {
        if let Some(e) = &self.unreadable {
            return Some(format!("unreadable: {e}"));
        }
        let (path, why) = self.rejected.iter().next()?;
        let more = match self.rejected.len() {
            1 => String::new(),
            n => format!(" (and {} more files)", n - 1),
        };
        Some(format!("rejected {}: {why}{more}", path.display()))
    }

    /// Every slice currently held.
    pub fn slices(&self) -> Vec<Slice> {
        self.files
            .values()
            .flat_map(|(_, p)| p.slices.iter().cloned())
            .collect()
    }

    /// Backends and creation times of everything held.
    pub fn discovered(&self) -> Discovered {
        discovered_from(self.held())
    }

    /// Every slice held, by reference.
    pub fn held(&self) -> impl Iterator<Item = &Slice> + Clone {
        self.files.values().flat_map(|(_, p)| &p.slices)
    }
}

impl Discovered {
    /// Recomputes the entries of the services in `keys` from `slices` (every slice
    /// held, from all sources), leaving the other services as they are. Equal to
    /// [`discovered_from`] over all slices when `keys` names every service whose
    /// slices changed; costs in proportion to those services, not to all.
    pub fn refresh<'a>(
        &mut self,
        keys: &std::collections::BTreeSet<ServiceKey>,
        slices: impl Iterator<Item = &'a Slice> + Clone,
    ) {
        if keys.is_empty() {
            return;
        }
        let wanted: std::collections::HashSet<(&str, &str)> = keys
            .iter()
            .map(|(ns, svc)| (ns.as_str(), svc.as_str()))
            .collect();
        let fresh = discovered_from(
            slices.filter(|s| wanted.contains(&(s.namespace.as_str(), s.service.as_str()))),
        );
        for key in keys {
            self.backends.remove(key);
            self.created.remove(key);
        }
        self.backends.extend(fresh.backends);
        self.created.extend(fresh.created);
    }
}

/// Backends and creation times (the latest slice creation time per backend) of
/// `slices`, from whichever sources they came.
pub fn discovered_from<'a>(slices: impl Iterator<Item = &'a Slice> + Clone) -> Discovered {
    let mut created: HashMap<ServiceKey, HashMap<IpAddr, SystemTime>> = HashMap::new();
    for s in slices.clone() {
        let Some(t) = s.created else { continue };
        let per = created
            .entry((s.namespace.clone(), s.service.clone()))
            .or_default();
        for ep in &s.endpoints {
            let slot = per.entry(ep.addr).or_insert(t);
            *slot = (*slot).max(t);
        }
    }
    Discovered {
        backends: backends(slices),
        created,
    }
}

fn is_slice_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLICE: &str = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-1\n  namespace: shop\n  creationTimestamp: \"2024-01-01T00:00:00Z\"\n  labels:\n    kubernetes.io/service-name: web\naddressType: IPv4\nendpoints:\n- addresses: [\"198.18.0.11\"]\nports:\n- name: http\n  port: 80\n";

    #[test]
    fn scans_changes_and_keeps_the_last_good_file() {
        let dir = std::env::temp_dir().join(format!("lbd-slices-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("web.yaml");
        std::fs::write(&file, SLICE).expect("write");
        std::fs::write(dir.join("notes.txt"), "not a slice").expect("write");
        let mut d = SliceDir::new(&dir);
        assert!(d.scan());
        assert!(!d.scan(), "nothing changed");
        let found = d.discovered();
        let web = &found.backends[&("shop".to_owned(), "web".to_owned())]
            [&("http".to_owned(), "TCP".to_owned())];
        assert_eq!(web.len(), 1);
        let t =
            found.created[&("shop".to_owned(), "web".to_owned())][&IpAddr::from([198, 18, 0, 11])];
        assert_eq!(
            Some(t),
            lb_model::units::parse_rfc3339("2024-01-01T00:00:00Z").ok()
        );

        std::fs::write(&file, "a: [broken").expect("write");
        d.scan_at(SystemTime::now() + SETTLE);
        assert_eq!(d.slices().len(), 1, "a broken file keeps what it held");
        std::fs::remove_file(&file).expect("rm");
        assert!(d.scan());
        assert!(d.slices().is_empty(), "a removed file contributes nothing");
        std::fs::remove_dir_all(dir).expect("cleanup");
    }

    #[test]
    fn a_changed_file_is_read_once_it_has_settled() {
        let dir = std::env::temp_dir().join(format!("lbd-slices-settle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("web.yaml");
        std::fs::write(&file, SLICE).expect("write");
        let mut d = SliceDir::new(&dir);
        assert!(d.scan(), "the first scan reads a file just written");
        // Caught mid-write: cut before its ports, it still parses (a slice without
        // ports contributes no backend).
        let two = SLICE.replace(
            "- addresses: [\"198.18.0.11\"]\n",
            "- addresses: [\"198.18.0.11\"]\n- addresses: [\"198.18.0.12\"]\n",
        );
        assert_ne!(two, SLICE);
        let cut = &two[..two.find("ports:").expect("ports")];
        assert!(parse(cut).is_ok(), "the cut file parses");
        std::fs::write(&file, cut).expect("write");
        assert!(!d.scan(), "not read while it may still be written");
        assert_eq!(d.slices().len(), 1, "it keeps what it held");
        std::fs::write(&file, &two).expect("write");
        assert!(!d.scan());
        assert!(d.scan_at(SystemTime::now() + SETTLE), "read once settled");
        let found = d.discovered();
        let web = &found.backends[&("shop".to_owned(), "web".to_owned())]
            [&("http".to_owned(), "TCP".to_owned())];
        assert_eq!(web.len(), 2);
        // A new file waits likewise; a removed one goes at once.
        std::fs::write(dir.join("more.yaml"), SLICE.replace("web-1", "web-2")).expect("write");
        assert!(!d.scan());
        std::fs::remove_file(&file).expect("rm");
        assert!(d.scan(), "removed");
        assert!(d.slices().is_empty());
        assert!(d.scan_at(SystemTime::now() + SETTLE));
        assert_eq!(d.slices().len(), 1);
        std::fs::remove_dir_all(dir).expect("cleanup");
    }
}
