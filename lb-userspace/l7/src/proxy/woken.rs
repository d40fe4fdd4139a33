//! Polling a future only when its own waker fired ([`OnWake`]).
//!
//! A connection's task is woken for every read and write of its request, and each
//! wake-up polls every branch of its `select!` — the stop signals and the idle timer
//! too. Polling tokio's `Notified` again while it waits takes its `Notify`'s mutex,
//! and the drain signal's `Notify` is shared by every connection of every worker: two
//! lock round trips on cache lines both CPUs write, per wake-up, for signals that
//! fire once in a connection's life. [`OnWake`] gives its future a waker of its own
//! and polls it only on its first poll and after that waker fired; other wake-ups of
//! the task cost a flag check.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
};

/// The waker an [`OnWake`] polls its future with: it notes that it fired and wakes
/// the task that polls the [`OnWake`].
#[derive(Debug, Default)]
pub(crate) struct Woken {
    fired: AtomicBool,
    /// The waker of the task polling the [`OnWake`], as of its last poll.
    task: Mutex<Option<Waker>>,
}

impl Woken {
    /// A waker for one [`OnWake`] at a time (made once per connection).
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        // Kept, not taken: the task's waker stays registered for the next event.
        let task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(task) = task {
            task.wake();
        }
    }
}

/// `fut`, polled only on the first poll and when `fut`'s own waker fired since the
/// last poll of it. One [`Woken`] serves one `OnWake` at a time: an `OnWake` that
/// sees the flag clears it.
pub(crate) struct OnWake<'a, F> {
    fut: F,
    woken: &'a Arc<Woken>,
    waker: Waker,
    /// The task waker stored in `woken` (skips the lock when it has not changed).
    stored: Option<Waker>,
    first: bool,
}

impl<'a, F: Future + Unpin> OnWake<'a, F> {
    pub(crate) fn new(woken: &'a Arc<Woken>, fut: F) -> Self {
        Self {
            fut,
            woken,
            waker: Waker::from(Arc::clone(woken)),
            stored: None,
            first: true,
        }
    }
}

impl<F: Future + Unpin> Future for OnWake<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // The task's waker goes in before the flag is read: an event after the read
        // then finds it and wakes the task, and none is lost.
        if !this
            .stored
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            let waker = cx.waker().clone();
            *this
                .woken
                .task
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(waker.clone());
            this.stored = Some(waker);
        }
        let fired = this.woken.fired.swap(false, Ordering::AcqRel);
        if !(this.first || fired) {
            return Poll::Pending;
        }
        this.first = false;
        Pin::new(&mut this.fut).poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::atomic::AtomicUsize,
        task::{Context, Poll},
    };

    use super::*;

    /// Counts its polls; ready once `open` is set, waking whoever polled it last
    /// when [`Gate::open`] is called.
    struct Gate {
        polls: AtomicUsize,
        open: AtomicBool,
        waker: Mutex<Option<Waker>>,
    }

    impl Gate {
        fn new() -> Arc<Self> {
            Arc::new(Self {
                polls: AtomicUsize::new(0),
                open: AtomicBool::new(false),
                waker: Mutex::new(None),
            })
        }

        fn open(&self) {
            self.open.store(true, Ordering::SeqCst);
            if let Some(w) = self.waker.lock().expect("gate lock").take() {
                w.wake();
            }
        }
    }

    struct Wait(Arc<Gate>);

    impl Future for Wait {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.0.polls.fetch_add(1, Ordering::SeqCst);
            if self.0.open.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.0.waker.lock().expect("gate lock") = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// Counts the wake-ups of the task.
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_future_is_polled_first_and_then_only_after_its_own_wake_up() {
        let gate = Gate::new();
        let woken = Woken::new();
        let task = Arc::new(Task(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&waker);
        let mut on = OnWake::new(&woken, Wait(Arc::clone(&gate)));
        assert!(Pin::new(&mut on).poll(&mut cx).is_pending());
        assert_eq!(
            gate.polls.load(Ordering::SeqCst),
            1,
            "the first poll polls it"
        );
        // The task woken for something else: the future is not polled again.
        for _ in 0..5 {
            assert!(Pin::new(&mut on).poll(&mut cx).is_pending());
        }
        assert_eq!(gate.polls.load(Ordering::SeqCst), 1);
        gate.open();
        assert_eq!(task.0.load(Ordering::SeqCst), 1, "its event wakes the task");
        assert!(Pin::new(&mut on).poll(&mut cx).is_ready());
        assert_eq!(gate.polls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn an_event_between_polls_of_another_task_waker_is_not_lost() {
        let gate = Gate::new();
        let woken = Woken::new();
        let first = Arc::new(Task(AtomicUsize::new(0)));
        let second = Arc::new(Task(AtomicUsize::new(0)));
        let mut on = OnWake::new(&woken, Wait(Arc::clone(&gate)));
        let w1 = Waker::from(Arc::clone(&first));
        assert!(
            Pin::new(&mut on)
                .poll(&mut Context::from_waker(&w1))
                .is_pending()
        );
        // Polled from elsewhere with another waker: that one is woken by the event.
        let w2 = Waker::from(Arc::clone(&second));
        assert!(
            Pin::new(&mut on)
                .poll(&mut Context::from_waker(&w2))
                .is_pending()
        );
        gate.open();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert!(
            Pin::new(&mut on)
                .poll(&mut Context::from_waker(&w2))
                .is_ready()
        );
    }
}
