//! The per-worker DOIC cores: each worker thread owns one [`Doic`] in a
//! thread local, made on first use from the shared [`Overload`]
//! configuration, so that the per-request path takes no lock. Before each
//! use the core applies what the other workers accepted ([`super::inbox`])
//! and, when woken for it, the protection reports the control thread
//! published ([`super::protect`]).

use std::cell::{Cell, RefCell};

use doic::Doic;

use super::Overload;

thread_local! {
    pub(super) static WORKER: Cell<usize> = const { Cell::new(usize::MAX) };
    pub(super) static CORE: RefCell<Option<Doic>> = const { RefCell::new(None) };
}

/// Marks the current thread as worker `index` (called once by the worker
/// thread at start).
pub(crate) fn set_worker(index: usize) {
    WORKER.with(|w| w.set(index));
}

/// The worker the current thread (or hosted task) is, if it is one.
pub(crate) fn current_worker() -> Option<usize> {
    Some(WORKER.with(Cell::get)).filter(|&w| w != usize::MAX)
}

/// Runs `f` on this worker's core (created on first use), after applying
/// what the other workers accepted.
pub(crate) fn with_core<R>(ov: &Overload, f: impl FnOnce(&mut Doic, usize) -> R) -> Option<R> {
    let worker = WORKER.with(Cell::get);
    CORE.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            let seed = ov.sequence_base ^ (worker as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let board = ov.realm_board.clone();
            match Doic::with_realm_board(
                &ov.identity,
                ov.cfg.clone(),
                seed,
                ov.sequence_base,
                board,
            ) {
                Ok(d) => *c = Some(d),
                Err(e) => {
                    tracing::error!(cause = %e, "DOIC core not started");
                    return None;
                }
            }
        }
        let core = c.as_mut()?;
        if ov.inboxes.drain(worker, core) {
            super::protect::apply(ov, core, ov.clock.now());
        }
        Some(f(core, worker))
    })
}

/// Forgets this thread's core: the next use makes a new one (tests).
#[cfg(test)]
pub(crate) fn reset() {
    CORE.with(|c| *c.borrow_mut() = None);
}
