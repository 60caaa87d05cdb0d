//! The own-overload controller against RFC 8581 §6.2.4, RFC 8582 §6.1 and
//! RFC 7683 §5.2.1.4 / §5.2.3, on a simulated clock.

use super::*;
use crate::features::Algorithm;

const ME: &str = "agent.example.com";

fn rates(r: &[(&str, f64)]) -> Vec<(String, f64)> {
    r.iter().map(|(p, v)| ((*p).to_owned(), *v)).collect()
}

fn ctl(capacity: u32) -> (OwnLoad, Instant) {
    let t0 = Instant::now();
    (
        OwnLoad::new(ME, OwnLoadParams::new(capacity), t0, 1_700_000_000_000),
        t0,
    )
}

fn report<'a>(c: &'a OwnLoad, peer: Option<&str>) -> &'a OwnReport {
    c.reports()
        .find(|r| r.peer.as_deref() == peer)
        .unwrap_or_else(|| panic!("no report for {peer:?}"))
}

fn rate_of(c: &OwnLoad, peer: &str) -> u32 {
    match report(c, Some(peer)).report.abatement {
        Abatement::Rate { per_second } => per_second,
        a => panic!("not a rate report: {a:?}"),
    }
}

fn seq(c: &OwnLoad, peer: Option<&str>) -> u64 {
    report(c, peer).report.sequence
}

#[test]
fn below_capacity_nothing_is_reported() {
    let (mut c, t0) = ctl(1000);
    c.handle_load(t0, &rates(&[("c1", 600.0), ("c2", 400.0)]));
    assert!(!c.is_reporting());
    assert_eq!(c.reports().count(), 0);
    assert_eq!(c.generation(), 0);
}

#[test]
fn above_capacity_each_peer_gets_a_proportional_rate_within_capacity() {
    let (mut c, t0) = ctl(1000);
    c.handle_load(t0, &rates(&[("c1", 1500.0), ("c2", 500.0), ("srv", 0.0)]));
    assert!(c.is_reporting());
    let (a1, a2) = (rate_of(&c, "c1"), rate_of(&c, "c2"));
    // RFC 8582 §6.1: a rate per reacting node; their sum within capacity.
    assert!(a1 + a2 <= 1000, "{a1} + {a2}");
    assert!(a1 + a2 >= 998, "the capacity is used: {a1} + {a2}");
    // Proportional to the 3:1 demand.
    assert!(
        (f64::from(a1) / f64::from(a2) - 3.0).abs() < 0.02,
        "{a1}/{a2}"
    );
    // A peer sending nothing gets no report.
    assert!(c.reports().all(|r| r.peer.as_deref() != Some("srv")));
    // RFC 8581 §6.2.4 / §7.2: PEER_REPORT with the agent's SourceID.
    for r in c.reports() {
        assert_eq!(r.report.report_type, ReportType::Peer);
        assert_eq!(r.report.source_id.as_deref(), Some(ME));
        assert_eq!(r.report.validity, Duration::from_secs(10));
        assert_eq!(r.until, t0 + Duration::from_secs(10));
    }
    // The loss report for peers without rate: 1 - 1000/2000 = 50 %.
    assert_eq!(
        report(&c, None).report.abatement,
        Abatement::Loss { percent: 50 }
    );
    // RFC 8582 §6.5: the rate report's OLR carries OC-Maximum-Rate only.
    let olr = report(&c, Some("c1")).report.to_olr();
    assert_eq!(
        (olr.maximum_rate, olr.reduction_percentage),
        (Some(a1), None)
    );
    assert_eq!(
        report(&c, Some("c1")).report.abatement.algorithm(),
        Algorithm::Rate
    );
}

#[test]
fn every_sending_peer_gets_at_least_one_request_per_second() {
    let (mut c, t0) = ctl(100);
    c.handle_load(t0, &rates(&[("big", 10_000.0), ("tiny", 0.5)]));
    assert_eq!(rate_of(&c, "tiny"), 1);
    // 1 + 1 + 98 by largest remainder: the whole capacity is allocated.
    assert_eq!(rate_of(&c, "big"), 99);
    // More peers than capacity: each keeps 1/s (0 would stop them).
    let d = [("a", 5.0), ("b", 5.0), ("c", 5.0)];
    assert_eq!(split(2, &d), vec![("a", 1), ("b", 1), ("c", 1)]);
    let s = split(10, &[("a", 0.0), ("b", 0.0)]);
    assert_eq!(s, vec![("a", 1), ("b", 1)]);
}

#[test]
fn one_peer_gets_the_whole_capacity_whatever_its_rate() {
    // 99.0 * d / d is 98.99... for some d: flooring alone gave 99 of 100.
    for d in [
        765.207_077_218_265_1,
        1_486.305_261_275_823,
        2_835.812_086_661_767,
        1.0,
        0.1,
    ] {
        assert_eq!(split(100, &[("c", d)]), vec![("c", 100)], "demand {d}");
    }
}

#[test]
fn allocations_never_exceed_capacity_for_any_load() {
    // A property over a spread of loads and peer counts.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let cap = 1 + (x % 5000) as u32;
        let n = 1 + (x >> 20) % 20;
        let demands: Vec<(String, f64)> = (0..n)
            .map(|i| (format!("p{i}"), ((x >> (i % 40)) % 10_000) as f64 / 7.0))
            .collect();
        let d: Vec<(&str, f64)> = demands.iter().map(|(p, v)| (p.as_str(), *v)).collect();
        let s = split(cap, &d);
        let sum: u64 = s.iter().map(|(_, a)| u64::from(*a)).sum();
        assert!(s.iter().all(|(_, a)| *a >= 1));
        let some_demand = d.iter().any(|(_, v)| *v > 0.0);
        if n <= u64::from(cap) && some_demand {
            assert_eq!(sum, u64::from(cap), "cap {cap} n {n}: all of it allocated");
        } else if n <= u64::from(cap) {
            assert!(sum <= u64::from(cap), "cap {cap} n {n} sum {sum}");
        } else {
            assert_eq!(sum, n);
        }
    }
}

#[test]
fn hysteresis_reporting_ends_only_clearly_and_durably_below_capacity() {
    let (mut c, t0) = ctl(1000);
    let s = Duration::from_secs(1);
    c.handle_load(t0, &rates(&[("c1", 2000.0)]));
    assert!(c.is_reporting());
    let first = seq(&c, Some("c1"));
    // Abated to its allocation: at capacity, reporting goes on.
    c.handle_load(t0 + s, &rates(&[("c1", 1000.0)]));
    // 90 % of capacity: not clearly below.
    c.handle_load(t0 + 2 * s, &rates(&[("c1", 900.0)]));
    c.handle_load(t0 + 3 * s, &rates(&[("c1", 900.0)]));
    c.handle_load(t0 + 4 * s, &rates(&[("c1", 900.0)]));
    assert!(c.is_reporting());
    // A dip below 80 % shorter than 2 s does not end it.
    c.handle_load(t0 + 5 * s, &rates(&[("c1", 500.0)]));
    c.handle_load(t0 + 6 * s, &rates(&[("c1", 950.0)]));
    c.handle_load(t0 + 7 * s, &rates(&[("c1", 500.0)]));
    c.handle_load(t0 + 8 * s, &rates(&[("c1", 500.0)]));
    assert!(c.is_reporting());
    assert!(!report(&c, Some("c1")).is_end());
    // Below for 2 s: every report ends with validity 0 (RFC 7683 §5.2.3) and
    // a greater sequence number (§5.2.1.4).
    c.handle_load(t0 + 9 * s, &rates(&[("c1", 500.0)]));
    assert!(!c.is_reporting());
    let end = report(&c, Some("c1"));
    assert!(end.is_end());
    assert_eq!(end.report.validity, Duration::ZERO);
    assert!(end.report.sequence > first);
    assert!(report(&c, None).is_end());
    // Kept for one validity period, then dropped.
    assert_eq!(end.until, t0 + 9 * s + Duration::from_secs(10));
    c.handle_load(t0 + 18 * s, &rates(&[("c1", 500.0)]));
    assert_eq!(c.reports().count(), 2);
    c.handle_load(t0 + 19 * s, &rates(&[("c1", 500.0)]));
    assert_eq!(c.reports().count(), 0);
    // Just at capacity does not start it again.
    c.handle_load(t0 + 20 * s, &rates(&[("c1", 1000.0)]));
    assert!(!c.is_reporting());
}

#[test]
fn new_sequence_only_on_material_change_or_renewal() {
    let (mut c, t0) = ctl(1000);
    let ms = Duration::from_millis(1000);
    c.handle_load(t0, &rates(&[("c1", 1500.0), ("c2", 500.0)]));
    let (s1, s2, g) = (seq(&c, Some("c1")), seq(&c, Some("c2")), c.generation());
    let a1 = rate_of(&c, "c1");
    // Both abate to their allocations, with measurement noise: no change.
    c.handle_load(t0 + ms, &rates(&[("c1", 740.0), ("c2", 251.0)]));
    c.handle_load(t0 + 2 * ms, &rates(&[("c1", 752.0), ("c2", 247.0)]));
    assert_eq!(c.generation(), g, "no new version for noise");
    assert_eq!((seq(&c, Some("c1")), seq(&c, Some("c2"))), (s1, s2));
    assert_eq!(
        rate_of(&c, "c1"),
        a1,
        "the abated rate is not taken as demand"
    );
    // c2 uses much less than allowed: its demand is visible again, and c1
    // gets the capacity c2 left (a material shift for both).
    c.handle_load(t0 + 3 * ms, &rates(&[("c1", 750.0), ("c2", 50.0)]));
    assert!(seq(&c, Some("c2")) > s2);
    assert!(seq(&c, Some("c1")) > s1);
    let (b1, b2) = (rate_of(&c, "c1"), rate_of(&c, "c2"));
    assert!(b1 + b2 <= 1000);
    assert!(b1 > 900, "c1 takes what c2 left: {b1}");
    assert!(b2 < 70, "{b2}");
    // Renewal at half the validity: same allocation, new sequence.
    let s = seq(&c, Some("c1"));
    let t = t0 + 3 * ms;
    c.handle_load(
        t + Duration::from_millis(4900),
        &rates(&[("c1", b1.into()), ("c2", 50.0)]),
    );
    assert_eq!(seq(&c, Some("c1")), s);
    c.handle_load(
        t + Duration::from_secs(5),
        &rates(&[("c1", b1.into()), ("c2", 50.0)]),
    );
    let r = report(&c, Some("c1"));
    assert!(r.report.sequence > s);
    assert_eq!(r.until, t + Duration::from_secs(15));
}

#[test]
fn a_new_peer_gets_a_share_and_a_peer_that_stops_has_its_report_ended() {
    let (mut c, t0) = ctl(900);
    let s = Duration::from_secs(1);
    c.handle_load(t0, &rates(&[("c1", 1000.0), ("c2", 1000.0)]));
    assert_eq!(rate_of(&c, "c1"), 450);
    // RFC 8582 §6.3: a new reacting node; the rates are recomputed.
    c.handle_load(
        t0 + s,
        &rates(&[("c1", 450.0), ("c2", 450.0), ("c3", 1000.0)]),
    );
    let (a1, a3) = (rate_of(&c, "c1"), rate_of(&c, "c3"));
    assert!(a1 + rate_of(&c, "c2") + a3 <= 900);
    assert!(a1 < 450 && a3 > 200, "{a1} {a3}");
    // c2 stops sending: it keeps its share for 2 s (one empty window of a
    // slow peer is not an end) ...
    let g = c.generation();
    c.handle_load(
        t0 + 2 * s,
        &rates(&[("c1", 300.0), ("c2", 0.0), ("c3", 300.0)]),
    );
    c.handle_load(t0 + 3 * s, &rates(&[("c1", 300.0), ("c3", 300.0)]));
    assert_eq!(c.generation(), g);
    assert_eq!(c.allocation("c2"), Some(300));
    // ... then its report ends (validity 0), the others go on.
    c.handle_load(t0 + 4 * s, &rates(&[("c1", 400.0), ("c3", 400.0)]));
    assert!(report(&c, Some("c2")).is_end());
    assert!(!report(&c, Some("c1")).is_end());
    assert_eq!(c.allocation("c2"), None);
}

#[test]
fn a_peer_that_leaves_or_fails_gives_its_share_back_at_once() {
    let (mut c, t0) = ctl(900);
    let s = Duration::from_secs(1);
    let load = rates(&[("c1", 1000.0), ("c2", 1000.0), ("c3", 1000.0)]);
    c.handle_load(t0, &load);
    assert_eq!(rate_of(&c, "c1"), 300);
    let (s1, s2) = (seq(&c, Some("c1")), seq(&c, Some("c2")));
    // c3's connection fails (RFC 8582 §8.2 note: the reporting node
    // recomputes the allocation when a reacting node goes away): its
    // report ends now, not after `end_after`, and c1 and c2, still
    // sending 1000/s, share the whole capacity in new versions.
    let left = ["c3".to_owned()];
    let load = rates(&[("c1", 300.0), ("c2", 300.0)]);
    c.handle_load(
        t0 + s,
        Inputs {
            left: &left,
            ..Inputs::rates(&load)
        },
    );
    assert!(report(&c, Some("c3")).is_end());
    assert_eq!(c.allocation("c3"), None);
    assert_eq!((rate_of(&c, "c1"), rate_of(&c, "c2")), (450, 450));
    assert!(seq(&c, Some("c1")) > s1 && seq(&c, Some("c2")) > s2);
    // Reconnected, it is a new reacting node and gets a share again.
    let load = rates(&[("c1", 450.0), ("c2", 450.0), ("c3", 1000.0)]);
    c.handle_load(t0 + 2 * s, &load);
    assert!(!report(&c, Some("c3")).is_end());
    let total: u32 = ["c1", "c2", "c3"].iter().map(|p| rate_of(&c, p)).sum();
    assert_eq!(total, 900);
}

#[test]
fn sequence_numbers_grow_and_survive_a_restart() {
    let (mut c, t0) = ctl(100);
    let mut last = 0;
    let mut t = t0;
    for i in 0..50 {
        // Swing c2's demand to force new versions on every measurement.
        let r = if i % 2 == 0 { 1000.0 } else { 10.0 };
        c.handle_load(t, &rates(&[("c1", 500.0), ("c2", r)]));
        for rep in c.reports() {
            assert!(rep.report.sequence <= c.sequence.last());
        }
        assert!(c.sequence.last() > last);
        last = c.sequence.last();
        t += Duration::from_millis(1);
    }
    // A restart 1 s later (new base): greater than every number sent.
    let mut d = OwnLoad::new(
        ME,
        OwnLoadParams::new(100),
        t,
        1_700_000_000_000 + (t - t0).as_millis() as u64 + 1000,
    );
    d.handle_load(t, &rates(&[("c1", 500.0)]));
    assert!(seq(&d, Some("c1")) > last);
}

mod in_the_core {
    //! The controller's reports as the core puts them in answers (RFC 8581
    //! §6.2.4, RFC 8582 §6.5, RFC 7683 §5.1.2).
    use super::*;
    use crate::{
        AnswerView, Candidate, Doic, DoicConfig, OcOlr, PeerPolicy, RequestView, Treatment,
    };
    use diameter::codec::doic::OcSupportedFeatures;
    use diameter::dictionary::doic::{OC_PEER_REPORT, OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};

    const SRV: &str = "s1.example.net";

    fn core() -> Doic {
        let mut cfg = DoicConfig::default();
        for p in ["rate", "loss", "nopr", "plain", SRV] {
            cfg.peers.insert(
                p.into(),
                PeerPolicy {
                    trusted: true,
                    receive_reports: true,
                    ..PeerPolicy::default()
                },
            );
        }
        Doic::new(ME, cfg, 7, 1).unwrap()
    }

    fn features(from: &str, vector: u64) -> OcSupportedFeatures {
        OcSupportedFeatures {
            feature_vector: Some(vector),
            source_id: Some(from.into()),
            peer_algo: None,
        }
    }

    /// One request from `from` relayed and answered by the server with
    /// nothing DOIC: the DOIC AVPs the agent puts in the answer.
    fn answer(
        core: &mut Doic,
        now: Instant,
        from: &str,
        f: Option<&OcSupportedFeatures>,
    ) -> (Option<OcSupportedFeatures>, Vec<OcOlr>) {
        let req = RequestView {
            app_id: 4,
            command_code: 272,
            from_peer: from,
            dest_realm: "example.net",
            dest_host: None,
            features: f,
            drmp: None,
        };
        let route = [Candidate {
            peer: SRV,
            server: Some(SRV),
        }];
        let Treatment::Forward { tx, .. } = core.treat(now, &req, &route) else {
            panic!("not forwarded")
        };
        let ans = AnswerView {
            app_id: 4,
            origin_host: SRV,
            origin_realm: "example.net",
            result_code: Some(2001),
            experimental_result_code: None,
            features: None,
            olrs: &[],
        };
        let act = core.on_answer(now, &tx, SRV, &ans);
        (act.add_features, act.forward_reports)
    }

    #[test]
    fn each_client_gets_the_report_it_can_act_on() {
        let (mut c, t0) = ctl(300);
        c.handle_load(
            t0,
            &rates(&[("rate", 400.0), ("loss", 200.0), ("plain", 1.0)]),
        );
        let mut core = core();
        for r in c.reports() {
            core.put_own_peer_report(t0, r.peer.as_deref(), r.report.clone(), r.until);
        }
        let now = t0 + Duration::from_millis(10);
        let all = OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT;
        // Rate and peer reports: its own OC-Maximum-Rate, OC-Peer-Algo rate.
        let (f, olrs) = answer(&mut core, now, "rate", Some(&features("rate", all)));
        let f = f.unwrap();
        assert_eq!(f.peer_algo, Some(OLR_RATE_ALGORITHM));
        assert_eq!(f.source_id.as_deref(), Some(ME));
        assert_eq!(olrs.len(), 1, "{olrs:?}");
        let o = &olrs[0];
        assert_eq!(o.report_type, ReportType::Peer);
        assert_eq!(o.source_id.as_deref(), Some(ME));
        assert_eq!(o.maximum_rate, c.allocation("rate"));
        assert_eq!(o.reduction_percentage, None);
        assert_eq!(o.validity_duration, Some(10));
        assert_eq!(o.sequence_number, seq(&c, Some("rate")));
        // Peer reports but loss only: the loss report, OC-Peer-Algo loss.
        let v = OLR_DEFAULT_ALGO | OC_PEER_REPORT;
        let (f, olrs) = answer(&mut core, now, "loss", Some(&features("loss", v)));
        assert_eq!(f.unwrap().peer_algo, Some(OLR_DEFAULT_ALGO));
        assert_eq!(olrs.len(), 1, "{olrs:?}");
        // 1 - 300/601 = 50.1 %: 51 %.
        assert_eq!(olrs[0].reduction_percentage, Some(51));
        assert_eq!(olrs[0].maximum_rate, None);
        assert_eq!(olrs[0].source_id.as_deref(), Some(ME));
        // DOIC without peer reports: no peer report (RFC 7683 §5.2.3).
        let v = OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM;
        let (f, olrs) = answer(&mut core, now, "nopr", Some(&features("nopr", v)));
        assert!(f.is_some());
        assert!(olrs.is_empty(), "{olrs:?}");
        // Not DOIC: no DOIC AVP at all (RFC 7683 §5.1.2).
        let (f, olrs) = answer(&mut core, now, "plain", None);
        assert!(f.is_none() && olrs.is_empty());
        // After the validity, nothing more is sent.
        let later = t0 + Duration::from_secs(11);
        let (_, olrs) = answer(&mut core, later, "rate", Some(&features("rate", all)));
        assert!(olrs.is_empty());
    }

    #[test]
    fn end_reports_go_out_and_older_versions_are_ignored() {
        let (mut c, t0) = ctl(100);
        let mut core = core();
        let put = |c: &OwnLoad, core: &mut Doic, now| {
            for r in c.reports() {
                core.put_own_peer_report(now, r.peer.as_deref(), r.report.clone(), r.until);
            }
        };
        c.handle_load(t0, &rates(&[("rate", 400.0)]));
        put(&c, &mut core, t0);
        let old = report(&c, Some("rate")).clone();
        let s = Duration::from_secs(1);
        for i in 1..=3 {
            c.handle_load(t0 + i * s, &rates(&[("rate", 10.0)]));
        }
        assert!(!c.is_reporting());
        put(&c, &mut core, t0 + 3 * s);
        // A late replica of the older version does not undo the end.
        core.put_own_peer_report(t0 + 3 * s, Some("rate"), old.report, old.until);
        let all = OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT;
        let (_, olrs) = answer(&mut core, t0 + 4 * s, "rate", Some(&features("rate", all)));
        assert_eq!(olrs.len(), 1);
        assert_eq!(olrs[0].validity_duration, Some(0));
        assert_eq!(olrs[0].sequence_number, seq(&c, Some("rate")));
    }

    #[test]
    fn every_worker_core_sends_the_same_version() {
        // Workers apply the published set at their own ticks; a core created
        // late sees only the latest set. Both send the same OLR (the
        // controller makes the sequence numbers, not the cores).
        let (mut c, t0) = ctl(100);
        let s = Duration::from_secs(1);
        let (mut early, mut late) = (core(), core());
        c.handle_load(t0, &rates(&[("rate", 400.0)]));
        for r in c.reports() {
            early.put_own_peer_report(t0, r.peer.as_deref(), r.report.clone(), r.until);
        }
        c.handle_load(t0 + 6 * s, &rates(&[("rate", 100.0)]));
        for core in [&mut early, &mut late] {
            for r in c.reports() {
                core.put_own_peer_report(t0 + 6 * s, r.peer.as_deref(), r.report.clone(), r.until);
            }
        }
        let all = OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT;
        let now = t0 + 6 * s + Duration::from_millis(50);
        let (_, a) = answer(&mut early, now, "rate", Some(&features("rate", all)));
        let (_, b) = answer(&mut late, now, "rate", Some(&features("rate", all)));
        assert_eq!(a.len(), 1);
        assert_eq!(a, b);
        assert_eq!(a[0].sequence_number, seq(&c, Some("rate")));
    }
}
