//! Seed 002 (draft-docdt-dime-ovli-01 appendix C.3): a mix of
//! Destination-Realm and Destination-Host routed requests through one agent in
//! front of S1, S2 and S3, step by step.

use super::sim::{Ans, Net, Req, tally};
use crate::DoicConfig;
use crate::audit::OcsEvent;
use crate::report::{Abatement, ReportType};

const REALM: &str = "realm";

/// Client C (DOIC), non-DOIC client N, agent A, servers S1..S3.
fn network() -> Net {
    network_with(DoicConfig::default())
}

/// [`network`] with agent A configured by `a`.
fn network_with(a: DoicConfig) -> Net {
    let mut net = Net::new();
    for s in ["s1", "s2", "s3"] {
        net.server(s, REALM);
    }
    net.agent("a", a, &["s1", "s2", "s3", "c"], false);
    net.realm_route(
        "a",
        REALM,
        &[("s1", Some("s1")), ("s2", Some("s2")), ("s3", Some("s3"))],
    );
    net.agent_mut("a").round_robin = true;
    net.agent("c", DoicConfig::default(), &["a"], true);
    net.realm_route("c", REALM, &[("a", None)]);
    for s in ["s1", "s2", "s3"] {
        net.host_route("c", s, &["a"]);
    }
    net
}

fn share(answers: &[Ans], pred: impl Fn(&Ans) -> bool) -> f64 {
    answers.iter().filter(|a| pred(a)).count() as f64 / answers.len() as f64
}

#[test]
fn seed002_mixed_host_and_realm_routing() {
    let mut net = network();
    net.overload(
        "s1",
        ReportType::Host,
        1,
        Abatement::Loss { percent: 30 },
        60,
    );

    // (1)-(2): C sends a realm-routed request; A selects S1.
    let a1 = net.send(Req::realm("c", REALM));
    assert_eq!(a1.path, ["c", "a", "s1"]);
    // (3)-(4): S1 answers with a host report; A records it and forwards it.
    let host = a1.reports(ReportType::Host);
    assert_eq!(host.len(), 1, "S1's host report is forwarded to the client");
    assert_eq!(host[0].reduction_percentage, Some(30));
    assert!(
        a1.reports(ReportType::Realm).is_empty(),
        "the realm is not overloaded yet"
    );
    assert!(
        net.agent_mut("a")
            .core
            .ocs_entry(16_777_238, ReportType::Host, "s1")
            .is_some()
    );
    // The client now holds S1's host OCS (it abates DH:S1 itself).
    assert!(
        net.agent_mut("c")
            .core
            .ocs_entry(16_777_238, ReportType::Host, "s1")
            .is_some()
    );
    assert!(
        net.agent_mut("c")
            .core
            .ocs_entry(16_777_238, ReportType::Realm, REALM)
            .is_none()
    );

    // A diverts the reported share of realm traffic from S1 to S2 and S3,
    // throttling none of it.
    let before = net.server_mut("s1").received;
    let answers: Vec<Ans> = (0..3000)
        .map(|_| net.send_via("a", Req::realm("n", REALM)))
        .collect();
    assert_eq!(
        tally(&answers).get(&2001),
        Some(&3000),
        "diversion, no throttling"
    );
    let to_s1 = net.server_mut("s1").received - before;
    // 1000 requests chose S1 first; about 30 % of them were diverted.
    assert!(
        (640..=760).contains(&to_s1),
        "S1 got {to_s1} of 1000 first choices"
    );

    // The client throttles DH:S1 at its own end; A does not throttle again.
    let dh: Vec<Ans> = (0..2000)
        .map(|_| net.send(Req::host("c", REALM, "s1")))
        .collect();
    let at_client = share(&dh, |a| a.path == ["c"] && a.code() == 5012);
    assert!(
        (at_client - 0.30).abs() < 0.035,
        "client-side share {at_client}"
    );
    assert!(
        dh.iter().all(|a| a.path.len() == 1 || a.code() == 2001),
        "A delegated to C"
    );
    // The non-DOIC client's DH:S1 requests are throttled by A with 5012.
    let dh_n: Vec<Ans> = (0..2000)
        .map(|_| net.send_via("a", Req::host("n", REALM, "s1")))
        .collect();
    let at_agent = share(&dh_n, |a| a.path == ["a"] && a.code() == 5012);
    assert!(
        (at_agent - 0.30).abs() < 0.035,
        "agent-side share {at_agent}"
    );

    // (5)-(7): S2 is overloaded too; A selects S2 for C's next realm request.
    net.overload(
        "s2",
        ReportType::Host,
        1,
        Abatement::Loss { percent: 80 },
        60,
    );
    let a2 = loop {
        let a = net.send(Req::realm("c", REALM));
        if a.served_by() == "s2" {
            break a;
        }
    };
    // (8): S2's host report is forwarded, and A adds a realm report: with S1
    // at 30 %, S2 at 80 % and S3 taking at most 1.5 shares, the realm can carry
    // (0.7 + 0.2 + 1.5) / 3 = 80 % of its traffic.
    let h2 = a2.reports(ReportType::Host);
    assert_eq!(h2.len(), 1);
    assert_eq!(h2[0].reduction_percentage, Some(80));
    let realm = a2.reports(ReportType::Realm);
    assert_eq!(
        realm.len(),
        1,
        "A synthesises a realm report: {:?}",
        a2.olrs
    );
    assert_eq!(realm[0].reduction_percentage, Some(20));
    assert!(realm[0].validity_duration.is_some_and(|v| v > 0));

    // The client throttles DH:S1, DH:S2 and DR:realm each at its own rate,
    // and does not throttle DH:S3.
    let c = &mut net.agent_mut("c").core;
    let app = super::sim::APP;
    let pct = |c: &crate::Doic, rt, id| c.ocs_entry(app, rt, id).map(|o| o.abatement);
    assert_eq!(
        pct(c, ReportType::Host, "s1"),
        Some(Abatement::Loss { percent: 30 })
    );
    assert_eq!(
        pct(c, ReportType::Host, "s2"),
        Some(Abatement::Loss { percent: 80 })
    );
    assert_eq!(
        pct(c, ReportType::Realm, REALM),
        Some(Abatement::Loss { percent: 20 })
    );
    assert_eq!(pct(c, ReportType::Host, "s3"), None);
    let dr: Vec<Ans> = (0..4000)
        .map(|_| net.send(Req::realm("c", REALM)))
        .collect();
    let dr_client = share(&dr, |a| a.path == ["c"]);
    assert!(
        (dr_client - 0.20).abs() < 0.03,
        "client throttles realm traffic: {dr_client}"
    );
    let s3: Vec<Ans> = (0..500)
        .map(|_| net.send(Req::host("c", REALM, "s3")))
        .collect();
    assert_eq!(tally(&s3).get(&2001), Some(&500), "DH:S3 untouched");

    // Non-DOIC clients: A applies its own realm report for them (5012).
    let n: Vec<Ans> = (0..4000)
        .map(|_| net.send_via("a", Req::realm("n", REALM)))
        .collect();
    let n_thr = share(&n, |a| a.path == ["a"] && a.code() == 5012);
    assert!(
        (n_thr - 0.20).abs() < 0.03,
        "agent throttles for non-DOIC client: {n_thr}"
    );

    // Evidence: A's own realm report is a recorded OCS version.
    let audit = net.agent_mut("a").core.audit();
    assert!(audit.versions().any(|v| v.own
        && v.key.report_type == ReportType::Realm
        && v.event == OcsEvent::Created
        && v.abatement == Abatement::Loss { percent: 20 }));
}

#[test]
fn seed002_realm_report_ends_when_capacity_returns() {
    let mut net = network();
    net.overload(
        "s1",
        ReportType::Host,
        1,
        Abatement::Loss { percent: 60 },
        5,
    );
    net.overload(
        "s2",
        ReportType::Host,
        1,
        Abatement::Loss { percent: 90 },
        5,
    );
    for _ in 0..6 {
        net.send(Req::realm("c", REALM));
    }
    let now = net.now();
    let r = net
        .agent_mut("a")
        .core
        .own_realm_report(now, super::sim::APP, REALM)
        .unwrap();
    // (0.4 + 0.1 + 1.5) / 3 = 0.667 -> 34 %.
    assert_eq!(r.abatement, Abatement::Loss { percent: 34 });
    // The servers recover: their reports end (validity 0, new sequence).
    net.overload("s1", ReportType::Host, 2, Abatement::Loss { percent: 0 }, 0);
    net.overload("s2", ReportType::Host, 2, Abatement::Loss { percent: 0 }, 0);
    // Non-DOIC traffic reaches every server (a diverted request may miss one).
    for _ in 0..30 {
        net.send_via("a", Req::realm("n", REALM));
    }
    net.server_mut("s1").reports.clear();
    net.server_mut("s2").reports.clear();
    // RFC 7683 §5.2.3: the realm report decreases in a controlled fashion,
    // following the servers' host OCS through their ramps.
    net.advance(std::time::Duration::from_secs(5));
    net.send_via("a", Req::realm("n", REALM));
    let now = net.now();
    let mid = net
        .agent_mut("a")
        .core
        .own_realm_report(now, super::sim::APP, REALM)
        .unwrap();
    let Abatement::Loss { percent } = mid.abatement else {
        panic!("loss expected")
    };
    assert!(
        (1..34).contains(&percent),
        "half way through the ramps: {percent} %"
    );
    // After the host OCS ramps are over, the realm report ends with validity 0.
    net.advance(std::time::Duration::from_secs(15));
    let ans: Vec<Ans> = (0..6).map(|_| net.send(Req::realm("c", REALM))).collect();
    let end = ans
        .iter()
        .flat_map(|a| a.reports(ReportType::Realm))
        .last()
        .unwrap();
    assert_eq!(
        end.validity_duration,
        Some(0),
        "end of the realm overload is signalled"
    );
    assert!(
        end.sequence_number > r.sequence,
        "with a greater sequence number"
    );
}

/// Seed 002 steps (5)-(8) toward a client whose application grammar has a
/// single `[ OC-OLR ]` (`olrs_per_answer = 1`): no answer carries two; S2's
/// host report rides on S2's answers, the agent's realm report on answers
/// with room (from S3, which reports nothing), and the client ends up with
/// both states, abating realm traffic once.
#[test]
fn one_olr_per_answer_still_delivers_every_report_one_at_a_time() {
    let mut net = network_with(DoicConfig {
        olrs_per_answer: Some(1),
        ..DoicConfig::default()
    });
    net.overload(
        "s1",
        ReportType::Host,
        1,
        Abatement::Loss { percent: 30 },
        60,
    );
    let a1 = net.send(Req::realm("c", REALM));
    assert_eq!(a1.olrs.len(), 1);
    net.overload(
        "s2",
        ReportType::Host,
        1,
        Abatement::Loss { percent: 80 },
        60,
    );
    let answers: Vec<Ans> = (0..3000)
        .map(|_| net.send(Req::realm("c", REALM)))
        .collect();
    assert!(
        answers.iter().all(|a| a.olrs.len() <= 1),
        "one OC-OLR at most"
    );
    assert!(
        answers
            .iter()
            .any(|a| a.reports(ReportType::Host).len() == 1 && a.served_by() == "s2"),
        "S2's host report reached C"
    );
    assert!(
        answers
            .iter()
            .any(|a| a.reports(ReportType::Realm).len() == 1 && a.served_by() == "s3"),
        "the agent's realm report reached C on an answer with room"
    );
    let c = &mut net.agent_mut("c").core;
    assert_eq!(
        c.ocs_entry(super::sim::APP, ReportType::Realm, REALM)
            .map(|o| o.abatement),
        Some(Abatement::Loss { percent: 20 })
    );
    // C abates realm traffic itself; A, which delivered the report, does not
    // abate it again.
    let dr: Vec<Ans> = (0..4000)
        .map(|_| net.send(Req::realm("c", REALM)))
        .collect();
    let at_client = share(&dr, |a| a.path == ["c"]);
    assert!(
        (at_client - 0.20).abs() < 0.03,
        "client throttles realm traffic: {at_client}"
    );
    assert!(
        dr.iter().all(|a| a.path.len() == 1 || a.code() == 2001),
        "nothing abated twice"
    );
}
