//! Several workers of one agent: each runs its own core, and the reports one
//! accepts are replicated to the others ([`crate::Doic::replicate`]).
//! The rate bucket of a rate OCS is shared, so the maximum rate holds for the
//! agent as a whole, not per worker.

use std::time::{Duration, Instant};

use super::fixtures::{answer_2001, request_to_s1, trust, tx, via_s1};
use super::sim::APP;
use crate::features::{OLR_RATE_ALGORITHM, OcSupportedFeatures};
use crate::report::{OcOlr, ReportType};
use crate::treatment::{AnswerActions, Treatment};
use crate::{Doic, DoicConfig};

fn workers(n: u64) -> Vec<Doic> {
    let mut cfg = DoicConfig::default();
    trust(&mut cfg, "s1");
    (0..n)
        .map(|i| Doic::new("a", cfg.clone(), i + 1, 0).unwrap())
        .collect()
}

fn answer(
    core: &mut Doic,
    now: Instant,
    olr: OcOlr,
    features: Option<&OcSupportedFeatures>,
) -> AnswerActions {
    let olrs = [olr];
    let view = answer_2001(features, &olrs);
    core.on_answer(now, &tx("s1"), "s1", &view)
}

fn forwarded(core: &mut Doic, now: Instant) -> bool {
    let req = request_to_s1(None);
    matches!(core.treat(now, &req, &via_s1()), Treatment::Forward { .. })
}

#[test]
fn rate_holds_across_workers_with_a_shared_bucket() {
    // RFC 8582 §6.6: the agent as a whole MUST limit traffic to the rate.
    let mut w = workers(4);
    let t0 = Instant::now();
    let mut olr = OcOlr::new(1, ReportType::Host);
    olr.maximum_rate = Some(200);
    let rate = OcSupportedFeatures {
        feature_vector: Some(OLR_RATE_ALGORITHM),
        ..OcSupportedFeatures::default()
    };
    let act = answer(&mut w[0], t0, olr, Some(&rate));
    assert_eq!(act.replicate.len(), 1);
    for other in &mut w[1..] {
        other.replicate(&act.replicate[0]);
    }
    // 10 s at 2000/s spread over the four workers.
    let gap = Duration::from_micros(500);
    let mut sent = 0;
    for i in 0..20_000u32 {
        let now = t0 + gap * i;
        sent += u32::from(forwarded(&mut w[(i % 4) as usize], now));
    }
    assert!(
        (1990..=2040).contains(&sent),
        "sent {sent}, rate 200/s over 10 s"
    );
}

#[test]
fn replicas_follow_the_sequence_rules() {
    let mut w = workers(2);
    let t0 = Instant::now();
    let mut newer = OcOlr::new(5, ReportType::Host);
    newer.reduction_percentage = Some(100);
    let mut older = OcOlr::new(4, ReportType::Host);
    older.reduction_percentage = Some(0);
    let a_new = answer(&mut w[0], t0, newer, None);
    let a_old = answer(&mut w[0], t0, older, None);
    assert!(
        a_old.replicate.is_empty(),
        "a stale report is not replicated"
    );
    // Worker 1 sees the replica; a late older one from elsewhere changes nothing.
    w[1].replicate(&a_new.replicate[0]);
    let crate::treatment::Replica::Report(mut stale) = a_new.replicate[0].clone() else {
        panic!("a report replica")
    };
    stale.report.sequence = 3;
    stale.report.abatement = crate::report::Abatement::Loss { percent: 0 };
    w[1].replicate(&crate::treatment::Replica::Report(stale));
    assert!(!forwarded(&mut w[1], t0), "worker 1 abates with sequence 5");
    let o = w[1].ocs_entry(APP, ReportType::Host, "s1").unwrap();
    assert_eq!(o.sequence, 5);
    // Expiry counts from when the answer was handled, not when replicated.
    assert_eq!(o.expires_at, t0 + Duration::from_secs(30));
}
