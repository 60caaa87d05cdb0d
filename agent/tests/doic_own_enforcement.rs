//! The agent holds its clients to its own capacity, end to end over real
//! TCP on loopback with the default worker count (RFC 8581 §6.2.4, RFC
//! 8582 §6.1, §7.2, RFC 7683 §5.2.2): a DOIC client that ignores the
//! agent's peer report and a client without DOIC, each at three times
//! `[doic] own_capacity`, in bursts of many requests per write: what
//! reaches the server stays within 10 % of the capacity, every request is
//! answered (the excess 3004 at once), and the DOIC client received the
//! peer report. The audit log records the report as issued with its
//! inputs, and `doic-agent audit explain --report SEQ` explains it: the
//! client's allocation, and the agent-wide 3004s, which over the whole log
//! equal the clients' own count of 3004 answers.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use diameter::codec::doic::OcSupportedFeatures;
use diameter::dictionary::doic::{OC_PEER_REPORT, OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};
use support::*;
use tools::loadgen::{Client, Identity, TEST_APP};

const S1: &str = "server1.example.net";
const CLIENT2: &str = "client2.example.org";
const CAPACITY: u32 = 100;
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_above_the_configured_capacity_are_held_to_it() {
    let s1 = Reporter::spawn(S1).await;
    let upstreams = [(s1.host.as_str(), s1.addr, Some(true))];
    // The protection of the server (on by default) is off: on a busy machine
    // the server's latency can rise enough for it to answer 5012 on the
    // server's behalf, and this test is about the agent's own capacity.
    let dir = audit_log::fresh_dir("own-enforcement");
    let tail = format!(
        "[audit]\ndir = \"{}\"\nflush_ms = 100\n[metrics]\nlisten = \"127.0.0.1:0\"\n[doic]\nown_capacity = {CAPACITY}\n[doic.protect]\nenabled = false\n[doic.peers.\"{CLIENT}\"]\ntrusted = true\n",
        dir.display()
    );
    // The default worker count.
    let agent = start_agent(agent_toml(None, "", &upstreams, &tail), 1).await;
    let addr = agent.local_addrs()[0];
    let doic = connect(addr).await;
    let plain = Client::connect(addr, Identity::new(CLIENT2, "example.org"), vec![TEST_APP])
        .await
        .unwrap();
    let cf = OcSupportedFeatures {
        source_id: Some(CLIENT.into()),
        ..client_features(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT)
    };
    let rate = 3.0 * f64::from(CAPACITY);
    let run = Duration::from_secs(12);
    let t0 = Instant::now();
    let a = tokio::spawn(send_regardless(doic, rate, run, Some(cf)));
    let b = tokio::spawn(send_regardless(plain, rate, run, None));
    // Reports start at the first measurement above capacity (about 2 s),
    // the DOIC client is held 1 s after: from 5 s on, steady state.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (n0, w0) = (s1.requests(), Instant::now());
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (n1, w1) = (s1.requests(), Instant::now());
    let body = http_get(agent.metrics_addr().unwrap(), "/metrics").await;
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let elapsed = t0.elapsed().as_secs_f64();
    #[expect(clippy::cast_precision_loss)]
    let reached = (n1 - n0) as f64 / (w1 - w0).as_secs_f64();
    let count = |v: &[Bytes], code: u32| v.iter().filter(|m| code_of(m) == code).count();
    eprintln!(
        "own enforcement: {reached:.1}/s reached the server (capacity {CAPACITY}); DOIC client {} sent, {} 2001, {} 3004; plain client {} sent, {} 2001, {} 3004; {elapsed:.1} s",
        a.len(),
        count(&a, 2001),
        count(&a, 3004),
        b.len(),
        count(&b, 2001),
        count(&b, 3004)
    );
    let cap = f64::from(CAPACITY);
    assert!(
        (0.9 * cap..=1.1 * cap).contains(&reached),
        "{reached}/s reached the server: {body}"
    );
    // Every request answered: 2001 relayed or 3004 at once (RFC 7683
    // §5.2.2), nothing else.
    for v in [&a, &b] {
        assert!(
            v.len() as f64 >= 0.9 * rate * run.as_secs_f64(),
            "{}",
            v.len()
        );
        let mut codes = std::collections::BTreeMap::new();
        for m in v.iter() {
            *codes.entry(code_of(m)).or_insert(0) += 1;
        }
        assert_eq!(count(v, 2001) + count(v, 3004), v.len(), "{codes:?}");
        assert!(count(v, 3004) as f64 > 0.5 * v.len() as f64);
    }
    // The DOIC client received the agent's peer report (RFC 8581 §6.2.4:
    // SourceID the agent, OC-Maximum-Rate its share, RFC 8582 §7.2) ...
    let olr = a
        .iter()
        .find_map(|m| own_reports(m).into_iter().next())
        .expect("an own peer report");
    assert_eq!(olr.source_id.as_deref(), Some(AGENT));
    let share = olr.maximum_rate.expect("OC-Maximum-Rate");
    assert!((1..CAPACITY).contains(&share), "{share}");
    // ... also in its 3004s; the client without DOIC gets no DOIC AVP
    // (RFC 7683 §5.1.2).
    assert!(
        a.iter()
            .filter(|m| code_of(m) == 3004)
            .all(|m| !own_reports(m).is_empty())
    );
    assert!(
        b.iter()
            .all(|m| olrs_of(m).is_empty() && features_of(m).is_empty())
    );
    // Per-client metrics; a report is shown in force only toward the
    // client that receives it.
    for peer in [CLIENT, CLIENT2] {
        let allocated = gauge(
            &body,
            &format!("doic_own_client_allocated_rps{{peer=\"{peer}\"}}"),
        );
        assert!(
            allocated.is_some_and(|x| x >= 1.0 && x < cap),
            "{peer}: {body}"
        );
        let throttled = gauge(
            &body,
            &format!("doic_own_client_throttled_total{{peer=\"{peer}\"}}"),
        );
        assert!(throttled.is_some_and(|x| x > 0.0), "{peer}: {body}");
    }
    for (peer, shown) in [(CLIENT, Some(1.0)), (CLIENT2, None)] {
        let sample = format!("doic_own_reports_active{{peer=\"{peer}\"}}");
        assert_eq!(gauge(&body, &sample), shown, "{peer}: {body}");
    }
    let answered_3004 = (count(&a, 3004) + count(&b, 3004)) as u64;
    explained(&dir, olr.sequence_number, share, answered_3004).await;
    stop(agent);
}

/// The audit log of the run: the own PEER report of sequence `seq` issued
/// to `CLIENT` with its allocation `share` and the agent's inputs, and its
/// agent-wide treatment with its denominator; over the whole log, the
/// per-second records count exactly the `answered_3004` 3004s the clients
/// received (the own enforcement's, answered before routing).
async fn explained(dir: &std::path::Path, seq: u64, share: u32, answered_3004: u64) {
    let logged_3004 = |log: &doic::audit::query::Log| -> u64 {
        log.seconds
            .iter()
            .filter_map(|(_, s)| s.split.throttled_by.get("3004"))
            .sum()
    };
    // The last seconds reach the log at the workers' next ticks.
    let log = audit_log::log_when(dir, |log| {
        log.explain_peer(seq)
            .is_some_and(|e| e.until.is_some() && e.seconds > 0)
            && logged_3004(log) >= answered_3004
    })
    .await;
    assert_eq!(logged_3004(&log), answered_3004);
    let wide = log.explain_peer(seq).unwrap();
    let e: serde_json::Value = serde_json::from_str(
        &audit_log::audit(dir, &["--json", "explain", "--report", &seq.to_string()]).text,
    )
    .unwrap();
    let mine: Vec<&serde_json::Value> = e["clients"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["report"]["sequence"] == seq)
        .collect();
    assert_eq!(mine.len(), 1, "{e:#}");
    let r = &mine[0]["report"];
    assert_eq!(r["to"], CLIENT, "{e:#}");
    assert_eq!(r["max_rate"], share, "{e:#}");
    assert_eq!(r["inputs"]["capacity"], CAPACITY, "{e:#}");
    assert!(mine[0]["until_by"].is_string(), "{e:#}");
    let w = &wide.agent_wide;
    assert_eq!(w.requests, e["agent_wide"]["requests"].as_u64().unwrap());
    assert_eq!(
        w.requests,
        w.forwarded + w.diverted + w.throttled + w.no_route,
        "{e:#}"
    );
    assert!(w.requests > 0 && w.throttled > 0, "{e:#}");
    let text = audit_log::audit(dir, &["explain", "--report", &seq.to_string()]).text;
    eprintln!("{text}");
    assert!(
        text.contains(&format!(
            "requests {} = forwarded {}",
            w.requests, w.forwarded
        )),
        "{text}"
    );
    assert!(text.contains("own enforcement"), "{text}");
    assert!(text.contains("abated at the source"), "{text}");
}
