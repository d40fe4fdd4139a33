//! Where lines go: rendered on the request's thread into a thread-local buffer,
//! appended to a shared buffer, and written out by [`AccessLog::flush`] (every 100 ms
//! from the proxy, and at shutdown, so no line is lost on a clean stop).

use std::{
    cell::RefCell,
    io::Write,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use super::render::{Entry, QueryPolicy, Renderer};
pub use lb_model::config::AccessLogConfig;

thread_local! {
    static SCRATCH: RefCell<(Renderer, Vec<u8>)> = RefCell::new((Renderer::default(), Vec::with_capacity(512)));
}

/// An open access log.
pub struct AccessLog {
    settings: AccessLogConfig,
    pending: Mutex<Vec<u8>>,
    sink: Mutex<(Box<dyn Write + Send>, Vec<u8>)>,
    lines: AtomicU64,
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
            pending: Mutex::new(Vec::with_capacity(64 * 1024)),
            sink: Mutex::new((sink, Vec::with_capacity(64 * 1024))),
            lines: AtomicU64::new(0),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &AccessLogConfig {
        &self.settings
    }

    /// Lines logged so far.
    pub fn lines(&self) -> u64 {
        self.lines.load(Ordering::Relaxed)
    }

    /// Logs one request (the caller has decided it is to be logged).
    pub fn log(&self, entry: &Entry<'_>, mask: &[String]) {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let (renderer, buf) = &mut *s;
            buf.clear();
            let q = QueryPolicy {
                strip: self.settings.strip_query,
                mask,
            };
            renderer.render(self.settings.format, entry, q, buf);
            self.pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(buf);
        });
        self.lines.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes out what is pending. The pending buffer is swapped with the sink's spare,
    /// so requests never wait for the write.
    ///
    /// # Errors
    /// The output's write error (the lines are dropped, not retried forever).
    pub fn flush(&self) -> std::io::Result<()> {
        let mut sink = self.sink.lock().unwrap_or_else(PoisonError::into_inner);
        let (out, spare) = &mut *sink;
        {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if pending.is_empty() {
                return Ok(());
            }
            std::mem::swap(&mut *pending, spare);
        }
        let result = out.write_all(spare).and_then(|()| out.flush());
        spare.clear();
        result
    }
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
