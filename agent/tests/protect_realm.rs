//! Protection of two servers without DOIC that share one realm, over real
//! TCP with two workers (docs/protect.md): server 1 of capacity C1, server
//! 2 of C2 = 3 C1, realm-routed requests from a client without DOIC.
//!
//! - Offered 2.5 C1 (0.625 of the realm's C1 + C2, more than C1 of it
//!   routed to server 1 first): the agent's limit for server 1 binds and the excess is
//!   diverted to server 2 (RFC 7683 §5.2.3 "diverted to another
//!   candidate", RFC 8581 §5: diversion before abatement), so the client
//!   sees 2001s, neither the server's 3004s nor the agent's throttle
//!   answers, and a DOIC client's answers carry no REALM report: the realm
//!   as a whole is not overloaded.
//! - Offered 3 (C1 + C2): the realm is short; each server is held to its
//!   own limit (a realm report the agent applies does not pass a request
//!   over a protected server's limit), so the realm's goodput is C1 + C2
//!   and the excess is answered by the agent at once. A DOIC client sees
//!   one REALM report made by the agent (seed 002), one version for the
//!   steady shortage, and its end with validity 0 when the load falls
//!   (RFC 7683 §5.2.3).

mod support;

use std::time::Duration;

use diameter::codec::doic::{OcOlr, OcSupportedFeatures, ReportType};
use diameter::dictionary::doic::OLR_DEFAULT_ALGO;
use doic::DoicConfig;
use doic::config::PeerPolicy;
use support::*;
use tools::loadgen::{Busy, Client, Identity, Report, Server, ServerBehaviour, TEST_APP, Traffic};

const C1: u32 = 100;
const C2: u32 = 300;
const S1: &str = "server1.example.net";
const S2: &str = "server2.example.net";
/// A DOIC client announcing loss only, trusted for reports.
const LOSS: &str = "client3.example.org";

/// One test at a time: each runs an agent on pinned workers, two servers
/// and a client at up to 1,200 requests/s on a machine with few cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn behaviour(capacity: u32, busy: Busy) -> ServerBehaviour {
    ServerBehaviour {
        capacity: Some(capacity),
        busy,
        ..Default::default()
    }
}

/// Server 1 (C1) and server 2 (C2) behaving as `busy`, behind an agent with
/// two workers and `[doic]` (protection on by default), `LOSS` trusted.
async fn two_servers(busy: Busy) -> Setup {
    let mut servers = Vec::new();
    for (host, c) in [(S1, C1), (S2, C2)] {
        let id = Identity::new(host, "example.net");
        let s = Server::spawn("127.0.0.1:0".parse().unwrap(), id, behaviour(c, busy))
            .await
            .unwrap();
        servers.push(s);
    }
    let mut config = config_for(&servers, "");
    config.node.workers = Some(2);
    let mut d = DoicConfig::default();
    let p = PeerPolicy {
        trusted: true,
        ..PeerPolicy::default()
    };
    d.peers.insert(LOSS.into(), p);
    config.doic = Some(d);
    let s = start(servers, config).await;
    // A running agent has measured its servers before the load comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    s
}

fn realm_reports(answers: &[bytes::Bytes]) -> Vec<OcOlr> {
    reports_in(answers, ReportType::Realm)
}

fn loss_features() -> OcSupportedFeatures {
    OcSupportedFeatures {
        feature_vector: Some(OLR_DEFAULT_ALGO),
        source_id: Some(LOSS.into()),
        peer_algo: None,
    }
}

/// Offers `rate` realm-routed requests per second for `secs`; returns the
/// client's report, the requests each server received per second between
/// `from` and `secs`, and the answers to `per_probe` requests of the DOIC
/// loss client sent at each of `probes` seconds into the run.
async fn offer(
    s: &Setup,
    c: &mut Client,
    probe: &mut Client,
    (rate, secs): (u64, u64),
    from: u64,
    (probes, per_probe): (&[f64], u32),
) -> (Report, Vec<f64>, Vec<Vec<bytes::Bytes>>) {
    let t = Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    };
    let loss_f = loss_features();
    let during = async {
        let start = tokio::time::Instant::now();
        let mut out = Vec::new();
        for (i, at) in (0u32..).zip(probes) {
            tokio::time::sleep_until(start + Duration::from_secs_f64(*at)).await;
            out.push(exchange(probe, 1 + 100 * i, per_probe, 5, Some(&loss_f)).await);
        }
        out
    };
    offer_open(s, c, &t, (rate, secs), (from, secs), during).await
}

fn refused(r: &Report) -> u64 {
    [3002, 3004, 5012, 5198]
        .iter()
        .filter_map(|c| r.by_code.get(c))
        .sum()
}

async fn diverted_then_held(busy: Busy) {
    let _one = SERIAL.lock().await;
    let s = two_servers(busy).await;
    let mut c = s.client().await;
    let mut probe = Client::connect(s.addr, Identity::new(LOSS, "example.org"), vec![TEST_APP])
        .await
        .unwrap();
    // The realm has headroom: server 1's excess goes to server 2.
    let (r, per_s, answers) = offer(
        &s,
        &mut c,
        &mut probe,
        (u64::from(5 * C1 / 2), 10),
        4,
        (&[5.0], 20),
    )
    .await;
    let answers = answers.concat();
    eprintln!(
        "{busy:?} at 2.5 C1: {per_s:?}/s at the servers, {:?}, limit {:?}",
        r.by_code,
        metric(s.agent(), &format!("doic_protect_limit{{peer=\"{S1}\"}}"))
    );
    assert_eq!(
        r.sent, r.answered,
        "every request answered: {:?}",
        r.by_code
    );
    let ok = r.by_code.get(&2001).copied().unwrap_or(0);
    // The onset (before the first limit) may cost a few, and a server
    // starved of CPU on a busy machine serves less for a while: up to a
    // tenth (measured: none on a quiet machine, 8 % with the machine's load
    // at 12 on 2 cores).
    assert!(
        refused(&r) * 10 <= r.sent && ok + refused(&r) == r.sent,
        "{:?}",
        r.by_code
    );
    assert!(
        per_s[0] <= 1.1 * f64::from(C1),
        "server 1 received {}/s, its capacity {C1}/s",
        per_s[0]
    );
    assert!(
        per_s[0] + per_s[1] >= 0.9 * f64::from(5 * C1 / 2),
        "{per_s:?}/s reached the servers of 2.5 C1 offered"
    );
    let served = answers.iter().filter(|a| code_of(a) == 2001).count();
    let codes: Vec<u32> = answers.iter().map(|a| code_of(a)).collect();
    assert!(
        served >= 18,
        "the DOIC client is served: {served} of 20: {codes:?}, REALM {:?}",
        realm_reports(&answers)
    );
    // The realm has headroom: no REALM report, not even one that came and
    // went (the agent's estimate weighs server 1's limit against the
    // realm's demand, seed 002).
    let rr = realm_reports(&answers);
    assert!(
        rr.is_empty(),
        "no REALM report while the realm has headroom: {rr:?}"
    );
    // The realm as a whole is short: the agent reports for it (seed 002).
    // Five requests every quarter second: the DOIC client is held to its
    // share of each server by a bucket (docs/protect.md), which passes a
    // few of a burst; bursts of 20 every 1.5 s got 2 to 15 of 80 served.
    let probes: Vec<f64> = (0..20).map(|i| 4.0 + 0.25 * f64::from(i)).collect();
    let (r, per_s, rounds) = offer(
        &s,
        &mut c,
        &mut probe,
        (u64::from(3 * (C1 + C2)), 10),
        4,
        (&probes, 5),
    )
    .await;
    eprintln!(
        "{busy:?} at 3 (C1 + C2): {per_s:?}/s at the servers, {:?}",
        r.by_code
    );
    assert_eq!(
        r.sent, r.answered,
        "every request answered: {:?}",
        r.by_code
    );
    assert!(
        per_s[0] <= 1.1 * f64::from(C1) && per_s[1] <= 1.1 * f64::from(C2),
        "{per_s:?}/s reached the servers of {C1} and {C2}/s"
    );
    // Each server at its limit: the realm's goodput is the sum of both (a
    // generous lower bound: on a shared machine the loopback servers are
    // starved of CPU at times and serve less; the upper bounds above are
    // not generous).
    let ok = r.by_code.get(&2001).copied().unwrap_or(0) as f64 / 10.0;
    assert!(
        ok >= 0.65 * f64::from(C1 + C2),
        "goodput {ok}/s, the realm's capacity {}/s: {:?}",
        C1 + C2,
        r.by_code
    );
    let answers = rounds.concat();
    assert!(
        answers.iter().all(|a| code_of(a) != 3002),
        "the DOIC client is answered at once"
    );
    // The DOIC client sees one stable REALM report in the answers of the
    // realm's servers from 4 to 9 s of the episode: the realm is short by
    // 1 - 400/1200 = 67 % of its demand. A new version comes only for a new
    // content (RFC 7683 §5.2.1.4), 10 points or more from the one before
    // (the estimate may still move once as the servers' limits settle on a
    // busy machine: 56 then 68 % was seen), never a version per tick: 4 and
    // 5 versions of 2 to 5 points apart without the hysteresis. (The
    // agent's own throttle answers speak for the agent's realm, not the
    // servers': they carry no REALM report of theirs.)
    let served: Vec<bytes::Bytes> = answers
        .iter()
        .filter(|a| code_of(a) == 2001)
        .cloned()
        .collect();
    let rr = realm_reports(&served);
    let codes: Vec<u32> = answers.iter().map(|a| code_of(a)).collect();
    eprintln!(
        "the DOIC client at 3 (C1 + C2): {} of {} served",
        served.len(),
        answers.len()
    );
    assert!(
        served.len() >= 10,
        "{} answers of the realm of {}: {codes:?}",
        served.len(),
        answers.len()
    );
    assert_eq!(
        rr.len(),
        served.len(),
        "a REALM report in every answer of the realm"
    );
    let mut versions: Vec<&OcOlr> = Vec::new();
    for o in &rr {
        assert_eq!(o.validity_duration, Some(30), "in force: {o:?}");
        match versions.last() {
            Some(v) if v.sequence_number == o.sequence_number => {
                assert_eq!(v.reduction_percentage, o.reduction_percentage);
            }
            Some(v) => {
                assert!(o.sequence_number > v.sequence_number, "{rr:?}");
                versions.push(o);
            }
            None => versions.push(o),
        }
    }
    let pcts: Vec<u32> = versions
        .iter()
        .filter_map(|v| v.reduction_percentage)
        .collect();
    assert!(
        versions.len() <= 2 && pcts.windows(2).all(|w| w[0].abs_diff(w[1]) >= 10),
        "one stable version: {pcts:?} of {rr:?}"
    );
    let last = versions[versions.len() - 1];
    // What the servers' limits make of it: 67 % when they sit at their
    // capacities; a 3004 server's limit may probe past it (42 % was seen).
    let pct = last.reduction_percentage.expect("a loss report");
    assert!((25..=85).contains(&pct), "{last:?}");
    // The load falls: the report ends with validity 0 and a greater
    // sequence (RFC 7683 §5.2.3), within the demand's window and dwell.
    let loss_f = loss_features();
    let ended = await_end(&mut probe, 1000, &loss_f, ReportType::Realm)
        .await
        .expect("an end report within 10 s");
    assert!(
        ended.sequence_number > last.sequence_number,
        "{ended:?} after {last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_realm_of_two_3004_servers_diverts_then_holds_each_server_to_its_limit() {
    diverted_then_held(Busy::Reject { cost: 0.1 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_realm_of_two_fifo_servers_diverts_then_holds_each_server_to_its_limit() {
    diverted_then_held(Busy::Queue).await;
}
