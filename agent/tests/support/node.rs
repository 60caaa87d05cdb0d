//! The agent under test, in front of loopback servers: its configuration,
//! starting it (on pinned worker threads as in production, or on the test's
//! own runtime, where `#[tokio::test(start_paused = true)]` drives every
//! timer of the agent), waiting for its peers, reading its metrics,
//! stopping it.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use agent::agent::Agent;
use agent::config::Config;
use agent::peer::table::state;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tools::loadgen::{Client, Identity, Server, ServerBehaviour, TEST_APP};

/// The agent's Origin-Host.
pub const AGENT: &str = "agent.example.com";
/// The test client's Origin-Host (accepted by `*.example.org`).
pub const CLIENT: &str = "client1.example.org";

/// Where the agent's workers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// Pinned worker threads and a control thread ([`Agent::start`]).
    Pinned,
    /// Tasks on the test's runtime ([`Agent::start_on`]); on a paused
    /// runtime the agent's timers follow the paused clock.
    Here,
}

/// An agent routing example.net to loadgen servers.
pub struct Setup {
    pub agent: Option<Agent>,
    pub servers: Vec<Server>,
    pub addr: SocketAddr,
}

/// `n` answering servers, `server1.example.net` ... on loopback.
pub async fn servers(n: usize, b: ServerBehaviour) -> Vec<Server> {
    let mut v = Vec::new();
    for i in 1..=n {
        let id = Identity::new(&format!("server{i}.example.net"), "example.net");
        v.push(
            Server::spawn("127.0.0.1:0".parse().unwrap(), id, b.clone())
                .await
                .unwrap(),
        );
    }
    v
}

/// One upstream peer of the agent: host, address, and `trusted` for DOIC
/// (`None`: the key left out).
pub type Upstream<'a> = (&'a str, SocketAddr, Option<bool>);

/// The agent's configuration: `workers` workers (`None`: the key left out,
/// the default count), Tc 0.2 s, Tw 6 s, a drain of 2 s and a request
/// timeout of 5 s, then `node_extra` in `[node]`; a peer for each of
/// `upstreams`, all routed for example.net; clients `*.example.org`
/// accepted; then `tail` (further sections).
pub fn agent_toml(
    workers: Option<usize>,
    node_extra: &str,
    upstreams: &[Upstream<'_>],
    tail: &str,
) -> Config {
    let workers = workers.map_or(String::new(), |n| format!("workers = {n}\n"));
    let mut t = format!(
        "[node]\norigin_host = \"{AGENT}\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\n{workers}tc_seconds = 0.2\ntw_seconds = 6\ndrain_seconds = 2\nrequest_timeout_seconds = 5\n{node_extra}\n"
    );
    let mut names = Vec::new();
    for (host, addr, trusted) in upstreams {
        t += &format!(
            "[[peer]]\nhost = \"{host}\"\nrealm = \"example.net\"\nconnect = \"{addr}\"\n"
        );
        if let Some(trusted) = trusted {
            t += &format!("trusted = {trusted}\n");
        }
        names.push(format!("\"{host}\""));
    }
    t += &format!(
        "[[route]]\nrealm = \"example.net\"\npeers = [{}]\n",
        names.join(", ")
    );
    t += "[accept]\nhosts = [\"*.example.org\"]\n";
    t += tail;
    Config::from_str_named(&t, Path::new("test.toml")).unwrap()
}

/// [`agent_toml`] with two workers in front of loadgen `servers`.
pub fn config_for(servers: &[Server], extra_node: &str) -> Config {
    let hosts: Vec<String> = (1..=servers.len())
        .map(|i| format!("server{i}.example.net"))
        .collect();
    let upstreams: Vec<Upstream<'_>> = hosts
        .iter()
        .zip(servers)
        .map(|(h, s)| (h.as_str(), s.addr, None))
        .collect();
    agent_toml(Some(2), extra_node, &upstreams, "")
}

/// Starts the agent and waits until every server peer is OKAY.
pub async fn start(servers: Vec<Server>, config: Config) -> Setup {
    start_with(Run::Pinned, servers, config).await
}

/// [`start`] on the test's runtime.
pub async fn start_here(servers: Vec<Server>, config: Config) -> Setup {
    start_with(Run::Here, servers, config).await
}

async fn start_with(run: Run, servers: Vec<Server>, config: Config) -> Setup {
    let agent = launch(run, config, servers.len()).await;
    let addr = agent.local_addrs()[0];
    Setup {
        agent: Some(agent),
        servers,
        addr,
    }
}

/// One server behaving as `b` behind an agent with the default worker
/// count, [`config_for`] changed by `edit`, run as `run` says.
pub async fn one_server(run: Run, b: ServerBehaviour, edit: impl FnOnce(&mut Config)) -> Setup {
    let servers = servers(1, b).await;
    let mut config = config_for(&servers, "");
    config.node.workers = None;
    edit(&mut config);
    start_with(run, servers, config).await
}

/// Two default servers behind a pinned agent.
pub async fn setup(n: usize) -> Setup {
    let s = servers(n, ServerBehaviour::default()).await;
    let c = config_for(&s, "");
    start(s, c).await
}

/// Starts the agent on pinned workers and waits until `n` peers are OKAY.
pub async fn start_agent(config: Config, n: usize) -> Agent {
    launch(Run::Pinned, config, n).await
}

/// Starts the agent as `run` says and waits until `n` peers are OKAY.
pub async fn launch(run: Run, config: Config, n: usize) -> Agent {
    let agent = match run {
        Run::Pinned => Agent::start(config),
        Run::Here => Agent::start_on(&tokio::runtime::Handle::current(), config),
    }
    .unwrap();
    wait_open(&agent, n).await;
    agent
}

/// Waits until `n` peers of `agent` are OKAY.
pub async fn wait_open(agent: &Agent, n: usize) {
    let table = agent.peers().clone();
    wait_until(Duration::from_secs(10), || {
        table
            .all()
            .iter()
            .filter(|(_, s)| s.state() == state::OKAY)
            .count()
            >= n
    })
    .await;
}

/// Polls `f` every 10 ms until it holds; fails after `limit`. Times are the
/// runtime's: on a paused runtime the limit is in paused time.
pub async fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < limit,
            "condition not reached within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A client `CLIENT` connected to the agent at `addr`, its CER answered 2001.
pub async fn connect(addr: SocketAddr) -> Client {
    let c = Client::connect(addr, Identity::new(CLIENT, "example.org"), vec![TEST_APP])
        .await
        .unwrap();
    assert_eq!(c.cea_result, 2001);
    c
}

/// Stops the agent without waiting for it (tests end meanwhile).
pub fn stop(agent: Agent) {
    agent.shutdown();
    std::thread::spawn(move || agent.join());
}

impl Setup {
    pub fn agent(&self) -> &Agent {
        self.agent.as_ref().unwrap()
    }

    /// A client connected to the agent.
    pub async fn client(&self) -> Client {
        connect(self.addr).await
    }

    /// Stops the agent (DPR, drain) and waits for it, then the servers.
    pub async fn stop(&mut self) {
        let agent = self.agent.take().unwrap();
        agent.shutdown();
        agent.wait().await;
        for s in &self.servers {
            s.stop();
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(a) = self.agent.take() {
            stop(a);
        }
        for s in &self.servers {
            s.stop();
        }
    }
}

/// The value of one sample of the agent's `/metrics` text, given as
/// `name{labels}` exactly as rendered; `None` when it is not there.
pub fn metric(agent: &Agent, sample: &str) -> Option<f64> {
    gauge(&agent::metrics::render(agent.metrics()), sample)
}

/// The value of one sample, `name{labels}` exactly as rendered, in a
/// metrics text (`/metrics` over HTTP).
pub fn gauge(body: &str, sample: &str) -> Option<f64> {
    body.lines().find_map(|l| {
        l.strip_prefix(sample)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// `GET path` on the metrics listener.
pub async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    body
}
