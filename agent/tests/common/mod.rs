//! Shared set-up of the integration tests: loopback servers, an agent in
//! front of them, raw message helpers.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use agent::agent::Agent;
use agent::config::Config;
use agent::peer::table::state;
use bytes::{Bytes, BytesMut};
use diameter::codec::header::{begin, finish};
use diameter::codec::{AvpIter, CommandFlags, HEADER_LEN, Header, RawAvp, Routing};
use diameter::dictionary::code;
use tools::loadgen::put_mandatory_avp;
use tools::loadgen::{Client, Identity, Server, ServerBehaviour, TEST_APP, TEST_CMD};

pub const AGENT: &str = "agent.example.com";

/// Two servers and an agent routing example.net to both.
pub struct Setup {
    pub agent: Option<Agent>,
    pub servers: Vec<Server>,
    pub addr: SocketAddr,
}

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

pub fn config_for(servers: &[Server], extra_node: &str) -> Config {
    let mut t = format!(
        "[node]\norigin_host = \"{AGENT}\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\ntc_seconds = 0.2\ntw_seconds = 6\ndrain_seconds = 2\nrequest_timeout_seconds = 5\n{extra_node}\n"
    );
    let mut names = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        let host = format!("server{}.example.net", i + 1);
        t += &format!(
            "[[peer]]\nhost = \"{host}\"\nrealm = \"example.net\"\nconnect = \"{}\"\n",
            s.addr
        );
        names.push(format!("\"{host}\""));
    }
    t += &format!(
        "[[route]]\nrealm = \"example.net\"\npeers = [{}]\n",
        names.join(", ")
    );
    t += "[accept]\nhosts = [\"*.example.org\"]\n";
    Config::from_str_named(&t, Path::new("test.toml")).unwrap()
}

/// Starts the agent and waits until every server peer is OKAY.
pub async fn start(servers: Vec<Server>, config: Config) -> Setup {
    let n = servers.len();
    let agent = Agent::start(config).unwrap();
    let addr = agent.local_addrs()[0];
    let shared = agent.shared().clone();
    wait_until(Duration::from_secs(10), || {
        shared
            .table
            .all()
            .iter()
            .filter(|(_, s)| s.state() == state::OKAY)
            .count()
            == n
    })
    .await;
    Setup {
        agent: Some(agent),
        servers,
        addr,
    }
}

pub async fn setup(n: usize) -> Setup {
    let s = servers(n, ServerBehaviour::default()).await;
    let c = config_for(&s, "");
    start(s, c).await
}

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

impl Setup {
    pub fn agent(&self) -> &Agent {
        self.agent.as_ref().unwrap()
    }

    pub async fn client(&self) -> Client {
        let c = Client::connect(
            self.addr,
            Identity::new("client1.example.org", "example.org"),
            vec![TEST_APP],
        )
        .await
        .unwrap();
        assert_eq!(c.cea_result, 2001);
        c
    }

    /// Stops the agent (DPR, drain) on a blocking thread.
    pub async fn stop(&mut self) {
        let agent = self.agent.take().unwrap();
        tokio::task::spawn_blocking(move || {
            agent.shutdown();
            agent.join();
        })
        .await
        .unwrap();
        for s in &self.servers {
            s.stop();
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(a) = self.agent.take() {
            a.shutdown();
            std::thread::spawn(move || a.join());
        }
        for s in &self.servers {
            s.stop();
        }
    }
}

/// A test request with extra AVPs appended.
pub fn request(hbh: u32, realm: &str, extra: &[(u32, &[u8])]) -> BytesMut {
    let mut out = BytesMut::new();
    let s = begin(
        &mut out,
        CommandFlags::REQUEST | CommandFlags::PROXIABLE,
        TEST_CMD,
        TEST_APP,
        hbh,
        hbh + 1000,
    );
    put_mandatory_avp(
        &mut out,
        code::SESSION_ID,
        format!("client1.example.org;1;{hbh}").as_bytes(),
    );
    put_mandatory_avp(&mut out, code::ORIGIN_HOST, b"client1.example.org");
    put_mandatory_avp(&mut out, code::ORIGIN_REALM, b"example.org");
    put_mandatory_avp(&mut out, code::DESTINATION_REALM, realm.as_bytes());
    for (c, d) in extra {
        put_mandatory_avp(&mut out, *c, d);
    }
    finish(&mut out, s);
    out
}

/// Reads until an answer (DWR from the agent are answered away).
pub async fn answer(c: &mut Client) -> Bytes {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), c.read_message())
            .await
            .expect("an answer in time")
            .unwrap();
        let h = Header::read(&m);
        if !h.is_request() {
            return m;
        }
    }
}

pub fn result_code(m: &[u8]) -> Option<u32> {
    Routing::scan(m).unwrap().result_code()
}

/// The top-level AVPs of a message (which must be well formed).
pub fn avps(m: &[u8]) -> impl Iterator<Item = RawAvp<'_>> {
    AvpIter::with_offset(&m[HEADER_LEN..], HEADER_LEN).map(Result::unwrap)
}

/// The value of one sample of the agent's `/metrics` text, given as
/// `name{labels}` exactly as rendered; `None` when it is not there.
pub fn metric(agent: &Agent, sample: &str) -> Option<f64> {
    agent::metrics::render(agent.shared())
        .lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}
