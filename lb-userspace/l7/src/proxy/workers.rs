//! Worker threads, one single-threaded runtime each (thread per core, as nginx and
//! Envoy do): every service listens once per worker with `SO_REUSEPORT`, so the
//! kernel spreads connections over the workers and a connection's requests, its
//! backend connections and their wake-ups stay on one thread. A shared work-stealing
//! runtime measured about a third slower here, most of it in cross-thread wake-ups.

use std::cell::Cell;

use tokio::{runtime::Handle, sync::oneshot};

thread_local! {
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// The index of the worker running the caller (0 outside the workers).
pub fn current() -> usize {
    WORKER.with(Cell::get)
}

/// The running workers.
#[derive(Debug)]
pub struct Workers {
    handles: Vec<Handle>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    /// Starts `n` workers (at least one), named `lbd-l7-<i>`. Threads inherit the
    /// caller's network namespace.
    ///
    /// # Errors
    /// A thread or runtime that cannot start.
    pub fn start(n: usize) -> std::io::Result<Self> {
        let mut w = Self {
            handles: Vec::new(),
            stops: Vec::new(),
            threads: Vec::new(),
        };
        for i in 0..n.max(1) {
            let (handle_tx, handle_rx) = std::sync::mpsc::channel();
            let (stop_tx, stop_rx) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("lbd-l7-{i}"))
                .spawn(move || {
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = handle_tx.send(Err(e));
                            return;
                        }
                    };
                    WORKER.with(|c| c.set(i));
                    let _ = handle_tx.send(Ok(rt.handle().clone()));
                    let _ = rt.block_on(stop_rx);
                })?;
            let handle = handle_rx.recv().map_err(std::io::Error::other)??;
            w.handles.push(handle);
            w.stops.push(stop_tx);
            w.threads.push(thread);
        }
        Ok(w)
    }

    /// The workers' runtimes.
    pub fn handles(&self) -> &[Handle] {
        &self.handles
    }

    /// Stops every worker (tasks still running are dropped) and joins the threads.
    pub fn stop(self) {
        for s in self.stops {
            let _ = s.send(());
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}
