//! The queries over merged worker records, a restart, a gap, an issued
//! version.

use super::*;
use crate::audit::Totals;
use crate::audit::record::{OcsCount, StartEntry, VersionEntry};

const T0: u64 = 1_796_152_692_000;

fn version(worker: usize, t: u64, event: &str, seq: u64, counts: Counters) -> Line {
    Line::new(
        "agent.example",
        T0 + t,
        Record::Version(VersionEntry {
            worker,
            app_id: 4,
            report_type: "host".into(),
            target: "s1".into(),
            own: false,
            event: event.into(),
            sequence: seq,
            loss_percent: Some(if seq == 1 { 50 } else { 80 }),
            max_rate: None,
            validity: if event == "ended" { 0.0 } else { 60.0 },
            counts,
            split: Spread {
                throttled_by: [("5012".to_owned(), counts.throttled)]
                    .into_iter()
                    .filter(|(_, n)| *n > 0)
                    .collect(),
                ..Spread::default()
            },
            delegated: Vec::new(),
            sent_to: Vec::new(),
        }),
    )
}

fn c(matched: u64, throttled: u64) -> Counters {
    Counters {
        matched,
        passed: matched - throttled,
        throttled,
        ..Counters::default()
    }
}

#[test]
fn workers_merge_updates_close_the_previous_version_and_removal_the_ending() {
    let lines = [
        version(0, 0, "created", 1, Counters::default()),
        version(1, 5, "created", 1, Counters::default()),
        version(0, 1000, "updated", 2, c(10, 5)),
        version(1, 1003, "updated", 2, c(4, 2)),
        version(0, 2000, "ended", 3, c(10, 8)),
        version(1, 2001, "ended", 3, c(5, 4)),
        version(0, 3000, "removed", 3, c(3, 1)),
        version(1, 3000, "removed", 3, c(2, 0)),
    ];
    let log = Log::read(&lines);
    assert_eq!(log.versions.len(), 3);
    let v1 = &log.versions[0];
    assert_eq!((v1.sequence, v1.counts), (1, c(14, 7)));
    assert_eq!(
        v1.split.throttled_by,
        [("5012".to_owned(), 7)].into(),
        "the split summed as the counts"
    );
    assert_eq!(v1.until_by.as_deref(), Some("updated"));
    assert_eq!(v1.until.as_deref(), Some(rfc3339(T0 + 1000).as_str()));
    assert!(v1.counts_closed);
    assert_eq!(log.versions[1].counts, c(15, 12));
    assert_eq!(log.versions[2].counts, c(5, 1));
    assert_eq!(
        log.versions[2].removed.as_deref(),
        Some(rfc3339(T0 + 3000).as_str())
    );
    let at = log.at(T0 + 1500);
    assert_eq!(at.ocs.len(), 1);
    assert_eq!((at.ocs[0].0.as_str(), at.ocs[0].1.sequence), ("active", 2));
    assert_eq!(log.at(T0 + 2500).ocs[0].0, "ending");
    assert!(log.at(T0 + 3000).ocs.is_empty());
    let e = log.explain(&log.versions[1]);
    assert!(e.claim.contains("80 % reduction"), "{}", e.claim);
    assert!(
        e.claim
            .contains("15 requests it matched there, 12 were throttled")
    );
}

#[test]
fn a_split_reads_back_through_its_line() {
    let line = version(0, 0, "updated", 2, c(10, 4));
    let text = serde_json::to_string(&line).unwrap();
    assert!(
        text.contains(r#""split":{"throttled_by":{"5012":4}}"#),
        "{text}"
    );
    assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), line);
}

#[test]
fn a_gap_is_read_and_narrows_the_explanation_of_what_it_overlaps() {
    let gap = GapEntry {
        report: 5,
        second: 2,
        ..GapEntry::default()
    };
    let lines = [
        version(0, 0, "created", 1, Counters::default()),
        Line::new("agent.example", T0 + 500, Record::Gap(gap)),
        version(0, 1000, "removed", 1, c(4, 2)),
    ];
    let log = Log::read(&lines);
    assert_eq!(log.gaps, [(rfc3339(T0 + 500), gap)]);
    let e = log.explain(&log.versions[0]);
    assert!(
        e.cannot_show
            .iter()
            .any(|s| s.starts_with("7 records lost")),
        "{:?}",
        e.cannot_show
    );
    assert!(log.timeline(Some(T0 + 600), None).gaps.is_empty());
}

#[test]
fn a_restart_ends_what_was_in_force_and_the_log_reads_on() {
    let mut lines = vec![version(0, 0, "created", 1, Counters::default())];
    lines.push(Line::new(
        "agent.example",
        T0 + 900,
        Record::Second(SecondEntry {
            totals: Totals::default(),
            split: Spread::default(),
            ocs: vec![OcsCount {
                app_id: 4,
                report_type: "host".into(),
                target: "s1".into(),
                sequence: 1,
                counts: c(6, 3),
                split: Spread::default(),
            }],
        }),
    ));
    lines.push(Line::new(
        "agent.example",
        T0 + 1000,
        Record::Start(StartEntry { workers: 2 }),
    ));
    lines.push(version(0, 2000, "created", 2, Counters::default()));
    let log = Log::read(&lines);
    assert_eq!(log.starts.len(), 1);
    let v1 = &log.versions[0];
    assert_eq!(v1.until_by.as_deref(), Some("restart"));
    assert_eq!(v1.counts, c(6, 3), "the last second's counts");
    assert!(!v1.counts_closed);
    assert!(
        log.explain(v1)
            .cannot_show
            .iter()
            .any(|s| s.contains("not closed"))
    );
    assert_eq!(log.at(T0 + 1500).ocs.len(), 0);
    assert_eq!(log.at(T0 + 2500).ocs[0].1.sequence, 2);
    assert_eq!(log.timeline(Some(T0 + 1500), None).versions.len(), 1);
}

/// The agent's own HOST version on worker `worker` (the report on a
/// server's behalf), `sent_to` the clients sent it.
fn own(worker: usize, t: u64, event: &str, seq: u64, counts: Counters, sent: &[&str]) -> Line {
    let mut l = version(worker, t, event, seq, counts);
    if let Record::Version(v) = &mut l.record {
        v.own = true;
        v.loss_percent = None;
        v.max_rate = Some(200);
        v.sent_to = sent.iter().map(|s| (*s).to_owned()).collect();
    }
    l
}

fn issued(t: u64, seq: u64, validity: f64) -> Line {
    use crate::audit::record::ServerInputs;
    Line::new(
        "agent.example",
        T0 + t,
        Record::Issued(IssuedEntry {
            report_type: "host".into(),
            to: "*".into(),
            sequence: seq,
            loss_percent: Some(67),
            max_rate: Some(200),
            validity,
            target: Some("s1".into()),
            app_ids: vec![4],
            inputs: None,
            server: Some(ServerInputs {
                limit: (validity > 0.0).then_some(200),
                offered: 600.0,
                ..ServerInputs::default()
            }),
            realm: None,
        }),
    )
}

#[test]
fn an_issued_version_is_explained_from_its_inputs_to_whom_it_went_and_what_was_done() {
    let lines = [
        issued(0, 7, 10.0),
        own(0, 0, "created", 7, Counters::default(), &[]),
        own(1, 2, "created", 7, Counters::default(), &[]),
        issued(1000, 8, 0.0),
        own(0, 1000, "ended", 8, c(10, 6), &["c1"]),
        own(1, 1001, "ended", 8, c(5, 3), &["c2"]),
        own(0, 2000, "removed", 8, c(1, 0), &[]),
        own(1, 2000, "removed", 8, c(1, 0), &[]),
    ];
    let log = Log::read(&lines);
    assert_eq!(log.issued.len(), 2);
    let v7 = log.find(7, None).next().unwrap();
    let e = log.explain(v7);
    assert_eq!(e.issued.len(), 1, "the record of its issue, not the end's");
    assert_eq!(e.issued[0].1.server.as_ref().unwrap().limit, Some(200));
    assert_eq!(e.sent_to, ["c1", "c2"], "merged over the workers");
    assert_eq!(v7.counts, c(15, 9));
    assert!(e.requested.is_none());
    for part in [
        "agent.example issued a HOST report for s1 (sequence 7, at most 200 requests/s)",
        "limit 200 requests/s, 600 requests/s offered",
        "it was sent to 2 clients (c1, c2)",
        "of the 15 requests it matched at this agent, 9 were throttled",
    ] {
        assert!(e.claim.contains(part), "{part}: {}", e.claim);
    }
    assert!(
        e.cannot_show
            .iter()
            .any(|s| s.starts_with("whether the clients sent it abated")),
        "{:?}",
        e.cannot_show
    );
    let end = log.explain(log.find(8, None).next().unwrap());
    assert!(
        end.claim.contains("(sequence 8, end (validity 0))"),
        "{}",
        end.claim
    );
    assert!(
        end.claim.contains("it was sent to no client"),
        "{}",
        end.claim
    );
    // A received version with the same sequence has no issue record.
    let received = Log::read(&[
        version(0, 0, "created", 7, Counters::default()),
        issued(0, 7, 10.0),
    ]);
    assert!(received.explain(&received.versions[0]).issued.is_empty());
}

fn peer(t: u64, to: &str, seq: u64, loss: Option<u32>, rate: Option<u32>, validity: f64) -> Line {
    Line::new(
        "agent.example",
        T0 + t,
        Record::Issued(IssuedEntry {
            report_type: "peer".into(),
            to: to.into(),
            sequence: seq,
            loss_percent: loss,
            max_rate: rate,
            validity,
            target: None,
            app_ids: Vec::new(),
            inputs: Some(crate::audit::record::IssuedInputs {
                capacity: 300,
                offered: 450.0,
                utilisation: 0.9,
                queue_delay_ms: 4.0,
                pending: 7,
            }),
            server: None,
            realm: None,
        }),
    )
}

fn wide(t: u64, forwarded: u64, throttled: u64) -> Line {
    Line::new(
        "agent.example",
        T0 + t,
        Record::Second(SecondEntry {
            totals: Totals {
                requests: forwarded + throttled,
                forwarded,
                throttled,
                ..Totals::default()
            },
            split: Spread {
                throttled_by: [("3004".to_owned(), throttled)].into(),
                ..Spread::default()
            },
            ocs: Vec::new(),
        }),
    )
}

#[test]
fn an_own_peer_report_is_explained_from_its_issue_records_and_the_agent_wide_seconds() {
    // One tick numbers its reports in turn (RFC 7683 §5.2.1.4): c1's rate
    // allocation (RFC 8582) #10, the loss report to the others `*` #11.
    let lines = [
        wide(0, 50, 0),
        peer(0, "c1", 10, None, Some(200), 30.0),
        peer(0, "*", 11, Some(20), None, 30.0),
        wide(1000, 90, 10),
        // Another client's change re-sends both unchanged.
        peer(2000, "c1", 10, None, Some(200), 30.0),
        peer(2000, "*", 11, Some(20), None, 30.0),
        peer(2000, "c2", 12, None, Some(100), 30.0),
        wide(2000, 80, 20),
        wide(3000, 70, 30),
        // c1 renewed (same allocation), `*` changed.
        peer(3000, "c1", 13, None, Some(200), 30.0),
        peer(3000, "*", 14, Some(40), None, 30.0),
        wide(4000, 60, 40),
        // The end: validity 0.
        peer(5000, "c1", 15, None, Some(200), 0.0),
        peer(5000, "*", 16, Some(40), None, 0.0),
        wide(5000, 100, 0),
        wide(6000, 100, 0),
    ];
    let log = Log::read(&lines);
    assert!(log.find(10, None).next().is_none(), "no OCS version here");
    let e = log.explain_peer(10).expect("the report of #10");
    assert_eq!(e.decided, rfc3339(T0));
    let to: Vec<(&str, u64)> = e
        .clients
        .iter()
        .map(|c| (c.report.to.as_str(), c.report.sequence))
        .collect();
    assert_eq!(to, [("c1", 10), ("*", 11)], "the decision's records");
    let c1 = &e.clients[0];
    assert_eq!((c1.report.max_rate, c1.resent), (Some(200), 1));
    assert_eq!(c1.until.as_deref(), Some(rfc3339(T0 + 3000).as_str()));
    assert_eq!(c1.until_by.as_deref(), Some("renewed (#13)"));
    let star = &e.clients[1];
    assert_eq!(star.report.loss_percent, Some(20));
    assert_eq!(
        star.until_by.as_deref(),
        Some("changed (#14: 40 % reduction)")
    );
    // #10 lasts until T0 + 3000: the seconds ending at 1000, 2000, 3000.
    assert_eq!(e.until.as_deref(), Some(rfc3339(T0 + 3000).as_str()));
    assert_eq!(e.seconds, 3);
    assert_eq!((e.agent_wide.requests, e.agent_wide.throttled), (300, 60));
    assert_eq!(
        e.agent_wide_split.throttled_by,
        [("3004".to_owned(), 60)].into()
    );
    assert!(e.claim.contains("capacity 300 requests/s"), "{}", e.claim);
    assert!(
        e.claim
            .contains("it allocated c1 200 requests/s, * 20 % reduction"),
        "{}",
        e.claim
    );
    assert!(
        e.claim
            .contains("of 300 requests 60 were throttled (20.0 %)"),
        "{}",
        e.claim
    );
    assert!(
        e.cannot_show.iter().any(|c| c.contains("own enforcement")),
        "own-enforcement throttles are not told apart in the per-second records"
    );
    assert!(
        e.cannot_show
            .iter()
            .any(|c| c.contains("abated at the source"))
    );
    // The ending: #15 lasts until the end of the log; the second record
    // written with it counts the second before it.
    let end = log.explain_peer(15).expect("#15");
    assert_eq!(end.clients[0].report.validity, 0.0);
    assert_eq!((end.until, end.seconds), (None, 1));
    assert!(end.claim.contains("still in force at the end of the log"));
    assert!(log.explain_peer(99).is_none());
}

#[test]
fn a_restart_ends_an_own_peer_report() {
    let lines = [
        peer(0, "c1", 10, None, Some(200), 30.0),
        Line::new(
            "agent.example",
            T0 + 4000,
            Record::Start(StartEntry { workers: 2 }),
        ),
        peer(6000, "c1", 20, None, Some(150), 30.0),
    ];
    let e = Log::read(&lines).explain_peer(10).expect("#10");
    assert_eq!(e.clients[0].until_by.as_deref(), Some("restart"));
    assert_eq!(e.until.as_deref(), Some(rfc3339(T0 + 4000).as_str()));
}
