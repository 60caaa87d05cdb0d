//! `doic-agent demo --relay`: the agent between built-in loopback peers, a
//! load client (`client1.example.org`) and one server per `[[peer]]` with a
//! `connect` address, with a one-line summary every second. Servers whose
//! configured port is 0 get an ephemeral port. `doic-agent demo` without
//! it runs the overload episode ([`episode`]).

pub mod episode;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::loadgen::{Client, Identity, Pace, Report, Server, ServerBehaviour, TEST_APP, Traffic};
use agent::agent::Agent;
use agent::config::Config;
use agent::peer::table::state;

/// The demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A loopback peer or the agent could not start.
    #[error("cannot start {what}")]
    Start {
        /// Which part.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The agent could not start.
    #[error(transparent)]
    Agent(#[from] agent::agent::StartError),
    /// The configuration has nothing to demonstrate.
    #[error("the demo needs a listen address and a [[route]] (check the configuration)")]
    Config,
}

/// Waits for a demo client's task and gives its report.
fn join_client(
    rt: &tokio::runtime::Runtime,
    client: tokio::task::JoinHandle<std::io::Result<Report>>,
) -> Result<Report, DemoError> {
    let start = |source| DemoError::Start {
        what: "the demo client".into(),
        source,
    };
    rt.block_on(client)
        .map_err(|e| start(std::io::Error::other(e)))?
        .map_err(start)
}

/// Runs the demo for `seconds` (or until `stop` is raised), printing a
/// summary line every second and a final report. Returns the client's
/// report.
///
/// # Errors
/// [`DemoError`] when a part cannot start.
pub fn run(
    mut config: Config,
    seconds: Option<u64>,
    outstanding: usize,
    stop: Arc<AtomicBool>,
) -> Result<Report, DemoError> {
    if config.node.listen.is_empty() || config.routes.is_empty() {
        return Err(DemoError::Config);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|source| DemoError::Start {
            what: "the demo runtime".into(),
            source,
        })?;
    // One server per dialled peer.
    let mut servers = Vec::new();
    for p in &mut config.peers {
        let Some(addr) = p.connect else { continue };
        let id = Identity::new(&p.host, &p.realm);
        let server = rt
            .block_on(Server::spawn(addr, id, ServerBehaviour::default()))
            .map_err(|source| DemoError::Start {
                what: format!("server {} on {addr}", p.host),
                source,
            })?;
        p.connect = Some(server.addr);
        servers.push((p.host.clone(), server));
    }
    let destination_realm = config.routes[0].realm.clone();
    let agent = Agent::start(config)?;
    let target = agent.local_addrs()[0];
    agent.start_kernel_telemetry();
    println!(
        "demo: agent on {target}, servers {}",
        servers
            .iter()
            .map(|(h, s)| format!("{h}@{}", s.addr))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(m) = agent.metrics_addr() {
        println!("demo: metrics at http://{m}/metrics");
    }
    // Wait (up to 5 s) for the upstream peers to open.
    let table = agent.peers().clone();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5)
        && !table.all().iter().any(|(_, s)| s.state() == state::OKAY)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let duration = seconds.map_or(Duration::from_secs(365 * 86_400), Duration::from_secs);
    let traffic = Traffic {
        destination_realm,
        destination_host: None,
    };
    let client_stop = stop.clone();
    let client = rt.spawn(async move {
        let mut c = Client::connect(
            target,
            Identity::new("client1.example.org", "example.org"),
            vec![TEST_APP],
        )
        .await?;
        let report = c
            .run(
                &traffic,
                Pace::Closed(outstanding),
                duration,
                Duration::from_secs(2),
                &client_stop,
            )
            .await?;
        let _ = c.disconnect().await;
        Ok::<Report, std::io::Error>(report)
    });
    let mut last: Vec<(String, u64)> = Vec::new();
    let mut tick = Instant::now();
    let start = Instant::now();
    while !client.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
        if tick.elapsed() < Duration::from_secs(1) {
            continue;
        }
        let dt = tick.elapsed().as_secs_f64();
        tick = Instant::now();
        let mut parts = Vec::new();
        let mut now_counts = Vec::new();
        for (_, p) in table.all() {
            let sent = p.stats.requests_out.load(Ordering::Relaxed);
            let before = last
                .iter()
                .find(|(h, _)| *h == p.host)
                .map_or(0, |(_, n)| *n);
            if p.connect.is_some() {
                let st = match p.state() {
                    state::OKAY => "okay",
                    state::SUSPECT => "suspect",
                    state::CONNECTING => "connecting",
                    state::CLOSING => "closing",
                    _ => "down",
                };
                parts.push(format!(
                    "{} {:>7.0}/s {st}",
                    p.host,
                    (sent - before) as f64 / dt
                ));
            }
            now_counts.push((p.host.clone(), sent));
        }
        let total: u64 = now_counts.iter().map(|(_, n)| n).sum::<u64>()
            - last.iter().map(|(_, n)| n).sum::<u64>();
        last = now_counts;
        let workers = agent.workers();
        let util: Vec<String> = (0..workers.count())
            .map(|i| format!("{:.0}%", workers.utilisation(i) * 100.0))
            .collect();
        println!(
            "t={:>3.0}s relayed {:>8.0}/s | {} | workers {}",
            start.elapsed().as_secs_f64(),
            total as f64 / dt,
            parts.join(" | "),
            util.join(" ")
        );
    }
    let report = join_client(&rt, client)?;
    agent.shutdown();
    agent.join();
    for (_, s) in &servers {
        s.stop();
    }
    println!(
        "demo: sent {} answered {} ({:.0}/s, p50 {} us, p99 {} us), result codes {:?}",
        report.sent,
        report.answered,
        report.rate(),
        report.percentile_us(50.0),
        report.percentile_us(99.0),
        report.by_code
    );
    Ok(report)
}
