//! The status pages of the metrics listener over HTTP against a running
//! agent with two workers (docs/status.md): `GET /peers` while a peer is
//! up and after it goes down (RFC 6733 §5.6 state, RFC 3539 watchdog
//! state, the last error naming the cause), `GET /health` going from 200
//! to 503 and back, `doic_build_info`, the series of pattern-accepted
//! peers dropped once they are gone, 404 and 405.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::Value;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tools::loadgen::{Client, Identity, Pace, ServerBehaviour, TEST_APP, Traffic};

const SERVER: &str = "server1.example.net";

/// A response: status code, headers (lowercase names), body.
struct Response {
    code: u16,
    head: String,
    body: String,
}

/// `METHOD path` on the metrics listener.
async fn http(addr: SocketAddr, method: &str, path: &str) -> Response {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).await.unwrap();
    let (head, body) = all.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    Response {
        code,
        head: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

async fn json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let r = http(addr, "GET", path).await;
    assert!(
        r.head.contains("content-type: application/json"),
        "{path}: {}",
        r.head
    );
    (r.code, serde_json::from_str(&r.body).unwrap())
}

/// The object of peer `name` in `GET /peers`, if listed.
async fn peer(addr: SocketAddr, name: &str) -> Option<Value> {
    let (code, v) = json(addr, "/peers").await;
    assert_eq!(code, 200);
    v.as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
}

/// Polls `GET /peers` until `f` holds for peer `name`; fails after 10 s.
async fn wait_peer(addr: SocketAddr, name: &str, f: impl Fn(&Value) -> bool) -> Value {
    let t0 = tokio::time::Instant::now();
    loop {
        if let Some(p) = peer(addr, name).await
            && f(&p)
        {
            return p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{name}: {:?}",
            peer(addr, name).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn traffic() -> Traffic {
    Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    }
}

/// A burst of requests in few writes, all answered.
async fn burst(c: &mut Client) {
    let stop = AtomicBool::new(false);
    let r = c
        .run(
            &traffic(),
            Pace::Closed(16),
            Duration::from_millis(100),
            Duration::from_secs(5),
            &stop,
        )
        .await
        .unwrap();
    assert!(r.sent >= 16 && r.sent == r.answered, "{r:?}");
}

/// One loadgen server behind an agent with two workers and `[metrics]`,
/// `[doic]` with an own capacity when `doic`.
async fn agent_with_metrics(doic: bool) -> (Setup, SocketAddr) {
    let servers = servers(1, ServerBehaviour::default()).await;
    let addr = servers[0].addr;
    let tail = if doic {
        "[metrics]\nlisten = \"127.0.0.1:0\"\n[doic]\nown_capacity = 1000000\n"
    } else {
        "[metrics]\nlisten = \"127.0.0.1:0\"\n"
    };
    let config = agent_toml(Some(2), "", &[(SERVER, addr, None)], tail);
    let s = start(servers, config).await;
    let m = s.agent().metrics_addr().unwrap();
    (s, m)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_and_health_follow_a_peer_up_and_down() {
    let (mut s, m) = agent_with_metrics(true).await;
    let server_addr = s.servers[0].addr.to_string();

    // Up: RFC 6733 §5.6 I-Open (the agent dialled), RFC 3539 OKAY.
    let (code, health) = json(m, "/health").await;
    assert_eq!(code, 200, "{health}");
    assert_eq!(health["status"], "ready");
    assert_eq!(health["routes_without_peer_up"], Value::Array(vec![]));
    let up = wait_peer(m, SERVER, |p| p["state"] == "I-Open").await;
    assert_eq!(up["kind"], "configured");
    assert_eq!(up["address"], server_addr.as_str());
    assert_eq!(up["watchdog"], "OKAY");
    assert_eq!(up["pending"], 0);
    assert_eq!(up["last_error"], Value::Null);
    assert!(up["worker"].as_u64().is_some_and(|w| w < 2), "{up}");
    assert!(
        up["since"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{up}"
    );
    assert!(up["since_seconds"].as_u64().is_some_and(|t| t < 60), "{up}");
    assert_eq!(up["doic"]["mode"], "auto");

    // A client that dialled the agent: R-Open, accepted by pattern.
    let mut c = s.client().await;
    burst(&mut c).await;
    let client = wait_peer(m, CLIENT, |p| p["state"] == "R-Open").await;
    assert_eq!(client["kind"], "accepted");
    assert_eq!(client["watchdog"], "OKAY");
    assert_eq!(
        client["address"],
        c.local_addr().unwrap().to_string().as_str()
    );
    // DOIC: the server's answers carry no OC-Supported-Features, so the
    // protection watches it (docs/protect.md); the client is no server.
    let sensed = wait_peer(m, SERVER, |p| p["doic"]["sensed"] == "no_doic_seen").await;
    assert_eq!(sensed["doic"]["mode"], "auto");
    assert_eq!(client["doic"]["sensed"], Value::Null, "{client}");

    // The server goes away (no DPR): Closed, watchdog DOWN, the cause.
    s.servers[0].stop();
    let down = wait_peer(m, SERVER, |p| p["state"] == "Closed").await;
    assert_eq!(down["watchdog"], "DOWN", "{down}");
    assert_eq!(down["address"], server_addr.as_str(), "where it is dialled");
    let cause = down["last_error"].as_str().unwrap_or_default();
    assert!(
        cause == "peer closed the connection" || cause == "read error" || cause.contains("refused"),
        "the cause as the peer down line gives it: {down}"
    );
    let (code, health) = json(m, "/health").await;
    assert_eq!(code, 503, "{health}");
    assert_eq!(health["status"], "not_ready");
    assert_eq!(
        health["reason"], "no route has a peer up: example.net",
        "{health}"
    );
    let route = &health["routes_without_peer_up"][0];
    assert_eq!(route["realm"], "example.net");
    assert!(
        route["peers"]
            .as_str()
            .is_some_and(|p| p.starts_with("peer server1.example.net down")),
        "{health}"
    );

    // Back on its address: the agent redials (Tc 0.2 s); the connection
    // is I-Open but the watchdog is REOPEN until three DWAs came back (RFC
    // 3539 §3.4.1, Appendix A): still no peer up.
    let t0 = tokio::time::Instant::now();
    let back = loop {
        match tools::loadgen::Server::spawn(
            server_addr.parse().unwrap(),
            Identity::new(SERVER, "example.net"),
            ServerBehaviour::default(),
        )
        .await
        {
            Ok(b) => break b,
            Err(e) => assert!(t0.elapsed() < Duration::from_secs(5), "rebind: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let reopen = wait_peer(m, SERVER, |p| p["state"] == "I-Open").await;
    assert_eq!(reopen["watchdog"], "REOPEN", "{reopen}");
    let (code, health) = json(m, "/health").await;
    assert_eq!(code, 503, "REOPEN takes no requests: {health}");
    drop(c);
    s.stop().await;
    back.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_of_gone_accepted_peers_are_dropped() {
    const N: usize = 4;
    // With [doic] and an own capacity: the own-load series are per peer too.
    let (s, m) = agent_with_metrics(true).await;
    let hosts: Vec<String> = (1..=N).map(|i| format!("gone{i}.example.org")).collect();
    let mut clients = Vec::new();
    for h in &hosts {
        let mut c = Client::connect(s.addr, Identity::new(h, "example.org"), vec![TEST_APP])
            .await
            .unwrap();
        assert_eq!(c.cea_result, 2001);
        burst(&mut c).await;
        clients.push(c);
    }
    let keep = s.client().await;
    let metrics = http(m, "GET", "/metrics").await.body;
    for h in &hosts {
        let sample = format!("doic_peer_requests_received_total{{peer=\"{h}\"}}");
        assert!(gauge(&metrics, &sample).is_some_and(|n| n >= 16.0), "{h}");
        let own = format!("doic_own_peer_load_rps{{peer=\"{h}\",source=\"userspace\"}}");
        wait_until(Duration::from_secs(5), || {
            gauge(&agent::metrics::render(s.agent().metrics()), &own).is_some()
        })
        .await;
        assert!(peer(m, h).await.is_some(), "{h} listed while connected");
    }
    // Half leave with DPR (RFC 6733 §5.4), half drop the connection.
    for (i, c) in clients.into_iter().enumerate() {
        if i % 2 == 0 {
            c.disconnect().await.unwrap();
        } else {
            drop(c);
        }
    }
    let table = s.agent().peers().clone();
    wait_until(Duration::from_secs(10), || {
        table
            .present()
            .iter()
            .all(|(_, p)| !p.host.starts_with("gone"))
    })
    .await;
    // The peer series at once; the own-load series at the next control
    // tick (every 100 ms), which measures the peers.
    let metrics = http(m, "GET", "/metrics").await.body;
    for h in &hosts {
        let sample = format!("doic_peer_requests_received_total{{peer=\"{h}\"}}");
        assert!(gauge(&metrics, &sample).is_none(), "{h}");
    }
    wait_until(Duration::from_secs(2), || {
        let page = agent::metrics::render(s.agent().metrics());
        hosts.iter().all(|h| !page.contains(h.as_str()))
    })
    .await;
    let metrics = http(m, "GET", "/metrics").await.body;
    for h in &hosts {
        let left: Vec<&str> = metrics.lines().filter(|l| l.contains(h.as_str())).collect();
        assert!(left.is_empty(), "{h}'s series dropped: {left:?}");
        assert!(peer(m, h).await.is_none(), "{h} not listed once gone");
    }
    for p in [SERVER, CLIENT] {
        let sample = format!("doic_peer_requests_received_total{{peer=\"{p}\"}}");
        assert!(gauge(&metrics, &sample).is_some(), "{p}'s series stay");
    }
    // The configured peer's series stay while it is down too.
    s.servers[0].stop();
    wait_peer(m, SERVER, |p| p["state"] == "Closed").await;
    let metrics = http(m, "GET", "/metrics").await.body;
    assert!(
        gauge(
            &metrics,
            &format!("doic_peer_requests_sent_total{{peer=\"{SERVER}\"}}")
        )
        .is_some_and(|n| n >= (16 * N) as f64),
        "{metrics}"
    );
    drop(keep);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_info_unknown_paths_and_methods() {
    let (_s, m) = agent_with_metrics(false).await;
    let metrics = http(m, "GET", "/metrics").await;
    assert_eq!(metrics.code, 200);
    let version = env!("CARGO_PKG_VERSION");
    let line = metrics
        .body
        .lines()
        .find(|l| l.starts_with("doic_build_info{"))
        .unwrap();
    assert!(
        line.starts_with(&format!("doic_build_info{{version=\"{version}\"")),
        "{line}"
    );
    assert!(line.contains("features=\""), "{line}");
    assert!(line.ends_with("} 1"), "{line}");

    let r = http(m, "GET", "/nothing-here").await;
    assert_eq!(r.code, 404);
    assert_eq!(r.body.lines().count(), 1, "{:?}", r.body);
    assert!(
        r.body.contains("/peers") && r.body.contains("/health"),
        "{}",
        r.body
    );
    for (method, path) in [
        ("POST", "/peers"),
        ("DELETE", "/health"),
        ("PUT", "/metrics"),
    ] {
        let r = http(m, method, path).await;
        assert_eq!(r.code, 405, "{method} {path}");
        assert!(r.head.contains("allow: get"), "{}", r.head);
        assert_eq!(r.body.lines().count(), 1);
    }
    let r = http(m, "GET", "/health?verbose=1").await;
    assert_eq!(r.code, 200, "a query string is ignored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_routes_is_ready_once_it_listens() {
    let toml = format!(
        "[node]\norigin_host = \"{AGENT}\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n[accept]\nhosts = [\"*.example.org\"]\n[metrics]\nlisten = \"127.0.0.1:0\"\n"
    );
    let config =
        agent::config::Config::from_str_named(&toml, std::path::Path::new("test.toml")).unwrap();
    let agent = start_agent(config, 0).await;
    let m = agent.metrics_addr().unwrap();
    let (code, health) = json(m, "/health").await;
    assert_eq!(code, 200, "{health}");
    assert_eq!(health["routes"], 0);
    assert_eq!(
        health["listen"][0],
        agent.local_addrs()[0].to_string().as_str()
    );
    let (code, peers) = json(m, "/peers").await;
    assert_eq!((code, peers), (200, Value::Array(vec![])));
    stop(agent);
}
