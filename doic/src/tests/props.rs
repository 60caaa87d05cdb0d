//! Property tests: arbitrary answers never panic the core, the OCS table stays
//! bounded, and a stored sequence number only moves forward (or rolls over,
//! RFC 7683 §5.2.1.3).

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::sim::APP;
use crate::audit::OcsEvent;
use crate::engine::AnswerView;
use crate::features::OcSupportedFeatures;
use crate::report::{OcOlr, ReportType};
use crate::treatment::{Candidate, PendingTx, RequestView, Treatment};
use crate::{Doic, DoicConfig, PeerPolicy};

/// RFC 7683 §5.2.1.3, written out independently of the implementation:
/// greater, or from within 1 % of the maximum to within 1 % of the minimum.
fn newer(stored: u64, received: u64) -> bool {
    let one_percent = u64::MAX / 100;
    received > stored || (stored >= u64::MAX - one_percent && received <= one_percent)
}

fn report_type() -> impl Strategy<Value = ReportType> {
    prop_oneof![
        Just(ReportType::Host),
        Just(ReportType::Realm),
        Just(ReportType::Peer),
        any::<i32>().prop_map(ReportType::Other),
    ]
}

fn olr() -> impl Strategy<Value = OcOlr> {
    (
        prop_oneof![0u64..8, (u64::MAX - 8)..=u64::MAX, any::<u64>()],
        report_type(),
        proptest::option::of(prop_oneof![0u32..=101, any::<u32>()]),
        proptest::option::of(prop_oneof![0u32..=3, any::<u32>()]),
        proptest::option::of(prop_oneof![Just("s1".to_owned()), Just("x".to_owned())]),
        proptest::option::of(0u32..2000),
    )
        .prop_map(|(seq, rt, red, val, src, rate)| {
            let mut o = OcOlr::new(seq, rt);
            o.reduction_percentage = red;
            o.validity_duration = val;
            o.source_id = src;
            o.maximum_rate = rate;
            o
        })
}

fn features() -> impl Strategy<Value = Option<OcSupportedFeatures>> {
    proptest::option::of(
        (
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(|(v, p)| OcSupportedFeatures {
                feature_vector: v,
                source_id: Some("s1".into()),
                peer_algo: p,
            }),
    )
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof![Just("s1".to_owned()), Just("s2".to_owned()), "[a-z]{1,3}"]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_answers_never_panic_and_tables_stay_bounded(
        steps in proptest::collection::vec((host(), features(), proptest::collection::vec(olr(), 0..4), 0u64..5_000), 1..40),
    ) {
        let mut cfg = DoicConfig { max_ocs: 8, ..DoicConfig::default() };
        cfg.peers.insert("s1".into(), PeerPolicy { trusted: true, receive_reports: true, ..PeerPolicy::default() });
        let mut core = Doic::new("a", cfg, 7, 0).unwrap();
        let mut now = Instant::now();
        for (origin, f, olrs, dt) in steps {
            now += Duration::from_millis(dt);
            let tx = PendingTx {
                app_id: APP,
                client: "c".into(),
                client_features: Some(std::borrow::Cow::Owned(OcSupportedFeatures::default())),
                client_peer_report: true,
                dest_realm: "realm".into(),
                upstream: "s1".into(),
            };
            let view = AnswerView {
                app_id: APP,
                origin_host: &origin,
                origin_realm: "realm",
                result_code: Some(2001),
                experimental_result_code: None,
                features: f.as_ref(),
                olrs: &olrs,
            };
            let act = core.on_answer(now, &tx, "s1", &view);
            // Never an upstream peer report downstream (RFC 8581 §6.2.5),
            // except the agent's own (none is set here).
            prop_assert!(act.forward_reports.iter().all(|o| o.report_type != ReportType::Peer));
            prop_assert!(core.ocs().len() <= 8);
            // Every request still gets exactly one treatment.
            let req = RequestView {
                app_id: APP,
                command_code: 272,
                from_peer: "n",
                dest_realm: "realm",
                dest_host: Some(&origin),
                features: None,
                drmp: Some(3),
            };
            let c = [Candidate { peer: "s1", server: Some("s1") }, Candidate { peer: "s2", server: Some("s2") }];
            // Now and then no route at all.
            let route: &[Candidate<'_>] = if dt % 7 == 0 { &[] } else { &c };
            let t = core.treat(now, &req, route);
            let ok = match t {
                Treatment::NoRoute => route.is_empty(),
                Treatment::Forward { index, .. } | Treatment::Divert { index, .. } => index < route.len(),
                Treatment::Throttle { .. } => true,
            };
            prop_assert!(ok);
            // Seed 003 denominators: every matched request has one outcome.
            for o in core.ocs().iter() {
                let c = o.counts;
                prop_assert_eq!(c.matched, c.passed + c.diverted + c.throttled + c.delegated, "{:?}", o.key);
            }
        }
        // Along each OCS's recorded history, every new version has a newer
        // sequence (greater, or rolled over), until the entry is removed.
        let mut last: std::collections::HashMap<(i32, String), u64> = Default::default();
        for v in core.audit().versions().filter(|v| !v.own) {
            let k = (v.key.report_type.value(), v.key.id.clone());
            match v.event {
                OcsEvent::Created => {
                    prop_assert!(!last.contains_key(&k), "created twice: {k:?}");
                    last.insert(k, v.sequence);
                }
                OcsEvent::Updated | OcsEvent::Ended => {
                    let prev = last.get(&k).copied();
                    prop_assert!(prev.is_some_and(|p| newer(p, v.sequence)),
                        "{prev:?} -> {} for {k:?}", v.sequence);
                    last.insert(k, v.sequence);
                }
                OcsEvent::Removed | OcsEvent::Untrusted => {
                    last.remove(&k);
                }
                OcsEvent::Expired | OcsEvent::Ramping => {}
            }
        }
        let totals = core.audit().totals;
        prop_assert_eq!(
            totals.requests,
            totals.forwarded + totals.diverted + totals.throttled + totals.no_route
        );
    }
}
