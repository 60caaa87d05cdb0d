//! `[doic]` changed by a reload of the running agent (two pinned workers,
//! real TCP on loopback) under load: clients writing many requests per
//! write while the reload happens. Every request is answered exactly once
//! (`exchange` asserts it), the clients' and the server's connections stay
//! (no second CER), and from the first request after the reload every
//! worker's core decides with the new section, its overload state kept
//! (RFC 7683 §5.2) or, for a peer no longer trusted, ended (§10.2).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent::agent::Agent;
use agent::config::Config;
use diameter::codec::doic::ReportType;
use diameter::dictionary::doic::OLR_DEFAULT_ALGO;
use support::*;
use tokio::task::JoinHandle;
use tools::loadgen::{Client, Identity, TEST_APP};

const S1: &str = "server1.example.net";
/// Requests per write, and per batch awaited.
const BURST: u32 = 25;

/// The agent in front of the reporting server `s1` (`trusted` or not) with
/// `[doic]` body `doic`, two workers.
fn config(s1: &Reporter, trusted: bool, doic: &str) -> Config {
    agent_config(&[(s1, trusted)], Some(doic), 2)
}

/// One client's batches: when each was written, and its answers' codes.
type Batches = Vec<(Instant, Vec<u32>)>;

/// Sends bursts of [`BURST`] requests, one write each, until `stop`
/// (about 2,500 requests/s per client on loopback); returns every batch.
fn load(mut c: Client, first: u32, stop: Arc<AtomicBool>) -> JoinHandle<(Client, Batches)> {
    tokio::spawn(async move {
        let mut hbh = first;
        let mut batches = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let at = Instant::now();
            let a = exchange(&mut c, hbh, BURST, BURST, None).await;
            batches.push((at, a.iter().map(|m| code_of(m)).collect()));
            hbh += BURST;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (c, batches)
    })
}

/// Two clients (one per worker: connections are spread in turn), each
/// past the first request of the overload; returns them.
async fn clients(agent: &Agent) -> Vec<Client> {
    let mut v = Vec::new();
    for i in 1..=2 {
        let id = Identity::new(&format!("load{i}.example.org"), "example.org");
        let c = Client::connect(agent.local_addrs()[0], id, vec![TEST_APP])
            .await
            .unwrap();
        assert_eq!(c.cea_result, 2001);
        v.push(c);
    }
    v
}

/// Runs the load of both clients for `before`, reloads `new` and runs it
/// `after` more; returns the reload's instant and each client's batches.
async fn reload_under_load(
    agent: &Agent,
    clients: Vec<Client>,
    new: Config,
    (before, after): (Duration, Duration),
) -> (Instant, Vec<Batches>) {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, c)| load(c, 1_000 + 100_000 * u32::try_from(i).unwrap(), stop.clone()))
        .collect();
    tokio::time::sleep(before).await;
    let plan = agent.reload(new);
    let at = Instant::now();
    assert!(plan.doic && plan.needs_restart.is_empty(), "{plan:?}");
    assert!(plan.add.is_empty() && plan.remove.is_empty());
    tokio::time::sleep(after).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        let (c, b) = t.await.unwrap();
        drop(c);
        all.push(b);
    }
    (at, all)
}

/// s1 sending a 100 % host report, trusted, behind an agent with `[doic]`
/// body `doic`, and two clients whose requests are all answered `code`
/// by the agent once the first answer brought the report.
async fn overloaded(doic: &str, code: u32) -> (Reporter, Agent, Vec<Client>) {
    let s1 = Reporter::spawn(S1).await;
    report_always(&s1);
    let agent = start_agent(config(&s1, true, doic), 1).await;
    let mut cs = clients(&agent).await;
    let a = exchange(&mut cs[0], 1, 1, 1, None).await;
    assert_eq!(code_of(&a[0]), 2001);
    for c in &mut cs {
        let a = exchange(c, 10, 4, 4, None).await;
        assert!(a.iter().all(|m| code_of(m) == code));
    }
    (s1, agent, cs)
}

/// Reloads `new` under the clients' load: every batch written before the
/// reload is answered `from`, every batch after it `to`, those in between
/// one or the other.
async fn reload_and_switch(agent: &Agent, cs: Vec<Client>, new: Config, (from, to): (u32, u32)) {
    let run = (Duration::from_millis(300), Duration::from_millis(300));
    let (at, all) = reload_under_load(agent, cs, new, run).await;
    for batches in &all {
        let (before, after) = split(batches, at);
        assert!(!before.is_empty() && !after.is_empty(), "{batches:?}");
        assert!(before.iter().all(|&c| c == from), "{before:?}");
        assert!(after.iter().all(|&c| c == to), "{after:?}");
        let any: Vec<u32> = batches.iter().flat_map(|b| b.1.clone()).collect();
        assert!(any.iter().all(|c| [from, to].contains(c)), "{any:?}");
    }
}

/// The codes of the batches written wholly before `at` and after it.
fn split(batches: &Batches, at: Instant) -> (Vec<u32>, Vec<u32>) {
    let mut before = Vec::new();
    let mut after = Vec::new();
    for (i, (sent, codes)) in batches.iter().enumerate() {
        let next = batches.get(i + 1).map(|b| b.0);
        if next.is_some_and(|n| n < at) {
            before.extend(codes);
        } else if *sent > at {
            after.extend(codes);
        }
    }
    (before, after)
}

/// RFC 7683 §8 and §5.2: `throttle_result` changes from 3004 to 5198 for
/// the requests after the reload on both workers, and the host report in
/// force keeps throttling every one of them (no request reaches s1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_throttle_answer_at_once_and_keeps_the_report() {
    let (s1, agent, cs) = overloaded("throttle_result = \"too_busy\"", 3004).await;
    let reached = s1.requests();
    let new = config(&s1, true, "throttle_result = \"retry_not_allowed\"");
    reload_and_switch(&agent, cs, new, (3004, 5198)).await;
    assert_eq!(
        s1.requests(),
        reached,
        "the report in force still holds them"
    );
    assert_eq!(s1.seen.cer.load(Ordering::Relaxed), 1, "one connection");
    stop(agent);
}

/// RFC 7683 §10.2, §10.4: once s1 is no longer trusted its report ends on
/// both workers at the reload (recorded as `untrusted` in the audit
/// trail), its requests are relayed again and the OC-OLR it keeps sending
/// is stripped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_no_longer_trusted_loses_its_report_at_the_reload() {
    let (s1, agent, cs) = overloaded("", 5012).await;
    reload_and_switch(&agent, cs, config(&s1, false, ""), (5012, 2001)).await;
    // The answers relayed now carry no OC-OLR of the untrusted server.
    let mut c = connect(agent.local_addrs()[0]).await;
    let a = exchange(&mut c, 1, 8, 8, None).await;
    assert!(
        a.iter()
            .all(|m| code_of(m) == 2001 && olrs_of(m).is_empty())
    );
    let metrics = agent.metrics_addr().unwrap();
    let t0 = Instant::now();
    loop {
        let body = http_get(metrics, "/audit").await;
        if body.contains("\"event\":\"Untrusted\"") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(s1.seen.cer.load(Ordering::Relaxed), 1, "one connection");
    stop(agent);
}

/// A server's `doic` mode changed by a reload (`[[peer]] doic`, docs/protect.md):
/// the control thread's estimator follows at its next tick, seen in
/// `GET /peers`; the connection stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protection_mode_change_reaches_the_control_thread() {
    let s1 = Reporter::spawn(S1).await;
    let running = config(&s1, false, "");
    let mut new = running.clone();
    new.peers[0].doic = doic::protect::Mode::Native;
    let agent = start_agent(running, 1).await;
    let mut c = connect(agent.local_addrs()[0]).await;
    let a = exchange(&mut c, 1, 20, 20, None).await;
    assert!(a.iter().all(|m| code_of(m) == 2001));
    let metrics = agent.metrics_addr().unwrap();
    let sensed = || async {
        let body = http_get(metrics, "/peers").await;
        let json = body.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let p = v
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == S1)
            .cloned()
            .unwrap();
        (p["doic"]["mode"].clone(), p["doic"]["sensed"].clone())
    };
    let t0 = Instant::now();
    while sensed().await.1 != "no_doic_seen" {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{:?}",
            sensed().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let plan = agent.reload(new);
    assert!(plan.doic, "{plan:?}");
    let t0 = Instant::now();
    loop {
        let (mode, seen) = sensed().await;
        if mode == "native" && seen == "supports_doic" {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{mode} {seen}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let a = exchange(&mut c, 100, 20, 20, None).await;
    assert!(a.iter().all(|m| code_of(m) == 2001));
    assert_eq!(s1.seen.cer.load(Ordering::Relaxed), 1, "one connection");
    stop(agent);
}

/// RFC 7683 §5.1 and §10.4: a DOIC client's OC-Supported-Features are
/// judged per transaction under the running `[doic]`, on one connection
/// that announces the same features throughout: its answers carry the
/// agent's OC-Supported-Features while the client is trusted, none from
/// the first request after a reload that no longer trusts it (the agent is
/// then the reacting node on its behalf), and again after a reload that
/// trusts it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_of_client_trust_applies_to_the_next_request_of_a_connection() {
    let s1 = Reporter::spawn(S1).await;
    let trusting = |t: bool| {
        let body = format!("[doic.peers.\"load1.example.org\"]\ntrusted = {t}\n");
        config(&s1, true, &body)
    };
    let agent = start_agent(trusting(true), 1).await;
    let id = Identity::new("load1.example.org", "example.org");
    let mut c = Client::connect(agent.local_addrs()[0], id, vec![TEST_APP])
        .await
        .unwrap();
    assert_eq!(c.cea_result, 2001);
    let features = diameter::codec::doic::OcSupportedFeatures {
        feature_vector: Some(OLR_DEFAULT_ALGO),
        source_id: None,
        peer_algo: None,
    };
    let mut hbh = 1;
    for (i, trusted) in [true, false, true].into_iter().enumerate() {
        if i > 0 {
            let plan = agent.reload(trusting(trusted));
            assert!(plan.doic && plan.needs_restart.is_empty(), "{plan:?}");
        }
        let a = exchange(&mut c, hbh, 20, 20, Some(&features)).await;
        hbh += 20;
        assert!(a.iter().all(|m| code_of(m) == 2001));
        let carry: Vec<bool> = a
            .iter()
            .map(|m| {
                diameter::codec::Routing::scan(m)
                    .unwrap()
                    .oc_supported_features()
                    .is_some()
            })
            .collect();
        assert_eq!(carry, vec![trusted; 20], "client trusted: {trusted}");
    }
    assert_eq!(s1.seen.cer.load(Ordering::Relaxed), 1, "one connection");
    stop(agent);
}

/// s1 puts a 100 % host report (sequence 1, 60 s) in every answer.
fn report_always(s1: &Reporter) {
    s1.set(Script {
        features: Some(server_features(OLR_DEFAULT_ALGO, S1)),
        olrs: vec![olr(1, ReportType::Host, 100, Some(60))],
        ..Script::default()
    });
}
