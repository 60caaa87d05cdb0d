//! The efficacy benchmark (`bench-overload`): useful throughput under
//! overload, "the ultimate measure" of RFC 7068 §3. An open-loop client
//! offers a multiple of a server's capacity C; goodput is the 2001 answers
//! received within the client's timeout T, per second. Each cell of the
//! grid (server kind x path x offered load) is measured on fresh servers
//! and fresh relays, so no queue is left over from the cell before.
//!
//! Servers ([`ServerKind`]): the built-in server queueing FIFO at C/s, or
//! rejecting with 3004 above C (`tools::loadgen::Busy`), or freeDiameter's
//! `test_app` server held to a share of one CPU by a cgroup, its C measured
//! first ([`fd_server`]). Paths
//! ([`PathKind`]): direct, a freeDiameter relay, the agent without
//! `[doic]`, the agent with `[doic]` (non-DOIC client), and a DOIC
//! reacting client in front: a second agent as the client's edge
//! (RFC 8581 agent chain) offering the rate (RFC 8582) or only the loss
//! algorithm (RFC 7683 §6).

pub mod fd_server;
pub mod svg;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent::agent::Agent;
use anyhow::Context;
use interop::fd::{FdNode, FdRelay, PeerTarget};
use tools::loadgen::{Busy, Identity, Pace, Report, Server, ServerBehaviour, Traffic};

use fd_server::{FdShare, LimitedFd};

use crate::relay::{connect_client, median, start_agent};

/// The servers' DiameterIdentity and realm.
pub const SERVER: (&str, &str) = ("server1.example.net", "example.net");

/// How often the sampler reads the server's counters (the standard
/// deviation of arrivals is per this interval).
pub const SAMPLE: Duration = Duration::from_millis(100);

/// What the server does above its capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServerKind {
    /// (a) one FIFO queue served at C/s: latency grows without bound.
    Fifo,
    /// (b) 3004 above C, each rejection costing this share of a request.
    Reject(f64),
    /// (c) freeDiameter's `test_app` server in a cgroup held to `cpu`, of
    /// measured capacity `capacity` (requests per second,
    /// [`fd_server::calibrate`]).
    Fd {
        /// Its cgroup.
        cpu: FdShare,
        /// Its measured capacity C.
        capacity: u32,
    },
}

impl ServerKind {
    /// A short name for tables.
    #[must_use]
    pub fn name(self) -> String {
        match self {
            ServerKind::Fifo => "FIFO at C/s".into(),
            ServerKind::Reject(c) => format!("3004 above C (cost {c})"),
            ServerKind::Fd { cpu, capacity } => {
                format!("freeDiameter at {} CPU (C {capacity})", cpu.share)
            }
        }
    }

    /// The word used in `--servers` and in the plots' file names.
    #[must_use]
    pub fn slug(self) -> &'static str {
        match self {
            ServerKind::Fifo => "fifo",
            ServerKind::Reject(_) => "reject",
            ServerKind::Fd { .. } => "fd",
        }
    }
}

/// How the client reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// Client to server.
    Direct,
    /// Through a freeDiameter relay (`rt_default`).
    FdRelay,
    /// Through the agent without `[doic]`.
    Agent,
    /// Through the agent with `[doic]`, the client without DOIC.
    AgentDoic,
    /// Client, edge agent (reacting node offering rate), agent, server.
    ChainRate,
    /// The same, the edge offering only loss.
    ChainLoss,
}

impl PathKind {
    /// Every path, in the table's order.
    pub const ALL: [PathKind; 6] = [
        PathKind::Direct,
        PathKind::FdRelay,
        PathKind::Agent,
        PathKind::AgentDoic,
        PathKind::ChainRate,
        PathKind::ChainLoss,
    ];

    /// The name used in tables, plots and `--paths`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Direct => "direct",
            PathKind::FdRelay => "fd-relay",
            PathKind::Agent => "agent",
            PathKind::AgentDoic => "agent-doic",
            PathKind::ChainRate => "chain-rate",
            PathKind::ChainLoss => "chain-loss",
        }
    }

    /// The path named `s`.
    #[must_use]
    pub fn parse(s: &str) -> Option<PathKind> {
        PathKind::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// One sample of an episode, every [`SAMPLE`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// Seconds since the load began.
    pub at: f64,
    /// Requests that reached the server in the interval, per second
    /// (`None` for server (c), which counts nothing the benchmark reads).
    pub admitted: Option<f64>,
    /// The wait in the server's queue at the end of the interval, ms
    /// (`None` for server (c)).
    pub server_wait_ms: Option<f64>,
    /// The limit the agent next to the server holds it to at the end of
    /// the interval, requests/s (`None`: not limited, or no agent).
    pub limit: Option<f64>,
    /// The mean latency of the server's answers in the last tick of the
    /// agent next to it, ms (`None`: no answer in the tick, or no agent).
    pub latency_ms: Option<f64>,
}

/// One measurement of a cell.
#[derive(Debug, Clone)]
pub struct Run {
    /// The client's report.
    pub report: Report,
    /// Requests the client sent per second (to check that the client kept
    /// up with the offered load).
    pub sent_rate: f64,
    /// The server's arrivals and queue wait over time, from the start of
    /// the warm-up.
    pub samples: Vec<Sample>,
    /// When the measurement began, seconds into the samples.
    pub measured_from: f64,
}

impl Run {
    /// Requests never answered by the end of the drain.
    #[must_use]
    pub fn unanswered(&self) -> u64 {
        self.report.sent.saturating_sub(self.report.answered)
    }

    /// The standard deviation of arrivals at the server per [`SAMPLE`]
    /// during the measurement (after the warm-up: the reaction to the onset
    /// is not the steady state).
    #[must_use]
    pub fn arrivals_sd(&self) -> f64 {
        let per: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.at > self.measured_from + SAMPLE.as_secs_f64())
            .filter_map(|s| Some(s.admitted? * SAMPLE.as_secs_f64()))
            .collect();
        if per.len() < 2 {
            return 0.0;
        }
        let mean = per.iter().sum::<f64>() / per.len() as f64;
        (per.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (per.len() - 1) as f64).sqrt()
    }
}

/// What one cell of the grid measures.
#[derive(Debug, Clone, Copy)]
pub struct CellSpec {
    /// The server.
    pub server: ServerKind,
    /// The path.
    pub path: PathKind,
    /// Offered load as a multiple of the capacity.
    pub load: f64,
}

/// What every cell shares.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The built-in servers' capacity C, requests per second.
    pub capacity: u32,
    /// Seconds of offered load per measurement.
    pub seconds: f64,
    /// The client's timeout T.
    pub timeout: Duration,
    /// Seconds of the same load before the measurement (so that it
    /// measures the overload's steady state, not its onset).
    pub warmup: f64,
    /// How long after the load the client waits for the last answers.
    pub drain: Duration,
    /// Requests name the server in Destination-Host (host-routed, RFC 7683
    /// §2); by default they carry Destination-Realm only (realm-routed).
    pub host_routed: bool,
    /// The `[doic.protect]` settings of the agent next to the server, as
    /// TOML lines (`slack = 0.05`); empty: the defaults (docs/protect.md).
    pub protect: String,
}

impl Setup {
    /// The capacity C of `server`: the built-in servers', or what was
    /// measured for server (c).
    #[must_use]
    pub fn capacity_of(&self, server: ServerKind) -> u32 {
        match server {
            ServerKind::Fd { capacity, .. } => capacity,
            _ => self.capacity,
        }
    }
}

/// The server of one cell.
enum Upstream {
    /// Servers (a) and (b), whose arrivals and queue wait are sampled.
    Builtin(Server),
    /// Server (c).
    Fd(LimitedFd),
}

impl Upstream {
    fn addr(&self) -> SocketAddr {
        match self {
            Upstream::Builtin(s) => s.addr,
            Upstream::Fd(f) => f.addr(),
        }
    }
}

/// Relays and servers of one cell, stopped on drop.
struct Rig {
    server: Option<Upstream>,
    agents: Vec<Agent>,
    relay: Option<FdNode>,
    entry: SocketAddr,
}

impl Drop for Rig {
    fn drop(&mut self) {
        for a in self.agents.drain(..) {
            a.shutdown();
            a.join();
        }
        self.relay.take();
        match self.server.take() {
            Some(Upstream::Builtin(s)) => s.stop(),
            // Stopped, then its cgroup removed.
            Some(Upstream::Fd(f)) => drop(f),
            None => {}
        }
    }
}

/// An agent configuration toward `upstream` (host, address), accepting the
/// load client and the edge agents; `doic` is its `[doic]` section, if any.
fn agent_toml(host: &str, upstream: (&str, SocketAddr), doic: Option<&str>) -> String {
    let mut t = format!(
        "[node]\norigin_host = \"{host}\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\ntc_seconds = 1\n\
         [ebpf]\nmode = \"off\"\n\
         [[peer]]\nhost = \"{}\"\nrealm = \"example.net\"\nconnect = \"{}\"\n\
         [[route]]\nrealm = \"example.net\"\npeers = [\"{}\"]\n[accept]\nhosts = [\"*.example.org\", \"*.example.com\"]\n",
        upstream.0, upstream.1, upstream.0
    );
    if let Some(d) = doic {
        t.push_str("[doic]\n");
        t.push_str(d);
    }
    t
}

/// The agent next to the server, as DOIC reporting node for the edge.
const CORE: &str = "core.example.com";
/// The client's edge agent (reacting node).
const EDGE: &str = "edge.example.com";

fn upstream(
    peers: &tokio::runtime::Runtime,
    setup: &Setup,
    server: ServerKind,
) -> anyhow::Result<Upstream> {
    let busy = match server {
        ServerKind::Fifo => Busy::Queue,
        ServerKind::Reject(cost) => Busy::Reject { cost },
        ServerKind::Fd { cpu, .. } => return Ok(Upstream::Fd(LimitedFd::start(SERVER, cpu)?)),
    };
    let behaviour = ServerBehaviour {
        capacity: Some(setup.capacity),
        busy,
        ..Default::default()
    };
    Ok(Upstream::Builtin(peers.block_on(Server::spawn(
        "127.0.0.1:0".parse()?,
        Identity::new(SERVER.0, SERVER.1),
        behaviour,
    ))?))
}

fn rig(peers: &tokio::runtime::Runtime, setup: &Setup, cell: CellSpec) -> anyhow::Result<Rig> {
    let server = upstream(peers, setup, cell.server)?;
    let server_addr = server.addr();
    let upstream = (SERVER.0, server_addr);
    let mut rig = Rig {
        entry: server_addr,
        server: Some(server),
        agents: vec![],
        relay: None,
    };
    // The agent next to the server: the edge trusted, the protection's
    // settings if any.
    let mut core_doic =
        format!("[doic.peers.\"{EDGE}\"]\ntrusted = true\nreceive_reports = true\n");
    if !setup.protect.is_empty() {
        core_doic.push_str(&format!("[doic.protect]\n{}\n", setup.protect));
    }
    match cell.path {
        PathKind::Direct => {}
        PathKind::FdRelay => {
            let relay = FdRelay::builder(PeerTarget::new(SERVER.0, server_addr)?, SERVER.1)
                .start()
                .context("freeDiameter relay")?;
            rig.entry = relay.target().addr;
            rig.relay = Some(relay);
        }
        PathKind::Agent | PathKind::AgentDoic => {
            let doic = (cell.path == PathKind::AgentDoic).then_some(core_doic.as_str());
            let agent = start_agent(&agent_toml(CORE, upstream, doic))?;
            rig.entry = agent.local_addrs()[0];
            rig.agents.push(agent);
        }
        PathKind::ChainRate | PathKind::ChainLoss => {
            let core = start_agent(&agent_toml(CORE, upstream, Some(&core_doic)))?;
            let algorithms = if cell.path == PathKind::ChainRate {
                "[\"loss\", \"rate\"]"
            } else {
                "[\"loss\"]"
            };
            let edge_doic = format!(
                "algorithms = {algorithms}\n[doic.peers.\"{CORE}\"]\ntrusted = true\nreceive_reports = true\n"
            );
            let edge = start_agent(&agent_toml(
                EDGE,
                ("core.example.com", core.local_addrs()[0]),
                Some(&edge_doic),
            ))?;
            rig.entry = edge.local_addrs()[0];
            rig.agents.push(core);
            rig.agents.push(edge);
        }
    }
    Ok(rig)
}

/// Measures one cell once: fresh server and relays, the open-loop client on
/// its own thread, the server sampled every [`SAMPLE`].
///
/// # Errors
/// When a relay does not start or the client cannot connect.
pub fn measure(
    peers: &tokio::runtime::Runtime,
    setup: &Setup,
    cell: CellSpec,
) -> anyhow::Result<Run> {
    // Server (c) on a CPU of its own, if asked: the rest before the rig.
    let _apart = match cell.server {
        ServerKind::Fd { cpu, .. } => fd_server::Apart::from(cpu)?,
        _ => None,
    };
    let rig = rig(peers, setup, cell)?;
    let rate = (f64::from(setup.capacity_of(cell.server)) * cell.load).round() as u64;
    let done = Arc::new(AtomicBool::new(false));
    let (entry, seconds, drain, warmup) = (rig.entry, setup.seconds, setup.drain, setup.warmup);
    let destination_host = setup.host_routed.then(|| SERVER.0.to_owned());
    let client_done = done.clone();
    let client = std::thread::spawn(move || -> anyhow::Result<Report> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let r = rt.block_on(async {
            let mut c = connect_client(entry).await?;
            let t = Traffic {
                destination_realm: SERVER.1.into(),
                destination_host,
            };
            let never = AtomicBool::new(false);
            // The warm-up's late answers arrive during the measurement and
            // count as unmatched, never as goodput.
            if warmup > 0.0 {
                c.run(
                    &t,
                    Pace::Open(rate),
                    Duration::from_secs_f64(warmup),
                    Duration::ZERO,
                    &never,
                )
                .await?;
            }
            let r = c
                .run(
                    &t,
                    Pace::Open(rate),
                    Duration::from_secs_f64(seconds),
                    drain,
                    &never,
                )
                .await?;
            Ok(r)
        });
        client_done.store(true, Ordering::Relaxed);
        r
    });
    // Server (c) counts nothing the benchmark can read: only what the
    // agent next to it sees.
    let builtin = match &rig.server {
        Some(Upstream::Builtin(server)) => Some(server),
        _ => None,
    };
    let samples = sample(
        builtin,
        rig.agents.first(),
        &done,
        Duration::from_secs_f64(warmup + seconds),
    );
    let report = client
        .join()
        .map_err(|_| anyhow::anyhow!("the load client panicked"))??;
    let sent_rate = report.sent as f64 / seconds;
    drop(rig);
    Ok(Run {
        report,
        sent_rate,
        samples,
        measured_from: warmup,
    })
}

/// Samples the server's arrivals and queue wait, and the limit `next` (the
/// agent next to the server) holds it to, every [`SAMPLE`] until `done` or
/// `seconds` have passed. The arrival rate of a sample is its
/// count over the time since the previous read, not over the nominal
/// [`SAMPLE`]: a sampler woken late (a loaded machine) would otherwise
/// read its own lateness as a burst of arrivals.
fn sample(
    server: Option<&Server>,
    next: Option<&Agent>,
    done: &AtomicBool,
    seconds: Duration,
) -> Vec<Sample> {
    if server.is_none() && next.is_none() {
        return Vec::new();
    }
    let view = || {
        let ov = next?.overload()?;
        agent::overload::protect_view(ov)
            .into_iter()
            .find(|v| v.peer == SERVER.0)
    };
    let count = || server.map(|s| s.stats.requests.load(Ordering::Relaxed));
    let t0 = Instant::now();
    let mut last = count();
    let mut last_at = t0;
    let mut out = Vec::new();
    let mut next = t0 + SAMPLE;
    while !done.load(Ordering::Relaxed) && t0.elapsed() < seconds {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let now = count();
        let at = Instant::now();
        let dt = at.duration_since(last_at).as_secs_f64().max(1e-6);
        let v = view();
        out.push(Sample {
            at: at.duration_since(t0).as_secs_f64(),
            admitted: now.zip(last).map(|(n, l)| (n - l) as f64 / dt),
            server_wait_ms: server.map(|s| s.backlog().as_secs_f64() * 1000.0),
            limit: v.as_ref().and_then(|v| v.limit).map(f64::from),
            latency_ms: v.and_then(|v| v.latency).map(|l| l.as_secs_f64() * 1000.0),
        });
        last = now;
        last_at = at;
        next += SAMPLE;
    }
    out
}

/// The medians of one cell over its rounds.
#[derive(Debug, Clone)]
pub struct Cell {
    /// What was measured.
    pub spec: CellSpec,
    /// Each round.
    pub runs: Vec<Run>,
}

impl Cell {
    fn med(&self, f: impl Fn(&Run) -> f64) -> f64 {
        median(self.runs.iter().map(f).collect())
    }

    /// Median goodput, 2001 answers within T per second.
    #[must_use]
    pub fn goodput(&self, timeout: Duration) -> f64 {
        self.med(|r| r.report.goodput(timeout))
    }

    /// Median p50 and p99 of the 2001 answers' latency, ms.
    #[must_use]
    pub fn ok_latency_ms(&self) -> (f64, f64) {
        (
            self.med(|r| f64::from(r.report.ok_percentile_us(50.0)) / 1000.0),
            self.med(|r| f64::from(r.report.ok_percentile_us(99.0)) / 1000.0),
        )
    }

    /// The most requests left unanswered in any round.
    #[must_use]
    pub fn unanswered(&self) -> u64 {
        self.runs.iter().map(Run::unanswered).max().unwrap_or(0)
    }

    /// Median goodput as a share of the server's capacity C.
    #[must_use]
    pub fn goodput_share(&self, setup: &Setup) -> f64 {
        self.goodput(setup.timeout) / f64::from(setup.capacity_of(self.spec.server))
    }

    /// Median share of the offered load the client actually sent.
    #[must_use]
    pub fn sent_share(&self, setup: &Setup) -> f64 {
        let c = f64::from(setup.capacity_of(self.spec.server));
        self.med(|r| r.sent_rate / (c * self.spec.load))
    }

    /// Median standard deviation of per-[`SAMPLE`] arrivals at the server
    /// (`None` for server (c), whose arrivals are not sampled).
    #[must_use]
    pub fn arrivals_sd(&self) -> Option<f64> {
        self.runs
            .iter()
            .all(|r| r.samples.iter().any(|s| s.admitted.is_some()))
            .then(|| self.med(Run::arrivals_sd))
    }
}

/// The Markdown table of `cells`: goodput/C per path and load, latency,
/// unanswered, and the load generator's own share of the offered load.
#[must_use]
pub fn table(setup: &Setup, cells: &[Cell]) -> String {
    let mut t = format!(
        "C = {} requests/s for the built-in servers (server (c): its C measured first, in its row), T = {} s, {} s of offered load per run after {} s of warm-up at the same load, medians of {} rounds.\n\n\
         | server | path | offered | goodput/C | 2001 p50 ms | 2001 p99 ms | unanswered | arrivals sd /100 ms | sent/offered |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        setup.capacity,
        setup.timeout.as_secs_f64(),
        setup.seconds,
        setup.warmup,
        cells.first().map_or(0, |x| x.runs.len())
    );
    for cell in cells {
        let (p50, p99) = cell.ok_latency_ms();
        t.push_str(&format!(
            "| {} | {} | {}x | {:.2} | {:.1} | {:.1} | {} | {} | {:.2} |\n",
            cell.spec.server.name(),
            cell.spec.path.name(),
            cell.spec.load,
            cell.goodput_share(setup),
            p50,
            p99,
            cell.unanswered(),
            cell.arrivals_sd()
                .map_or_else(|| "-".to_owned(), |sd| format!("{sd:.1}")),
            cell.sent_share(setup),
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> Setup {
        Setup {
            capacity: 2000,
            seconds: 1.0,
            timeout: Duration::from_secs(2),
            warmup: 0.0,
            drain: Duration::ZERO,
            host_routed: false,
            protect: String::new(),
        }
    }

    #[test]
    fn server_c_is_measured_against_its_own_capacity() {
        let fd = ServerKind::Fd {
            cpu: FdShare {
                share: 0.1,
                period_us: 20_000,
                own_cpu: None,
            },
            capacity: 2124,
        };
        let s = setup();
        assert_eq!(s.capacity_of(fd), 2124);
        assert_eq!(s.capacity_of(ServerKind::Fifo), 2000);
        assert_eq!(s.capacity_of(ServerKind::Reject(0.05)), 2000);
        let report = Report {
            ok_latencies_us: vec![1_000; 1062],
            elapsed: Duration::from_secs(1),
            ..Report::default()
        };
        let run = Run {
            report,
            sent_rate: 2124.0,
            samples: Vec::new(),
            measured_from: 0.0,
        };
        let cell = Cell {
            spec: CellSpec {
                server: fd,
                path: PathKind::Direct,
                load: 1.0,
            },
            runs: vec![run],
        };
        assert!((cell.goodput_share(&s) - 0.5).abs() < 1e-9);
        assert!((cell.sent_share(&s) - 1.0).abs() < 1e-9);
        // Its arrivals are not sampled: no standard deviation, not 0.
        assert_eq!(cell.arrivals_sd(), None);
    }
}
