//! What the relay benchmarks share: start the agent from a configuration and
//! wait until it has opened its server, drive one closed- or open-loop
//! measurement through it, take medians.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use agent::agent::Agent;
use agent::config::Config;
use agent::peer::table::state;
use tools::loadgen::{Client, Identity, Pace, Report, TEST_APP, Traffic};

/// The load client's DiameterIdentity.
pub const CLIENT_HOST: &str = "client1.example.org";

/// The test_app load client [`CLIENT_HOST`] connected to `addr`, its CER
/// answered 2001; asked again, up to [`CONNECT_ATTEMPTS`] times, when the
/// server closes the connection before its CEA.
///
/// # Errors
/// A failed connection, or a CEA with another Result-Code.
pub async fn connect_client(addr: SocketAddr) -> anyhow::Result<Client> {
    let mut attempt = 1;
    let c = loop {
        match Client::connect(
            addr,
            Identity::new(CLIENT_HOST, "example.org"),
            vec![TEST_APP],
        )
        .await
        {
            Ok(c) => break c,
            // freeDiameter closes a new connection during the CER while it
            // still holds the previous one of the same Origin-Host (the
            // last round's client, closed a moment ago): ask again once it
            // has let that one go.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
                ) && attempt < CONNECT_ATTEMPTS =>
            {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "capabilities exchange with {addr} (attempt {attempt} of {CONNECT_ATTEMPTS})"
                )));
            }
        }
    };
    anyhow::ensure!(c.cea_result == 2001, "CEA {} from {addr}", c.cea_result);
    Ok(c)
}

/// How many times [`connect_client`] connects to a server that closed
/// during the capabilities exchange.
const CONNECT_ATTEMPTS: u32 = 5;

/// Starts the agent from TOML text and waits (15 s at most) until one of its
/// peers is OKAY, so measurements never include the capabilities exchange.
///
/// # Errors
/// A bad configuration, a failed start, or no peer open in time.
pub fn start_agent(toml: &str) -> anyhow::Result<Agent> {
    let agent = Agent::start(Config::from_str_named(toml, Path::new("bench.toml"))?)?;
    let t0 = Instant::now();
    while !agent
        .peers()
        .all()
        .iter()
        .any(|(_, s)| s.state() == state::OKAY)
    {
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(15),
            "agent never opened the server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(agent)
}

/// One test_app client to `addr`: 300 ms of warm-up, then `seconds` of
/// traffic at `pace`. Every request must be answered, and answered 2001.
///
/// # Errors
/// A failed connection or CEA, or a request not answered 2001.
pub fn measure(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    pace: Pace,
    seconds: u64,
) -> anyhow::Result<Report> {
    measure_from(rt, addr, pace, seconds, || {})
}

/// [`measure`], calling `at_start` between the warm-up and the
/// measurement (to sample counters the report should be compared with).
///
/// # Errors
/// As [`measure`].
pub fn measure_from(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    pace: Pace,
    seconds: u64,
    at_start: impl FnOnce(),
) -> anyhow::Result<Report> {
    measure_as(rt, addr, (pace, seconds), false, at_start)
}

/// [`measure_from`], the client a DOIC reacting node when `doic_client`
/// (OC-Supported-Features in every request, [`Client::announce_doic`]).
///
/// # Errors
/// As [`measure`].
pub fn measure_as(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    (pace, seconds): (Pace, u64),
    doic_client: bool,
    at_start: impl FnOnce(),
) -> anyhow::Result<Report> {
    rt.block_on(async {
        let mut c = connect_client(addr).await?;
        if doic_client {
            c.announce_doic();
        }
        drive(c, addr, (pace, seconds), async { at_start() }).await
    })
}

/// [`measure_from`] with `clients` connections at once
/// (`client1.example.org`, `client2.example.org`, ...), the pace split
/// evenly among them (each keeps its share of the outstanding requests or
/// of the rate): one report, merged ([`merge`]). `at_start` runs once every
/// client has warmed up; then they all start. One client is
/// [`measure_from`].
///
/// # Errors
/// As [`measure`], for any of the clients.
pub fn measure_clients(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    (pace, seconds): (Pace, u64),
    clients: usize,
    at_start: impl FnOnce(),
) -> anyhow::Result<Report> {
    if clients <= 1 {
        return measure_from(rt, addr, pace, seconds, at_start);
    }
    let each = match pace {
        Pace::Closed(n) => Pace::Closed((n / clients).max(1)),
        Pace::Open(r) => Pace::Open((r / clients as u64).max(1)),
        other => anyhow::bail!("{other:?} is not split among clients"),
    };
    rt.block_on(async {
        let warm = std::sync::Arc::new(tokio::sync::Barrier::new(clients + 1));
        let go = std::sync::Arc::new(tokio::sync::Barrier::new(clients + 1));
        let mut set = tokio::task::JoinSet::new();
        for i in 1..=clients {
            let (warm, go) = (warm.clone(), go.clone());
            set.spawn(async move {
                let host = format!("client{i}.example.org");
                let c = Client::connect(addr, Identity::new(&host, "example.org"), vec![TEST_APP])
                    .await?;
                anyhow::ensure!(c.cea_result == 2001, "CEA {} from {addr}", c.cea_result);
                drive(c, addr, (each, seconds), async move {
                    warm.wait().await;
                    go.wait().await;
                })
                .await
            });
        }
        // A client that fails before the barrier ends the run with its
        // error instead of leaving the others waiting.
        tokio::select! {
            _ = warm.wait() => {}
            Some(r) = set.join_next() => {
                r??;
                anyhow::bail!("a client ended before the measurement");
            }
        }
        at_start();
        go.wait().await;
        let mut reports = Vec::with_capacity(clients);
        while let Some(r) = set.join_next().await {
            reports.push(r??);
        }
        Ok(merge(reports))
    })
}

/// Drives the connected client `c`: 300 ms of warm-up, `at_start`, then
/// `seconds` at `pace`, then DPR; every request answered 2001.
async fn drive(
    mut c: Client,
    addr: SocketAddr,
    (pace, seconds): (Pace, u64),
    at_start: impl Future<Output = ()>,
) -> anyhow::Result<Report> {
    let t = Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    };
    // Warm-up, then the measurement.
    let stop = AtomicBool::new(false);
    c.run(
        &t,
        pace,
        Duration::from_millis(300),
        Duration::from_secs(5),
        &stop,
    )
    .await?;
    at_start.await;
    let r = c
        .run(
            &t,
            pace,
            Duration::from_secs(seconds),
            Duration::from_secs(10),
            &stop,
        )
        .await?;
    let _ = c.disconnect().await;
    anyhow::ensure!(
        r.sent == r.answered,
        "{addr}: sent {} answered {}",
        r.sent,
        r.answered
    );
    anyhow::ensure!(
        r.by_code.get(&2001) == Some(&r.answered),
        "{addr}: result codes {:?}",
        r.by_code
    );
    Ok(r)
}

/// Reports of clients run at the same time as one: counts summed,
/// latencies merged (sorted), the longest elapsed.
#[must_use]
pub fn merge(reports: Vec<Report>) -> Report {
    let mut all = Report::default();
    for r in reports {
        all.sent += r.sent;
        all.answered += r.answered;
        all.unmatched += r.unmatched;
        all.malformed += r.malformed;
        all.with_olr += r.with_olr;
        for (code, n) in r.by_code {
            *all.by_code.entry(code).or_default() += n;
        }
        all.latencies_us.extend(r.latencies_us);
        all.ok_latencies_us.extend(r.ok_latencies_us);
        all.elapsed = all.elapsed.max(r.elapsed);
    }
    all.latencies_us.sort_unstable();
    all.ok_latencies_us.sort_unstable();
    all
}

/// The median of `v` (0 when empty).
#[must_use]
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
