//! The running agent: worker threads pinned to cores (one current-thread
//! tokio runtime each), listeners, outbound connections, the metrics
//! endpoint and the control thread, assembled from a [`Config`]. The
//! shutdown of RFC 6733 §5.4 (DPR to every peer, drain, answer every
//! pending request) starts with [`Agent::shutdown`].
//!
//! [`Agent::start_on`] runs the same agent as tasks on a runtime the caller
//! passes in (`agent::hosted`): a test that pauses tokio's clock then drives
//! every timer of the agent, Tc, Tw, the request timeout and DOIC's
//! validity, probes and ramps included.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};

use crate::config::Config;
use crate::overload::hosted::HostedCore;
use crate::peer::table::PeerTable;
use crate::routing::{PeerView, Router};

mod hosted;

/// The agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listening address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A worker thread or its runtime could not be created.
    #[error("cannot start worker {index}")]
    Worker {
        /// The worker.
        index: usize,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// State shared by every worker.
#[derive(Debug)]
pub struct Shared {
    /// The configuration.
    pub config: Config,
    /// The peer table.
    pub table: PeerTable,
    /// The routing table.
    pub router: Router,
    /// Flips to true when the agent stops.
    pub shutdown: watch::Receiver<bool>,
    pub(crate) next_conn: AtomicU64,
    /// Socket call counters of every connection (batching evidence).
    pub io: IoStats,
    /// Kernel telemetry: counters per peer, arrival rates (control thread).
    pub kernel: crate::telemetry::Kernel,
    /// DOIC state shared by the workers; `None` when overload control is off.
    pub overload: Option<crate::overload::Overload>,
    /// The retry budget of 3004 retries and failovers (`[retry]`).
    pub retry: crate::relay::budget::RetryGate,
    /// Inbound connections waiting for their CER, capped.
    pub admission: crate::admission::Admission<Arc<Notify>>,
    workers: Vec<WorkerSlot>,
    next_worker: AtomicUsize,
}

/// Socket calls and what they carried, over every connection: reads and
/// writes are batched, so under load one call carries many messages.
#[derive(Debug, Default)]
pub struct IoStats {
    /// `read` calls that returned data.
    pub reads: AtomicU64,
    /// Whole messages those reads completed.
    pub messages_read: AtomicU64,
    /// `write` calls that wrote data.
    pub writes: AtomicU64,
    /// Bytes those writes carried.
    pub bytes_written: AtomicU64,
}

/// One worker as the others see it.
#[derive(Debug)]
struct WorkerSlot {
    handle: tokio::runtime::Handle,
    live: Arc<AtomicUsize>,
    idle: Arc<Notify>,
    /// Busy share of the last second, in per mille (control thread).
    utilisation: AtomicU32,
    /// The worker thread's kernel thread id (0: not a thread, [`hosted`]).
    tid: i32,
    /// The worker's DOIC state when it is not a thread ([`hosted`]).
    hosted: Option<Arc<HostedCore>>,
}

impl WorkerSlot {
    /// Runs `fut` on the worker, uncounted.
    fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        match &self.hosted {
            None => drop(self.handle.spawn(fut)),
            Some(core) => drop(self.handle.spawn(hosted::on_worker(core.clone(), fut))),
        }
    }
}

impl Shared {
    /// Number of worker threads.
    #[must_use]
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// Busy share of worker `i` over the last second, 0.0 to 1.0.
    #[must_use]
    pub fn utilisation(&self, i: usize) -> f64 {
        self.workers.get(i).map_or(0.0, |w| {
            f64::from(w.utilisation.load(Ordering::Relaxed)) / 1000.0
        })
    }

    /// CPU time worker `i`'s thread has used so far (user and system, as
    /// the scheduler accounts it: `/proc/self/task/TID/schedstat`). The
    /// cost of relaying is this time per message, read as exactly as the
    /// kernel keeps it whatever else runs on the machine.
    #[must_use]
    pub fn worker_cpu_time(&self, i: usize) -> Option<Duration> {
        let tid = self.workers.get(i)?.tid;
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
        let w = &self.workers[i % self.workers.len()];
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
        let i = self.next_worker.fetch_add(1, Ordering::Relaxed);
        self.spawn_on(i, fut);
    }
}

/// A running agent.
#[derive(Debug)]
pub struct Agent {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
    control: Option<JoinHandle<()>>,
    control_stop: Arc<AtomicBool>,
    /// The control tick of an agent on a caller's runtime.
    control_task: Option<tokio::task::JoinHandle<()>>,
    listen: Vec<SocketAddr>,
    metrics: Option<SocketAddr>,
}

impl Agent {
    /// Binds the listeners, starts the workers, dials the peers.
    ///
    /// # Errors
    /// [`StartError`] when an address cannot be bound or a thread started.
    pub fn start(config: Config) -> Result<Agent, StartError> {
        Agent::launch(config, None)
    }

    /// [`Agent::start`] on the caller's runtime `handle`: the workers are
    /// groups of tasks there, not threads (each keeps its own DOIC core,
    /// lent to whichever thread polls one of its tasks), and the listeners,
    /// the dialling, every connection, the control tick and the metrics
    /// endpoint are tasks too. Every time the agent reads is the runtime's
    /// (`tokio::time`, and the request path's clock follows it:
    /// [`Clock::following`](crate::clock::Clock::following)), so on a
    /// runtime whose clock is paused (`tokio::time::pause`,
    /// `#[tokio::test(start_paused = true)]`) the agent's timers follow the
    /// paused clock. Stop with [`Agent::shutdown`], then await
    /// [`Agent::wait`]. No thread is pinned and no worker's CPU time is
    /// measured ([`Shared::worker_cpu_time`] is `None`).
    ///
    /// # Errors
    /// [`StartError`] when an address cannot be bound.
    pub fn start_on(handle: &tokio::runtime::Handle, config: Config) -> Result<Agent, StartError> {
        // Every `now` read while starting is the runtime's too.
        let _entered = handle.enter();
        Agent::launch(config, Some(handle))
    }

    /// Starts the agent on pinned worker threads, or as tasks on `on`.
    fn launch(config: Config, on: Option<&tokio::runtime::Handle>) -> Result<Agent, StartError> {
        let mut listeners = Vec::new();
        for addr in &config.node.listen {
            let l = bind(*addr)?;
            crate::net::connect::set_backlog(&l, config.node.listen_backlog).map_err(|source| {
                StartError::Bind {
                    addr: *addr,
                    source,
                }
            })?;
            listeners.push(l);
        }
        let metrics_listener = config
            .metrics
            .as_ref()
            .map(|m| bind(m.listen))
            .transpose()?;
        let listen = listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect();
        let metrics = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());

        let (stop, shutdown) = watch::channel(false);
        let n = config.worker_count();
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let mut threads = Vec::new();
        let mut slots = Vec::new();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        // Pinned worker threads, or workers on the caller's runtime.
        let threads_to_start = if on.is_some() { 0 } else { n };
        if let Some(handle) = on {
            slots.extend((0..n).map(|index| hosted::worker_slot(handle, index)));
        }
        for index in 0..threads_to_start {
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
                    // SAFETY: gettid has no preconditions.
                    let tid = unsafe { libc::gettid() };
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
                .map_err(|source| StartError::Worker { index, source })?;
            threads.push(t);
            let (handle, tid) = ready_rx
                .recv()
                .map_err(|_| StartError::Worker {
                    index,
                    source: std::io::Error::other("worker thread ended"),
                })?
                .map_err(|source| StartError::Worker { index, source })?;
            slots.push(WorkerSlot {
                handle,
                live,
                idle,
                utilisation: AtomicU32::new(0),
                tid,
                hosted: None,
            });
        }
        let table = PeerTable::from_config(&config);
        let router = Router::from_config(&config, |h| table.by_host(h));
        let identity = &config.node.origin_host;
        let overload = match on {
            None => crate::overload::Overload::new(identity, config.doic_effective(), n),
            Some(_) => config.doic_effective().map(|cfg| {
                crate::overload::Overload::with_clock(identity, cfg, n, hosted::clock())
            }),
        };
        let retry = crate::relay::budget::RetryGate::new(&config.retry);
        let admission = crate::admission::Admission::new(
            config.node.max_pending_cer,
            config.node.max_pending_cer_per_source,
        );
        let shared = Arc::new(Shared {
            overload,
            retry,
            admission,
            config,
            table,
            router,
            shutdown,
            next_conn: AtomicU64::new(1),
            io: IoStats::default(),
            kernel: crate::telemetry::Kernel::default(),
            workers: slots,
            next_worker: AtomicUsize::new(0),
        });
        for (i, l) in listeners.into_iter().enumerate() {
            let s = shared.clone();
            shared.spawn_on(i, crate::net::connect::listen(s, l));
        }
        for (id, slot) in shared.table.all() {
            if let Some(addr) = slot.connect {
                let s = shared.clone();
                shared.spawn_on(id, crate::net::connect::dial_loop(s, id, addr));
            }
        }
        if let Some(l) = metrics_listener {
            let s = shared.clone();
            shared.spawn_on(0, crate::metrics::serve(s, l));
        }
        let control_stop = Arc::new(AtomicBool::new(false));
        let control = on.is_none().then(|| {
            let shared = shared.clone();
            let stop = control_stop.clone();
            std::thread::Builder::new()
                .name("doic-control".into())
                .spawn(move || control_loop(&shared, &stop))
                .ok()
        });
        let control_task = on.map(|h| h.spawn(hosted::control(shared.clone())));
        tracing::info!(workers = n, listen = ?listen, metrics = ?metrics, "agent started");
        Ok(Agent {
            shared,
            stop,
            threads,
            control: control.flatten(),
            control_stop,
            control_task,
            listen,
            metrics,
        })
    }

    /// The addresses the agent listens on (with the ports actually bound).
    #[must_use]
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.listen
    }

    /// The metrics endpoint's address, if configured.
    #[must_use]
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// The shared state (peer table, counters).
    #[must_use]
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Starts the graceful stop (RFC 6733 §5.4): listeners close, every open
    /// connection sends DPR and relays nothing new (a request arriving from
    /// then on is answered 3002 at once); pending requests are answered by
    /// their upstream peer or, at 80 % of the drain, locally with 3002.
    /// Each connection closes without losing a queued answer: all written,
    /// then a FIN, then a read to the peer's end of stream (`docs/relay.md`,
    /// "Shutdown").
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits until every worker has finished (call [`Agent::shutdown`]
    /// first). An agent on a caller's runtime ([`Agent::start_on`]) has no
    /// thread to wait for: its control tick stops, its tasks end on their
    /// own; await [`Agent::wait`] to wait for them.
    pub fn join(mut self) {
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

    /// [`Agent::join`] for async callers: on a caller's runtime, waits for
    /// every task of every worker to end (call [`Agent::shutdown`] first);
    /// with pinned workers, joins them on a blocking thread.
    pub async fn wait(mut self) {
        if self.control_task.is_none() {
            let _ = tokio::task::spawn_blocking(move || self.join()).await;
            return;
        }
        let mut shutdown = self.shared.shutdown.clone();
        stopped(&mut shutdown).await;
        for w in &self.shared.workers {
            hosted::idle(w).await;
        }
        if let Some(c) = self.control_task.take() {
            c.abort();
            let _ = c.await;
        }
    }
}

impl Drop for Agent {
    /// An agent on a caller's runtime stops its control tick with it (the
    /// workers stop as on [`Agent::shutdown`]: the stop signal's sender is
    /// gone).
    fn drop(&mut self) {
        if let Some(c) = self.control_task.take() {
            c.abort();
        }
    }
}

fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, StartError> {
    let l =
        std::net::TcpListener::bind(addr).map_err(|source| StartError::Bind { addr, source })?;
    l.set_nonblocking(true)
        .map_err(|source| StartError::Bind { addr, source })?;
    Ok(l)
}

/// The control thread: every 100 ms the DOIC ticks of the workers, once a
/// second their busy share. (Overload control attaches here: it reads the
/// same load signals.)
fn control_loop(shared: &Arc<Shared>, stop: &AtomicBool) {
    let mut control = Control::new(shared, Instant::now());
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(CONTROL_TICK);
        control.handle_tick(shared, Instant::now());
    }
}

/// The period of the control tick.
const CONTROL_TICK: Duration = Duration::from_millis(100);

/// What the control tick keeps between ticks.
struct Control {
    /// Each worker's busy time at the last second.
    last: Vec<Duration>,
    /// When that was.
    at: Instant,
    ticks: u64,
}

impl Control {
    fn new(shared: &Shared, now: Instant) -> Control {
        let last = shared
            .workers
            .iter()
            .map(|w| w.handle.metrics().worker_total_busy_duration(0))
            .collect();
        Control {
            last,
            at: now,
            ticks: 0,
        }
    }

    /// One tick at `now`.
    fn handle_tick(&mut self, shared: &Arc<Shared>, now: Instant) {
        self.ticks += 1;
        if shared.overload.is_some() && !*shared.shutdown.borrow() {
            // DOIC expiry, ramps and snapshots run on each worker (its core
            // lives there); the audit trail is rendered once a second.
            let full = self.ticks.is_multiple_of(10);
            for w in &shared.workers {
                let s = shared.clone();
                w.spawn(async move {
                    if let Some(ov) = &s.overload {
                        crate::overload::tick(ov, full);
                    }
                });
            }
        }
        let elapsed = now.saturating_duration_since(self.at);
        if elapsed < Duration::from_secs(1) {
            return;
        }
        self.at = now;
        for (i, w) in shared.workers.iter().enumerate() {
            let busy = w.handle.metrics().worker_total_busy_duration(0);
            let delta = busy.saturating_sub(self.last[i]);
            self.last[i] = busy;
            let permille = (delta.as_secs_f64() / elapsed.as_secs_f64() * 1000.0).min(1000.0);
            w.utilisation.store(permille as u32, Ordering::Relaxed);
        }
        shared.kernel.handle_tick(now);
        if let Some(ov) = &shared.overload {
            crate::overload::own::control_tick(shared, ov, now);
        }
    }
}

/// Resolves once the agent is stopping.
pub(crate) async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
