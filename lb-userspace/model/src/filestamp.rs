//! Telling a file edit apart without reading the file.

use std::{path::Path, time::SystemTime};

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
}
