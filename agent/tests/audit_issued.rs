//! The reports the agent issues itself in the audit log, over real TCP with
//! the default worker count (docs/operations.md, seed 003 from the reporting
//! side): a FIFO server without DOIC offered 3x its capacity by a client
//! without DOIC, and a trusted DOIC client sending a few requests a second.
//! The agent limits the server and issues HOST reports on its behalf (RFC
//! 7683 §5.1.3, docs/protect.md) until the load falls and it ends them
//! (validity 0, §5.2.3). The log, read back with the query code, holds each
//! version with its inputs, and `doic-agent audit explain --report SEQ`
//! names the clients sent it and counts what the clients counted, exactly.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use diameter::codec::doic::{OcSupportedFeatures, ReportType};
use diameter::dictionary::doic::OLR_DEFAULT_ALGO;
use doic::DoicConfig;
use doic::audit::query::{Log, Version};
use doic::config::PeerPolicy;
use support::audit_log::{audit, fresh_dir, log_when};
use support::*;
use tools::loadgen::{Busy, Client, Identity, ServerBehaviour, TEST_APP, Traffic};

const C: u32 = 200;
const SERVER: &str = "server1.example.net";
/// A DOIC client announcing loss, trusted for reports.
const PROBE: &str = "client3.example.org";

/// One test at a time: each runs an agent on pinned workers, servers and a
/// client at up to 1,200 requests/s on a machine with few cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn loss_features() -> OcSupportedFeatures {
    OcSupportedFeatures {
        feature_vector: Some(OLR_DEFAULT_ALGO),
        source_id: Some(PROBE.into()),
        peer_algo: None,
    }
}

/// What a client counted of its answers: the throttles by Result-Code,
/// the 2001s, and the sequences of the HOST reports its answers carried.
#[derive(Default)]
struct Counted {
    throttled_by: BTreeMap<String, u64>,
    ok: u64,
    host_sequences: BTreeSet<u64>,
    ended: bool,
}

impl Counted {
    fn count(&mut self, answers: &[bytes::Bytes]) {
        for a in answers {
            match code_of(a) {
                2001 => self.ok += 1,
                code @ (3004 | 5012 | 5198) => {
                    *self.throttled_by.entry(code.to_string()).or_default() += 1;
                }
                other => panic!("unexpected Result-Code {other}"),
            }
        }
        for o in reports_in(answers, ReportType::Host) {
            self.host_sequences.insert(o.sequence_number);
            self.ended |= o.validity_duration == Some(0);
        }
    }
}

/// `[doic]` (protection on by default) with `PROBE` trusted, and the
/// audit log in `dir` flushed every 100 ms.
fn logging(c: &mut agent::config::Config, dir: &std::path::Path) {
    let mut d = DoicConfig::default();
    let p = PeerPolicy {
        trusted: true,
        ..PeerPolicy::default()
    };
    d.peers.insert(PROBE.into(), p);
    c.doic = Some(d);
    c.audit.dir = Some(dir.to_owned());
    c.audit.flush_ms = 100;
}

/// The client without DOIC and `PROBE`, once the agent has measured its
/// servers (before the load comes).
async fn clients(s: &Setup) -> (Client, Client) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let probe = Client::connect(s.addr, Identity::new(PROBE, "example.org"), vec![TEST_APP])
        .await
        .unwrap();
    (s.client().await, probe)
}

fn server_versions(log: &Log) -> Vec<&Version> {
    log.versions
        .iter()
        .filter(|v| v.report_type == "host" && v.target == SERVER)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_reports_issued_on_a_servers_behalf_are_recorded_with_their_inputs_and_explained() {
    let _one = SERIAL.lock().await;
    let dir = fresh_dir("issued-host");
    let b = ServerBehaviour {
        capacity: Some(C),
        busy: Busy::Queue,
        ..Default::default()
    };
    let s = one_server(Run::Pinned, b, |c| logging(c, &dir)).await;
    let (mut load, mut probe) = clients(&s).await;
    let f = loss_features();
    // Host-routed: the server's host OCS alone treats them (no realm).
    let t = Traffic {
        destination_realm: "example.net".into(),
        destination_host: Some(SERVER.into()),
    };
    let mut hbh = 1;
    let probes = async {
        let mut answers = Vec::new();
        for _ in 0..12 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            answers.extend(exchange_to(&mut probe, hbh, 10, 5, Some(&f), Some(SERVER)).await);
            hbh += 10;
        }
        answers
    };
    let (report, _, answers) =
        offer_open(&s, &mut load, &t, (3 * u64::from(C), 8), (4, 8), probes).await;
    assert_eq!(report.sent, report.answered, "{:?}", report.by_code);
    let mut probed = Counted::default();
    probed.count(&answers);
    // The load has stopped: the probe sends until it is sent the end.
    for _ in 0..60 {
        if probed.ended {
            break;
        }
        let a = exchange_to(&mut probe, hbh, 1, 1, Some(&f), Some(SERVER)).await;
        hbh += 1;
        probed.count(&a);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        probed.ended,
        "the DOIC client was sent the end: {:?}",
        probed.host_sequences
    );
    let mut loaded = Counted::default();
    for (code, n) in &report.by_code {
        match code {
            2001 => loaded.ok += n,
            3004 | 5012 | 5198 => *loaded.throttled_by.entry(code.to_string()).or_default() += n,
            other => panic!("unexpected Result-Code {other}: {:?}", report.by_code),
        }
    }
    // Every version closed on every worker, the end issued.
    let log = log_when(&dir, |l| {
        let vs = server_versions(l);
        !vs.is_empty()
            && vs.iter().all(|v| v.counts_closed && v.removed.is_some())
            && l.issued
                .iter()
                .any(|(_, i)| i.report_type == "host" && i.validity == 0.0)
    })
    .await;
    let metrics = agent::metrics::render(s.agent().metrics());
    assert!(metrics.contains("doic_audit_dropped_total 0"), "{metrics}");

    // Each version issued, with its inputs: the limit while it binds, its
    // end (validity 0) once lifted; sequences growing (RFC 7683 §5.2.1.4).
    let issued: Vec<_> = log
        .issued
        .iter()
        .map(|(_, i)| i)
        .filter(|i| i.report_type == "host")
        .collect();
    assert!(issued.len() >= 2, "{issued:#?}");
    for w in issued.windows(2) {
        assert!(w[0].sequence < w[1].sequence, "{issued:#?}");
    }
    for i in &issued {
        assert_eq!((i.target.as_deref(), i.to.as_str()), (Some(SERVER), "*"));
        assert_eq!(i.app_ids, [TEST_APP]);
        let inputs = i.server.as_ref().expect("the server's inputs");
        if i.validity > 0.0 {
            let limit = inputs.limit.expect("a limit while it binds");
            assert_eq!(i.max_rate, Some(limit), "{i:?}");
            assert!(inputs.baseline_ms.is_some(), "{i:?}");
        }
    }
    // The first binds under the load (a later one may be made as it
    // falls, offered 0).
    let first = issued[0].server.as_ref().unwrap();
    assert!(first.offered > 0.0, "{:?}", issued[0]);
    let last = issued[issued.len() - 1];
    assert_eq!(
        (last.validity, last.server.as_ref().unwrap().limit),
        (0.0, None)
    );
    // Every version the workers held is one the agent issued (a worker
    // may skip one replaced before its next tick).
    let versions = server_versions(&log);
    let seqs: BTreeSet<u64> = issued.iter().map(|i| i.sequence).collect();
    for v in &versions {
        assert!(v.own && seqs.contains(&v.sequence), "{v:?} not issued");
    }

    // `audit explain --report SEQ` of each version: to whom it was sent,
    // exactly the DOIC client whose answers carried it (the client without
    // DOIC never), and what the agent did, summing to what the clients
    // counted.
    let mut throttled_by: BTreeMap<String, u64> = BTreeMap::new();
    let mut passed = 0;
    for v in &versions {
        let seq = v.sequence.to_string();
        let json: serde_json::Value =
            serde_json::from_str(&audit(&dir, &["--json", "explain", "--report", &seq]).text)
                .unwrap();
        let sent: BTreeSet<String> = serde_json::from_value(json["sent_to"].clone()).unwrap();
        let carried = probed.host_sequences.contains(&v.sequence);
        if v.validity > 0.0 {
            assert_eq!(sent.contains(PROBE), carried, "{seq}: {sent:?}");
        } else {
            // The end is sent for a validity period, past its state.
            assert!(!sent.contains(PROBE) || carried, "{seq}: {sent:?}");
        }
        assert!(!sent.contains(CLIENT), "{seq}: {sent:?}");
        assert_eq!(json["issued"][0][1]["sequence"], v.sequence, "{json:#}");
        let by: BTreeMap<String, u64> =
            serde_json::from_value(json["version"]["split"]["throttled_by"].clone())
                .unwrap_or_default();
        assert_eq!(by.values().sum::<u64>(), v.counts.throttled, "{json:#}");
        for (code, n) in by {
            *throttled_by.entry(code).or_default() += n;
        }
        passed += v.counts.passed;
    }
    let mut counted = loaded.throttled_by.clone();
    for (code, n) in &probed.throttled_by {
        *counted.entry(code.clone()).or_default() += n;
    }
    assert!(
        counted.values().sum::<u64>() * 3 >= report.sent,
        "{counted:?} of {}",
        report.sent
    );
    assert_eq!(
        throttled_by, counted,
        "throttled by Result-Code = the clients' answers"
    );
    assert!(passed <= loaded.ok + probed.ok);

    // The text: the decision and its inputs, to whom, the claim.
    let main = versions
        .iter()
        .filter(|v| v.validity > 0.0 && probed.host_sequences.contains(&v.sequence))
        .max_by_key(|v| v.counts.matched)
        .expect("a version the DOIC client was sent");
    let e = audit(&dir, &["explain", "--report", &main.sequence.to_string()]).text;
    eprintln!(
        "{} versions issued, {} held; the clients counted {counted:?} throttled\n{e}",
        issued.len(),
        versions.len()
    );
    let c = main.counts;
    for needle in [
        format!("host report #{} for {SERVER} to *", main.sequence),
        format!(
            "from the server's limit {} requests/s",
            main.max_rate.unwrap()
        ),
        format!("sent to: {PROBE}"),
        format!("it was sent to 1 client ({PROBE})"),
        format!(
            "of the {} requests it matched at this agent, {} were throttled",
            c.matched, c.throttled
        ),
        "whether the clients sent it abated at the source".into(),
    ] {
        assert!(e.contains(&needle), "{needle} not in:\n{e}");
    }
    let timeline = audit(&dir, &["timeline"]).text;
    assert!(
        timeline.contains(&format!(
            "issued: host report #{} for {SERVER}",
            last.sequence
        )),
        "{timeline}"
    );
    let at = audit(&dir, &["at", &main.from]).text;
    assert!(
        at.contains(&format!("host {SERVER} #{} (issued)", main.sequence)),
        "{at}"
    );
}

/// A client without DOIC offering 3 (C1 + C2) realm-routed requests per
/// second to a realm of two FIFO servers of C1 and C2 = 3 C1: the realm is
/// short and the agent issues a REALM report (seed 002), applies it itself
/// to the client that cannot receive it, and ends it (validity 0) once the
/// load falls. The log holds each REALM version with the realm's servers,
/// summed limits, demand and shortage; `explain --report SEQ` names the DOIC
/// client it was sent to, and the agent's own versions (the REALM report,
/// the servers' HOST reports) throttled exactly what the clients counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realm_reports_issued_are_recorded_with_their_inputs_and_explained() {
    let _one = SERIAL.lock().await;
    use tools::loadgen::Server;
    const C1: u32 = 100;
    const S2: &str = "server2.example.net";
    let dir = fresh_dir("issued-realm");
    let mut servers = Vec::new();
    for (host, c) in [(SERVER, C1), (S2, 3 * C1)] {
        let b = ServerBehaviour {
            capacity: Some(c),
            busy: Busy::Queue,
            ..Default::default()
        };
        let id = Identity::new(host, "example.net");
        servers.push(
            Server::spawn("127.0.0.1:0".parse().unwrap(), id, b)
                .await
                .unwrap(),
        );
    }
    let mut config = config_for(&servers, "");
    config.node.workers = None;
    logging(&mut config, &dir);
    let s = start(servers, config).await;
    let (mut load, mut probe) = clients(&s).await;
    let f = loss_features();
    let t = Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    };
    let mut hbh = 1;
    let probes = async {
        let mut answers = Vec::new();
        for _ in 0..16 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            answers.extend(exchange(&mut probe, hbh, 10, 5, Some(&f)).await);
            hbh += 10;
        }
        answers
    };
    let (report, _, answers) =
        offer_open(&s, &mut load, &t, (u64::from(12 * C1), 10), (4, 10), probes).await;
    assert_eq!(report.sent, report.answered, "{:?}", report.by_code);
    let realm_seqs = |answers: &[bytes::Bytes]| -> BTreeSet<u64> {
        reports_in(answers, ReportType::Realm)
            .iter()
            .map(|o| o.sequence_number)
            .collect()
    };
    let mut carried = realm_seqs(&answers);
    let mut probed = Counted::default();
    probed.count(&answers);
    // The load has stopped: the probe sends until it is sent the end,
    // every answer counted.
    let mut ended = None;
    for _ in 0..40 {
        let a = exchange(&mut probe, hbh, 1, 1, Some(&f)).await;
        hbh += 1;
        probed.count(&a);
        carried.extend(realm_seqs(&a));
        ended = reports_in(&a, ReportType::Realm)
            .into_iter()
            .find(|o| o.validity_duration == Some(0));
        if ended.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let ended = ended.expect("the end of the REALM report within 10 s");
    // The end issued, every REALM version it replaced closed on every
    // worker, every HOST version of the servers closed and gone.
    let log = log_when(&dir, |l| {
        l.issued
            .iter()
            .any(|(_, i)| i.report_type == "realm" && i.validity == 0.0)
            && l.versions.iter().all(|v| match v.report_type.as_str() {
                "realm" => v.validity == 0.0 || v.counts_closed,
                _ => v.counts_closed && v.removed.is_some(),
            })
    })
    .await;
    let mut s = s;
    s.stop().await;

    let issued: Vec<_> = log
        .issued
        .iter()
        .map(|(_, i)| i)
        .filter(|i| i.report_type == "realm")
        .collect();
    assert!(issued.len() >= 2, "{issued:#?}");
    // The report starts at `realm::START` short; a later version of the same
    // report may move below it (steps of 10 points) until it ends.
    let first = issued[0].realm.as_ref().expect("the realm's inputs");
    assert!(
        first.shortage_percent >= doic::realm::START,
        "{:?}",
        issued[0]
    );
    for i in &issued {
        assert_eq!(i.target.as_deref(), Some("example.net"));
        assert_eq!(i.app_ids, [TEST_APP]);
        let r = i.realm.as_ref().expect("the realm's inputs");
        let servers: BTreeSet<&str> = r.servers.iter().map(String::as_str).collect();
        assert_eq!(servers, [SERVER, S2].into(), "{i:?}");
        assert_eq!(i.loss_percent, Some(r.shortage_percent), "{i:?}");
        assert!(r.demand.is_some_and(|d| d > 0.0), "{i:?}");
        if i.validity > 0.0 {
            let (limits, demand) = (r.limits.unwrap(), r.demand.unwrap());
            assert!(limits < demand, "short: {i:?}");
        }
    }
    assert_eq!(issued[issued.len() - 1].sequence, ended.sequence_number);
    // The version the DOIC client was sent most: explain names it, and only
    // it; the client without DOIC was never sent it.
    let main = log
        .versions
        .iter()
        .filter(|v| v.report_type == "realm" && v.validity > 0.0 && v.counts_closed)
        .max_by_key(|v| v.counts.matched)
        .expect("a closed REALM version");
    assert!(main.own);
    let seq = main.sequence.to_string();
    let json: serde_json::Value =
        serde_json::from_str(&audit(&dir, &["--json", "explain", "--report", &seq]).text).unwrap();
    let sent: BTreeSet<String> = serde_json::from_value(json["sent_to"].clone()).unwrap();
    assert_eq!(
        sent.contains(PROBE),
        carried.contains(&main.sequence),
        "{sent:?}"
    );
    assert!(!sent.contains(CLIENT), "{sent:?}");
    assert_eq!(
        json["issued"][0][1]["realm"]["shortage_percent"],
        main.loss_percent.unwrap()
    );
    // What the agent throttled under its own versions is what the clients
    // counted as throttled, by Result-Code.
    let mut by_code: BTreeMap<String, u64> = BTreeMap::new();
    for v in log.versions.iter().filter(|v| v.own) {
        for (code, n) in &v.split.throttled_by {
            *by_code.entry(code.clone()).or_default() += n;
        }
    }
    let mut counted = probed.throttled_by.clone();
    for (code, n) in &report.by_code {
        if matches!(code, 3004 | 5012 | 5198) {
            *counted.entry(code.to_string()).or_default() += n;
        }
    }
    eprintln!(
        "{} REALM versions issued; the agent's versions throttled {by_code:?}, the clients counted {counted:?}\n{}",
        issued.len(),
        audit(&dir, &["explain", "--report", &seq]).text
    );
    assert_eq!(by_code, counted);
    let e = audit(&dir, &["explain", "--report", &seq]).text;
    for needle in [
        format!("realm report #{} for example.net to *", main.sequence),
        "from the realm's servers (".into(),
        format!("short by {} %", main.loss_percent.unwrap()),
        format!(
            "of the {} requests it matched at this agent, {} were throttled",
            main.counts.matched, main.counts.throttled
        ),
    ] {
        assert!(e.contains(&needle), "{needle} not in:\n{e}");
    }
}
