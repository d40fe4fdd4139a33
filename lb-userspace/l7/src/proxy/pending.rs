//! Connections that have not sent a complete request head yet, oldest first.
//!
//! A connection that sends nothing holds a slot and a file descriptor for nothing.
//! Each is closed at `header_timeout`, but a client can open them faster than that:
//! 10,100 silent connections once filled `max_connections` and kept every
//! well-behaved client out. So when the proxy is full (or out of file descriptors) a
//! new connection makes room by closing the oldest connection still without a request
//! head; only when there is none is the new one refused. A connection leaves this set
//! when its first request head is complete and is never evicted after that.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use tokio::sync::Notify;

/// The set; one per proxy.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    waiting: Mutex<BTreeMap<u64, Arc<Notify>>>,
    next: AtomicU64,
    evicted: AtomicU64,
}

/// A connection's place in [`Pending`]: `evict` is notified when it must close.
#[derive(Debug)]
pub(crate) struct Ticket {
    id: u64,
    /// Notified once when the connection is chosen to make room.
    pub evict: Arc<Notify>,
}

impl Pending {
    /// Enters a new connection (the youngest).
    pub fn enter(&self) -> Ticket {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evict = Arc::new(Notify::new());
        self.lock().insert(id, Arc::clone(&evict));
        Ticket { id, evict }
    }

    /// The connection sent its first head, or ended: it can no longer be evicted.
    pub fn leave(&self, ticket: &Ticket) {
        self.lock().remove(&ticket.id);
    }

    /// Tells the oldest waiting connection to close; false when none waits.
    pub fn evict_oldest(&self) -> bool {
        let Some((_, evict)) = self.lock().pop_first() else {
            return false;
        };
        // A stored permit: the connection closes even if it is not polling yet.
        evict.notify_one();
        self.evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Connections closed to make room so far.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Notify>>> {
        // The map stays consistent whatever panicked while holding it.
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_waiting_connection_goes_first_and_one_with_a_request_never() {
        let p = Pending::default();
        let (a, b, c) = (p.enter(), p.enter(), p.enter());
        p.leave(&a); // sent its head
        assert!(p.evict_oldest());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let notified = |t: &Ticket| {
            let evict = Arc::clone(&t.evict);
            rt.block_on(async {
                tokio::time::timeout(std::time::Duration::from_millis(50), evict.notified())
                    .await
                    .is_ok()
            })
        };
        assert!(notified(&b), "b was the oldest still waiting");
        assert!(!notified(&a) && !notified(&c));
        assert!(p.evict_oldest());
        assert!(notified(&c));
        assert!(!p.evict_oldest(), "nobody left");
        assert_eq!(p.evicted(), 2);
    }
}
