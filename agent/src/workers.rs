//! The worker set and the stop signal, below both `net` and `runtime`:
//! [`Workers`] (where tasks run, what the control thread measures of them)
//! and [`Stop`] (flips to true once when the agent stops, RFC 6733 §5.4:
//! every connection then sends its DPR). `runtime` builds them and runs the
//! threads; `net` spawns connections on them and watches the signal.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::overload::hosted::HostedCore;

/// One worker as the others see it.
#[derive(Debug)]
pub(crate) struct WorkerSlot {
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) live: Arc<AtomicUsize>,
    pub(crate) idle: Arc<Notify>,
    /// Busy share of the last second, in per mille (control thread).
    pub(crate) utilisation: AtomicU32,
    /// The worker thread's kernel thread id (0: not a thread, [`crate::runtime::Runtime::hosted`]).
    pub(crate) tid: i32,
    /// The worker's DOIC state when it is not a thread ([`crate::runtime::Runtime::hosted`]).
    pub(crate) hosted: Option<Arc<HostedCore>>,
}

impl WorkerSlot {
    /// Runs `fut` on the worker, uncounted.
    pub(crate) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        match &self.hosted {
            None => drop(self.handle.spawn(fut)),
            Some(core) => drop(self.handle.spawn(on_worker(core.clone(), fut))),
        }
    }
}

/// The worker threads: where tasks run, and what the control thread
/// measures of them.
#[derive(Debug)]
pub struct Workers {
    pub(crate) slots: Vec<WorkerSlot>,
    pub(crate) next: AtomicUsize,
}

impl Workers {
    /// Number of worker threads.
    #[must_use]
    pub fn count(&self) -> usize {
        self.slots.len()
    }

    /// Busy share of worker `i` over the last second, 0.0 to 1.0.
    #[must_use]
    pub fn utilisation(&self, i: usize) -> f64 {
        self.slots.get(i).map_or(0.0, |w| {
            f64::from(w.utilisation.load(Ordering::Relaxed)) / 1000.0
        })
    }

    /// CPU time worker `i`'s thread has used so far (user and system, as
    /// the scheduler accounts it: `/proc/self/task/TID/schedstat`). The
    /// cost of relaying is this time per message, read as exactly as the
    /// kernel keeps it whatever else runs on the machine. `None` for a
    /// worker on a caller's runtime ([`crate::runtime::Runtime::hosted`]).
    #[must_use]
    pub fn cpu_time(&self, i: usize) -> Option<Duration> {
        let tid = self.slots.get(i)?.tid;
        if tid == 0 {
            return None;
        }
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
        let ns = stat.split_whitespace().next()?.parse().ok()?;
        Some(Duration::from_nanos(ns))
    }

    /// Runs `fut` on worker `i` (modulo the count), counted so that the
    /// worker waits for it on shutdown.
    pub(crate) fn spawn_on(&self, i: usize, fut: impl Future<Output = ()> + Send + 'static) {
        let w = &self.slots[i % self.slots.len()];
        let live = w.live.clone();
        let idle = w.idle.clone();
        live.fetch_add(1, Ordering::SeqCst);
        w.spawn(async move {
            fut.await;
            if live.fetch_sub(1, Ordering::SeqCst) == 1 {
                idle.notify_waiters();
            }
        });
    }

    /// Runs `fut` on the next worker in turn (connections spread across
    /// workers).
    pub(crate) fn spawn_next(&self, fut: impl Future<Output = ()> + Send + 'static) {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        self.spawn_on(i, fut);
    }

    /// Runs `fut` on every worker, not counted (a tick: it must not hold a
    /// worker's shutdown back).
    pub(crate) fn spawn_each<F>(&self, mut fut: impl FnMut(usize) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        for (i, w) in self.slots.iter().enumerate() {
            w.spawn(fut(i));
        }
    }

    /// Each worker's total busy time so far.
    pub(crate) fn busy(&self) -> impl Iterator<Item = Duration> + '_ {
        self.slots
            .iter()
            .map(|w| w.handle.metrics().worker_total_busy_duration(0))
    }

    pub(crate) fn set_utilisation(&self, i: usize, permille: u32) {
        if let Some(w) = self.slots.get(i) {
            w.utilisation.store(permille, Ordering::Relaxed);
        }
    }
}

/// The stop signal: flips to true once when the agent stops.
#[derive(Debug, Clone)]
pub struct Stop(pub(crate) watch::Receiver<bool>);

impl Stop {
    /// True once the agent is stopping.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        *self.0.borrow()
    }

    /// The receiver, for a `select!` on [`watch::Receiver::changed`].
    pub(crate) fn receiver(&self) -> watch::Receiver<bool> {
        self.0.clone()
    }

    /// Resolves once the agent is stopping.
    pub(crate) async fn stopped(&self) {
        stopped(&mut self.0.clone()).await;
    }
}

/// Resolves once the agent is stopping.
pub(crate) async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Runs `fut` with the worker's DOIC state `core` entered around each of its
/// polls (a worker on a caller's runtime), so that the thread-local state
/// is the worker's for the length of the poll.
pub(crate) async fn on_worker(core: Arc<HostedCore>, fut: impl Future<Output = ()> + Send) {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| core.enter(|| fut.as_mut().poll(cx))).await;
}
