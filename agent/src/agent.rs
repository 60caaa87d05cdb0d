//! The running agent: worker threads pinned to cores (one current-thread
//! tokio runtime each), listeners, outbound connections, the metrics
//! endpoint and the control thread, assembled from a [`Config`]. The
//! shutdown of RFC 6733 §5.4 (DPR to every peer, drain, answer every
//! pending request) starts with [`Agent::shutdown`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};

use crate::config::Config;
use crate::peer::table::PeerTable;
use crate::routing::{PeerView, Router};

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
    /// The worker thread's kernel thread id.
    tid: i32,
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
        w.handle.spawn(async move {
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
    listen: Vec<SocketAddr>,
    metrics: Option<SocketAddr>,
}

impl Agent {
    /// Binds the listeners, starts the workers, dials the peers.
    ///
    /// # Errors
    /// [`StartError`] when an address cannot be bound or a thread started.
    pub fn start(config: Config) -> Result<Agent, StartError> {
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
            });
        }
        let table = PeerTable::from_config(&config);
        let router = Router::from_config(&config, |h| table.by_host(h));
        let overload =
            crate::overload::Overload::new(&config.node.origin_host, config.doic_effective(), n);
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
        let control = {
            let shared = shared.clone();
            let stop = control_stop.clone();
            std::thread::Builder::new()
                .name("doic-control".into())
                .spawn(move || control_loop(&shared, &stop))
                .ok()
        };
        tracing::info!(workers = n, listen = ?listen, metrics = ?metrics, "agent started");
        Ok(Agent {
            shared,
            stop,
            threads,
            control,
            control_stop,
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
    /// first).
    pub fn join(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.control_stop.store(true, Ordering::Relaxed);
        if let Some(c) = self.control.take() {
            let _ = c.join();
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

/// The control thread: once a second, the workers' busy share. (Overload
/// control attaches here: it reads the same load signals.)
fn control_loop(shared: &Arc<Shared>, stop: &AtomicBool) {
    let mut last: Vec<Duration> = shared
        .workers
        .iter()
        .map(|w| w.handle.metrics().worker_total_busy_duration(0))
        .collect();
    let mut at = Instant::now();
    let mut ticks = 0u64;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        ticks += 1;
        if shared.overload.is_some() && !*shared.shutdown.borrow() {
            // DOIC expiry, ramps and snapshots run on each worker (its core
            // lives there); the audit trail is rendered once a second.
            let full = ticks.is_multiple_of(10);
            for i in 0..shared.workers.len() {
                let s = shared.clone();
                shared.workers[i].handle.spawn(async move {
                    if let Some(ov) = &s.overload {
                        crate::overload::tick(ov, full);
                    }
                });
            }
        }
        if at.elapsed() < Duration::from_secs(1) {
            continue;
        }
        let elapsed = at.elapsed();
        at = Instant::now();
        for (i, w) in shared.workers.iter().enumerate() {
            let busy = w.handle.metrics().worker_total_busy_duration(0);
            let delta = busy.saturating_sub(last[i]);
            last[i] = busy;
            let permille = (delta.as_secs_f64() / elapsed.as_secs_f64() * 1000.0).min(1000.0);
            w.utilisation.store(permille as u32, Ordering::Relaxed);
        }
        shared.kernel.handle_tick(at);
        if let Some(ov) = &shared.overload {
            crate::overload::own::control_tick(shared, ov, at);
        }
    }
}

/// Resolves once the agent is stopping.
pub(crate) async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
