//! The running agent, assembled from a [`Config`]: the parts each task is
//! given (the connections' [`crate::net::ConnCtx`], the relay's
//! [`crate::net::RelayCtx`], the control thread's
//! [`crate::runtime::control::Control`], the metrics endpoint's
//! [`crate::metrics::Sources`]), started on the threads of
//! [`crate::runtime`]. The shutdown of RFC 6733 §5.4 (DPR to every peer,
//! drain, answer every pending request) starts with [`Agent::shutdown`];
//! [`Agent::reload`] changes peers, routes and `[accept]` while it runs.
//!
//! [`Agent::start_on`] runs the same agent as tasks on a runtime the caller
//! passes in ([`Runtime::hosted`]): a test that pauses tokio's clock then
//! drives every timer of the agent, Tc, Tw, the request timeout and DOIC's
//! validity, probes and ramps included.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use crate::admission::Admission;
use crate::config::{Config, Plan};
use crate::ebpf::live::Live;
use crate::metrics::Sources;
use crate::net::{ConnCtx, IoStats, RelayCtx};
use crate::overload::Overload;
use crate::peer::table::PeerTable;
use crate::relay::budget::RetryGate;
use crate::routing::live::LiveRoutes;
use crate::routing::{PeerView, Router};
use crate::runtime::{Runtime, WorkerError, Workers, control::Control};
use crate::telemetry::Kernel;

/// The agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listening address could not be bound.
    #[error("{listener}: cannot listen on {addr}")]
    Bind {
        /// Which listener of the configuration (`node.listen[0]`,
        /// `metrics.listen`).
        listener: String,
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The audit log could not be opened.
    #[error("cannot open the audit log")]
    Audit(#[source] crate::audit::writer::WriteError),
    /// The TLS material of a listener or peer does not load (RFC 6733 §13).
    #[error(transparent)]
    Tls(#[from] crate::tls::ReloadError),
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

/// The audit log could not be opened (`[audit] dir`).
impl From<crate::audit::writer::WriteError> for StartError {
    fn from(e: crate::audit::writer::WriteError) -> Self {
        StartError::Audit(e)
    }
}

impl From<WorkerError> for StartError {
    fn from(WorkerError { index, source }: WorkerError) -> Self {
        StartError::Worker { index, source }
    }
}

/// A running agent.
#[derive(Debug)]
pub struct Agent {
    config: Arc<Config>,
    /// The audit log's writer (`[audit] dir`).
    audit: Option<crate::audit::writer::Writer>,
    /// The configuration running now: the one started, then each reload's
    /// ([`Agent::reload`]; what needs a restart keeps its started value).
    running: Mutex<Config>,
    /// What the connections share, for a reload.
    conn: Arc<ConnCtx>,
    runtime: Runtime,
    sources: Arc<Sources>,
    ebpf: Arc<Live>,
    listen: Vec<SocketAddr>,
    metrics: Option<SocketAddr>,
    tls: Arc<crate::tls::Material>,
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
    /// measured ([`Workers::cpu_time`] is `None`).
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
        let tls = Arc::new(config.tls_material()?);
        let mut listeners = Vec::new();
        for (i, addr) in config.listen_addrs().iter().enumerate() {
            let listener = || format!("node.listen[{i}]");
            let l = bind(*addr, listener)?;
            let bind_error = |source| StartError::Bind {
                listener: listener(),
                addr: *addr,
                source,
            };
            crate::net::connect::set_backlog(&l, config.node.listen_backlog).map_err(bind_error)?;
            if let Some(bytes) = config.node.socket_buffer_bytes {
                crate::net::connect::set_buffers(&l, bytes).map_err(bind_error)?;
            }
            listeners.push(l);
        }
        let metrics_listener = config
            .metrics
            .as_ref()
            .map(|m| bind(m.listen, || "metrics.listen".to_owned()))
            .transpose()?;
        let listen: Vec<SocketAddr> = listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect();
        let metrics = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());

        let n = config.worker_count();
        let mut runtime = match on {
            None => Runtime::start(n)?,
            Some(handle) => Runtime::hosted(handle, n),
        };
        let config = Arc::new(config);
        let table = Arc::new(PeerTable::from_config(&config));
        let router = Router::from_config(&config, |h| table.by_host(h));
        let routes = Arc::new(LiveRoutes::new(router));
        let overload = config.doic_effective().map(|cfg| {
            Arc::new(Overload::with_clock(
                &config.node.origin_host,
                cfg,
                n,
                runtime.clock(),
            ))
        });
        let audit = match (&overload, &config.audit.dir) {
            (Some(ov), Some(_)) => ov
                .start_audit_log(config.audit.feed_capacity)
                .map(|log| crate::audit::writer::Writer::spawn(log, &config.audit, n)),
            _ => None,
        }
        .transpose()?;
        let retry = Arc::new(RetryGate::new(&config.retry));
        let admission = Arc::new(Admission::new(
            config.node.max_pending_cer,
            config.node.max_pending_cer_per_source,
        ));
        let io = Arc::new(IoStats::default());
        let kernel = Arc::new(Kernel::default());
        let ebpf = Arc::new(Live::default());
        let workers = runtime.workers().clone();
        let conn = Arc::new(ConnCtx {
            config: config.clone(),
            relay: RelayCtx {
                origin_host: config.node.origin_host.clone(),
                origin_realm: config.node.origin_realm.clone(),
                table: table.clone(),
                routes: routes.clone(),
                overload: overload.clone(),
                retry: retry.clone(),
                upstream_backlog: config.node.upstream_backlog_bytes,
            },
            admission: admission.clone(),
            io: io.clone(),
            kernel: kernel.clone(),
            stop: runtime.stop_signal().clone(),
            next_conn: AtomicU64::new(1),
            accept: Mutex::new(config.accept.clone()),
        });
        let sources = Arc::new(Sources {
            table: table.clone(),
            retry,
            io,
            admission,
            workers: workers.clone(),
            kernel: kernel.clone(),
            overload: overload.clone(),
            routes,
            listen: listen.clone(),
        });
        for (i, l) in listeners.into_iter().enumerate() {
            let server = tls.server(&format!("node.listen[{i}].tls"));
            let fut = crate::net::connect::listen(conn.clone(), workers.clone(), l, server);
            workers.spawn_on(i, fut);
        }
        for (id, slot) in table.all() {
            if let Some(addr) = slot.connect {
                let client = config
                    .peers
                    .iter()
                    .position(|p| p.host.eq_ignore_ascii_case(&slot.host))
                    .and_then(|i| tls.client(&format!("peer[{i}].tls")));
                let fut = crate::net::connect::dial_loop(conn.clone(), id, addr, client);
                workers.spawn_dialer(id, fut);
            }
        }
        if let Some(l) = metrics_listener {
            let fut = crate::metrics::serve(sources.clone(), runtime.stop_signal().clone(), l);
            workers.spawn_on(0, fut);
        }
        runtime.start_control(Control {
            ebpf: ebpf.clone(),
            kernel,
            overload,
            table,
        });
        tracing::info!(workers = n, listen = ?listen, metrics = %crate::net::OrNone(metrics), "agent started");
        Ok(Agent {
            running: Mutex::new((*config).clone()),
            config,
            audit,
            conn,
            runtime,
            sources,
            ebpf,
            listen,
            metrics,
            tls,
        })
    }

    /// Reads the TLS files of every TLS listener and peer again (RFC 6733
    /// §13; what a reload on SIGHUP calls): connections made from now on
    /// use the new certificates, keys and CAs, open ones keep theirs. A part
    /// whose files do not load keeps its old material, and is logged.
    ///
    /// # Errors
    /// The listeners and peers whose files did not load.
    pub fn reload_tls(&self) -> Result<(), Vec<crate::tls::ReloadError>> {
        let done = self.tls.reload();
        match &done {
            Ok(()) => tracing::info!(
                listeners = self.tls.servers.len(),
                peers = self.tls.clients.len(),
                "TLS material reloaded"
            ),
            Err(failed) => {
                for e in failed {
                    tracing::warn!(key = %e.key, cause = %e.source, "TLS material not reloaded; the old one stays");
                }
            }
        }
        done
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

    /// The configuration the agent started with.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Reloads the configuration (SIGHUP, `doic-agent reload`): `new` (read
    /// and checked by the caller, [`Config::check_runnable`]) against the
    /// running one, [`Plan::between`]. Peers, routes, `[accept]` and `[doic]`
    /// change live (the DOIC cores keep their overload state): an added peer is dialled, a removed one is sent DPR (RFC 6733
    /// §5.4) and closed once its pending requests are answered or the drain
    /// ends, the peers that stay keep their connections and state. What is
    /// read only at start (listen addresses, workers, `[ebpf]`, ...) is
    /// logged at WARN as needing a restart and keeps its running value.
    /// Returns the plan carried out.
    pub fn reload(&self, new: Config) -> Plan {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let plan = Plan::between(&running, &new);
        crate::runtime::reload::apply(&self.conn, self.runtime.workers(), &plan, &new);
        // The TLS files of the listeners and peers are read again (errors
        // are logged there, and the old material stays).
        if !self.tls.servers.is_empty() || !self.tls.clients.is_empty() {
            let _ = self.reload_tls();
        }
        running.peers = new.peers;
        running.routes = new.routes;
        running.accept = new.accept;
        if plan.doic {
            // What runs: the keys read at start keep their running values.
            running.doic = match (new.doic, running.doic.take()) {
                (Some(n), Some(r)) => Some(n.keeping_start_only(&r)),
                (_, r) => r,
            };
        }
        plan
    }

    /// The peer table (states, counters).
    #[must_use]
    pub fn peers(&self) -> &Arc<PeerTable> {
        &self.sources.table
    }

    /// Socket call counters of every connection (batching evidence).
    #[must_use]
    pub fn io(&self) -> &IoStats {
        &self.sources.io
    }

    /// Inbound connections waiting for their CER.
    #[must_use]
    pub fn admission(&self) -> &Arc<Admission<Arc<Notify>>> {
        &self.sources.admission
    }

    /// DOIC state shared by the workers; `None` when overload control is off.
    #[must_use]
    pub fn overload(&self) -> Option<&Arc<Overload>> {
        self.sources.overload.as_ref()
    }

    /// The worker threads (count, utilisation, CPU time).
    #[must_use]
    pub fn workers(&self) -> &Workers {
        &self.sources.workers
    }

    /// Kernel telemetry as the agent last read it (arrival rates, counters).
    #[must_use]
    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.sources.kernel
    }

    /// What `/metrics` renders ([`crate::metrics::render`]).
    #[must_use]
    pub fn metrics(&self) -> &Arc<Sources> {
        &self.sources
    }

    /// Starts the kernel telemetry as the `[ebpf]` section says (the ports
    /// of the bound listeners filled in) and hands it to the control thread.
    /// Without the program (no privileges, `mode = "off"`, not built) one
    /// line is logged and `doic_ebpf_attached` stays 0. Returns true when
    /// the program is attached.
    pub fn start_kernel_telemetry(&self) -> bool {
        let attached = self.ebpf.start(self.config.ebpf_config(self.local_addrs()));
        self.sources.kernel.set_counting(attached);
        attached
    }

    /// Detaches the kernel program from every interface (idempotent); the
    /// agent's last reading goes with it. [`Agent::join`] calls it once the
    /// connections are closed.
    pub fn detach_kernel_telemetry(&self) {
        self.ebpf.detach();
        self.sources.kernel.set_counting(false);
    }

    /// Starts the graceful stop (RFC 6733 §5.4): listeners close, every open
    /// connection sends DPR and relays nothing new (a request arriving from
    /// then on is answered 3002 at once); pending requests are answered by
    /// their upstream peer or, at 80 % of the drain, locally with 3002.
    /// Each connection closes without losing a queued answer: all written,
    /// then a FIN, then a read to the peer's end of stream (`docs/relay.md`,
    /// "Shutdown").
    pub fn shutdown(&self) {
        self.runtime.stop();
    }

    /// Waits until every worker has finished (call [`Agent::shutdown`]
    /// first), then detaches the kernel program: it stays attached until
    /// every connection has closed. An agent on a caller's runtime
    /// ([`Agent::start_on`]) has no thread to wait for: its control tick
    /// stops, its tasks end on their own; await [`Agent::wait`] to wait for
    /// them.
    pub fn join(mut self) {
        self.runtime.join();
        self.detach_kernel_telemetry();
        self.stop_audit_log();
    }

    /// Writes what the audit log was fed, flushes and closes it
    /// (idempotent; [`Agent::join`] and [`Agent::wait`] call it last).
    pub fn stop_audit_log(&mut self) {
        if let Some(w) = self.audit.as_mut() {
            w.stop();
        }
    }

    /// [`Agent::join`] for async callers: on a caller's runtime, waits for
    /// every task of every worker to end (call [`Agent::shutdown`] first),
    /// then detaches the kernel program; with pinned workers, joins them on
    /// a blocking thread.
    pub async fn wait(mut self) {
        if !self.runtime.is_hosted() {
            let _ = tokio::task::spawn_blocking(move || self.join()).await;
            return;
        }
        self.runtime.wait().await;
        self.detach_kernel_telemetry();
        self.stop_audit_log();
    }
}

/// Binds `addr`, the configuration's `listener`.
fn bind(
    addr: SocketAddr,
    listener: impl Fn() -> String,
) -> Result<std::net::TcpListener, StartError> {
    let bind_error = |source| StartError::Bind {
        listener: listener(),
        addr,
        source,
    };
    let l = std::net::TcpListener::bind(addr).map_err(bind_error)?;
    l.set_nonblocking(true).map_err(bind_error)?;
    Ok(l)
}
