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
