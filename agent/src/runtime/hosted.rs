//! The agent on a runtime the caller passes in (`Agent::start_on`,
//! [`super::Runtime::hosted`]): the
//! workers are groups of tasks on that runtime instead of pinned threads,
//! the control tick is a task driven by a `tokio::time` interval, and the
//! request path's clock follows the runtime's time. Under a paused clock
//! (`tokio::time::pause`) every timer of the agent then follows it: Tc,
//! Tw, the request and CER timeouts, the drain, DOIC's validity, probes
//! and ramps.
//!
//! A worker here keeps what a worker thread keeps in thread-locals in a
//! [`HostedCore`], lent to the thread that polls one of its tasks for the
//! length of the poll ([`crate::workers::on_worker`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Instant;

use tokio::sync::Notify;

use super::control::{Control, TICK};
use super::{Stop, Workers};
use crate::clock::Clock;
use crate::overload::hosted::HostedCore;
use crate::workers::WorkerSlot;

/// Worker `index`, its tasks on `handle`.
pub(super) fn worker_slot(handle: &tokio::runtime::Handle, index: usize) -> WorkerSlot {
    WorkerSlot {
        handle: handle.clone(),
        live: Arc::new(AtomicUsize::new(0)),
        idle: Arc::new(Notify::new()),
        utilisation: AtomicU32::new(0),
        tid: 0,
        hosted: Some(Arc::new(HostedCore::new(index))),
        accepted: Arc::default(),
        dialed: Arc::default(),
    }
}

/// The runtime's time (paused or not, as the runtime is).
fn runtime_now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The request path's clock, following the runtime's time.
pub(super) fn clock() -> Clock {
    Clock::following(runtime_now)
}

/// The control tick as a task: one tick every [`TICK`] of the runtime's
/// time, until aborted.
pub(super) async fn control(control: Control, workers: Arc<Workers>, shutdown: Stop) {
    let mut ticking = control.ticking(&workers, runtime_now());
    let start = tokio::time::Instant::now() + TICK;
    let mut every = tokio::time::interval_at(start, TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        ticking.handle_tick(&workers, &shutdown, runtime_now());
    }
}

/// Resolves once every task of worker `w` has ended.
pub(super) async fn idle(w: &WorkerSlot) {
    loop {
        let notified = w.idle.notified();
        if w.live.load(Ordering::SeqCst) == 0 {
            break;
        }
        notified.await;
    }
}
