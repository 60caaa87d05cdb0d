//! What an operator reads of a running `doic-agent run`: the agent with
//! the default configuration (several workers) over real TCP, its only
//! upstream down, then up, then gone. Its stderr is captured from the
//! binary: JSON lines with `--log-format json`, plain text (no ANSI
//! colour codes, stderr being a pipe) without. The 3002 answers a client
//! meets meanwhile name the realm and the down peer (RFC 6733 §7.1.3
//! DIAMETER_UNABLE_TO_DELIVER).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use diameter::codec::header::HEADER_LEN;
use diameter::codec::{AvpIter, Routing};
use diameter::dictionary::code;
use tools::loadgen::{Client, Identity, Server, ServerBehaviour, TEST_APP, Traffic};

#[path = "../../agent/tests/support/mod.rs"]
mod support;
use interop::process::free_port;
use support::process::{AgentProcess, events, rt};
use support::scratch::Scratch;

/// The agent: `run` with a configuration dialling `upstream`, listening
/// on `listen`, and `args`; SIGTERM with `stop`, killed on drop.
fn spawn_agent(listen: u16, upstream: u16, args: &[&str]) -> AgentProcess {
    let dir = Scratch::new(&format!("logs-{listen}"));
    let cfg = dir.file(
        "agent.toml",
        format!(
            "[node]\norigin_host = \"agent.example.com\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:{listen}\"]\ntc_seconds = 0.2\nrequest_timeout_seconds = 0.5\n[[peer]]\nhost = \"s.example.net\"\nrealm = \"example.net\"\nconnect = \"127.0.0.1:{upstream}\"\n[[route]]\nrealm = \"example.net\"\npeers = [\"s.example.net\"]\n[accept]\nhosts = [\"*.example.org\"]\n"
        ),
    );
    let mut all: Vec<&std::ffi::OsStr> = vec!["run".as_ref(), cfg.as_os_str()];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    AgentProcess::spawn(env!("CARGO_BIN_EXE_doic-agent"), &all).holding(dir)
}

const DOWN: &str =
    "no peer up for realm example.net (peer s.example.net down: Connection refused (os error 111))";

/// A burst of `n` requests in one write; their answers' Result-Codes and
/// Error-Messages.
async fn burst(agent: SocketAddr, n: u32) -> Vec<(u32, String)> {
    let mut c = Client::connect(
        agent,
        Identity::new("c.example.org", "example.org"),
        vec![TEST_APP],
    )
    .await
    .unwrap();
    assert_eq!(c.cea_result, 2001);
    let t = Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    };
    let mut out = BytesMut::new();
    for hbh in 1..=n {
        c.put_request(&mut out, &t, hbh);
    }
    c.write_raw(&out).await.unwrap();
    let mut answers = Vec::new();
    while answers.len() < n as usize {
        let m = tokio::time::timeout(Duration::from_secs(5), c.read_message())
            .await
            .unwrap()
            .unwrap();
        if diameter::codec::Header::read(&m).is_request() {
            // The agent's DWR (RFC 6733 §5.5), not an answer.
            continue;
        }
        let a = Routing::scan_answer(&m).unwrap();
        let why = AvpIter::with_offset(&m[HEADER_LEN..], HEADER_LEN)
            .map(Result::unwrap)
            .find(|a| a.code == code::ERROR_MESSAGE)
            .map(|a| String::from_utf8_lossy(a.data).into_owned())
            .unwrap_or_default();
        answers.push((a.result_code().unwrap(), why));
    }
    answers
}

#[test]
fn json_lines_name_the_down_peer_its_cause_the_route_and_each_3002() {
    let (listen, upstream) = (free_port().unwrap(), free_port().unwrap());
    let mut agent = spawn_agent(listen, upstream, &["--log-format", "json"]);
    agent.wait_for("listening", |l| l.contains("\"listening\""));
    // The first failed dial: one WARN naming the peer, its address and the
    // cause; the route with no peer up: one WARN.
    let dial = agent.wait_for("dial", |l| l.contains("cannot connect to peer"));
    let dial: serde_json::Value = serde_json::from_str(&dial).unwrap();
    assert_eq!(dial["level"], "WARN");
    assert_eq!(dial["fields"]["peer"], "s.example.net");
    assert_eq!(dial["fields"]["addr"], format!("127.0.0.1:{upstream}"));
    assert_eq!(dial["fields"]["cause"], "Connection refused (os error 111)");
    assert_eq!(dial["fields"]["failures"], 1);
    agent.wait_for("route", |l| l.contains("route has no peer up"));
    let route = events(
        &agent.lines(),
        "route has no peer up: its requests are answered 3002",
    );
    assert_eq!(route[0]["level"], "WARN");
    assert_eq!(route[0]["fields"]["realm"], "example.net");

    // A client's burst: every request answered 3002 saying why; one
    // warning for the burst (rate-limited per connection).
    let rt = rt();
    let agent_addr: SocketAddr = format!("127.0.0.1:{listen}").parse().unwrap();
    let answers = rt.block_on(burst(agent_addr, 5));
    assert_eq!(answers, vec![(3002, DOWN.to_owned()); 5]);
    agent.wait_for("3002", |l| l.contains("request answered 3002"));
    let refused = events(
        &agent.lines(),
        "request answered 3002 DIAMETER_UNABLE_TO_DELIVER",
    );
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["level"], "WARN");
    assert_eq!(refused[0]["fields"]["peer"], "c.example.org");
    assert_eq!(refused[0]["fields"]["cause"], DOWN);
    // Reconnect attempts go on every Tc (0.2 s) meanwhile.
    std::thread::sleep(Duration::from_millis(1500));

    // The upstream comes up: INFO lines naming it.
    let server = rt.block_on(async {
        Server::spawn(
            format!("127.0.0.1:{upstream}").parse().unwrap(),
            Identity::new("s.example.net", "example.net"),
            ServerBehaviour::default(),
        )
        .await
        .unwrap()
    });
    let up = agent.wait_for("peer up", |l| {
        l.contains("\"peer up\"") && l.contains("\"peer\":\"s.example.net\"")
    });
    let up: serde_json::Value = serde_json::from_str(&up).unwrap();
    assert_eq!(up["level"], "INFO");
    assert_eq!(up["fields"]["peer"], "s.example.net");
    let back = events(&agent.lines(), "connected to peer after failed attempts");
    assert_eq!(back[0]["level"], "INFO");
    let failures = back[0]["fields"]["failures"].as_u64().unwrap();
    assert!(failures >= 5, "{back:?}");
    // Rate-limited: the first failure and every tenth are warnings, each
    // with the count so far.
    let dials = events(&agent.lines(), "cannot connect to peer; retrying");
    let counts: Vec<u64> = dials
        .iter()
        .map(|d| d["fields"]["failures"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (1..=failures).filter(|n| n % 10 == 1).collect();
    assert_eq!(counts, expected);
    let answers = rt.block_on(burst(agent_addr, 3));
    assert!(answers.iter().all(|(rc, _)| *rc == 2001), "{answers:?}");

    // Each client that leaves is a peer down too (its name, downstream).
    let client = agent.wait_for("client down", |l| l.contains("\"peer down\""));
    let client: serde_json::Value = serde_json::from_str(&client).unwrap();
    assert_eq!(client["fields"]["peer"], "c.example.org");
    assert_eq!(client["fields"]["side"], "downstream");
    // The upstream goes away (closed without DPR): INFO `peer down` with
    // the cause.
    server.stop();
    let down = agent.wait_for("peer down", |l| {
        l.contains("\"peer down\"") && l.contains("\"peer\":\"s.example.net\"")
    });
    let down: serde_json::Value = serde_json::from_str(&down).unwrap();
    assert_eq!(down["level"], "INFO");
    assert_eq!(down["fields"]["peer"], "s.example.net");
    assert_eq!(down["fields"]["side"], "upstream");
    assert_eq!(down["fields"]["cause"], "peer closed the connection");
    assert!(agent.stop().success());
    // Every line is one JSON object; no field prints as `Some(...)`.
    let lines = agent.lines();
    for l in &lines {
        let j: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(j["timestamp"].is_string() && j["level"].is_string(), "{l}");
        assert!(!l.contains("Some("), "{l}");
    }
    assert!(!events(&lines, "stopped").is_empty());
}

#[test]
fn text_lines_have_no_colour_codes_on_a_pipe_and_the_level_option_filters() {
    let (listen, upstream) = (free_port().unwrap(), free_port().unwrap());
    let mut agent = spawn_agent(listen, upstream, &[]);
    let dial = agent.wait_for("dial", |l| l.contains("cannot connect to peer"));
    assert!(
        dial.contains(&format!(
            " WARN agent::net::connect: cannot connect to peer; retrying peer=s.example.net addr=127.0.0.1:{upstream} cause=Connection refused (os error 111) failures=1 retry_every=200ms"
        )),
        "{dial}"
    );
    agent.wait_for("listening", |l| l.contains("INFO doic_agent: listening"));
    assert!(agent.stop().success());
    let lines = agent.lines();
    assert!(lines.iter().all(|l| !l.contains('\u{1b}')), "{lines:?}");
    assert!(lines.iter().all(|l| !l.contains("Some(")), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("INFO doic_agent: stopped")));

    // --log-level error: nothing at all for the same story.
    let mut quiet = spawn_agent(free_port().unwrap(), upstream, &["--log-level", "error"]);
    std::thread::sleep(Duration::from_millis(800));
    assert!(quiet.stop().success());
    assert_eq!(quiet.lines(), Vec::<String>::new());
}

#[test]
fn an_upstream_that_does_not_answer_is_named_in_one_warning_per_burst() {
    // RFC 6733 §7.1.3: the agent answers 3002 for the request its upstream
    // left unanswered past node.request_timeout_seconds.
    let rt = rt();
    let server = rt.block_on(async {
        Server::spawn(
            "127.0.0.1:0".parse().unwrap(),
            Identity::new("s.example.net", "example.net"),
            ServerBehaviour {
                answer_requests: false,
                ..ServerBehaviour::default()
            },
        )
        .await
        .unwrap()
    });
    let listen = free_port().unwrap();
    let mut agent = spawn_agent(listen, server.addr.port(), &["--log-format", "json"]);
    agent.wait_for("listening", |l| l.contains("\"listening\""));
    let agent_addr: SocketAddr = format!("127.0.0.1:{listen}").parse().unwrap();
    // Until the upstream is up the burst gets `no peer up`; once it is, the
    // requests wait for its silence.
    let t0 = Instant::now();
    let answers = loop {
        let answers = rt.block_on(burst(agent_addr, 4));
        if answers[0].1 == "upstream answer timed out" {
            break answers;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{answers:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        answers,
        vec![(3002, "upstream answer timed out".to_owned()); 4]
    );
    let timed_out = agent.wait_for("timeout", |l| l.contains("\"expired\""));
    let timed_out: serde_json::Value = serde_json::from_str(&timed_out).unwrap();
    assert_eq!(timed_out["level"], "WARN");
    assert_eq!(timed_out["fields"]["peer"], "s.example.net");
    assert_eq!(timed_out["fields"]["cause"], "upstream answer timed out");
    let lines = agent.lines();
    let expired: u64 = events(&lines, "requests answered 3002 DIAMETER_UNABLE_TO_DELIVER")
        .iter()
        .filter(|e| e["fields"]["peer"] == "s.example.net")
        .map(|e| e["fields"]["expired"].as_u64().unwrap())
        .sum();
    // One line per connection per 10 s: the burst's requests in it.
    assert!((1..=4).contains(&expired), "{lines:?}");
    assert!(agent.stop().success());
    server.stop();
}
