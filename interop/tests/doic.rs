//! DOIC wire compatibility with an independent encoder: the Erlang/OTP
//! `diameter` server (OTP's RFC 7683 dictionary, and the escript's RFC 8581 /
//! RFC 8582 grammar) decodes the OC-Supported-Features the agent adds to
//! every request (it answers with DOIC AVPs only to requests carrying one,
//! RFC 7683 §5.2.3) and sends OTP-encoded OC-OLRs that the agent honours.

use std::path::Path;
use std::time::{Duration, Instant};

use agent::agent::Agent;
use agent::config::Config;
use agent::peer::table::state;
use interop::erl::{ErlClient, ErlServer, Olr, ReportType};
use interop::fd::PeerTarget;

const AGENT: &str = "agent.example.com";
const ERL_CLIENT: &str = "erl-client.example.org";

/// An agent with `[doic]` in front of the Erlang server (trusted), the
/// Erlang client trusted to receive reports when `trust_client`.
fn agent(server: &PeerTarget, trust_client: bool) -> Agent {
    agent_with(server, trust_client, "")
}

/// [`agent`] with more `[doic]` keys.
fn agent_with(server: &PeerTarget, trust_client: bool, doic: &str) -> Agent {
    let mut t = format!(
        "[node]\norigin_host = \"{AGENT}\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\ntw_seconds = 6\ntc_seconds = 1\ndrain_seconds = 3\n[[peer]]\nhost = \"{}\"\nrealm = \"example.net\"\nconnect = \"{}\"\ntrusted = true\n[[route]]\nrealm = \"example.net\"\npeers = [\"{}\"]\n[accept]\nhosts = [\"*.example.org\"]\n[doic]\nalgorithms = [\"loss\", \"rate\"]\npeer_report = true\nthrottle_result = \"auto\"\n",
        server.identity, server.addr, server.identity
    );
    t += doic;
    if trust_client {
        t += &format!("[doic.peers.\"{ERL_CLIENT}\"]\ntrusted = true\n");
    }
    let config = Config::from_str_named(&t, Path::new("interop-doic.toml")).unwrap();
    let agent = Agent::start(config).unwrap();
    let t0 = Instant::now();
    while !agent
        .peers()
        .all()
        .iter()
        .any(|(_, s)| s.state() == state::OKAY)
    {
        assert!(t0.elapsed() < Duration::from_secs(15), "server not open");
        std::thread::sleep(Duration::from_millis(20));
    }
    agent
}

fn target(agent: &Agent) -> PeerTarget {
    PeerTarget::new(AGENT, agent.local_addrs()[0]).unwrap()
}

fn code(r: &interop::erl::ErlResult, c: &str) -> u64 {
    r.result_codes.get(c).copied().unwrap_or(0)
}

fn stop(agent: Agent) {
    agent.shutdown();
    agent.join();
}

#[test]
fn otp_host_loss_report_is_honoured_for_a_non_doic_client() {
    let server = ErlServer::builder()
        .olr(Olr::loss(ReportType::Host, 50, 1, 60))
        .start()
        .unwrap();
    let agent = agent(&server.target(), false);
    let n = 2000;
    let r = ErlClient::new(&target(&agent))
        .n(n)
        .concurrency(4)
        .run()
        .unwrap();
    assert_eq!(r.answered, u64::from(n), "{}", r.output);
    // OTP answered with an OLR: it decoded the agent's OC-Supported-Features.
    // The agent throttles half for the client (RFC 7683 §6, 5012 per §8)
    // and sends it nothing DOIC (§5.1.2).
    let share = code(&r, "5012") as f64 / f64::from(n);
    assert!(
        (share - 0.5).abs() < 0.06,
        "throttled {share}: {}",
        r.output
    );
    assert_eq!(
        code(&r, "2001") + code(&r, "5012"),
        u64::from(n),
        "{}",
        r.output
    );
    assert_eq!((r.oc_supported_features, r.oc_olr), (0, 0), "{}", r.output);
    stop(agent);
}

#[test]
fn otp_host_report_is_forwarded_to_a_doic_client() {
    let server = ErlServer::builder()
        .olr(Olr::loss(ReportType::Host, 30, 9, 60))
        .start()
        .unwrap();
    let agent = agent(&server.target(), true);
    let r = ErlClient::new(&target(&agent))
        .n(50)
        .concurrency(1)
        .dest_host("erl-server.example.net")
        .doic()
        .run()
        .unwrap();
    assert!(r.oc_olr > 0, "{}", r.output);
    let o = &r.first_olr;
    assert_eq!(
        o.get("sequence").map(String::as_str),
        Some("9"),
        "{}",
        r.output
    );
    assert_eq!(o.get("report_type").map(String::as_str), Some("0"));
    assert_eq!(
        o.get("reduction_percentage").map(String::as_str),
        Some("30")
    );
    // The client's OC-Supported-Features in answers is the agent's: loss
    // selected (RFC 7683 §5.1.3).
    assert!(r.oc_supported_features > 0, "{}", r.output);
    assert_eq!(
        r.first_features.get("feature_vector").map(String::as_str),
        Some("1"),
        "{}",
        r.output
    );
    // The client received the report and abates at the source: the agent
    // does not throttle its requests (RFC 7683 §5.2.3).
    assert_eq!(code(&r, "2001"), 50, "{}", r.output);
    stop(agent);
}

#[test]
fn otp_peer_report_is_honoured_and_never_relayed() {
    let server = ErlServer::builder()
        .olr(Olr::loss(ReportType::Peer, 100, 3, 60))
        .start()
        .unwrap();
    let agent = agent(&server.target(), true);
    let r = ErlClient::new(&target(&agent))
        .n(20)
        .concurrency(1)
        .doic_vector(0x15)
        .run()
        .unwrap();
    assert_eq!(r.answered, 20, "{}", r.output);
    // The first answer carries the report; every later request meets a 100 %
    // peer OCS with no alternate: 3004 (RFC 8581 §6.2.5, RFC 7683 §8).
    assert_eq!(code(&r, "2001"), 1, "{}", r.output);
    assert_eq!(code(&r, "3004"), 19, "{}", r.output);
    // Peer reports go no further than the peer they were meant for.
    assert_eq!(r.oc_olr, 0, "{}", r.output);
    // OTP's client sends no SourceID, so it does not support peer reports
    // (RFC 8581 §6.1.1): the agent answers with loss only, no SourceID.
    assert_eq!(
        r.first_features.get("feature_vector").map(String::as_str),
        Some("1"),
        "{}",
        r.output
    );
    stop(agent);
}

#[test]
fn otp_rate_report_is_honoured() {
    let server = ErlServer::builder()
        .olr(Olr::rate(ReportType::Host, 50, 4, 60))
        .start()
        .unwrap();
    let agent = agent(&server.target(), false);
    let t0 = Instant::now();
    let r = ErlClient::new(&target(&agent))
        .n(2000)
        .concurrency(8)
        .run()
        .unwrap();
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(r.answered, 2000, "{}", r.output);
    let passed = code(&r, "2001") as f64;
    // At most 50/s (plus the burst tolerance and the first request) reach
    // the server over the client's run.
    assert!(code(&r, "5012") > 0, "{}", r.output);
    assert!(
        passed <= 50.0 * secs + 20.0,
        "{passed} in {secs:.1}s: {}",
        r.output
    );
    stop(agent);
}

#[test]
fn otp_client_decodes_the_agents_own_peer_report() {
    // RFC 8581 §6.2.4 / RFC 8582 §6.5 as decoded by OTP with the escript's
    // RFC 8581/8582 grammar: above `own_capacity`, an OTP client that
    // supports peer reports (OC_PEER_REPORT and its SourceID) and rate gets
    // the agent's PEER_REPORT with SourceID = the agent and OC-Maximum-Rate.
    let server = ErlServer::builder().start().unwrap();
    let agent = agent_with(&server.target(), true, "own_capacity = 50\n");
    // Enough requests to last several of the control thread's 1 s
    // measurements even at the OTP client's fastest (about 4600/s seen).
    let r = ErlClient::new(&target(&agent))
        .n(20_000)
        .concurrency(4)
        .doic_vector(0x15)
        .doic_source_id()
        .run()
        .unwrap();
    assert_eq!(r.answered, 20_000, "{}", r.output);
    assert!(r.oc_olr > 0, "no OC-OLR decoded: {}", r.output);
    let o = &r.first_olr;
    let get = |k: &str| o.get(k).map(String::as_str);
    assert_eq!(get("report_type"), Some("2"), "{}", r.output);
    assert_eq!(get("source_id"), Some(AGENT), "{}", r.output);
    // One sending peer: the whole capacity.
    assert_eq!(get("max_rate"), Some("50"), "{}", r.output);
    assert_eq!(get("reduction_percentage"), Some("-"), "{}", r.output);
    assert_eq!(get("validity_duration"), Some("10"), "{}", r.output);
    // The answers' features: OC_PEER_REPORT, SourceID = the agent and
    // OC-Peer-Algo rate (RFC 8581 §6.1.2).
    let f = |k: &str| r.first_features.get(k).map(String::as_str);
    assert_eq!(f("source_id"), Some(AGENT), "{}", r.output);
    assert_eq!(f("peer_algo"), Some("4"), "{}", r.output);
    stop(agent);
}
