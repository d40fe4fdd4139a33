//! Where lines go: rendered on the request's thread straight into that thread's own
//! buffer of the log (a [`Shard`]), and written out by [`AccessLog::flush`] (every
//! 100 ms from the proxy, and at shutdown, so no line is lost on a clean stop).
//!
//! Why a buffer per thread: one buffer shared by the proxy's workers was a lock and a
//! line counter that every logged request of every worker wrote, so their cache line
//! moved between cores on every request, and each line was rendered once into a
//! scratch buffer and copied again under that lock. A thread's shard is locked only
//! by that thread and, every 100 ms, by the flush.
//!
//! Order: one thread's lines are written in the order it logged them. Lines of
//! different threads within one flush interval are written one thread's after
//! another's, as nginx's buffered logs of several workers are.

use std::{
    cell::RefCell,
    io::Write,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use super::render::{Entry, QueryPolicy, Renderer};
pub use lb_model::config::AccessLogConfig;

/// Bytes a thread's buffer starts with: about 300 lines, which a worker at 60,000
/// logged requests a second writes in half of the flush interval.
const SHARD_CAPACITY: usize = 64 * 1024;

/// One thread's lines since the last flush, and how many it has logged in all.
#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    lines: u64,
}

/// One thread's buffer of one log.
type Shard = Mutex<Pending>;

/// Each thread's renderer and its shards, one per log it has written to (normally
/// one), found by the log's [`AccessLog::id`].
#[derive(Default)]
struct Scratch {
    renderer: Renderer,
    shards: Vec<(u64, Arc<Shard>)>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The output, and one spare buffer per shard that the flush swaps in.
type Sink = (Box<dyn Write + Send>, Vec<Vec<u8>>);

/// Numbers the logs of this process, so a thread tells its shards apart.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// An open access log.
pub struct AccessLog {
    settings: AccessLogConfig,
    id: u64,
    shards: Mutex<Shards>,
    sink: Mutex<Sink>,
}

/// The shards of the threads that have logged, in the order they first did, and the
/// lines of threads since gone. A thread that ends leaves its shard to the log alone;
/// the next flush writes what it holds and lets it go, so threads that come and go do
/// not grow the log.
#[derive(Default)]
struct Shards {
    live: Vec<Arc<Shard>>,
    retired_lines: u64,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl AccessLog {
    /// Opens the configured output.
    ///
    /// # Errors
    /// The file cannot be opened for appending.
    pub fn open(settings: AccessLogConfig) -> std::io::Result<Self> {
        let sink: Box<dyn Write + Send> = if settings.file.is_empty() || settings.file == "-" {
            Box::new(std::io::stderr())
        } else {
            Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&settings.file)?,
            )
        };
        Ok(Self::with_sink(settings, sink))
    }

    /// An access log writing to `sink`.
    pub fn with_sink(settings: AccessLogConfig, sink: Box<dyn Write + Send>) -> Self {
        Self {
            settings,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            shards: Mutex::new(Shards::default()),
            sink: Mutex::new((sink, Vec::new())),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &AccessLogConfig {
        &self.settings
    }

    /// Lines logged so far.
    pub fn lines(&self) -> u64 {
        let shards = self.shards.lock().unwrap_or_else(PoisonError::into_inner);
        shards.retired_lines + shards.live.iter().map(|s| lock(s).lines).sum::<u64>()
    }

    /// Threads with a buffer of this log (for tests: gone ones are let go).
    #[cfg(test)]
    pub(crate) fn shard_count(&self) -> usize {
        self.shards
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .live
            .len()
    }

    /// Logs one request (the caller has decided it is to be logged).
    pub fn log(&self, entry: &Entry<'_>, mask: &[String]) {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let Scratch { renderer, shards } = &mut *s;
            let shard = match shards.iter().position(|(id, _)| *id == self.id) {
                Some(i) => &shards[i].1,
                None => self.new_shard(shards),
            };
            let q = QueryPolicy {
                strip: self.settings.strip_query,
                mask,
            };
            let mut pending = lock(shard);
            renderer.render(self.settings.format, entry, q, &mut pending.bytes);
            pending.lines += 1;
        });
    }

    /// This thread's first line of this log: a shard for it, registered with the
    /// log. Shards of logs since dropped (only this thread holds them) are forgotten.
    fn new_shard<'a>(&self, shards: &'a mut Vec<(u64, Arc<Shard>)>) -> &'a Arc<Shard> {
        shards.retain(|(_, s)| Arc::strong_count(s) > 1);
        let shard = Arc::new(Mutex::new(Pending {
            bytes: Vec::with_capacity(SHARD_CAPACITY),
            lines: 0,
        }));
        self.shards
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .live
            .push(Arc::clone(&shard));
        shards.push((self.id, shard));
        &shards[shards.len() - 1].1
    }

    /// Writes out what is pending. Each shard's buffer is swapped with a spare, so
    /// requests never wait for the write.
    ///
    /// # Errors
    /// The output's first write error (the lines are dropped, not retried forever).
    pub fn flush(&self) -> std::io::Result<()> {
        let mut sink = self.sink.lock().unwrap_or_else(PoisonError::into_inner);
        let (out, spares) = &mut *sink;
        let live_after = {
            // Lock order: the sink, the list, a shard (a request takes only its shard).
            let mut shards = self.shards.lock().unwrap_or_else(PoisonError::into_inner);
            let Shards {
                live,
                retired_lines,
            } = &mut *shards;
            if spares.len() < live.len() {
                spares.resize_with(live.len(), || Vec::with_capacity(SHARD_CAPACITY));
            }
            for (shard, spare) in live.iter().zip(spares.iter_mut()) {
                let mut pending = lock(shard);
                if !pending.bytes.is_empty() {
                    std::mem::swap(&mut pending.bytes, spare);
                }
            }
            // A shard only the log holds is a gone thread's, emptied just above.
            live.retain(|shard| {
                let gone = Arc::strong_count(shard) == 1;
                if gone {
                    *retired_lines += lock(shard).lines;
                }
                !gone
            });
            live.len()
        };
        let mut result = Ok(());
        let mut wrote = false;
        for spare in spares.iter_mut().filter(|s| !s.is_empty()) {
            if result.is_ok() {
                result = out.write_all(spare);
                wrote = true;
            }
            spare.clear();
        }
        // Spares are interchangeable once written: as many as shards are kept (a
        // thread that came since gets its spare at the next flush).
        spares.truncate(live_after);
        if wrote && result.is_ok() {
            result = out.flush();
        }
        result
    }
}

fn lock(shard: &Shard) -> std::sync::MutexGuard<'_, Pending> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::error!(
                file = %self.settings.file,
                error = %e,
                "access log lines lost: writing them failed"
            );
        }
    }
}
