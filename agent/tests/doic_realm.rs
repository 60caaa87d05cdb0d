//! Seed 002 (draft-docdt-dime-ovli-01 appendix C.3: a mix of
//! Destination-Host and Destination-Realm routed requests) through the
//! running agent over real TCP, with 1, 2 and 4 workers and the default
//! count (one per core): the agent as reporting node for a realm whose
//! servers together are short (RFC 7683 §5.1.3), one sequence space for its
//! realm report whichever worker sends it (§5.2.1.4), the report applied by
//! the agent for a client that did not receive it, and ended with validity 0
//! (§5.2.3).
//!
//! The three server connections are spread over the workers in turn and
//! the clients' connections by count (`agent::workers::place`), so with two
//! or four workers the answers that carry the realm report are handled on
//! other workers than the requests they answer.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use diameter::codec::Routing;
use diameter::codec::doic::{OcOlr, ReportType};
use diameter::dictionary::doic::OLR_DEFAULT_ALGO;
use support::*;
use tools::loadgen::{Client, Identity, TEST_APP};

const S1: &str = "server1.example.net";
const S2: &str = "server2.example.net";
const S3: &str = "server3.example.net";
/// A client that sends no OC-Supported-Features.
const PLAIN: &str = "client2.example.org";
/// The DOIC client `CLIENT`, trusted and authorised for reports, and no
/// ramp at the end of a host report (the realm report ends at once).
const DOIC: &str = "ramp = 0.0\n[doic.peers.\"client1.example.org\"]\ntrusted = true\n";

fn origin_host(m: &[u8]) -> String {
    let r = Routing::scan(m).unwrap();
    String::from_utf8_lossy(r.origin_host().unwrap_or_default()).into_owned()
}

fn reports(m: &[u8], rt: ReportType) -> Vec<OcOlr> {
    olrs_of(m)
        .into_iter()
        .filter(|o| o.report_type == rt)
        .collect()
}

/// The one realm report of an answer.
fn realm_report(m: &[u8]) -> OcOlr {
    let r = reports(m, ReportType::Realm);
    assert_eq!(r.len(), 1, "one realm report: {:?}", olrs_of(m));
    r[0].clone()
}

/// Sends realm-routed requests from `c` one at a time until one is answered
/// by `server`; returns that answer.
async fn answered_by(c: &mut Client, hbh: &mut u32, server: &str) -> Bytes {
    let cf = client_features(OLR_DEFAULT_ALGO);
    for _ in 0..100 {
        let a = exchange(c, *hbh, 1, 1, Some(&cf)).await.remove(0);
        *hbh += 1;
        assert_eq!(code_of(&a), 2001);
        if origin_host(&a) == server {
            return a;
        }
    }
    panic!("{server} never answered");
}

/// Whether `s`'s one-shot script was used.
fn sent(s: &Reporter) -> bool {
    s.script.lock().unwrap().olrs.is_empty()
}

/// `workers` workers (`None`: the default count).
async fn seed002_with_workers(workers: Option<usize>) {
    let s = [
        Reporter::spawn(S1).await,
        Reporter::spawn(S2).await,
        Reporter::spawn(S3).await,
    ];
    let servers = [(&s[0], true), (&s[1], true), (&s[2], true)];
    let mut config = agent_config(&servers, Some(DOIC), workers.unwrap_or(1));
    config.node.workers = workers;
    let agent = start_agent(config, 3).await;
    let addr = agent.local_addrs()[0];
    let mut c = connect(addr).await;
    let mut plain = Client::connect(addr, Identity::new(PLAIN, "example.org"), vec![TEST_APP])
        .await
        .unwrap();
    let cf = client_features(OLR_DEFAULT_ALGO);
    let mut hbh = 1;

    // (1)-(4): S1 at 30 %: its host report reaches the client, diversion
    // suffices, no realm report.
    host_loss_once(&s[0], 30);
    let a1 = answered_by(&mut c, &mut hbh, S1).await;
    let h1 = reports(&a1, ReportType::Host);
    assert_eq!(h1.len(), 1, "S1's host report forwarded");
    assert_eq!(h1[0].reduction_percentage, Some(30));
    assert!(reports(&a1, ReportType::Realm).is_empty());

    // (5)-(8): S2 at 80 % too: the answer that carries S2's host report
    // carries the agent's realm report, (0.7 + 0.2 + 1.5) / 3 = 0.8: 20 %.
    host_loss_once(&s[1], 80);
    let a2 = answered_by(&mut c, &mut hbh, S2).await;
    let h2 = reports(&a2, ReportType::Host);
    assert_eq!(h2.len(), 1, "S2's host report forwarded");
    assert_eq!(h2[0].reduction_percentage, Some(80));
    let realm = realm_report(&a2);
    assert_eq!(realm.reduction_percentage, Some(20));
    assert!(realm.validity_duration.is_some_and(|v| v > 0));
    let seq = realm.sequence_number;

    // The DOIC client abates at the source: the agent throttles none of its
    // realm-routed or DH:S1 requests, sent in bursts, and every answer
    // carries the same realm report, whichever worker handled it.
    let dr = exchange(&mut c, hbh, 60, 16, Some(&cf)).await;
    hbh += 60;
    let dh = exchange_to(&mut c, hbh, 20, 8, Some(&cf), Some(S1)).await;
    hbh += 20;
    let mut servers = std::collections::HashSet::new();
    for a in dr.iter().chain(&dh) {
        assert_eq!(code_of(a), 2001, "delegated to the client, not throttled");
        servers.insert(origin_host(a));
        let r = realm_report(a);
        assert_eq!(
            (r.sequence_number, r.reduction_percentage),
            (seq, Some(20)),
            "one version for the whole agent"
        );
    }
    assert!(
        servers.contains(S3),
        "answers from several servers: {servers:?}"
    );

    // The client without DOIC: the agent applies its realm report itself
    // (5012, RFC 7683 §8), and sends it no DOIC AVP (§5.1.2).
    let n = 2000;
    let na = exchange(&mut plain, 1, n, 32, None).await;
    let thr: Vec<&Bytes> = na.iter().filter(|a| code_of(a) == 5012).collect();
    let ok = na.iter().filter(|a| code_of(a) == 2001).count();
    assert_eq!(thr.len() + ok, n as usize, "only 2001 and 5012");
    assert!(thr.iter().all(|a| origin_host(a) == AGENT));
    assert!(na.iter().all(|a| olrs_of(a).is_empty()));
    let share = thr.len() as f64 / f64::from(n);
    // 20 %: binomial sd 0.9 pp over 2000; 5 pp is > 5 sd.
    assert!((share - 0.2).abs() < 0.05, "agent throttles {share}");

    // The host reports end (validity 0, RFC 7683 §5.2.3; DH requests reach
    // their server): the realm report ends with validity 0 and a greater
    // sequence number.
    for (i, host) in [S1, S2].into_iter().enumerate() {
        report_once(
            &s[i],
            OLR_DEFAULT_ALGO,
            vec![olr(2, ReportType::Host, 0, Some(0))],
        );
        let a = exchange_to(&mut c, hbh, 1, 1, Some(&cf), Some(host)).await;
        hbh += 1;
        assert_eq!(code_of(&a[0]), 2001);
        assert!(sent(&s[i]), "{host}'s end report sent");
    }
    // Re-evaluated at most every 100 ms on a realm-routed request.
    let t0 = Instant::now();
    let end = loop {
        let a = exchange(&mut c, hbh, 1, 1, Some(&cf)).await.remove(0);
        hbh += 1;
        let r = realm_report(&a);
        if r.validity_duration == Some(0) {
            break r;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no end report: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(end.sequence_number > seq, "a new version ends the report");
    let after = exchange(&mut c, hbh, 40, 16, Some(&cf)).await;
    for a in &after {
        assert_eq!(code_of(a), 2001);
        let r = realm_report(a);
        assert_eq!(
            (r.sequence_number, r.validity_duration),
            (end.sequence_number, Some(0)),
            "the same end report from every worker"
        );
    }
    let na = exchange(&mut plain, 10_000, 500, 32, None).await;
    assert!(na.iter().all(|a| code_of(a) == 2001), "nothing throttled");
    stop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed002_realm_report_with_one_worker() {
    seed002_with_workers(Some(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed002_realm_report_with_two_workers() {
    seed002_with_workers(Some(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed002_realm_report_with_four_workers() {
    seed002_with_workers(Some(4)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed002_realm_report_with_the_default_worker_count() {
    seed002_with_workers(None).await;
}
