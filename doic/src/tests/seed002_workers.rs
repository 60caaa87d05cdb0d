//! Seed 002 (draft-docdt-dime-ovli-01 appendix C.3) with the agent as two
//! workers' cores: the client's connection on worker 0, which treats the
//! requests, the servers' on worker 1, which handles the answers, as in the
//! running agent. Whatever one core hands out (`AnswerActions::replicate`,
//! `Doic::take_replicas`) the other applies, as the agent's inboxes carry
//! it; both share one [`RealmBoard`]. Simulated clock.
//!
//! Shown here: the answer that carries S2's host report already carries the
//! realm report (step 8) though its request was treated by the other core;
//! one version, one sequence number, on both cores; the client that was sent
//! it abates at the source on both, the agent abates for the others; the
//! end of the host reports ends it with validity 0 on both (RFC 7683
//! §5.1.3, §5.2.1.4, §5.2.3).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fixtures::{REALM, trust};
use super::sim::APP;
use crate::audit::OcsEvent;
use crate::engine::AnswerView;
use crate::features::{OLR_DEFAULT_ALGO, OcSupportedFeatures};
use crate::realm::RealmBoard;
use crate::report::{Abatement, OcOlr, Report, ReportType};
use crate::treatment::{AnswerActions, Candidate, PendingTx, Replica, RequestView, Treatment};
use crate::{Doic, DoicConfig};

const SERVERS: [&str; 3] = ["s1", "s2", "s3"];
/// The sequence base of the agent's own reports.
const BASE: u64 = 1000;

/// The agent's two cores; no ramp at the end of a host report.
fn cores() -> [Doic; 2] {
    let mut cfg = DoicConfig {
        ramp: Duration::ZERO,
        ..DoicConfig::default()
    };
    for p in ["s1", "s2", "s3", "c"] {
        trust(&mut cfg, p);
    }
    let board = Arc::new(RealmBoard::new(BASE, cfg.max_ocs));
    [1, 2].map(|seed| Doic::with_realm_board("a", cfg.clone(), seed, BASE, board.clone()).unwrap())
}

/// The DOIC client `c` (loss).
fn c_features() -> OcSupportedFeatures {
    OcSupportedFeatures {
        feature_vector: Some(OLR_DEFAULT_ALGO),
        source_id: Some("c".into()),
        peer_algo: None,
    }
}

/// The three servers, `first` preferred.
fn candidates(first: usize) -> Vec<Candidate<'static>> {
    (0..3)
        .map(|i| SERVERS[(first + i) % 3])
        .map(|s| Candidate {
            peer: s,
            server: Some(s),
        })
        .collect()
}

fn owned(tx: PendingTx<'_>) -> PendingTx<'static> {
    PendingTx {
        app_id: tx.app_id,
        client: Cow::Owned(tx.client.into_owned()),
        client_features: tx.client_features.map(|f| Cow::Owned(f.into_owned())),
        client_peer_report: tx.client_peer_report,
        dest_realm: Cow::Owned(tx.dest_realm.into_owned()),
        upstream: Cow::Owned(tx.upstream.into_owned()),
    }
}

/// Worker 0 treats a realm-routed request of `from` (`c` announces DOIC),
/// `first` the preferred server; what it hands out goes to worker 1.
/// `None`: the agent throttled it.
fn treat(w: &mut [Doic; 2], now: Instant, from: &str, first: usize) -> Option<PendingTx<'static>> {
    let cf = c_features();
    let req = RequestView {
        app_id: APP,
        command_code: 272,
        from_peer: from,
        dest_realm: REALM,
        dest_host: None,
        features: (from == "c").then_some(&cf),
        drmp: None,
    };
    let t = w[0].treat(now, &req, &candidates(first));
    for r in w[0].take_replicas() {
        w[1].replicate(&r);
    }
    match t {
        Treatment::Forward { tx, .. } | Treatment::Divert { tx, .. } => Some(owned(tx)),
        Treatment::Throttle { .. } => None,
        Treatment::NoRoute => panic!("three servers"),
    }
}

/// Worker 1 handles the 2001 answer to `tx` from its server with `olrs`;
/// what it hands out goes to worker 0 when `pass` says so (else it is
/// returned in the actions).
fn answer_on_1(
    w: &mut [Doic; 2],
    now: Instant,
    tx: &PendingTx<'_>,
    olrs: &[OcOlr],
    pass: impl Fn(&Replica) -> bool,
) -> AnswerActions {
    let view = AnswerView {
        app_id: APP,
        origin_host: &tx.upstream,
        origin_realm: REALM,
        result_code: Some(2001),
        experimental_result_code: None,
        features: None,
        olrs,
    };
    let upstream = tx.upstream.clone();
    let mut act = w[1].on_answer(now, tx, &upstream, &view);
    let (now_, later): (Vec<_>, Vec<_>) = act.replicate.drain(..).partition(|r| pass(r));
    for r in &now_ {
        w[0].replicate(r);
    }
    act.replicate = later;
    act
}

fn host(seq: u64, percent: u32, validity: u32) -> OcOlr {
    let mut o = OcOlr::new(seq, ReportType::Host);
    o.reduction_percentage = Some(percent);
    o.validity_duration = Some(validity);
    o
}

fn realm_olrs(act: &AnswerActions) -> Vec<&OcOlr> {
    act.forward_reports
        .iter()
        .filter(|o| o.report_type == ReportType::Realm)
        .collect()
}

/// A request of `c` reaching server `i` first (the relay's choice), on
/// worker 0.
fn to_server(w: &mut [Doic; 2], now: Instant, i: usize) -> PendingTx<'static> {
    let tx = treat(w, now, "c", i).expect("nothing to throttle yet");
    assert_eq!(tx.upstream, SERVERS[i]);
    tx
}

/// Steps (1)-(8): S1 at 30 %, then S2 at 80 %, their host reports handled
/// by worker 1 (`pass` says which of its replicas reach worker 0 at once).
/// Returns the actions of S2's answer.
fn seed002_steps(w: &mut [Doic; 2], t0: Instant, pass: impl Fn(&Replica) -> bool) -> AnswerActions {
    let tx = to_server(w, t0, 0);
    let a1 = answer_on_1(w, t0, &tx, &[host(1, 30, 60)], |_| true);
    assert!(realm_olrs(&a1).is_empty(), "diversion suffices");
    let t = t0 + Duration::from_millis(1);
    let tx = to_server(w, t, 1);
    answer_on_1(w, t, &tx, &[host(1, 80, 60)], pass)
}

fn own(w: &Doic, now: Instant) -> Option<Report> {
    w.own_realm_report(now, APP, REALM)
}

#[test]
fn step_8_holds_across_workers_with_one_version_and_its_deliveries() {
    let mut w = cores();
    let t0 = Instant::now();
    let a2 = seed002_steps(&mut w, t0, |_| true);
    // (8) on worker 1, whose core never treated a realm-routed request:
    // (0.7 + 0.2 + 1.5) / 3 = 0.8, a 20 % realm report next to S2's.
    let realm = realm_olrs(&a2);
    assert_eq!(realm.len(), 1, "{:?}", a2.forward_reports);
    assert_eq!(realm[0].reduction_percentage, Some(20));
    assert_eq!(realm[0].sequence_number, BASE + 1);
    let t = t0 + Duration::from_millis(2);
    assert_eq!(own(&w[0], t), own(&w[1], t), "the same version on both");

    // One second of traffic, 1 ms apart, rotating first choices: `c` was
    // sent the report (by worker 1) and abates at the source, so worker 0
    // throttles none of its requests; every answer (worker 1) carries the
    // same version. The agent abates 20 % for the client `n` that was not.
    let mut throttled_n = 0;
    for i in 0..1000u32 {
        let now = t + Duration::from_millis(u64::from(i));
        let tx = treat(&mut w, now, "c", i as usize % 3).expect("delegated to c");
        let a = answer_on_1(&mut w, now, &tx, &[], |_| true);
        let r = realm_olrs(&a);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].sequence_number, r[0].reduction_percentage),
            (BASE + 1, Some(20))
        );
        throttled_n += u32::from(treat(&mut w, now, "n", i as usize % 3).is_none());
    }
    let share = f64::from(throttled_n) / 1000.0;
    // Binomial sd 1.3 pp over 1000; 5 pp is nearly 4 sd.
    assert!((share - 0.2).abs() < 0.05, "agent abates {share} for n");
    // Re-evaluated every 100 ms on both cores: still one version.
    let end = t + Duration::from_secs(1);
    for core in &w {
        assert_eq!(own(core, end).map(|r| r.sequence), Some(BASE + 1));
        let made: Vec<_> = core
            .audit()
            .versions()
            .filter(|v| v.own && v.key.report_type == ReportType::Realm)
            .map(|v| (v.event, v.sequence))
            .collect();
        assert_eq!(made, [(OcsEvent::Created, BASE + 1)]);
    }
}

#[test]
fn a_core_reaching_an_estimate_made_elsewhere_takes_that_version() {
    let mut w = cores();
    let t0 = Instant::now();
    // S2's host report reaches worker 0 at once, worker 1's realm version
    // (and its delivery to `c`) only later: worker 0 re-evaluates first.
    let a2 = seed002_steps(&mut w, t0, |r| matches!(r, Replica::Report(_)));
    assert_eq!(realm_olrs(&a2)[0].sequence_number, BASE + 1);
    let t = t0 + Duration::from_millis(2);
    // Worker 0 re-evaluates on its next realm-routed request (the host
    // report changed), reaches 20 % too, and takes worker 1's version.
    let _ = treat(&mut w, t, "n", 0);
    for core in &w {
        assert_eq!(
            own(core, t).map(|r| (r.sequence, r.abatement)),
            Some((BASE + 1, Abatement::Loss { percent: 20 })),
            "the same content, the same sequence number"
        );
    }
    // The held replicas arrive: nothing changes but the delivery to `c`.
    for r in &a2.replicate {
        w[0].replicate(r);
    }
    assert_eq!(own(&w[0], t).map(|r| r.sequence), Some(BASE + 1));
    for i in 0..200u32 {
        let now = t + Duration::from_millis(u64::from(i));
        assert!(
            treat(&mut w, now, "c", i as usize % 3).is_some(),
            "delegated"
        );
    }
}

#[test]
fn the_end_of_the_host_reports_ends_the_realm_report_on_both_cores() {
    let mut w = cores();
    let t0 = Instant::now();
    seed002_steps(&mut w, t0, |_| true);
    // S1 and S2 end their reports (validity 0, RFC 7683 §5.2.3); no ramp.
    let t1 = t0 + Duration::from_secs(1);
    for i in [0, 1] {
        let tx = to_server_even_if_abated(&mut w, t1, i);
        answer_on_1(&mut w, t1, &tx, &[host(2, 0, 0)], |_| true);
    }
    // The next re-evaluation (worker 0, on a realm-routed request) ends the
    // realm report: validity 0, a greater sequence number, on both cores.
    let t2 = t1 + Duration::from_millis(150);
    assert!(treat(&mut w, t2, "n", 0).is_some());
    for core in &w {
        let end = own(core, t2).expect("the end report");
        assert_eq!((end.sequence, end.validity), (BASE + 2, Duration::ZERO));
    }
    let tx = treat(&mut w, t2, "c", 2).unwrap();
    let a = answer_on_1(&mut w, t2, &tx, &[], |_| true);
    let r = realm_olrs(&a);
    assert_eq!(
        (r[0].sequence_number, r[0].validity_duration),
        (BASE + 2, Some(0))
    );
    // Nothing is abated any more; the end report goes for its validity
    // period (30 s), then no more.
    for i in 0..300u32 {
        let now = t2 + Duration::from_millis(u64::from(i));
        assert!(treat(&mut w, now, "n", i as usize % 3).is_some());
    }
    assert!(own(&w[1], t2 + Duration::from_secs(31)).is_none());
}

/// A request of `c` to server `i`, retried until the agent's diversion
/// lets it reach `i` (the host report of `i` diverts some away).
fn to_server_even_if_abated(w: &mut [Doic; 2], now: Instant, i: usize) -> PendingTx<'static> {
    for _ in 0..1000 {
        if let Some(tx) = treat(w, now, "c", i)
            && tx.upstream == SERVERS[i]
        {
            return tx;
        }
    }
    panic!("{} never chosen", SERVERS[i]);
}
