//! Fade-in ramp start times, kept across agent restarts.
//!
//! A restarted agent must continue a backend's ramp where it was, not start it over
//! (which would throttle a healthy backend again) nor skip it. Start times are stored
//! as JSON, `{"<service>/<address>": <unix milliseconds>}`, written atomically
//! (temporary file + rename) whenever a backend is first seen.

use std::{
    collections::BTreeMap,
    io,
    net::IpAddr,
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

/// Start times by service and backend, optionally backed by a file.
#[derive(Debug, Default)]
pub struct FadeStarts {
    starts: BTreeMap<String, u64>,
    path: Option<PathBuf>,
    dirty: bool,
}

fn key(service: &str, addr: IpAddr) -> String {
    format!("{service}/{addr}")
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
                    .map_err(|e| log::warn!("{}: ignoring fade-in state: {e}", p.display()))
                    .ok(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => {
                    log::warn!("{}: ignoring fade-in state: {e}", p.display());
                    None
                }
            })
            .unwrap_or_default();
        Self {
            starts,
            path,
            dirty: false,
        }
    }

    /// When `service`'s backend `addr` was first seen, recording `now` if never.
    pub fn first_seen(&mut self, service: &str, addr: IpAddr, now: SystemTime) -> SystemTime {
        let ms = *self.starts.entry(key(service, addr)).or_insert_with(|| {
            self.dirty = true;
            millis(now)
        });
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    /// Forgets backends no longer configured (so one that comes back fades in again).
    pub fn retain(&mut self, live: &[(String, IpAddr)]) {
        let keep: std::collections::HashSet<String> =
            live.iter().map(|(s, a)| key(s, *a)).collect();
        let before = self.starts.len();
        self.starts.retain(|k, _| keep.contains(k));
        self.dirty |= self.starts.len() != before;
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
            serde_json::to_vec_pretty(&self.starts).map_err(io::Error::other)?,
        )?;
        std::fs::rename(&tmp, path)?;
        self.dirty = false;
        Ok(())
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
