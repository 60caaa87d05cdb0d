//! The threads of a running agent: worker threads pinned to cores (one
//! current-thread tokio runtime each, [`Workers`]), the control thread
//! ([`control`]: DOIC ticks, utilisation, kernel telemetry, the agent's
//! own load) and the shutdown sequence of RFC 6733 §5.4 ([`Runtime::stop`],
//! [`Runtime::join`]: the workers end once every connection has sent its DPR,
//! drained and closed, then the control thread). [`Runtime::hosted`] builds
//! the same workers as groups of tasks on a runtime the caller passes in,
//! with the control tick as a task ([`hosted`]). A reload of the
//! configuration is carried out on the running workers by [`reload`].
//!
//! Threads talk through atomics and bounded channels, never an unbounded
//! queue: the feeds of the workers to the control thread are in
//! [`control::Feeds`] (crossbeam), the connections' queues between workers
//! in `net::link` (bounded tokio channels).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::thread::JoinHandle;

use tokio::sync::{Notify, watch};

pub mod control;
mod hosted;
pub(crate) mod reload;

use crate::clock::Clock;
pub use crate::workers::{Stop, Workers};
use crate::workers::{WorkerSlot, stopped};

/// A worker thread or its runtime could not be created.
#[derive(Debug, thiserror::Error)]
#[error("cannot start worker {index}")]
pub struct WorkerError {
    /// The worker.
    pub index: usize,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// The agent's threads: the workers, the control thread and the stop
/// signal they watch.
#[derive(Debug)]
pub struct Runtime {
    workers: Arc<Workers>,
    stop_tx: watch::Sender<bool>,
    stop: Stop,
    threads: Vec<JoinHandle<()>>,
    control: Option<JoinHandle<()>>,
    control_stop: Arc<AtomicBool>,
    /// The caller's runtime, for workers that are not threads.
    hosted_on: Option<tokio::runtime::Handle>,
    /// The control tick of workers on a caller's runtime.
    control_task: Option<tokio::task::JoinHandle<()>>,
}

impl Runtime {
    /// Starts `n` worker threads, each pinned to a core (round robin over
    /// the cores this process may use) with its own current-thread tokio
    /// runtime. A worker ends once the agent stops and every task spawned
    /// on it with [`Workers::spawn_on`] has ended.
    ///
    /// # Errors
    /// [`WorkerError`] when a thread or its runtime cannot be created.
    pub fn start(n: usize) -> Result<Runtime, WorkerError> {
        let (stop_tx, shutdown) = watch::channel(false);
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let mut threads = Vec::new();
        let mut slots = Vec::new();
        // Each worker says once that it is ready (its runtime's handle).
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        for index in 0..n {
            let core = (!cores.is_empty()).then(|| cores[index % cores.len()]);
            let ready_tx = ready_tx.clone();
            let mut shutdown = shutdown.clone();
            let live = Arc::new(AtomicUsize::new(0));
            let idle = Arc::new(Notify::new());
            let (live2, idle2) = (live.clone(), idle.clone());
            let t = std::thread::Builder::new()
                .name(format!("doic-worker-{index}"))
                .spawn(move || {
                    if let Some(core) = core {
                        core_affinity::set_for_current(core);
                    }
                    crate::overload::set_worker(index);
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let tid = crate::host::thread::current_tid();
                    let _ = ready_tx.send(Ok((rt.handle().clone(), tid)));
                    rt.block_on(async move {
                        stopped(&mut shutdown).await;
                        // Wait for every task of this worker to end.
                        loop {
                            let notified = idle2.notified();
                            if live2.load(Ordering::SeqCst) == 0 {
                                break;
                            }
                            notified.await;
                        }
                    });
                })
                .map_err(|source| WorkerError { index, source })?;
            threads.push(t);
            let (handle, tid) = ready_rx
                .recv()
                .map_err(|_| WorkerError {
                    index,
                    source: std::io::Error::other("worker thread ended"),
                })?
                .map_err(|source| WorkerError { index, source })?;
            slots.push(WorkerSlot {
                handle,
                live,
                idle,
                utilisation: AtomicU32::new(0),
                tid,
                hosted: None,
                accepted: Arc::default(),
                dialed: Arc::default(),
            });
        }
        Ok(Runtime::with(slots, threads, None, stop_tx, shutdown))
    }

    /// `n` workers as groups of tasks on the caller's runtime `handle`, not
    /// threads: each keeps its own DOIC core, lent to whichever thread polls
    /// one of its tasks; the control tick is a task there too
    /// ([`Runtime::start_control`]). No thread is pinned and no worker's CPU
    /// time is measured.
    #[must_use]
    pub fn hosted(handle: &tokio::runtime::Handle, n: usize) -> Runtime {
        let (stop_tx, shutdown) = watch::channel(false);
        let slots = (0..n)
            .map(|index| hosted::worker_slot(handle, index))
            .collect();
        Runtime::with(slots, Vec::new(), Some(handle.clone()), stop_tx, shutdown)
    }

    fn with(
        slots: Vec<WorkerSlot>,
        threads: Vec<JoinHandle<()>>,
        hosted_on: Option<tokio::runtime::Handle>,
        stop_tx: watch::Sender<bool>,
        shutdown: watch::Receiver<bool>,
    ) -> Runtime {
        Runtime {
            workers: Arc::new(Workers { slots }),
            stop_tx,
            stop: Stop(shutdown),
            threads,
            control: None,
            control_stop: Arc::new(AtomicBool::new(false)),
            hosted_on,
            control_task: None,
        }
    }

    /// The clock of every `now` the request path reads: the CPU counter on
    /// worker threads, the caller's runtime time on hosted workers (paused
    /// when it is paused).
    #[must_use]
    pub fn clock(&self) -> Clock {
        match self.hosted_on {
            None => Clock::new(),
            Some(_) => hosted::clock(),
        }
    }

    /// The workers.
    #[must_use]
    pub fn workers(&self) -> &Arc<Workers> {
        &self.workers
    }

    /// The stop signal every task watches.
    #[must_use]
    pub fn stop_signal(&self) -> &Stop {
        &self.stop
    }

    /// Starts the control thread on `control` (at most once; a thread that
    /// cannot be created leaves the agent without ticks, logged), or its
    /// task on the caller's runtime ([`Runtime::hosted`]).
    pub(crate) fn start_control(&mut self, control: control::Control) {
        if let Some(handle) = &self.hosted_on {
            let task = hosted::control(control, self.workers.clone(), self.stop.clone());
            self.control_task = Some(handle.spawn(task));
            return;
        }
        let stop = self.control_stop.clone();
        let workers = self.workers.clone();
        let shutdown = self.stop.clone();
        match std::thread::Builder::new()
            .name("doic-control".into())
            .spawn(move || control.run(&workers, &shutdown, &stop))
        {
            Ok(t) => self.control = Some(t),
            Err(e) => tracing::error!(cause = %e, "cannot start the control thread"),
        }
    }

    /// Starts the graceful stop: every task sees [`Stop`] flip.
    pub fn stop(&self) {
        let _ = self.stop_tx.send(true);
    }

    /// Waits until every worker has finished (call [`Runtime::stop`]
    /// first), then stops the control thread. Hosted workers
    /// ([`Runtime::hosted`]) have no thread to wait for: their control tick
    /// stops, their tasks end on their own ([`Runtime::wait`] waits for
    /// them).
    pub fn join(&mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.control_stop.store(true, Ordering::Relaxed);
        if let Some(c) = self.control.take() {
            let _ = c.join();
        }
        if let Some(c) = self.control_task.take() {
            c.abort();
        }
    }

    /// True when the workers are tasks on a caller's runtime.
    #[must_use]
    pub fn is_hosted(&self) -> bool {
        self.hosted_on.is_some()
    }

    /// Hosted workers ([`Runtime::hosted`]): waits until the stop and every
    /// task of every worker has ended, then stops the control tick.
    pub async fn wait(&mut self) {
        self.stop.stopped().await;
        for w in &self.workers.slots {
            hosted::idle(w).await;
        }
        if let Some(c) = self.control_task.take() {
            c.abort();
            let _ = c.await;
        }
    }
}

impl Drop for Runtime {
    /// Hosted workers stop their control tick with the runtime (the
    /// workers stop as on [`Runtime::stop`]: the stop signal's sender is
    /// gone).
    fn drop(&mut self) {
        if let Some(c) = self.control_task.take() {
            c.abort();
        }
    }
}
