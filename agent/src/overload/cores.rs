//! The per-worker DOIC cores: each worker thread owns one [`Doic`] in a
//! thread local, made on first use from the shared [`Overload`]
//! configuration, so that the per-request path takes no lock. Before each
//! use the core applies what the other workers accepted ([`super::inbox`])
//! and, when woken for it, the protection reports the control thread
//! published ([`super::protect`]), and a `[doic]` a reload published
//! ([`super::Overload::reconfigure`]), at the instant of that use.

use std::cell::{Cell, RefCell};

use doic::Doic;

use super::Overload;

thread_local! {
    pub(super) static WORKER: Cell<usize> = const { Cell::new(usize::MAX) };
    pub(super) static CORE: RefCell<Option<Doic>> = const { RefCell::new(None) };
    /// The generation of `[doic]` this thread's core runs with.
    static CONFIG_APPLIED: Cell<u64> = const { Cell::new(0) };
}

/// Puts `generation` as this thread's core's `[doic]` generation; the
/// previous one back (a hosted worker lends its core, [`super::hosted`]).
pub(super) fn swap_config_applied(generation: u64) -> u64 {
    CONFIG_APPLIED.with(|a| a.replace(generation))
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
/// what the other workers accepted. Its common case is the thread-local
/// access, the borrow and the inbox's flag (one relaxed load): the core's
/// creation and the wake-up work are out of line ([`start`], [`wake`]).
#[inline]
pub(crate) fn with_core<R>(ov: &Overload, f: impl FnOnce(&mut Doic, usize) -> R) -> Option<R> {
    let worker = WORKER.with(Cell::get);
    CORE.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(start(ov, worker)?);
        }
        let core = c.as_mut()?;
        if ov.inboxes.ready(worker) {
            wake(ov, core, worker);
        }
        Some(f(core, worker))
    })
}

/// This worker's core, made from the shared configuration (first use).
#[cold]
#[inline(never)]
fn start(ov: &Overload, worker: usize) -> Option<Doic> {
    let seed = ov.sequence_base ^ (worker as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let board = ov.realm_board.clone();
    let cfg = ov.cfg.held();
    match Doic::with_realm_board(
        &ov.identity,
        cfg.get().clone(),
        seed,
        ov.sequence_base,
        board,
    ) {
        Ok(d) => {
            CONFIG_APPLIED.with(|a| a.set(cfg.generation()));
            Some(d)
        }
        Err(e) => {
            tracing::error!(cause = %e, "DOIC core not started");
            None
        }
    }
}

/// The worker was woken ([`super::inbox::Inboxes::ready`]): the replicas
/// waiting in its inbox, a reload's `[doic]` and the protection's reports
/// applied to its core, at the instant of this use.
#[cold]
#[inline(never)]
fn wake(ov: &Overload, core: &mut Doic, worker: usize) {
    if ov.inboxes.drain(worker, core) {
        let now = ov.clock.now();
        reconfigure(ov, core, worker, now);
        super::protect::apply(ov, core, now);
    }
}

/// Applies the `[doic]` a reload published, if this core does not run
/// with it yet, at `now`.
#[cold]
fn reconfigure(ov: &Overload, core: &mut Doic, worker: usize, now: std::time::Instant) {
    let generation = ov.cfg.generation();
    if CONFIG_APPLIED.with(Cell::get) == generation {
        return;
    }
    let cfg = ov.cfg.held();
    CONFIG_APPLIED.with(|a| a.set(cfg.generation()));
    match core.reconfigure(now, cfg.get()) {
        Ok(0) => tracing::debug!(worker, "doic: new configuration applied"),
        Ok(ended) => tracing::info!(
            worker,
            ended,
            "doic: new configuration applied; overload states of peers no longer trusted ended"
        ),
        // The reload's check validated it; a core never runs a half-applied one.
        Err(e) => {
            tracing::error!(worker, cause = %e, "doic: new configuration not applied; the running one stays")
        }
    }
}

/// Forgets this thread's core: the next use makes a new one (tests).
#[cfg(test)]
pub(crate) fn reset() {
    CORE.with(|c| *c.borrow_mut() = None);
}
