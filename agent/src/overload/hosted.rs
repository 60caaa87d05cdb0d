//! The DOIC state of a worker that is not a thread. On pinned workers
//! ([`crate::agent::Agent::start`]) each worker thread keeps its core, its
//! index and the generations of own reports and of `[doic]` its core holds in thread-locals
//! ([`super::cores::with_core`], [`super::own`]). On a caller's runtime
//! ([`crate::agent::Agent::start_on`]) one thread polls the tasks of every
//! worker (and a task may move between threads): there each worker keeps
//! that state in a [`HostedCore`] and lends it to the thread-locals for the
//! length of one poll of one of its tasks. The code inside sees what it
//! sees on a worker thread, and two workers never share a core.

use std::sync::{Mutex, MutexGuard, PoisonError};

use doic::Doic;

use super::cores::{CORE, WORKER};
use super::{own, protect};

/// One worker's DOIC state while none of its tasks runs.
#[derive(Debug)]
pub(crate) struct HostedCore {
    index: usize,
    state: Mutex<Lent>,
}

/// What a worker thread keeps in thread-locals.
#[derive(Debug, Default)]
struct Lent {
    core: Option<Doic>,
    own_applied: u64,
    protect_applied: u64,
    config_applied: u64,
}

impl HostedCore {
    /// The state of worker `index`, its core made on first use as on a
    /// worker thread.
    pub(crate) fn new(index: usize) -> Self {
        Self {
            index,
            state: Mutex::new(Lent::default()),
        }
    }

    /// Runs `f` with this worker's core, index and own-report generation in
    /// the current thread's thread-locals, and takes them back when `f`
    /// returns or unwinds (the thread's own come back). The lock serialises
    /// the polls of one worker's tasks: on a multi-thread runtime two
    /// threads never hold one worker's core. `f` must not enter a worker
    /// itself (a poll never polls another task).
    pub(crate) fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let mut lending = Lending {
            held: self.state.lock().unwrap_or_else(PoisonError::into_inner),
            worker: self.index,
        };
        lending.swap();
        f()
    }
}

/// A worker's state in the thread-locals; the thread's own in `held` and
/// `worker` meanwhile. Swapping again puts everything back.
struct Lending<'a> {
    held: MutexGuard<'a, Lent>,
    worker: usize,
}

impl Lending<'_> {
    fn swap(&mut self) {
        self.worker = WORKER.with(|w| w.replace(self.worker));
        CORE.with(|c| std::mem::swap(&mut *c.borrow_mut(), &mut self.held.core));
        self.held.own_applied = own::swap_applied(self.held.own_applied);
        self.held.protect_applied = protect::swap_applied(self.held.protect_applied);
        self.held.config_applied = super::cores::swap_config_applied(self.held.config_applied);
    }
}

impl Drop for Lending<'_> {
    fn drop(&mut self) {
        self.swap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overload::Overload;
    use crate::overload::cores::with_core;
    use doic::DoicConfig;

    fn overload(workers: usize) -> Overload {
        let clock = crate::clock::Clock::new();
        Overload::with_clock("agent.example.com", DoicConfig::default(), workers, clock)
    }

    /// Whether the current thread holds a core.
    fn holds_core() -> bool {
        CORE.with(|c| c.borrow().is_some())
    }

    #[test]
    fn each_hosted_worker_lends_its_own_core_and_the_threads_comes_back() {
        let ov = overload(2);
        let (a, b) = (HostedCore::new(0), HostedCore::new(1));
        assert_eq!(a.enter(|| with_core(&ov, |_, worker| worker)), Some(0));
        // Worker 0 made its core; worker 1 does not see it.
        assert!(a.state.lock().unwrap().core.is_some());
        assert!(!b.enter(holds_core));
        assert_eq!(b.enter(|| with_core(&ov, |_, worker| worker)), Some(1));
        assert!(b.state.lock().unwrap().core.is_some());
        // The next poll of worker 0 is lent the core it made.
        assert!(a.enter(holds_core));
        // Outside, the thread has no worker and no core of theirs.
        assert_eq!(WORKER.with(std::cell::Cell::get), usize::MAX);
        assert!(!holds_core());
    }

    #[test]
    fn own_report_generations_are_per_hosted_worker() {
        let (a, b) = (HostedCore::new(0), HostedCore::new(1));
        a.enter(|| own::swap_applied(7));
        assert_eq!(
            b.enter(|| own::swap_applied(3)),
            0,
            "worker 1 saw worker 0's"
        );
        assert_eq!(a.enter(|| own::swap_applied(8)), 7);
        assert_eq!(own::swap_applied(0), 0, "the thread's own stays");
    }

    #[test]
    fn an_unwinding_poll_gives_the_thread_its_state_back() {
        let a = HostedCore::new(4);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            a.enter(|| panic!("a task panicked"))
        }));
        assert!(r.is_err());
        assert_eq!(WORKER.with(std::cell::Cell::get), usize::MAX);
        assert_eq!(a.enter(|| WORKER.with(std::cell::Cell::get)), 4);
    }
}
