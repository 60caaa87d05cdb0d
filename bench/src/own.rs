//! The own-overload efficacy benchmark (`bench-own`): the relay itself is
//! the bottleneck. A relay process is held to a fixed share of one CPU by a
//! cgroup ([`CpuLimit`]); its capacity C is measured in that share by a
//! closed-loop calibration run (2001 answers per second, [`calibrate`]);
//! then many open-loop clients offer multiples of C. Goodput is the 2001
//! answers within the client's timeout
//! per second (RFC 7068 §3); every request must be answered (RFC 7683
//! §5.2.2: what the agent throttles it answers). The upstream server runs
//! outside the cgroup and answers everything at once, so whatever limits
//! goodput is the relay's CPU share.
//!
//! Subjects ([`Subject`]): the agent as a real process (`doic-agent run`,
//! its default worker count and kernel program, `[doic]` without
//! `own_capacity`: its own overload is found by measurement,
//! `doic::own_load::measure`), reached two ways: behind an edge agent that
//! reacts to its peer reports (RFC 8581 §6.2.4, the rate of RFC 8582: the
//! agent's clients abate at the source, as DOIC intends), and directly by
//! clients half of which announce DOIC and ignore what they are told, half
//! without it (the worst case: everything the agent cannot relay it must
//! read and answer itself); and freeDiameter's relay (`rt_default`) in the
//! same share as the anchor. A relay starts with the CPU it wants and is
//! held to the share once it is up (a systemd `CPUQuota=` set at run time
//! does the same), so its start (loading and verifying the kernel program)
//! is not measured. [`AgentProcess`] is also what the cgroup end-to-end
//! test starts.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::Context;
use interop::fd::{FdNode, FdRelay, PeerTarget};
use interop::process::free_port;
use tools::loadgen::{Client, Identity, Pace, Report, Server, ServerBehaviour, TEST_APP, Traffic};

use crate::relay_ab::{CpuLimit, move_to_cgroup};

/// The upstream server's DiameterIdentity and realm.
pub const SERVER: (&str, &str) = ("server1.example.net", "example.net");

/// The DiameterIdentity of load client `i` (realm `example.org`).
#[must_use]
pub fn client_host(i: usize) -> String {
    format!("client{i}.example.org")
}

/// The DiameterIdentity of the edge agent in front of the agent
/// ([`Subject::Chain`]).
pub const EDGE: &str = "edge.example.org";

/// The agent's DiameterIdentity.
pub const AGENT: &str = "agent.example.com";

/// The agent's configuration for these runs: one upstream server, clients
/// of `example.org` accepted, the default worker count and kernel program
/// mode, `[doic]` without `own_capacity` and the DOIC clients `trusted`
/// (as the clients of the enforcement tests). The server's
/// protection (`[doic.peers.<server>] protect`, docs/protect.md) is
/// `protect`: `"native"` takes it out of these runs, whose server is never
/// the bottleneck (with `"auto"`, the default, the agent's own scheduling
/// delay in a small CPU share reads as the server's latency and its
/// adaptive limit throttles: docs/own-overload.md). `node` is added to its
/// `[node]` section as given (its socket buffers, say).
#[must_use]
pub fn agent_toml(
    (listen, metrics): (u16, u16),
    server: SocketAddr,
    trusted: &[String],
    (protect, node): (&str, &str),
) -> String {
    let mut t = format!(
        "[node]\norigin_host = \"{AGENT}\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:{listen}\"]\n{node}\n\
         [metrics]\nlisten = \"127.0.0.1:{metrics}\"\n\
         [[peer]]\nhost = \"{}\"\nrealm = \"{}\"\nconnect = \"{server}\"\n\
         [[route]]\nrealm = \"{}\"\npeers = [\"{}\"]\n[accept]\nhosts = [\"*.example.org\"]\n[doic]\n",
        SERVER.0, SERVER.1, SERVER.1, SERVER.0
    );
    t.push_str(&format!(
        "[doic.peers.\"{}\"]\nprotect = \"{protect}\"\n",
        SERVER.0
    ));
    for host in trusted {
        t.push_str(&format!("[doic.peers.\"{host}\"]\ntrusted = true\n"));
    }
    t
}

/// The edge agent's configuration: in front of the agent at `agent`, for
/// the clients of `example.org`; a DOIC reacting node that offers the loss
/// and rate algorithms and takes the agent's reports (RFC 8581 §6.1.1), so
/// that what the agent cannot carry is answered at the edge. No kernel
/// program (the edge is not measured). `node` is added to its `[node]`
/// section as given (its queues toward the agent, say).
#[must_use]
pub fn edge_toml(agent: SocketAddr, metrics: u16, node: &str) -> String {
    format!(
        "[node]\norigin_host = \"{EDGE}\"\norigin_realm = \"example.org\"\nlisten = [\"127.0.0.1:0\"]\n{node}\n\
         [metrics]\nlisten = \"127.0.0.1:{metrics}\"\n\
         [ebpf]\nmode = \"off\"\n\
         [[peer]]\nhost = \"{AGENT}\"\nrealm = \"example.com\"\nconnect = \"{agent}\"\n\
         [[route]]\nrealm = \"{}\"\npeers = [\"{AGENT}\"]\n[accept]\nhosts = [\"*.example.org\"]\n\
         [doic]\nalgorithms = [\"loss\", \"rate\"]\n[doic.peers.\"{AGENT}\"]\ntrusted = true\nreceive_reports = true\n",
        SERVER.1
    )
}

/// `doic-agent run` as a child process, moved into a cgroup before it
/// starts (a shell writes its own pid into `cgroup.procs`, then execs the
/// agent), its stderr in a log file. SIGTERM on drop.
#[derive(Debug)]
pub struct AgentProcess {
    child: Child,
    /// Where clients connect.
    pub entry: SocketAddr,
    /// The metrics endpoint.
    pub metrics: SocketAddr,
    /// The configuration and the log.
    pub dir: PathBuf,
}

impl AgentProcess {
    /// Starts `bin run --config <toml(listen port, metrics port)>` in the
    /// cgroup at `cgroup` (every thread starts there) and waits (15 s at
    /// most) until `/metrics` shows the upstream server open (RFC 6733
    /// §5.6 I-Open, `doic_peer_state` 2) and the kernel program attached
    /// (the benchmarks run as root, with the agent's default `[ebpf]`).
    ///
    /// # Errors
    /// When the process cannot start, exits, or never opens the server.
    pub fn spawn(
        bin: &Path,
        cgroup: &Path,
        toml: impl FnOnce(u16, u16) -> String,
    ) -> anyhow::Result<Self> {
        let (listen, metrics) = (free_port()?, free_port()?);
        let dir = std::env::temp_dir().join(format!("doic-own-{}-{listen}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let cfg = dir.join("agent.toml");
        std::fs::write(&cfg, toml(listen, metrics))?;
        let log = std::fs::File::create(dir.join("agent.log"))?;
        let child = Command::new("sh")
            .arg("-c")
            .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
            .arg(cgroup)
            .arg(bin)
            .arg("run")
            .arg("--config")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut p = Self {
            child,
            entry: SocketAddr::from(([127, 0, 0, 1], listen)),
            metrics: SocketAddr::from(([127, 0, 0, 1], metrics)),
            dir,
        };
        let open = format!("doic_peer_state{{peer=\"{}\"}} 2", SERVER.0);
        let t0 = Instant::now();
        loop {
            if let Some(status) = p.child.try_wait()? {
                anyhow::bail!("the agent exited ({status}): {}", p.log_tail());
            }
            // Up: the server open and the kernel program loaded (the agent
            // relays while it loads; verifying it takes a CPU's 0.1-0.2 s).
            if p.metrics_page()
                .is_some_and(|m| m.contains(&open) && m.contains("\ndoic_ebpf_attached 1\n"))
            {
                return Ok(p);
            }
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(15),
                "the agent never opened {}: {}",
                SERVER.0,
                p.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The agent's process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The `/metrics` page, `None` when it cannot be read.
    #[must_use]
    pub fn metrics_page(&self) -> Option<String> {
        metrics_page(self.metrics)
    }

    /// [`overload_digest`] of this agent.
    #[must_use]
    pub fn overload_digest(&self) -> String {
        overload_digest(self.metrics)
    }

    /// The last lines of the agent's log.
    #[must_use]
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap_or(libc::pid_t::MAX);
        // SAFETY: kill(2) on the child this value owns and has not reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let t0 = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `/metrics` page at `addr`, `None` when it cannot be read.
#[must_use]
pub fn metrics_page(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// The lines of the `/metrics` page at `addr` that say what an agent found
/// of its own load, of its server's and of its reports (`doic_own_*`,
/// `doic_protect_*`, `doic_worker_utilisation`, treatments, full queues,
/// OCS in force), for the benchmark's log.
#[must_use]
pub fn overload_digest(addr: SocketAddr) -> String {
    let page = (0..3)
        .find_map(|_| metrics_page(addr))
        .unwrap_or_else(|| "(no /metrics page)".into());
    page.lines()
        .filter(|l| {
            [
                "doic_own_",
                "doic_protect_",
                "doic_worker_utilisation",
                "doic_requests_treated_total",
                "doic_queue_full_total",
                "doic_ocs_active",
                "doic_reports_received_total",
                "(no",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The value of the sample `name{labels}` (exactly as rendered) in a
/// `/metrics` page; `None` when it is not there.
#[must_use]
pub fn gauge(page: &str, sample: &str) -> Option<f64> {
    page.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(name, _)| *name == sample)
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// A field of `/proc/PID/status` in KiB (`VmHWM`: the peak resident set,
/// `VmRSS`: the current one).
#[must_use]
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// CPU seconds (user + system) process `pid` has used, from
/// `/proc/PID/stat`.
#[must_use]
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's closing parenthesis: state is field 3, utime 14.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz.max(1.0))
}

/// The relay under test, and how its clients reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// `doic-agent run`, `[doic]` without `own_capacity`, behind an edge
    /// agent (outside the cgroup) that reacts to its peer reports; the
    /// clients connect to the edge.
    Chain,
    /// The same agent, the clients connected to it: half announce DOIC and
    /// ignore what they are told, half have no DOIC.
    Agent,
    /// freeDiameter's relay (`rt_default`), the anchor.
    FdRelay,
}

impl Subject {
    /// Every subject.
    pub const ALL: [Subject; 3] = [Subject::Chain, Subject::Agent, Subject::FdRelay];

    /// The name used in tables, plots and `--subjects`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Subject::Chain => "agent-chain",
            Subject::Agent => "agent",
            Subject::FdRelay => "fd-relay",
        }
    }

    /// The subject named `s`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Subject> {
        Self::ALL.into_iter().find(|x| x.name() == s)
    }

    /// How many of the load clients announce DOIC (and ignore reports).
    #[must_use]
    pub fn doic_clients(self, clients: usize) -> usize {
        match self {
            Subject::Agent | Subject::FdRelay => clients / 2,
            Subject::Chain => 0,
        }
    }
}

/// What every measurement shares.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The `doic-agent` binary.
    pub agent_bin: PathBuf,
    /// The relay's share of one CPU.
    pub cpu_share: f64,
    /// The cgroup's bandwidth period, µs.
    pub period_us: u64,
    /// Load clients ([`Subject::doic_clients`] of them announce DOIC and
    /// ignore reports).
    pub clients: usize,
    /// The client's timeout T: later answers are not goodput.
    pub timeout: Duration,
    /// Seconds of the same load before each measurement.
    pub warmup: f64,
    /// Seconds of offered load per measurement.
    pub seconds: f64,
    /// How long after the load the clients wait for the last answers.
    pub drain: Duration,
    /// The agent's `protect` mode for the server ([`agent_toml`]).
    pub server_protect: String,
    /// Lines for the edge's `[node]` ([`edge_toml`]).
    pub edge_node: String,
    /// Lines for the agent's `[node]` ([`agent_toml`]).
    pub agent_node: String,
}

/// One relay held to the CPU share, with its upstream server; stopped on
/// drop (the relay first).
#[derive(Debug)]
pub struct Rig {
    /// What is measured.
    pub subject: Subject,
    /// The agent, for [`Subject::Agent`] and [`Subject::Chain`].
    pub agent: Option<AgentProcess>,
    /// The edge agent in front of it, for [`Subject::Chain`], and its
    /// metrics endpoint.
    pub edge: Option<(agent::agent::Agent, SocketAddr)>,
    fd: Option<FdNode>,
    /// Where the clients connect.
    pub entry: SocketAddr,
    /// The relay's process id.
    pub pid: u32,
    /// The upstream server (outside the cgroup).
    pub server: Server,
    // Declared last: removed once the relay has left it.
    limit: CpuLimit,
}

impl Rig {
    /// Starts `subject` in a fresh cgroup held to the setup's share, in
    /// front of a fresh server on `peers`.
    ///
    /// # Errors
    /// No cgroup cpu controller, a relay that does not start.
    pub fn start(
        peers: &tokio::runtime::Runtime,
        setup: &Setup,
        subject: Subject,
    ) -> anyhow::Result<Self> {
        let server = peers.block_on(Server::spawn(
            "127.0.0.1:0".parse()?,
            Identity::new(SERVER.0, SERVER.1),
            ServerBehaviour::default(),
        ))?;
        let name = format!(
            "doic-bench-own-{}-{}",
            std::process::id(),
            server.addr.port()
        );
        // Started with a whole CPU, held to the share once up.
        let limit = CpuLimit::new(&name, 1.0, setup.period_us)?;
        let rig = match subject {
            Subject::Agent | Subject::Chain => {
                let trusted: Vec<String> = match subject {
                    Subject::Chain => vec![EDGE.to_owned()],
                    _ => (0..subject.doic_clients(setup.clients))
                        .map(client_host)
                        .collect(),
                };
                let a = AgentProcess::spawn(&setup.agent_bin, &limit.dir, |l, m| {
                    agent_toml(
                        (l, m),
                        server.addr,
                        &trusted,
                        (&setup.server_protect, &setup.agent_node),
                    )
                })?;
                let edge = match subject {
                    Subject::Chain => {
                        let metrics = free_port()?;
                        let e = crate::relay::start_agent(&edge_toml(
                            a.entry,
                            metrics,
                            &setup.edge_node,
                        ))
                        .context("edge agent")?;
                        Some((e, SocketAddr::from(([127, 0, 0, 1], metrics))))
                    }
                    _ => None,
                };
                Self {
                    subject,
                    entry: edge.as_ref().map_or(a.entry, |e| e.0.local_addrs()[0]),
                    pid: a.pid(),
                    agent: Some(a),
                    edge,
                    fd: None,
                    server,
                    limit,
                }
            }
            Subject::FdRelay => {
                let mut fd = FdRelay::builder(PeerTarget::new(SERVER.0, server.addr)?, SERVER.1)
                    .start()
                    .context("freeDiameter relay")?;
                let pid = fd.daemon().pid();
                move_to_cgroup(&limit.dir, pid)?;
                Self {
                    subject,
                    entry: fd.target().addr,
                    pid,
                    agent: None,
                    edge: None,
                    fd: Some(fd),
                    server,
                    limit,
                }
            }
        };
        rig.limit.set(setup.cpu_share, setup.period_us)?;
        Ok(rig)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.edge.take();
        self.agent.take();
        self.fd.take();
        self.server.stop();
    }
}

/// What the clients received, summed over them.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The clients' reports merged: counts summed, latencies merged (sorted),
    /// the longest elapsed.
    pub report: Report,
    /// CPU seconds the relay used during the measurement.
    pub cpu: f64,
    /// The relay's peak resident set at the end, KiB.
    pub hwm_kib: u64,
    /// The agent's [`AgentProcess::overload_digest`] at the end of the
    /// load (empty for another relay).
    pub digest: String,
}

impl Outcome {
    /// Requests never answered by the end of the drain.
    #[must_use]
    pub fn unanswered(&self) -> u64 {
        self.report.sent.saturating_sub(self.report.answered)
    }

    /// Answers with Result-Code `code`.
    #[must_use]
    pub fn count(&self, code: u32) -> u64 {
        self.report.by_code.get(&code).copied().unwrap_or(0)
    }

    /// The relay's CPU µs per answer (NaN without answers).
    #[must_use]
    pub fn cpu_us_per_answer(&self) -> f64 {
        if self.report.answered == 0 {
            return f64::NAN;
        }
        self.cpu * 1e6 / self.report.answered as f64
    }
}

/// Runs the setup's clients against `rig` at `pace` each, after `warmup`
/// seconds of the same pace (whose answers are not counted), for `seconds`;
/// `during` runs on this thread meanwhile (sampling). The relay's CPU is
/// taken over the measurement, its peak resident set at the end.
///
/// # Errors
/// When a client cannot connect or its CER is refused.
pub fn offer(
    clients_rt: &tokio::runtime::Runtime,
    setup: &Setup,
    rig: &Rig,
    pace: Pace,
    seconds: f64,
    during: impl FnOnce(),
) -> anyhow::Result<Outcome> {
    let mut tasks = Vec::new();
    let (entry, warmup, drain) = (rig.entry, setup.warmup, setup.drain);
    let t = Traffic {
        destination_realm: SERVER.1.into(),
        destination_host: None,
    };
    let mut connected = Vec::new();
    for i in 0..setup.clients {
        let id = Identity::new(&client_host(i), "example.org");
        let mut c = clients_rt.block_on(Client::connect(entry, id, vec![TEST_APP]))?;
        anyhow::ensure!(c.cea_result == 2001, "CEA {} from {entry}", c.cea_result);
        if i < rig.subject.doic_clients(setup.clients) {
            c.announce_doic();
        }
        connected.push(c);
    }
    let warm = Duration::from_secs_f64(warmup);
    for mut c in connected {
        let t = t.clone();
        tasks.push(clients_rt.spawn(async move {
            let never = AtomicBool::new(false);
            if !warm.is_zero() {
                c.run(&t, pace, warm, Duration::ZERO, &never).await?;
            }
            c.run(&t, pace, Duration::from_secs_f64(seconds), drain, &never)
                .await
        }));
    }
    // The measurement's CPU starts after the warm-up.
    std::thread::sleep(warm);
    let cpu1 = cpu_secs(rig.pid).unwrap_or(0.0);
    let measuring = Instant::now();
    during();
    // What the agent shows near the end of the load, before the drain.
    std::thread::sleep(Duration::from_secs_f64(seconds * 0.9).saturating_sub(measuring.elapsed()));
    let mut digest = rig
        .agent
        .as_ref()
        .map(AgentProcess::overload_digest)
        .unwrap_or_default();
    if let Some((_, metrics)) = &rig.edge {
        digest.push_str(&format!("\n  edge: {}", overload_digest(*metrics)));
    }
    let mut reports = Vec::new();
    for task in tasks {
        reports.push(clients_rt.block_on(task)??);
    }
    let cpu2 = cpu_secs(rig.pid).unwrap_or(cpu1);
    Ok(Outcome {
        report: crate::relay::merge(reports),
        cpu: cpu2 - cpu1,
        hwm_kib: status_kib(rig.pid, "VmHWM").unwrap_or(0),
        digest,
    })
}

/// Outstanding requests per client in the calibration run.
pub const CALIBRATION_WINDOW: usize = 32;

/// What a calibration run found (see [`calibrate`]).
#[derive(Debug)]
pub struct Calibration {
    /// 2001 answers per second in the closed loop.
    pub goodput: f64,
    /// The agent's own capacity (`doic_own_capacity_rps`) read once a
    /// second while it held itself overloaded by measurement
    /// (`doic_own_measured_overload` 1), in order; empty for another relay
    /// or an agent that never found itself overloaded.
    pub measured: Vec<f64>,
    /// The whole outcome of the run.
    pub outcome: Outcome,
}

impl Calibration {
    /// The capacity the agent measured: the median of [`Self::measured`]
    /// (`None` when empty).
    #[must_use]
    pub fn measured_capacity(&self) -> Option<f64> {
        (!self.measured.is_empty()).then(|| crate::relay::median(self.measured.clone()))
    }
}

/// The relay's capacity in its share: a closed-loop run (each client
/// keeps [`CALIBRATION_WINDOW`] requests outstanding) of `seconds` on a
/// fresh rig, its 2001 answers per second and, for the agent, the capacity
/// it measured for itself meanwhile.
///
/// # Errors
/// As [`Rig::start`] and [`offer`].
pub fn calibrate(
    peers: &tokio::runtime::Runtime,
    clients_rt: &tokio::runtime::Runtime,
    setup: &Setup,
    subject: Subject,
    seconds: f64,
) -> anyhow::Result<Calibration> {
    let rig = Rig::start(peers, setup, subject)?;
    let metrics = rig.agent.as_ref().map(|a| a.metrics);
    let mut measured = Vec::new();
    let outcome = offer(
        clients_rt,
        setup,
        &rig,
        Pace::Closed(CALIBRATION_WINDOW),
        seconds,
        || {
            let Some(m) = metrics else { return };
            let start = Instant::now();
            while start.elapsed().as_secs_f64() + 1.0 < seconds {
                std::thread::sleep(Duration::from_secs(1));
                let Some(page) = metrics_page(m) else {
                    continue;
                };
                if gauge(&page, "doic_own_measured_overload") == Some(1.0)
                    && let Some(c) = gauge(&page, "doic_own_capacity_rps")
                {
                    measured.push(c);
                }
            }
        },
    )?;
    let goodput = outcome.count(2001) as f64 / outcome.report.elapsed.as_secs_f64().max(1e-3);
    Ok(Calibration {
        goodput,
        measured,
        outcome,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_resident_set_is_read_from_proc_and_is_at_least_the_current_one() {
        let me = std::process::id();
        // The current set first: the peak read after it is at least that
        // (the process may grow between the two reads, never un-peak).
        let rss = status_kib(me, "VmRSS");
        let hwm = status_kib(me, "VmHWM");
        assert!(
            hwm.is_some_and(|h| h > 0 && h >= rss.unwrap_or(0)),
            "{hwm:?} {rss:?}"
        );
        assert_eq!(status_kib(me, "NoSuchField"), None);
    }

    #[test]
    fn cpu_seconds_grow_with_work() {
        let me = std::process::id();
        let before = cpu_secs(me).unwrap();
        let t0 = Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        assert!(cpu_secs(me).unwrap() > before);
    }

    #[test]
    fn reports_merge_into_sums_and_sorted_latencies() {
        let a = Report {
            sent: 3,
            answered: 2,
            by_code: [(2001, 1), (3004, 1)].into(),
            ok_latencies_us: vec![5, 9],
            latencies_us: vec![5, 9],
            elapsed: Duration::from_secs(2),
            ..Report::default()
        };
        let b = Report {
            sent: 2,
            answered: 2,
            by_code: [(2001, 2)].into(),
            ok_latencies_us: vec![1, 7],
            latencies_us: vec![1, 7],
            elapsed: Duration::from_secs(3),
            ..Report::default()
        };
        let m = crate::relay::merge(vec![a, b]);
        assert_eq!((m.sent, m.answered), (5, 4));
        assert_eq!(m.by_code, [(2001, 3), (3004, 1)].into());
        assert_eq!(m.ok_latencies_us, vec![1, 5, 7, 9]);
        assert_eq!(m.elapsed, Duration::from_secs(3));
        let o = Outcome {
            report: m,
            ..Outcome::default()
        };
        assert_eq!((o.unanswered(), o.count(2001), o.count(5012)), (1, 3, 0));
    }

    #[test]
    fn the_agent_configuration_is_one_the_agent_accepts() {
        let trusted: Vec<String> = (0..Subject::Agent.doic_clients(4))
            .map(client_host)
            .collect();
        let t = agent_toml(
            (3868, 9090),
            "127.0.0.1:3869".parse().unwrap(),
            &trusted,
            ("native", "socket_buffer_bytes = 32768"),
        );
        let c = agent::config::Config::from_str_named(&t, Path::new("own.toml"));
        assert!(c.is_ok(), "{t}\n{:?}", c.err());
        assert_eq!(c.unwrap().node.socket_buffer_bytes, Some(32_768));
        assert!(t.contains("[doic.peers.\"client1.example.org\"]\ntrusted = true"));
        assert!(!t.contains("client2.example.org") && !t.contains("own_capacity"));
        let bad = agent_toml(
            (3868, 9090),
            "127.0.0.1:3869".parse().unwrap(),
            &[],
            ("sometimes", ""),
        );
        assert!(agent::config::Config::from_str_named(&bad, Path::new("own.toml")).is_err());
        // The edge in front of it: a reacting node that takes its reports.
        let e = edge_toml("127.0.0.1:3868".parse().unwrap(), 9091, "");
        let c = agent::config::Config::from_str_named(&e, Path::new("edge.toml"));
        assert!(c.is_ok(), "{e}\n{:?}", c.err());
        let bounded = edge_toml(
            "127.0.0.1:3868".parse().unwrap(),
            9091,
            "upstream_queue = 1024\nupstream_backlog_bytes = 65536",
        );
        let c = agent::config::Config::from_str_named(&bounded, Path::new("edge.toml")).unwrap();
        assert_eq!(
            (c.node.upstream_queue, c.node.upstream_backlog_bytes),
            (1024, 65_536)
        );
        assert!(e.contains("receive_reports = true") && e.contains("\"rate\""));
        assert_eq!(Subject::Chain.doic_clients(8), 0);
    }
}
