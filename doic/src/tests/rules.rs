//! One simulation per DOIC rule the core implements: capability announcement,
//! report acceptance, trust, sequence and validity, controlled ending, error
//! answers, and agent behaviour for non-DOIC clients.

use std::time::{Duration, Instant};

use super::fixtures::{
    REALM, answer_2001, host_n, loss, net, ocs, request_to_s1, trust, tx, via_s1,
};
use super::sim::{APP, Ans, Net, Req, tally};
use crate::audit::{OcsEvent, Verdict};
use crate::config::ThrottleResult;
use crate::engine::AnswerView;
use crate::features::{
    Algorithm, OC_PEER_REPORT, OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM, OcSupportedFeatures,
};
use crate::report::{Abatement, OcOlr, ReportType};
use crate::treatment::Treatment;
use crate::{Doic, DoicConfig, PeerPolicy};

#[test]
fn agent_inserts_features_for_non_doic_client() {
    // RFC 7683 §5.1.3: MUST include OC-Supported-Features in requests it
    // relays that do not contain one; RFC 8581 §6.1.1: OC_PEER_REPORT and the
    // agent's own SourceID; RFC 8582 §5: loss and rate.
    let mut net = net();
    host_n(&mut net, "s1");
    let (from, req) = net.server_mut("s1").last.clone().unwrap();
    assert_eq!(from, "a");
    let f = req.features.unwrap();
    assert_eq!(
        f.feature_vector,
        Some(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT)
    );
    assert_eq!(f.source_id.as_deref(), Some("a"));
}

#[test]
fn relayed_request_source_id_is_replaced() {
    // RFC 8581 §6.1.1: remove the received SourceID, put the agent's own.
    let mut net = net();
    net.send(Req::host("c", REALM, "s1"));
    let (_, req) = net.server_mut("s1").last.clone().unwrap();
    assert_eq!(req.features.unwrap().source_id.as_deref(), Some("a"));
}

#[test]
fn no_doic_avp_in_answer_to_request_without_one() {
    // RFC 7683 §5.1.2 (and §5.1.3 for the agent as reacting node).
    let mut net = net();
    net.overload("s1", ReportType::Host, 1, loss(10), 30);
    let a = host_n(&mut net, "s1");
    assert_eq!(a.features, None);
    assert!(a.olrs.is_empty());
    // The agent still acted on the report for the client (reacting node).
    assert!(ocs(&mut net, "a", ReportType::Host, "s1").is_some());
}

#[test]
fn answer_features_toward_doic_client() {
    // RFC 8581 §6.1.2: upstream SourceID stripped; the agent's SourceID and
    // OC-Peer-Algo added for a supporting peer.
    let mut net = net();
    let a = net.send(Req::host("c", REALM, "s1"));
    let f = a.features.unwrap();
    assert_eq!(f.source_id.as_deref(), Some("a"));
    assert!(f.peer_algo.is_some());
    assert!(f.feature_vector.unwrap() & OC_PEER_REPORT != 0);
}

#[test]
fn untrusted_peer_reports_are_stripped_and_ignored() {
    // RFC 7683 §10.2 and §10.4: MUST NOT honor or forward OLRs from untrusted
    // peers; MUST strip DOIC AVPs from them.
    let mut net = net();
    net.server("evil", REALM);
    net.host_route("c", "evil", &["a"]);
    net.overload("evil", ReportType::Host, 1, loss(100), 30);
    net.overload("evil", ReportType::Realm, 1, loss(100), 30);
    let a = net.send(Req::host("c", REALM, "evil"));
    assert!(a.olrs.is_empty(), "stripped: {:?}", a.olrs);
    let core = &net.agent_mut("a").core;
    assert!(core.ocs().is_empty());
    let verdicts: Vec<_> = core.audit().reports().map(|r| r.verdict.clone()).collect();
    assert_eq!(verdicts, [Verdict::Untrusted, Verdict::Untrusted]);
    // Realm traffic keeps flowing.
    assert_eq!(net.send_via("a", Req::realm("n", REALM)).code(), 2001);
}

#[test]
fn peer_report_with_foreign_source_id_is_ignored() {
    // RFC 8581 §6.2.3: SourceID not the peer's DiameterIdentity: MUST ignore.
    let mut net = net();
    net.overload("s1", ReportType::Peer, 1, loss(100), 30);
    let s1 = net.server_mut("s1");
    s1.reports.get_mut(&2).unwrap().source_id = Some("elsewhere".into());
    host_n(&mut net, "s1");
    let core = &net.agent_mut("a").core;
    assert!(core.ocs_entry(APP, ReportType::Peer, "s1").is_none());
    assert!(core.ocs_entry(APP, ReportType::Peer, "elsewhere").is_none());
    assert_eq!(
        core.audit().reports().last().unwrap().verdict,
        Verdict::NotFromPeer
    );
    // With the right SourceID it is accepted and acted on.
    net.overload("s1", ReportType::Peer, 2, loss(100), 30);
    host_n(&mut net, "s1");
    assert!(ocs(&mut net, "a", ReportType::Peer, "s1").is_some());
}

#[test]
fn peer_reports_are_never_relayed() {
    // RFC 8581 §6.2.5: an agent MUST strip the peer-report OC-OLR.
    let mut net = net();
    net.overload("s1", ReportType::Peer, 1, loss(20), 30);
    net.overload("s1", ReportType::Host, 1, loss(20), 30);
    let a = net.send(Req::host("c", REALM, "s1"));
    assert!(a.reports(ReportType::Peer).is_empty());
    assert_eq!(
        a.reports(ReportType::Host).len(),
        1,
        "the host report is forwarded"
    );
    assert!(ocs(&mut net, "c", ReportType::Peer, "s1").is_none());
    // RFC 7683 §5.2.1.3 / RFC 8581 §6.2.5: every report of the answer is
    // processed by the agent.
    let core = &net.agent_mut("a").core;
    assert!(core.ocs_entry(APP, ReportType::Peer, "s1").is_some());
    assert!(core.ocs_entry(APP, ReportType::Host, "s1").is_some());
}

#[test]
fn reports_only_to_peers_authorized_and_supporting_them() {
    // RFC 7683 §10.4: a node MUST NOT send an overload report to a peer not
    // authorized to receive it, and an agent MUST remove reports inserted by
    // others; RFC 7683 §5.2.3: no report type the peer did not advertise.
    let mut net = net();
    let no_pr = DoicConfig {
        peer_report: false,
        ..DoicConfig::default()
    };
    net.agent("c2", no_pr, &["a"], true);
    net.host_route("c2", "s1", &["a"]);
    net.agent("c3", DoicConfig::default(), &["a"], true);
    net.host_route("c3", "s1", &["a"]);
    let mut cfg = DoicConfig::default();
    for p in ["s1", "s2", "c", "c2"] {
        trust(&mut cfg, p);
    }
    cfg.peers.insert(
        "c3".into(),
        PeerPolicy {
            trusted: true,
            receive_reports: false,
            ..PeerPolicy::default()
        },
    );
    net.agent_mut("a").core = Doic::new("a", cfg, 3, 0).unwrap();
    let now = net.now();
    net.agent_mut("a").core.set_own_peer_report(
        now,
        Some(Abatement::Loss { percent: 1 }),
        Duration::from_secs(60),
    );
    net.overload("s1", ReportType::Host, 1, loss(1), 60);
    let counts = |a: &Ans| {
        (
            a.reports(ReportType::Host).len(),
            a.reports(ReportType::Peer).len(),
        )
    };
    // c supports peer reports: the host report and a's peer report.
    let to_c = net.send(Req::host("c", REALM, "s1"));
    assert_eq!(counts(&to_c), (1, 1));
    // c2 does not announce OC_PEER_REPORT: the host report only.
    let to_c2 = net.send(Req::host("c2", REALM, "s1"));
    assert_eq!(counts(&to_c2), (1, 0));
    // c3 may not receive reports: no DOIC AVP at all, and a abates for it.
    let to_c3 = net.send(Req::host("c3", REALM, "s1"));
    assert!(to_c3.olrs.is_empty() && to_c3.features.is_none());
    assert!(net.agent_mut("c3").core.ocs().is_empty());
    // An untrusted client's OC-Supported-Features is ignored the same way.
    net.agent("c4", DoicConfig::default(), &["a"], true);
    net.host_route("c4", "s1", &["a"]);
    let to_c4 = net.send(Req::host("c4", REALM, "s1"));
    assert!(to_c4.olrs.is_empty() && to_c4.features.is_none());
}

#[test]
fn treatment_order_host_then_peer_counting_first_step() {
    // RFC 8581 §5: host/realm first, then peer, taking into account what the
    // first step throttled. s1 reports host 30 % and peer 50 %: overall 50 %
    // of traffic toward s1 is removed, not 65 %.
    let mut net = net();
    net.host_route("a", "s1", &["s1"]);
    net.overload("s1", ReportType::Host, 1, loss(30), 60);
    net.overload("s1", ReportType::Peer, 1, loss(50), 60);
    host_n(&mut net, "s1");
    let n = 40_000;
    let answers: Vec<Ans> = (0..n).map(|_| host_n(&mut net, "s1")).collect();
    let t = tally(&answers);
    let removed = (n - t.get(&2001).copied().unwrap_or(0)) as f64 / n as f64;
    assert!((removed - 0.50).abs() < 0.015, "removed {removed}, {t:?}");
    // Host-caused throttles are 5012, peer-caused 3004 (RFC 7683 §8).
    let host_share = t.get(&5012).copied().unwrap_or(0) as f64 / n as f64;
    assert!((host_share - 0.30).abs() < 0.015, "host step {host_share}");
    assert!(t.get(&3004).copied().unwrap_or(0) > 0);
}

#[test]
fn peer_report_diverts_realm_traffic_before_throttling() {
    // RFC 8581 §6.2.5: diversion preferred, throttling only without capacity.
    let mut net = net();
    net.overload("s1", ReportType::Peer, 1, loss(100), 60);
    net.send_via("a", Req::realm("n", REALM));
    let answers: Vec<Ans> = (0..100)
        .map(|_| net.send_via("a", Req::realm("n", REALM)))
        .collect();
    assert!(
        answers
            .iter()
            .all(|a| a.code() == 2001 && a.served_by() == "s2")
    );
    let audit = net.agent_mut("a").core.audit().totals;
    assert!(audit.diverted >= 100);
}

#[test]
fn configured_throttle_result_retry_not_allowed() {
    // Seed 004: Experimental-Result 5198 where configured.
    let mut net = Net::new();
    net.server("s1", REALM);
    let cfg = DoicConfig {
        throttle_result: ThrottleResult::RetryNotAllowed,
        ..DoicConfig::default()
    };
    net.agent("a", cfg, &["s1"], false);
    net.overload("s1", ReportType::Host, 1, loss(100), 30);
    host_n(&mut net, "s1");
    let a = host_n(&mut net, "s1");
    assert_eq!((a.experimental, a.result_code), (Some(5198), None));
}

fn core_with(peers: &[&str]) -> Doic {
    let mut cfg = DoicConfig::default();
    for p in peers {
        trust(&mut cfg, p);
    }
    Doic::new("a", cfg, 1, 0).unwrap()
}

fn host_olr(seq: u64) -> OcOlr {
    let mut o = OcOlr::new(seq, ReportType::Host);
    o.reduction_percentage = Some(50);
    o
}

/// A host report (sequence 1) of the rate algorithm: `rate` requests/s.
fn host_rate_olr(rate: u32) -> OcOlr {
    OcOlr {
        maximum_rate: Some(rate),
        reduction_percentage: None,
        ..host_olr(1)
    }
}

/// OC-Supported-Features offering the rate algorithm only (RFC 8582 §5).
fn rate_only() -> OcSupportedFeatures {
    OcSupportedFeatures {
        feature_vector: Some(OLR_RATE_ALGORITHM),
        ..OcSupportedFeatures::default()
    }
}

#[test]
fn received_5198_forbids_retry_on_alternate() {
    // Seed 004: a 5198 answer means no retry on an alternate path.
    let mut core = core_with(&["s1"]);
    let now = Instant::now();
    let mut view = AnswerView {
        app_id: APP,
        origin_host: "s1",
        origin_realm: REALM,
        result_code: None,
        experimental_result_code: Some(5198),
        features: None,
        olrs: &[],
    };
    assert!(
        !core
            .on_answer(now, &tx("s1"), "s1", &view)
            .retry_on_alternate
    );
    view.experimental_result_code = None;
    view.result_code = Some(3004);
    assert!(
        core.on_answer(now, &tx("s1"), "s1", &view)
            .retry_on_alternate
    );
}

#[test]
fn reports_only_from_the_pending_requests_peer_and_realm() {
    // RFC 7683 §10.1: act only on a proper answer to a pending request, and
    // only on reports within the peer's responsibility.
    let mut core = core_with(&["s1", "s2"]);
    let now = Instant::now();
    let olrs = [host_olr(1)];
    let view = answer_2001(None, &olrs);
    core.on_answer(now, &tx("s2"), "s1", &view);
    assert!(
        core.ocs().is_empty(),
        "answer from a peer the request was not sent to"
    );
    let realm_olr = [OcOlr {
        report_type: ReportType::Realm,
        ..host_olr(1)
    }];
    let other = AnswerView {
        origin_realm: "competitor.example",
        olrs: &realm_olr,
        ..view
    };
    core.on_answer(now, &tx("s1"), "s1", &other);
    assert!(
        core.ocs().is_empty(),
        "realm report for a realm not asked for"
    );
    let verdicts: Vec<_> = core.audit().reports().map(|r| r.verdict.clone()).collect();
    assert_eq!(verdicts, [Verdict::OutOfScope, Verdict::OutOfScope]);
    core.on_answer(now, &tx("s1"), "s1", &view);
    assert_eq!(core.ocs().len(), 1);
}

#[test]
fn forged_report_flood_is_bounded() {
    // RFC 7683 §10.2: forged reports cannot exhaust memory.
    let mut cfg = DoicConfig {
        max_ocs: 64,
        ..DoicConfig::default()
    };
    trust(&mut cfg, "s1");
    let mut core = Doic::new("a", cfg, 1, 0).unwrap();
    let now = Instant::now();
    let olrs = [host_olr(1)];
    for i in 0..10_000 {
        let host = format!("h{i}");
        let view = AnswerView {
            origin_host: &host,
            ..answer_2001(None, &olrs)
        };
        core.on_answer(now, &tx("s1"), "s1", &view);
    }
    assert_eq!(core.ocs().len(), 64);
    assert!(
        core.audit()
            .reports()
            .any(|r| r.verdict == Verdict::TableFull)
    );
}

#[test]
fn algorithm_selection_must_be_single_and_offered() {
    // RFC 7683 §5.1.2: one algorithm, from the offered set; otherwise the
    // reports of that answer are not acted on.
    let mut core = core_with(&["s1"]);
    let now = Instant::now();
    let olrs = [host_olr(1)];
    let both = OcSupportedFeatures {
        feature_vector: Some(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM),
        ..OcSupportedFeatures::default()
    };
    let view = answer_2001(Some(&both), &olrs);
    core.on_answer(now, &tx("s1"), "s1", &view);
    assert!(core.ocs().is_empty());
    assert!(matches!(
        core.audit().reports().last().unwrap().verdict,
        Verdict::Invalid(_)
    ));
    // Rate offered only when configured: a loss-only agent rejects rate.
    let mut cfg = DoicConfig {
        algorithms: vec![Algorithm::Loss],
        ..DoicConfig::default()
    };
    trust(&mut cfg, "s1");
    let mut loss_only = Doic::new("a", cfg, 1, 0).unwrap();
    assert_eq!(loss_only.vector() & OLR_RATE_ALGORITHM, 0);
    let rate = rate_only();
    let rate_olr = [host_rate_olr(10)];
    let view = AnswerView {
        features: Some(&rate),
        olrs: &rate_olr,
        ..view
    };
    loss_only.on_answer(now, &tx("s1"), "s1", &view);
    assert!(loss_only.ocs().is_empty());
}

#[test]
fn rate_report_not_forwarded_to_loss_only_client_agent_abates_instead() {
    // RFC 7683 §5.1.3: the agent advertises a superset and keeps consistency:
    // a client that does not support rate is not sent a rate report; the
    // agent abates for it.
    let mut net = Net::new();
    net.server("s1", REALM);
    net.agent("a", DoicConfig::default(), &["s1", "c"], false);
    let cfg = DoicConfig {
        algorithms: vec![Algorithm::Loss],
        ..DoicConfig::default()
    };
    net.agent("c", cfg, &["a"], true);
    net.host_route("c", "s1", &["a"]);
    net.overload(
        "s1",
        ReportType::Host,
        1,
        Abatement::Rate { per_second: 0 },
        30,
    );
    let a = net.send(Req::host("c", REALM, "s1"));
    assert!(a.olrs.is_empty());
    assert_eq!(
        a.features.unwrap().feature_vector.map(|v| v & 0x5),
        Some(OLR_DEFAULT_ALGO)
    );
    let b = net.send(Req::host("c", REALM, "s1"));
    assert_eq!(
        (b.path.as_slice(), b.code()),
        (&["c".to_owned(), "a".to_owned()][..], 5012)
    );
}

#[test]
fn rate_priority_from_drmp_admits_high_priority_first() {
    // RFC 8582 §8.3.2 with DRMP (RFC 7944) priorities: at overload, priority
    // requests get the band between TAU1 and TAU2.
    let mut core = core_with(&["s1"]);
    let t0 = Instant::now();
    let rate = rate_only();
    let olrs = [host_rate_olr(100)];
    let view = answer_2001(Some(&rate), &olrs);
    core.on_answer(t0, &tx("s1"), "s1", &view);
    let cands = via_s1();
    let mut passed = [0u32; 2];
    for i in 0..4000u32 {
        let now = t0 + Duration::from_micros(u64::from(i) * 1000);
        let high = i % 2 == 0;
        let req = request_to_s1(Some(if high { 1 } else { 10 }));
        if matches!(core.treat(now, &req, &cands), Treatment::Forward { .. }) {
            passed[usize::from(high)] += 1;
        }
    }
    // 4 s at 1000/s offered, 100/s allowed: about 400 pass, mostly priority.
    let total = passed[0] + passed[1];
    assert!((390..=415).contains(&total), "passed {passed:?}");
    assert!(passed[1] > 3 * passed[0], "priority first: {passed:?}");
}

#[test]
fn evidence_counters_add_up() {
    // Seed 003: matched = passed + diverted + throttled + delegated, per version.
    let mut net = net();
    net.overload("s1", ReportType::Host, 1, loss(40), 60);
    net.send(Req::realm("c", REALM));
    for _ in 0..500 {
        host_n(&mut net, "s1");
        net.send_via("a", Req::realm("n", REALM));
        net.send(Req::host("c", REALM, "s1"));
    }
    // A new version closes the counters of the previous one into the trail.
    net.overload("s1", ReportType::Host, 2, loss(10), 60);
    host_n(&mut net, "s1");
    let core = &net.agent_mut("a").core;
    let closed = core
        .audit()
        .versions()
        .find(|v| v.event == OcsEvent::Updated)
        .unwrap()
        .closed_counts;
    assert_eq!(
        closed.matched,
        closed.passed + closed.diverted + closed.throttled + closed.delegated
    );
    assert!(
        closed.throttled > 0 && closed.diverted > 0 && closed.delegated > 0,
        "{closed:?}"
    );
    let totals = core.audit().totals;
    assert_eq!(
        totals.requests,
        totals.forwarded + totals.diverted + totals.throttled
    );
}

#[test]
fn agent_made_answers_carry_its_doic_avps() {
    // RFC 7683 §5.1.2 and RFC 8581 §6.2.4: the agent's own answers (throttles)
    // carry its OC-Supported-Features and its peer report toward a supporting
    // peer, and nothing toward a request without OC-Supported-Features.
    let mut net = net();
    net.host_route("a", "s1", &["s1"]);
    net.overload("s1", ReportType::Peer, 1, loss(100), 60);
    host_n(&mut net, "s1");
    let now = net.now();
    net.agent_mut("a").core.set_own_peer_report(
        now,
        Some(Abatement::Loss { percent: 5 }),
        Duration::from_secs(60),
    );
    // c's host-routed request to s1 is throttled by a (s1's peer report, no
    // alternate): 3004, with a's features and a's peer report.
    let t = net.send(Req::host("c", REALM, "s1"));
    assert_eq!(
        (t.path.as_slice(), t.code()),
        (&["c".to_owned(), "a".to_owned()][..], 3004)
    );
    let f = t.features.clone().unwrap();
    assert_eq!(f.source_id.as_deref(), Some("a"));
    let own = t.reports(ReportType::Peer);
    assert_eq!((own.len(), own[0].source_id.as_deref()), (1, Some("a")));
    // The non-DOIC client's throttle answer has no DOIC AVP.
    let n = host_n(&mut net, "s1");
    assert_eq!(
        (n.code(), n.features.is_none(), n.olrs.is_empty()),
        (3004, true, true)
    );
}

#[test]
fn one_server_host_report_is_applied_once_to_realm_traffic() {
    // RFC 7683 §6.1: the reacting node abates the requested percentage. With
    // one server in the realm the agent's own realm report (seed 002) says
    // the same thing as the host report; applying both abated 75 % instead
    // of 50 % (found by the relay's end-to-end test).
    let mut net = Net::new();
    net.server("s1", REALM);
    net.agent("a", DoicConfig::default(), &["s1"], false);
    net.realm_route("a", REALM, &[("s1", Some("s1"))]);
    net.overload("s1", ReportType::Host, 1, loss(50), 60);
    let n = 20_000;
    let answers: Vec<Ans> = (0..n)
        .map(|_| net.send_via("a", Req::realm("n", REALM)))
        .collect();
    let t = tally(&answers);
    let throttled = *t.get(&5012).unwrap_or(&0) as f64 / f64::from(n);
    assert!(
        (throttled - 0.5).abs() < 0.02,
        "throttled share {throttled}: {t:?}"
    );
}
