//! Telling a file edit apart without reading the file.

use std::{
    path::Path,
    time::{Duration, SystemTime},
};

/// How long a watched file must be left alone before a change to it is read: a
/// writer that truncates and then writes (an editor, `echo > file`) leaves an empty or
/// cut file in between, and a read then would put that in force.
pub const SETTLE: Duration = Duration::from_millis(200);

/// Modification time and size (an editor's write-and-rename changes both or at least
/// the time); `None` when the file is unreadable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStamp(Option<(SystemTime, u64)>);

impl FileStamp {
    /// The stamp of `path` now.
    pub fn of(path: &Path) -> Self {
        Self(
            std::fs::metadata(path)
                .ok()
                .and_then(|m| Some((m.modified().ok()?, m.len()))),
        )
    }

    /// Whether the file was last modified at least `settle` before `now`: a writer
    /// that truncates and then writes (an editor, `echo > file`) has likely finished.
    /// A file that cannot be read, or whose time is ahead of `now`, counts as
    /// settled: there is nothing to wait for.
    pub fn settled(&self, now: SystemTime, settle: Duration) -> bool {
        match &self.0 {
            Some((modified, _)) => modified_before(*modified, now, settle),
            None => true,
        }
    }
}

/// Whether a file last modified at `modified` was left alone for `settle` by `now` (a
/// time ahead of `now` counts as settled, so a clock step cannot hold a read off).
pub fn modified_before(modified: SystemTime, now: SystemTime, settle: Duration) -> bool {
    now.duration_since(modified)
        .map_or(true, |age| age >= settle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_just_written_has_not_settled() {
        let dir = std::env::temp_dir().join(format!("lb-stamp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("f");
        std::fs::write(&path, "x").expect("write");
        let stamp = FileStamp::of(&path);
        let now = SystemTime::now();
        let settle = SETTLE;
        assert!(!stamp.settled(now, settle), "written just now");
        assert!(stamp.settled(now + settle, settle));
        // A modification time ahead of the clock cannot be waited out.
        assert!(stamp.settled(now - Duration::from_secs(3600), settle));
        assert!(FileStamp::of(&dir.join("missing")).settled(now, settle));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
