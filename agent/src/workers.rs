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
    /// Accepted connections running on the worker ([`Workers::spawn_accepted`]).
    pub(crate) accepted: Arc<AtomicUsize>,
    /// Dial loops running on the worker, one per configured peer it dials
    /// ([`Workers::spawn_dialer`]).
    pub(crate) dialed: Arc<AtomicUsize>,
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

    /// The accepted connections and the dial loops worker `i` runs now
    /// (what [`place`] weighs); zeros for a worker that does not exist.
    #[must_use]
    pub fn connections(&self, i: usize) -> (usize, usize) {
        self.slots.get(i).map_or((0, 0), |w| {
            (
                w.accepted.load(Ordering::Relaxed),
                w.dialed.load(Ordering::Relaxed),
            )
        })
    }

    /// CPU time worker `i`'s thread has used so far (user and system, as
    /// the scheduler accounts it: [`crate::host::thread::cpu_time`]). The
    /// cost of relaying is this time per message, read as exactly as the
    /// kernel keeps it whatever else runs on the machine. `None` for a
    /// worker on a caller's runtime ([`crate::runtime::Runtime::hosted`])
    /// or when procfs does not say.
    #[must_use]
    pub fn cpu_time(&self, i: usize) -> Option<Duration> {
        let tid = self.slots.get(i)?.tid;
        if tid == 0 {
            return None;
        }
        crate::host::thread::cpu_time(tid).ok()
    }

    /// Runs `fut` on worker `i` (modulo the count), counted so that the
    /// worker waits for it on shutdown.
    pub(crate) fn spawn_on(&self, i: usize, fut: impl Future<Output = ()> + Send + 'static) {
        let w = &self.slots[i % self.slots.len()];
        w.live.fetch_add(1, Ordering::SeqCst);
        let counted = Counted {
            live: w.live.clone(),
            idle: w.idle.clone(),
        };
        w.spawn(async move {
            // Uncounted when the task ends, however: a task that panics
            // (tokio ends it) must not hold the worker's shutdown forever.
            let _counted = counted;
            fut.await;
        });
    }

    /// Runs an accepted connection's `fut` on the worker [`place`] picks
    /// from the connections each runs now, counted there until it ends.
    pub(crate) fn spawn_accepted(&self, fut: impl Future<Output = ()> + Send + 'static) {
        let load = |f: fn(&WorkerSlot) -> &Arc<AtomicUsize>| -> Vec<usize> {
            self.slots
                .iter()
                .map(|w| f(w).load(Ordering::Relaxed))
                .collect()
        };
        let i = place(&load(|w| &w.accepted), &load(|w| &w.dialed));
        self.spawn_counted(i, |w| &w.accepted, fut);
    }

    /// Runs the dial loop `fut` of peer `peer` on worker `peer` (modulo the
    /// count: upstream connections spread in turn), counted there until it
    /// ends.
    pub(crate) fn spawn_dialer(&self, peer: usize, fut: impl Future<Output = ()> + Send + 'static) {
        self.spawn_counted(peer % self.slots.len(), |w| &w.dialed, fut);
    }

    fn spawn_counted(
        &self,
        i: usize,
        count: fn(&WorkerSlot) -> &Arc<AtomicUsize>,
        fut: impl Future<Output = ()> + Send + 'static,
    ) {
        let n = count(&self.slots[i]).clone();
        n.fetch_add(1, Ordering::Relaxed);
        self.spawn_on(i, async move {
            fut.await;
            n.fetch_sub(1, Ordering::Relaxed);
        });
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

/// A task counted in its worker's `live` until this is dropped, when it
/// ends or unwinds.
struct Counted {
    live: Arc<AtomicUsize>,
    idle: Arc<Notify>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        if self.live.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }
}

/// Resolves once the agent is stopping.
pub(crate) async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// The worker for a new accepted connection, given the accepted connections
/// (`accepted[i]`) and the dial loops (`dialed[i]`) each worker runs: the one
/// with the fewest accepted, ties to the one with the most dialed, then to
/// the lowest index.
///
/// All the traffic to a peer goes through its one connection (RFC 6733
/// §2.1), so a request read on another worker than its upstream
/// connection's crosses threads twice (docs/relay.md, "Throughput and
/// cores"). A lone client is placed with the upstream connections; more
/// clients spread by count, so that many connecting at once (Diameter
/// connections live for days) never land on one worker.
///
/// # Panics
/// When `accepted` is empty or the two lengths differ.
pub(crate) fn place(accepted: &[usize], dialed: &[usize]) -> usize {
    assert_eq!(accepted.len(), dialed.len(), "one count of each per worker");
    (0..accepted.len())
        .min_by_key(|&i| (accepted[i], std::cmp::Reverse(dialed[i])))
        .expect("at least one worker")
}

/// Runs `fut` with the worker's DOIC state `core` entered around each of its
/// polls (a worker on a caller's runtime), so that the thread-local state
/// is the worker's for the length of the poll.
pub(crate) async fn on_worker(core: Arc<HostedCore>, fut: impl Future<Output = ()> + Send) {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| core.enter(|| fut.as_mut().poll(cx))).await;
}

#[cfg(test)]
mod tests {
    use super::place;

    #[test]
    fn a_lone_client_goes_to_the_worker_of_the_upstream_connections() {
        assert_eq!(place(&[0, 0], &[0, 1]), 1);
        assert_eq!(place(&[0, 0], &[1, 0]), 0);
        assert_eq!(place(&[0, 0, 0, 0], &[1, 1, 2, 1]), 2);
    }

    #[test]
    fn clients_balance_by_count_before_upstream_connections() {
        // The worker with the upstream connection already has a client.
        assert_eq!(place(&[1, 0], &[1, 0]), 1);
        assert_eq!(place(&[0, 1], &[0, 1]), 0);
        assert_eq!(place(&[3, 2, 2], &[0, 0, 5]), 2);
    }

    #[test]
    fn ties_without_upstream_connections_go_to_the_lowest_index() {
        assert_eq!(place(&[0, 0], &[0, 0]), 0);
        assert_eq!(place(&[1, 0, 0], &[0, 0, 0]), 1);
    }

    #[test]
    fn many_clients_connecting_at_once_spread_evenly() {
        // Placed one after another, each counted before the next is placed.
        for (workers, dialed) in [(2, vec![0, 1]), (3, vec![4, 0, 0]), (4, vec![1, 1, 1, 1])] {
            let mut accepted = vec![0; workers];
            for _ in 0..workers * 25 {
                let i = place(&accepted, &dialed);
                accepted[i] += 1;
            }
            assert_eq!(accepted, vec![25; workers], "dialed {dialed:?}");
        }
    }

    #[test]
    fn one_worker_takes_everything() {
        assert_eq!(place(&[7], &[0]), 0);
    }
}
