//! Fade-in ramp start times, kept across agent restarts.
//!
//! A restarted agent must continue a backend's ramp where it was, not start it over
//! (which would throttle a healthy backend again) nor skip it. Start times are stored
//! as JSON, `{"<service>/<address>": <unix milliseconds>}`, written atomically
//! (temporary file + rename) whenever a backend is first seen. In memory they are
//! kept per service and address, so the per-second lookups allocate nothing.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    io,
    net::IpAddr,
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

/// Start times (unix milliseconds) by service and backend, optionally backed by a file.
#[derive(Debug, Default)]
pub struct FadeStarts {
    starts: HashMap<String, HashMap<IpAddr, u64>>,
    path: Option<PathBuf>,
    dirty: bool,
    /// Keep every start time, also of backends not live now (see
    /// [`FadeStarts::hold`]).
    held: bool,
}

/// The file's flat form → per service; keys that do not read as `service/address`
/// are dropped (they can only come from a hand-edited file).
fn from_file(flat: BTreeMap<String, u64>) -> HashMap<String, HashMap<IpAddr, u64>> {
    let mut out: HashMap<String, HashMap<IpAddr, u64>> = HashMap::new();
    for (k, ms) in flat {
        let Some((service, addr)) = k.rsplit_once('/') else {
            continue;
        };
        let Ok(addr) = addr.parse() else { continue };
        out.entry(service.to_owned()).or_default().insert(addr, ms);
    }
    out
}

/// A state file that cannot be used: every backend then ramps from now.
fn ignored(file: &std::path::Path, error: &dyn std::fmt::Display) {
    tracing::warn!(
        file = %file.display(),
        %error,
        "fade-in state unreadable, ramping every backend from now"
    );
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl FadeStarts {
    /// Loads the file at `path` if there is one. A missing file is an empty state; an
    /// unreadable or corrupt one is reported and treated as empty (every backend then
    /// counts as first seen now, the safe side of a ramp).
    pub fn load(path: Option<PathBuf>) -> Self {
        let starts = path
            .as_ref()
            .and_then(|p| match std::fs::read_to_string(p) {
                Ok(text) => serde_json::from_str(&text)
                    .map(from_file)
                    .map_err(|e| ignored(p, &e))
                    .ok(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => {
                    ignored(p, &e);
                    None
                }
            })
            .unwrap_or_default();
        Self {
            starts,
            path,
            dirty: false,
            held: false,
        }
    }

    /// When `service`'s backend `addr` was first seen, recording `now` if never.
    pub fn first_seen(&mut self, service: &str, addr: IpAddr, now: SystemTime) -> SystemTime {
        if !self.starts.contains_key(service) {
            self.starts.insert(service.to_owned(), HashMap::new());
        }
        let per = self.starts.get_mut(service).expect("inserted above");
        let ms = *per.entry(addr).or_insert_with(|| {
            self.dirty = true;
            millis(now)
        });
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    /// Whether no ramp start is recorded.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// While held, [`FadeStarts::retain`] forgets nothing: a restarted agent that has
    /// not heard from a source yet (etcd) does not know its backends, and must not
    /// restart their ramps for that.
    pub fn hold(&mut self, held: bool) {
        self.held = held;
    }

    /// Forgets backends no longer configured (so one that comes back fades in again).
    pub fn retain(&mut self, live: &[(&str, IpAddr)]) {
        if self.held {
            return;
        }
        let mut keep: HashSet<(&str, IpAddr)> = HashSet::with_capacity(live.len());
        keep.extend(live.iter().copied());
        let before: usize = self.starts.values().map(HashMap::len).sum();
        self.starts.retain(|service, per| {
            per.retain(|addr, _| keep.contains(&(service.as_str(), *addr)));
            !per.is_empty()
        });
        let after: usize = self.starts.values().map(HashMap::len).sum();
        self.dirty |= after != before;
    }

    /// Writes the file if anything changed since the last save.
    ///
    /// # Errors
    /// The file or its directory could not be written.
    pub fn save(&mut self) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        if !self.dirty {
            return Ok(());
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("json.tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec_pretty(&self.flat()).map_err(io::Error::other)?,
        )?;
        std::fs::rename(&tmp, path)?;
        self.dirty = false;
        Ok(())
    }

    /// The file's form: `{"<service>/<address>": ms}`, sorted.
    fn flat(&self) -> BTreeMap<String, u64> {
        self.starts
            .iter()
            .flat_map(|(s, per)| per.iter().map(move |(a, ms)| (format!("{s}/{a}"), *ms)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_times_survive_a_restart() {
        let dir = std::env::temp_dir().join(format!("lbd-fade-{}", std::process::id()));
        let path = dir.join("fade-in.json");
        let addr: IpAddr = [198, 18, 0, 11].into();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        let mut first = FadeStarts::load(Some(path.clone()));
        assert_eq!(first.first_seen("web", addr, t0), t0);
        first.save().expect("save");

        let mut again = FadeStarts::load(Some(path.clone()));
        let later = t0 + Duration::from_secs(10);
        assert_eq!(
            again.first_seen("web", addr, later),
            t0,
            "the old start is kept"
        );
        again.hold(true);
        again.retain(&[]);
        assert_eq!(
            again.first_seen("web", addr, later),
            t0,
            "held: nothing forgotten"
        );
        again.hold(false);
        again.retain(&[]);
        again.save().expect("save");
        let mut forgotten = FadeStarts::load(Some(path));
        assert_eq!(
            forgotten.first_seen("web", addr, later),
            later,
            "a returning backend fades in again"
        );
        std::fs::remove_dir_all(dir).expect("cleanup");
    }

    #[test]
    fn corrupt_state_is_empty_state() {
        let path = std::env::temp_dir().join(format!("lbd-fade-bad-{}.json", std::process::id()));
        std::fs::write(&path, "{not json").expect("write");
        let mut s = FadeStarts::load(Some(path.clone()));
        let now = UNIX_EPOCH + Duration::from_secs(5);
        assert_eq!(s.first_seen("web", [198, 18, 0, 1].into(), now), now);
        std::fs::remove_file(path).expect("cleanup");
    }
}
