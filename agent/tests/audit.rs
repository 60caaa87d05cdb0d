//! The durable audit log over TCP (seed 003, docs/operations.md): the
//! scripted episode of a reporting server (host report 50 %, update 80 %,
//! a stale report, the end with validity 0) through an agent with two
//! workers, `doic-agent audit explain` checked against what the client
//! itself counted; a restart in the middle read as one timeline; the plot;
//! a feed made to fill (every drop counted, shown as gaps, the workers
//! never slowed); the CLI asking a running agent (`--url`).

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use agent::agent::Agent;
use diameter::codec::doic::ReportType;
use diameter::dictionary::doic::OLR_DEFAULT_ALGO;
use doic::audit::query::Log;
use support::audit_log::{ask, audit, fresh_dir, log_when};
use support::*;

const S1: &str = "server1.example.net";

/// An agent with two workers, `[doic]` with a 4 s ramp, the audit log in
/// `dir` flushed every 100 ms, in front of `s1` (trusted).
async fn agent_logging(s1: &Reporter, dir: &Path) -> Agent {
    let mut config = agent_config(&[(s1, true)], Some("ramp = 4.0"), 2);
    config.audit.dir = Some(dir.to_owned());
    config.audit.flush_ms = 100;
    start_agent(config, 1).await
}

fn totals(log: &Log) -> doic::audit::Totals {
    let mut t = doic::audit::Totals::default();
    for (_, s) in &log.seconds {
        t.add_counts(&s.totals);
    }
    t
}

#[derive(Default)]
struct Counted {
    ok: u64,
    throttled: u64,
    hbh: u32,
    /// The throttles by Result-Code.
    by_code: std::collections::BTreeMap<String, u64>,
}

impl Counted {
    fn new() -> Self {
        Self {
            hbh: 1,
            ..Self::default()
        }
    }

    /// Counts one answer: 2001, or a throttle (3004, 5012).
    fn count(&mut self, answer: &[u8]) {
        match code_of(answer) {
            2001 => self.ok += 1,
            code @ (3004 | 5012) => {
                self.throttled += 1;
                *self.by_code.entry(code.to_string()).or_default() += 1;
            }
            other => panic!("unexpected Result-Code {other}"),
        }
    }
}

/// Sends `n` host-routed requests to `S1`, a burst of up to 20 in one
/// write every 25 ms, and counts the answers by Result-Code (exactly one
/// per request).
async fn burst(c: &mut tools::loadgen::Client, counted: &mut Counted, n: u32) {
    let mut left = n;
    while left > 0 {
        let k = left.min(20);
        let answers = exchange_to(c, counted.hbh, k, k, None, Some(S1)).await;
        counted.hbh += k;
        left -= k;
        for a in &answers {
            counted.count(a);
        }
        if left > 0 {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// One request alone, its answer carrying what `s1` was scripted to add.
async fn one(c: &mut tools::loadgen::Client, counted: &mut Counted) {
    burst(c, counted, 1).await;
}

/// Scripts `s1`'s next answer with a host report `(sequence, percent,
/// validity)`, sends single requests until one has carried it, then `n`
/// more; returns the 2001s counted before the report came back.
async fn report_then(
    c: &mut tools::loadgen::Client,
    counted: &mut Counted,
    s1: &Reporter,
    (seq, percent, validity): (u64, u32, u32),
    n: u32,
) -> u64 {
    report_once(
        s1,
        OLR_DEFAULT_ALGO,
        vec![olr(seq, ReportType::Host, percent, Some(validity))],
    );
    let before = counted.ok;
    while s1.script.lock().unwrap().once {
        one(c, counted).await;
    }
    let carried = counted.ok - before;
    burst(c, counted, n).await;
    carried
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_matches_what_the_client_counted_through_an_episode() {
    let dir = fresh_dir("episode");
    let s1 = Reporter::spawn(S1).await;
    let agent = agent_logging(&s1, &dir).await;
    let mut c = connect(agent.local_addrs()[0]).await;
    let mut n = Counted::new();
    // Host report 50 % (sequence 1), in the answer to the first request.
    let before_ocs = report_then(&mut c, &mut n, &s1, (1, 50, 60), 1600).await;
    assert_eq!(before_ocs, 1, "the request whose answer brought the report");
    // Update to 80 % (sequence 2), carried by the next passed request.
    report_then(&mut c, &mut n, &s1, (2, 80, 60), 1600).await;
    // A stale report: sequence 1 again, ignored (RFC 7683 §5.2.1.1).
    report_then(&mut c, &mut n, &s1, (1, 10, 60), 800).await;
    // The end: sequence 3, validity 0; the ramp of 4 s follows (the
    // requests below take about 1 s).
    report_then(&mut c, &mut n, &s1, (3, 0, 0), 800).await;
    let sent = u64::from(n.hbh - 1);
    assert_eq!(n.ok + n.throttled, sent);
    assert!(n.throttled > 300, "{} throttled", n.throttled);
    // Every version closed on both workers, every second counted.
    let log = log_when(&dir, |l| {
        l.versions.len() == 3
            && l.versions
                .iter()
                .all(|v| v.counts_closed && v.removed.is_some())
            && totals(l).requests == sent
    })
    .await;
    let metrics = agent::metrics::render(agent.metrics());
    assert!(metrics.contains("doic_audit_dropped_total 0"), "{metrics}");
    stop(agent);

    let seqs: Vec<u64> = log.versions.iter().map(|v| v.sequence).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(log.versions[0].until_by.as_deref(), Some("updated"));
    assert_eq!(log.versions[1].until_by.as_deref(), Some("ended"));
    assert_eq!(log.versions[0].workers.len(), 2, "both workers held it");
    // The client's own counts, exactly: every 3004 is a throttle of one
    // of the versions, every 2001 a pass of one of them but the first
    // request's, whose answer brought the report.
    let sum = |f: fn(&doic::audit::Counters) -> u64| -> u64 {
        log.versions.iter().map(|v| f(&v.counts)).sum()
    };
    assert_eq!(sum(|c| c.throttled), n.throttled);
    // Split by Result-Code as the client received them (a host report:
    // 5012, RFC 7683 §8), in each version and agent-wide.
    let mut by_code = std::collections::BTreeMap::new();
    for v in &log.versions {
        assert_eq!(
            v.split.throttled_by.values().sum::<u64>(),
            v.counts.throttled
        );
        for (code, k) in &v.split.throttled_by {
            *by_code.entry(code.clone()).or_insert(0) += k;
        }
    }
    assert_eq!(by_code, n.by_code);
    let mut wide = doic::audit::Spread::default();
    for (_, s) in &log.seconds {
        wide.add(&s.split);
    }
    assert_eq!(wide.throttled_by, n.by_code);
    assert_eq!(sum(|c| c.passed) + before_ocs, n.ok);
    assert_eq!(sum(|c| c.matched) + before_ocs, sent);
    let t = totals(&log);
    assert_eq!(
        (t.requests, t.forwarded, t.throttled, t.diverted, t.no_route),
        (sent, n.ok, n.throttled, 0, 0),
        "agent-wide requests = forwarded + diverted + throttled + no_route"
    );

    // `audit explain 2`: the 80 % version, the stale report listed.
    let e = audit(&dir, &["explain", "2"]);
    let v2_code = format!(
        "throttled by Result-Code: 5012: {}",
        log.versions[1].counts.throttled
    );
    assert!(e.text.contains(&v2_code), "{v2_code} not in:\n{}", e.text);
    if std::env::var_os("DOIC_AUDIT_PLOT_OUT").is_some() {
        eprintln!("{}\n{}", audit(&dir, &["timeline"]).text, e.text);
    }
    assert!(e.warnings.is_empty());
    let v2 = &log.versions[1].counts;
    for needle in [
        "OC-OLR received".to_owned(),
        "loss 80 %".to_owned(),
        "(stale)".to_owned(),
        format!(
            "matched {} = passed {} + diverted 0 + throttled {} + delegated 0",
            v2.matched, v2.passed, v2.throttled
        ),
        "claim: A received HOST report (80 % reduction, sequence 2) for server1.example.net"
            .to_owned(),
        "arrivals at server1.example.net from other paths".to_owned(),
        "the application outcome".to_owned(),
    ] {
        assert!(e.text.contains(&needle), "{needle} not in:\n{}", e.text);
    }
    let j: serde_json::Value =
        serde_json::from_str(&audit(&dir, &["--json", "explain", "2"]).text).unwrap();
    assert_eq!(j["version"]["counts"]["throttled"], v2.throttled);
    assert_eq!(j["version"]["split"]["throttled_by"]["5012"], v2.throttled);
    assert_eq!(j["ignored"][0]["report"]["verdict"], "stale");
    assert_eq!(j["ignored"][0]["report"]["sequence"], 1);

    // `audit at`: in the middle of version 2, only it.
    let v = &log.versions[1];
    let at = audit(&dir, &["at", v.until.as_deref().unwrap()]).text;
    assert!(at.contains("host server1.example.net #3"), "{at}");
    let mid = audit(&dir, &["--json", "at", &v.from]).text;
    let mid: serde_json::Value = serde_json::from_str(&mid).unwrap();
    assert_eq!(mid["ocs"].as_array().map(Vec::len), Some(1), "{mid}");
    assert_eq!(mid["ocs"][0][1]["sequence"], 2);
    assert_eq!(mid["ocs"][0][1]["loss_percent"], 80);

    // `audit plot`: one SVG document with the four series, a band per
    // version and the requested reduction.
    let out = dir.join("episode.svg");
    audit(&dir, &["plot", "--out", out.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&out).unwrap();
    check_svg(&svg);
    for name in [
        "offered",
        "forwarded",
        "diverted",
        "throttled",
        "requested reduction",
    ] {
        assert!(svg.contains(&format!(">{name}</text>")), "series {name}");
    }
    assert_eq!(svg.matches("<polyline").count(), 5);
    assert_eq!(svg.matches("<rect class=\"band\"").count(), 3);
    if let Ok(keep) = std::env::var("DOIC_AUDIT_PLOT_OUT") {
        std::fs::copy(&out, keep).unwrap();
    }
}

/// The SVG is one well-formed XML document: every element closed in order.
fn check_svg(svg: &str) {
    let mut open: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find('<') {
        let j = rest[i..].find('>').expect("a tag is closed") + i;
        let tag = &rest[i + 1..j];
        rest = &rest[j + 1..];
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        if tag.starts_with('/') {
            assert_eq!(
                open.pop().as_deref(),
                Some(name.as_str()),
                "misnested </{name}>"
            );
        } else if !tag.ends_with('/') {
            open.push(name);
        }
    }
    assert!(open.is_empty(), "unclosed {open:?}");
    assert!(svg.starts_with("<svg "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_reads_as_one_timeline() {
    let dir = fresh_dir("restart");
    let s1 = Reporter::spawn(S1).await;
    let mut n = Counted::new();
    for seq in [7, 8] {
        let agent = agent_logging(&s1, &dir).await;
        let mut c = connect(agent.local_addrs()[0]).await;
        report_then(&mut c, &mut n, &s1, (seq, 50, 60), 100).await;
        let sent = u64::from(n.hbh - 1);
        log_when(&dir, |l| {
            l.versions.len() == usize::try_from(seq - 6).unwrap() && totals(l).requests == sent
        })
        .await;
        drop(c);
        agent.shutdown();
        agent.wait().await;
    }
    let files = agent::audit::writer::files(&dir).unwrap();
    assert_eq!(files.len(), 2, "one file per run: {files:?}");
    let (lines, bad) = agent::audit::read::read_dir(&dir).unwrap();
    assert!(bad.is_empty());
    let log = Log::read(&lines);
    assert_eq!(log.starts.len(), 2);
    assert_eq!(log.versions.len(), 2);
    let (first, second) = (&log.versions[0], &log.versions[1]);
    assert_eq!((first.sequence, second.sequence), (7, 8));
    assert_eq!(
        first.until_by.as_deref(),
        Some("restart"),
        "the state died with the agent"
    );
    assert!(first.until.as_deref().unwrap() <= second.from.as_str());
    assert_eq!(
        log.versions.iter().map(|v| v.counts.throttled).sum::<u64>(),
        n.throttled,
        "the counts of both runs"
    );
    assert_eq!(totals(&log).requests, u64::from(n.hbh - 1));
    let t = audit(&dir, &["timeline"]).text;
    assert_eq!(t.matches("started").count(), 2, "{t}");
    assert!(t.contains("host server1.example.net #7") && t.contains("host server1.example.net #8"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_is_json_and_absent_without_doic() {
    let s1 = Reporter::spawn(S1).await;
    let agent = start_agent(agent_config(&[(&s1, true)], Some(""), 2), 1).await;
    let m = agent.metrics_addr().unwrap();
    let on = http_get(m, "/audit").await;
    assert!(
        on.starts_with("HTTP/1.1 200") && on.contains("Content-Type: application/json\r\n"),
        "{on}"
    );
    stop(agent);
    let agent = start_agent(agent_config(&[(&s1, true)], None, 2), 1).await;
    let off = http_get(agent.metrics_addr().unwrap(), "/audit").await;
    assert!(
        off.starts_with("HTTP/1.1 404") && off.contains("Content-Type: application/json\r\n"),
        "{off}"
    );
    stop(agent);
}

/// Sends `n` requests to `S1` in writes of 50, each write's answers read
/// before the next (a client as fast as the agent answers), counting the
/// answers by Result-Code; returns the requests answered per second.
async fn flood(c: &mut tools::loadgen::Client, counted: &mut Counted, n: u32) -> f64 {
    let t0 = Instant::now();
    let before = counted.hbh;
    let mut left = n;
    while left > 0 {
        let k = left.min(50);
        let answers = exchange_to(c, counted.hbh, k, k, None, Some(S1)).await;
        assert_eq!(answers.len(), k as usize, "one answer per request");
        counted.hbh += k;
        left -= k;
        for a in &answers {
            counted.count(a);
        }
    }
    f64::from(counted.hbh - before) / t0.elapsed().as_secs_f64()
}

/// The value of the counter `name` in `metrics`.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_feed_is_counted_exactly_shown_as_gaps_and_never_slows_the_workers() {
    use doic::audit::record::Record;
    let dir = fresh_dir("full-feed");
    let s1 = Reporter::spawn(S1).await;
    let mut config = agent_config(&[(&s1, true)], Some("ramp = 4.0"), 2);
    config.audit.dir = Some(dir.to_path_buf());
    config.audit.flush_ms = 100;
    // Four lines between two flushes: a worker tick of the flood below
    // overflows it.
    config.audit.feed_capacity = 4;
    let agent = start_agent(config, 1).await;
    let mut c = connect(agent.local_addrs()[0]).await;
    let mut n = Counted::new();
    // Without reports: no record per answer, the feed keeps up.
    let calm = flood(&mut c, &mut n, 500).await;
    let calm_ok = n.ok;
    // Every answer of s1 now carries a host report (10 %), each a new
    // version (sequence 1, 2, ...): one `report` record per answer (created
    // once, updated after), far more than the feed holds. (A repeated
    // report makes no record: it is counted in the record it repeats.)
    s1.set(Script {
        features: Some(server_features(OLR_DEFAULT_ALGO, S1)),
        olrs: vec![olr(1, ReportType::Host, 10, Some(60))],
        rising: true,
        ..Script::default()
    });
    // One request brings it; both workers' versions are logged before the
    // flood (the feed is not full yet).
    flood(&mut c, &mut n, 1).await;
    log_when(&dir, |l| {
        l.versions.first().is_some_and(|v| v.workers.len() == 2)
    })
    .await;
    let full = flood(&mut c, &mut n, 2000).await;
    let reports = n.ok - calm_ok;
    assert_eq!(n.ok + n.throttled, u64::from(n.hbh - 1));
    assert!(n.throttled > 0, "the report was applied");
    // The workers never waited on the feed: every request was answered
    // while it dropped (below); the rates are printed, not compared (a
    // shared machine makes a ratio of two short runs noise).
    // Every report record produced is in the log or in a gap, exactly;
    // and at a quiet moment the metrics say the same of every record.
    let t0 = Instant::now();
    let (lines, dropped) = loop {
        let read = || agent::audit::read::read_dir(&dir).unwrap().0;
        let before = read();
        let m = agent::metrics::render(agent.metrics());
        let after = read();
        let gaps: Vec<_> = after
            .iter()
            .filter_map(|l| match &l.record {
                Record::Gap(g) => Some(*g),
                _ => None,
            })
            .collect();
        let written_reports = after
            .iter()
            .filter(|l| matches!(l.record, Record::Report(_)))
            .count() as u64;
        let lost_reports: u64 = gaps.iter().map(|g| g.report).sum();
        assert!(
            written_reports + lost_reports <= reports,
            "{written_reports} written + {lost_reports} lost > {reports} produced"
        );
        let records = after
            .iter()
            .filter(|l| !matches!(l.record, Record::Start(_) | Record::Gap(_)))
            .count() as u64;
        let lost: u64 = gaps.iter().map(doic::audit::record::GapEntry::total).sum();
        let quiet = before.len() == after.len()
            && written_reports + lost_reports == reports
            && counter(&m, "doic_audit_dropped_total") == lost
            && counter(&m, "doic_audit_records_total") == records + lost
            && counter(&m, "doic_audit_lines_total") == after.len() as u64;
        if quiet {
            break (after, lost);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{written_reports} + {lost_reports} of {reports} report records; {m}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "{calm:.0} requests/s calm, {full:.0} with the feed full; {dropped} records dropped, {} lines written",
        lines.len()
    );
    assert!(
        dropped > reports / 2,
        "the feed was full: {dropped} of {reports}"
    );
    // The CLI says where the log is incomplete.
    let t = audit(&dir, &["timeline"]).text;
    assert!(t.contains("records lost before this time"), "{t}");
    let gap_lines = lines
        .iter()
        .filter(|l| matches!(l.record, Record::Gap(_)))
        .count();
    assert_eq!(t.matches(" gap: ").count(), gap_lines);
    let e = audit(&dir, &["explain", "1"]).text;
    assert!(e.contains("records lost while it was in force"), "{e}");
    let j: serde_json::Value =
        serde_json::from_str(&audit(&dir, &["--json", "timeline"]).text).unwrap();
    let in_json: u64 = j["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            ["report", "version", "issued", "second"]
                .iter()
                .map(|k| g[1][k].as_u64().unwrap())
                .sum::<u64>()
        })
        .sum();
    assert_eq!(in_json, dropped);
    stop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_asks_a_running_agent_what_it_asks_of_the_directory() {
    let dir = fresh_dir("url");
    let s1 = Reporter::spawn(S1).await;
    let agent = agent_logging(&s1, &dir).await;
    let mut c = connect(agent.local_addrs()[0]).await;
    let mut n = Counted::new();
    report_then(&mut c, &mut n, &s1, (5, 50, 60), 400).await;
    let sent = u64::from(n.hbh - 1);
    log_when(&dir, |l| {
        l.versions.len() == 1 && totals(l).requests == sent
    })
    .await;
    let url = format!("http://{}/audit", agent.metrics_addr().unwrap());
    let by_url = |args: &[&str]| ask(&["--url", &url], args);
    // The same records: the same answers (the writer may have written a
    // second more between the two reads: compare what both have).
    let remote = by_url(&["explain", "5"]).unwrap();
    assert!(remote.warnings.is_empty(), "{:?}", remote.warnings);
    let local = audit(&dir, &["explain", "5"]);
    let first = |s: &str| s.lines().take(3).collect::<Vec<_>>().join("\n");
    assert_eq!(first(&remote.text), first(&local.text));
    assert!(remote.text.contains("OC-OLR received"), "{}", remote.text);
    let j: serde_json::Value =
        serde_json::from_str(&by_url(&["--json", "timeline"]).unwrap().text).unwrap();
    assert_eq!(j["versions"][0]["sequence"], 5);
    assert_eq!(j["versions"][0]["loss_percent"], 50);
    assert!(j["versions"][0]["counts"]["throttled"].as_u64().unwrap() <= n.throttled);
    stop(agent);

    // One line each when there is nothing to ask.
    let agent = start_agent(agent_config(&[(&s1, true)], Some(""), 2), 1).await;
    let bare = format!("http://{}/audit", agent.metrics_addr().unwrap());
    let e = ask(&["--url", &bare], &["timeline"])
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "the agent at {bare} has no audit log (404 Not Found: no audit log: [audit] dir is not set)"
        )
    );
    stop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diverted_requests_are_counted_by_the_peer_they_went_to() {
    const S2: &str = "server2.example.net";
    let dir = fresh_dir("divert");
    let s1 = Reporter::spawn(S1).await;
    let s2 = Reporter::spawn(S2).await;
    let mut config = agent_config(&[(&s1, true), (&s2, true)], Some("ramp = 4.0"), 2);
    config.audit.dir = Some(dir.to_path_buf());
    config.audit.flush_ms = 100;
    let agent = start_agent(config, 2).await;
    let mut c = connect(agent.local_addrs()[0]).await;
    // S1's host report (50 %), brought by one request routed to it.
    report_once(
        &s1,
        OLR_DEFAULT_ALGO,
        vec![olr(4, ReportType::Host, 50, Some(60))],
    );
    let mut hbh = 1;
    while s1.script.lock().unwrap().once {
        exchange_to(&mut c, hbh, 1, 1, None, Some(S1)).await;
        hbh += 1;
    }
    let (seen1, seen2) = (s1.requests(), s2.requests());
    // Realm-routed requests in bursts: what S1's report selects goes to S2.
    let n = 2000;
    let mut counted = Counted::new();
    for a in &exchange(&mut c, hbh, n, 50, None).await {
        counted.count(a);
    }
    let to1 = s1.requests() - seen1;
    let to2 = s2.requests() - seen2;
    assert_eq!(to1 + to2, counted.ok, "what the servers saw");
    let log = log_when(&dir, |l| {
        totals(l).requests == u64::from(n + hbh - 1)
            && l.versions.first().is_some_and(|v| v.counts.matched > 0)
    })
    .await;
    stop(agent);
    let v = &log.versions[0];
    assert!(v.counts.diverted > 100, "{:?}", v.counts);
    // Every passed request of S1's version went to S1, every diverted one
    // to S2, and only there.
    assert_eq!(v.counts.passed, to1);
    assert_eq!(
        v.split.diverted_to.clone().into_iter().collect::<Vec<_>>(),
        [(S2.to_owned(), v.counts.diverted)]
    );
    let mut wide = doic::audit::Spread::default();
    for (_, s) in &log.seconds {
        wide.add(&s.split);
    }
    let t = totals(&log);
    assert_eq!(wide.diverted_to.get(S2).copied(), Some(t.diverted));
    assert_eq!(t.diverted, v.counts.diverted);
    assert!(t.diverted <= to2);
    let e = audit(&dir, &["explain", "4"]).text;
    let want = format!("diverted to: {S2}: {}", v.counts.diverted);
    assert!(e.contains(&want), "{want} not in:\n{e}");
}
