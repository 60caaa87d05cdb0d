//! `doic-agent demo` (the default): an overload episode on loopback. Two
//! built-in servers without DOIC, each of a stated capacity, serve FIFO
//! (`loadgen::Busy::Queue`: past the capacity the wait grows without
//! bound); two clients, one a DOIC reacting node (RFC 7683 §5.1.1), the
//! other not, offer together half the servers' capacity, then one, two,
//! three times it, and back. The episode runs twice on fresh servers and a
//! fresh agent: with `[doic]`, then the same without, and the summary
//! compares their goodput: 2001 answers within the clients' timeout per
//! second (RFC 7068 §3).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent::agent::Agent;
use agent::config::Config;
use agent::peer::table::state;

use super::DemoError;
use crate::loadgen::{
    Busy, Client, Identity, Live, Pace, Report, Server, ServerBehaviour, TEST_APP, Traffic,
};

/// The offered load of each step, as a multiple of the servers' capacity.
pub const STEPS: &[f64] = &[0.5, 1.0, 2.0, 3.0, 2.0, 1.0, 0.5];

/// The servers of the episode.
const SERVERS: [&str; 2] = ["server1.example.net", "server2.example.net"];
/// The client that is a DOIC reacting node.
const DOIC_CLIENT: &str = "client2.example.org";
/// The client that is not.
const PLAIN_CLIENT: &str = "client1.example.org";

/// What the episode is made of.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Each server's capacity, requests per second.
    pub capacity: u32,
    /// How long each step of [`STEPS`] lasts.
    pub step: Duration,
    /// The clients' timeout: later answers are not goodput. Also the
    /// agent's request timeout, so that every request is answered.
    pub timeout: Duration,
}

impl Spec {
    /// The servers' capacity together.
    #[must_use]
    pub fn total(&self) -> u32 {
        self.capacity * SERVERS.len() as u32
    }

    fn pace(&self) -> Pace {
        // Each client offers half.
        Pace::Steps {
            base: u64::from(self.total() / 2),
            step: self.step,
            shares: STEPS,
        }
    }
}

impl Default for Spec {
    fn default() -> Self {
        Self {
            capacity: 500,
            step: Duration::from_secs(3),
            timeout: Duration::from_secs(2),
        }
    }
}

/// One run of the episode.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// With `[doic]`.
    pub controlled: bool,
    /// The DOIC client's report.
    pub doic: Report,
    /// The other client's report.
    pub plain: Report,
    /// Requests the agent answered itself (throttled).
    pub throttled: u64,
    /// Requests diverted to another server.
    pub diverted: u64,
}

impl Outcome {
    /// 2001 answers within the timeout per second, both clients.
    #[must_use]
    pub fn goodput(&self, timeout: Duration) -> f64 {
        self.doic.goodput(timeout) + self.plain.goodput(timeout)
    }

    /// Requests never answered.
    #[must_use]
    pub fn unanswered(&self) -> u64 {
        [&self.doic, &self.plain]
            .iter()
            .map(|r| r.sent.saturating_sub(r.answered))
            .sum()
    }
}

/// Both runs.
#[derive(Debug, Clone)]
pub struct Summary {
    /// What ran.
    pub spec: Spec,
    /// With `[doic]`.
    pub with: Outcome,
    /// Without.
    pub without: Outcome,
}

fn config(spec: &Spec, servers: &[Server], controlled: bool) -> Result<Config, DemoError> {
    let mut t = format!(
        "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\ntc_seconds = 1\nrequest_timeout_seconds = {}\n\
         [metrics]\nlisten = \"127.0.0.1:0\"\n[accept]\nhosts = [\"*.example.org\"]\n\
         [[route]]\nrealm = \"example.net\"\npeers = [{}]\n",
        spec.timeout.as_secs_f64(),
        SERVERS.map(|s| format!("\"{s}\"")).join(", ")
    );
    for (host, s) in SERVERS.iter().zip(servers) {
        let _ = write!(
            t,
            "[[peer]]\nhost = \"{host}\"\nrealm = \"example.net\"\nconnect = \"{}\"\n",
            s.addr
        );
    }
    if controlled {
        let _ = write!(
            t,
            "[doic]\n[doic.peers.\"{DOIC_CLIENT}\"]\ntrusted = true\nreceive_reports = true\n"
        );
    }
    Config::from_str_named(&t, std::path::Path::new("<demo episode>")).map_err(|e| {
        DemoError::Start {
            what: "the episode's configuration".into(),
            source: std::io::Error::other(e.to_string()),
        }
    })
}

fn start_err(what: &str) -> impl FnOnce(std::io::Error) -> DemoError + '_ {
    move |source| DemoError::Start {
        what: what.into(),
        source,
    }
}

/// What the live line reads from the agent: throttled and diverted totals
/// and the overload control states in force.
fn agent_counts(agent: &Agent) -> (u64, u64, usize) {
    agent.overload().map_or((0, 0, 0), |ov| {
        let snaps = ov.snapshots();
        let (mut th, mut dv) = (0, 0);
        for s in &snaps {
            th += s.totals.throttled;
            dv += s.totals.diverted;
        }
        (th, dv, snaps.first().map_or(0, |s| s.ocs.len()))
    })
}

/// The limits the agent holds its servers to (`agent::overload::protect`),
/// requests per second, or `n/a` when none binds.
fn agent_limits(agent: &Agent) -> String {
    let limits: Vec<String> = agent
        .overload()
        .map(|ov| agent::overload::protect_view(ov))
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.limit.map(|l| l.to_string()))
        .collect();
    if limits.is_empty() {
        "n/a".into()
    } else {
        limits.join("+")
    }
}

/// Runs the episode once; prints a line per second.
fn run_once(spec: &Spec, controlled: bool, stop: &Arc<AtomicBool>) -> Result<Outcome, DemoError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(start_err("the demo runtime"))?;
    let behaviour = ServerBehaviour {
        capacity: Some(spec.capacity),
        busy: Busy::Queue,
        ..Default::default()
    };
    let mut servers = Vec::new();
    for host in SERVERS {
        let s = rt
            .block_on(Server::spawn(
                ([127, 0, 0, 1], 0).into(),
                Identity::new(host, "example.net"),
                behaviour.clone(),
            ))
            .map_err(start_err("a demo server"))?;
        servers.push(s);
    }
    let agent = Agent::start(config(spec, &servers, controlled)?)?;
    let target = agent.local_addrs()[0];
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5)
        && agent
            .peers()
            .all()
            .iter()
            .filter(|(_, s)| s.state() == state::OKAY)
            .count()
            < SERVERS.len()
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "episode {}: agent on {target}{}, servers {} FIFO at {}/s each",
        if controlled {
            "with [doic]"
        } else {
            "without control"
        },
        agent
            .metrics_addr()
            .map(|m| format!(" (metrics http://{m}/metrics)"))
            .unwrap_or_default(),
        servers
            .iter()
            .map(|s| s.addr.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        spec.capacity
    );
    let pace = spec.pace();
    let duration = spec.step * STEPS.len() as u32;
    let drain = spec.timeout + Duration::from_secs(1);
    let mut lives: Vec<Arc<Live>> = Vec::new();
    let mut clients = Vec::new();
    for (host, doic) in [(PLAIN_CLIENT, false), (DOIC_CLIENT, true)] {
        let mut c = rt
            .block_on(Client::connect(
                target,
                Identity::new(host, "example.org"),
                vec![TEST_APP],
            ))
            .map_err(start_err("a demo client"))?;
        if doic {
            c.announce_doic();
        }
        lives.push(c.watch(spec.timeout));
        let stop = stop.clone();
        clients.push(rt.spawn(async move {
            let traffic = Traffic {
                destination_realm: "example.net".into(),
                destination_host: None,
            };
            let r = c.run(&traffic, pace, duration, drain, &stop).await;
            let _ = c.disconnect().await;
            r
        }));
    }
    let start = Instant::now();
    let mut last = (0u64, (0u64, 0u64, 0usize));
    let mut tick = start;
    while !clients.iter().all(tokio::task::JoinHandle::is_finished) {
        std::thread::sleep(Duration::from_millis(50));
        if tick.elapsed() < Duration::from_secs(1) {
            continue;
        }
        let dt = tick.elapsed().as_secs_f64();
        tick = Instant::now();
        let at = start.elapsed();
        let good: u64 = lives
            .iter()
            .map(|l| l.ok_in_time.load(Ordering::Relaxed))
            .sum();
        let counts = agent_counts(&agent);
        let waits: Vec<String> = servers
            .iter()
            .map(|s| format!("{:.1}s", s.backlog().as_secs_f64()))
            .collect();
        let offered = if at <= duration {
            pace.rate_at(at) * 2.0
        } else {
            0.0
        };
        println!(
            "t={:>3.0}s offered {:>5.0}/s goodput {:>5.0}/s throttled {:>5.0}/s diverted {:>4.0}/s limit {} reports {} | server wait {}",
            at.as_secs_f64(),
            offered,
            (good - last.0) as f64 / dt,
            (counts.0 - last.1.0) as f64 / dt,
            (counts.1 - last.1.1) as f64 / dt,
            agent_limits(&agent),
            counts.2,
            waits.join(" ")
        );
        last = (good, counts);
    }
    let mut reports = Vec::new();
    for c in clients {
        reports.push(super::join_client(&rt, c)?);
    }
    let (throttled, diverted, _) = agent_counts(&agent);
    agent.shutdown();
    agent.join();
    for s in &servers {
        s.stop();
    }
    let doic = reports.pop().unwrap_or_default();
    let plain = reports.pop().unwrap_or_default();
    Ok(Outcome {
        controlled,
        doic,
        plain,
        throttled,
        diverted,
    })
}

/// Runs the episode with `[doic]`, then without, and prints the summary.
///
/// # Errors
/// [`DemoError`] when a part cannot start.
pub fn run(spec: Spec, stop: &Arc<AtomicBool>) -> Result<Summary, DemoError> {
    println!(
        "demo: an overload episode: 2 servers without DOIC, {}/s each ({}/s together), FIFO; offered {} x that, {} s per step; client timeout {} s",
        spec.capacity,
        spec.total(),
        STEPS
            .iter()
            .map(|s| format!("{s}"))
            .collect::<Vec<_>>()
            .join(" / "),
        spec.step.as_secs_f64(),
        spec.timeout.as_secs_f64()
    );
    let with = run_once(&spec, true, stop)?;
    let without = run_once(&spec, false, stop)?;
    let t = spec.timeout;
    let offered: f64 = STEPS.iter().map(|s| s.min(1.0)).sum::<f64>() / STEPS.len() as f64
        * f64::from(spec.total());
    for o in [&with, &without] {
        println!(
            "demo: {:<15} goodput {:>5.0}/s ({:.2} of what the servers could serve of the offered load), DOIC client {:.0}/s, other client {:.0}/s, throttled {}, diverted {}, unanswered {}, result codes {:?} / {:?}",
            if o.controlled {
                "with [doic]"
            } else {
                "without control"
            },
            o.goodput(t),
            o.goodput(t) / offered,
            o.doic.goodput(t),
            o.plain.goodput(t),
            o.throttled,
            o.diverted,
            o.unanswered(),
            o.doic.by_code,
            o.plain.by_code
        );
    }
    println!(
        "demo: goodput with [doic] {:.0}/s against {:.0}/s without control ({:.2}x)",
        with.goodput(t),
        without.goodput(t),
        with.goodput(t) / without.goodput(t).max(1e-9)
    );
    Ok(Summary {
        spec,
        with,
        without,
    })
}
