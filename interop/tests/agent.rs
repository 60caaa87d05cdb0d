//! The agent between the Diameter stacks operators run: freeDiameter
//! test_app and Erlang/OTP diameter, clients and servers, on loopback.
//! Every request is answered 2001 through the agent; CER/CEA, DWR/DWA and
//! DPR/DPA are exchanged with both stacks.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use agent::agent::Agent;
use agent::config::Config;
use agent::peer::table::{PeerSlot, state};
use interop::erl::{ErlClient, ErlServer};
use interop::fd::{BenchSpec, FdRelay, FdServer, PeerTarget};

const AGENT: &str = "agent.example.com";

/// An agent routing realm example.net to `servers`, accepting clients of
/// *.example.org, with the shortest watchdog RFC 3539 allows.
fn agent(servers: &[PeerTarget]) -> Agent {
    let mut t = format!(
        "[node]\norigin_host = \"{AGENT}\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\ntw_seconds = 6\ntc_seconds = 1\ndrain_seconds = 3\n"
    );
    let mut names = Vec::new();
    for s in servers {
        t += &format!(
            "[[peer]]\nhost = \"{}\"\nrealm = \"example.net\"\nconnect = \"{}\"\n",
            s.identity, s.addr
        );
        names.push(format!("\"{}\"", s.identity));
    }
    t += &format!(
        "[[route]]\nrealm = \"example.net\"\npeers = [{}]\n[accept]\nhosts = [\"*.example.org\"]\n",
        names.join(", ")
    );
    let config = Config::from_str_named(&t, Path::new("interop.toml")).unwrap();
    let agent = Agent::start(config).unwrap();
    let n = servers.len();
    wait(Duration::from_secs(15), "servers open", || {
        agent
            .peers()
            .all()
            .iter()
            .filter(|(_, s)| s.state() == state::OKAY)
            .count()
            == n
    });
    agent
}

fn wait(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn target(agent: &Agent) -> PeerTarget {
    PeerTarget::new(AGENT, agent.local_addrs()[0]).unwrap()
}

fn slot(agent: &Agent, host: &str) -> std::sync::Arc<PeerSlot> {
    agent
        .peers()
        .all()
        .into_iter()
        .find(|(_, s)| s.host == host)
        .unwrap()
        .1
}

/// Idle for a watchdog interval: the agent's DWR gets a DWA from each
/// server; then the shutdown's DPR gets a DPA from each.
fn watchdog_then_disconnect(agent: Agent, hosts: &[&str]) {
    let slots: Vec<_> = hosts.iter().map(|h| slot(&agent, h)).collect();
    wait(Duration::from_secs(20), "a DWA from every server", || {
        slots
            .iter()
            .all(|s| s.stats.dwa_received.load(Ordering::Relaxed) >= 1)
    });
    assert!(slots.iter().all(|s| s.state() == state::OKAY));
    agent.shutdown();
    agent.join();
    for (h, s) in hosts.iter().zip(&slots) {
        assert_eq!(s.stats.dpr_sent.load(Ordering::Relaxed), 1, "{h}");
        assert_eq!(s.stats.dpa_received.load(Ordering::Relaxed), 1, "{h}: DPA");
    }
}

#[test]
fn fd_client_agent_fd_server() {
    let server = FdServer::builder().start().unwrap();
    let agent = agent(&[server.target()]);
    let r = BenchSpec::new(target(&agent))
        .seconds(2)
        .concurrency(20)
        .run()
        .unwrap();
    eprintln!("{r}");
    assert!(r.all_answered_ok(), "{r}");
    assert!(r.answered > 100, "{r}");
    let s = slot(&agent, "server1.example.net");
    assert_eq!(s.stats.answers_in.get(2001), r.answered);
    let client = slot(&agent, "client1.example.org");
    assert_eq!(client.stats.answers_out.get(2001), r.answered);
    watchdog_then_disconnect(agent, &["server1.example.net"]);
}

#[test]
fn erlang_client_agent_erlang_server() {
    let server = ErlServer::builder().start().unwrap();
    let agent = agent(&[server.target()]);
    let r = ErlClient::new(&target(&agent))
        .n(1000)
        .concurrency(10)
        .proxy_info()
        .run()
        .unwrap();
    assert_eq!(r.peer_host, AGENT, "{}", r.output);
    assert!(r.all_answered_ok(), "{}", r.output);
    assert_eq!(r.ok(), 1000, "{}", r.output);
    watchdog_then_disconnect(agent, &["erl-server.example.net"]);
}

#[test]
fn mixed_clients_through_the_agent_to_both_stacks() {
    let fd = FdServer::builder().start().unwrap();
    let erl = ErlServer::builder().start().unwrap();
    let agent = agent(&[fd.target(), erl.target()]);
    let r = BenchSpec::new(target(&agent))
        .seconds(2)
        .concurrency(20)
        .run()
        .unwrap();
    assert!(r.all_answered_ok(), "{r}");
    let e = ErlClient::new(&target(&agent))
        .n(1000)
        .concurrency(10)
        .run()
        .unwrap();
    assert!(e.all_answered_ok(), "{}", e.output);
    // Destination-Host pins requests to one stack.
    let pinned = ErlClient::new(&target(&agent))
        .n(200)
        .dest_host("server1.example.net")
        .run()
        .unwrap();
    assert!(pinned.all_answered_ok(), "{}", pinned.output);
    let to_fd = slot(&agent, "server1.example.net")
        .stats
        .requests_out
        .load(Ordering::Relaxed);
    let to_erl = slot(&agent, "erl-server.example.net")
        .stats
        .requests_out
        .load(Ordering::Relaxed);
    assert_eq!(to_fd + to_erl, r.answered + 1000 + 200);
    assert!(
        to_fd >= 200 && to_erl > 0,
        "both stacks served: fd {to_fd}, erl {to_erl}"
    );
    watchdog_then_disconnect(agent, &["server1.example.net", "erl-server.example.net"]);
}

/// A freeDiameter relay between the agent and the server: its answers carry
/// the relay's Route-Record (a freeDiameter habit), which the agent passes on.
#[test]
fn agent_behind_a_freediameter_relay() {
    let server = FdServer::builder().start().unwrap();
    let relay = FdRelay::builder(server.target(), server.realm())
        .start()
        .unwrap();
    let agent = agent(&[relay.target()]);
    let e = ErlClient::new(&target(&agent))
        .n(500)
        .concurrency(10)
        .proxy_info()
        .run()
        .unwrap();
    assert!(e.all_answered_ok(), "{}", e.output);
    assert_eq!(e.ok(), 500, "{}", e.output);
    agent.shutdown();
    agent.join();
}

/// RFC 6733 §5.6.4: the agent and the server are both configured to dial
/// each other. Whichever connection comes first (and, when they cross, the
/// one the election keeps: `server1.example.net` > `agent.example.com`),
/// exactly one stays open without flapping, and traffic flows on it. (The
/// election itself is unit-tested in `peer::table`, where both connections
/// can be made to cross deterministically.)
#[test]
fn connection_race_with_freediameter_is_resolved_by_election() {
    let port = interop::process::free_port().unwrap();
    let agent_target = PeerTarget::loopback(AGENT, port);
    let server = FdServer::builder()
        .connect_to(agent_target.clone())
        .start()
        .unwrap();
    let text = format!(
        "[node]\norigin_host = \"{AGENT}\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:{port}\"]\nworkers = 2\ntc_seconds = 1\n\
         [[peer]]\nhost = \"server1.example.net\"\nrealm = \"example.net\"\nconnect = \"{}\"\n\
         [[route]]\nrealm = \"example.net\"\npeers = [\"server1.example.net\"]\n[accept]\nhosts = [\"*.example.org\"]\n",
        server.target().addr
    );
    let agent =
        Agent::start(Config::from_str_named(&text, Path::new("race.toml")).unwrap()).unwrap();
    let s = slot(&agent, "server1.example.net");
    wait(Duration::from_secs(20), "server open", || {
        s.state() == state::OKAY
    });
    // Stable for a few reconnect intervals: one open connection, no flapping.
    let opened = s.stats.requests_out.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(s.state(), state::OKAY);
    let r = BenchSpec::new(target(&agent))
        .seconds(1)
        .concurrency(10)
        .run()
        .unwrap();
    assert!(r.all_answered_ok(), "{r}");
    assert_eq!(
        s.stats.requests_out.load(Ordering::Relaxed) - opened,
        r.answered
    );
    agent.shutdown();
    agent.join();
}
