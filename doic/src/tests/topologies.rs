//! The agent topologies of RFC 8581 §4.1: a single agent, redundant agents,
//! and agent chains, each with the agent's own peer report.

use std::time::Duration;

use super::fixtures;
use super::sim::{APP, Ans, Net, Req, tally};
use crate::DoicConfig;
use crate::features::{OC_PEER_REPORT, OLR_DEFAULT_ALGO};
use crate::report::{Abatement, ReportType};

const REALM: &str = "realm";

fn count(answers: &[Ans], pred: impl Fn(&Ans) -> bool) -> usize {
    answers.iter().filter(|a| pred(a)).count()
}

#[test]
fn single_agent_client_throttles_on_agent_peer_report() {
    // RFC 8581 §4.1.1 Figure 2: c -- a -- {s1, s2}; a is overloaded.
    let mut net = fixtures::net();
    let now = net.now();
    net.agent_mut("a").core.set_own_peer_report(
        now,
        Some(Abatement::Loss { percent: 40 }),
        Duration::from_secs(60),
    );

    let first = net.send(Req::realm("c", REALM));
    // RFC 8581 §6.1.2: toward a supporting peer, SourceID and OC-Peer-Algo.
    let f = first.features.clone().unwrap();
    assert_eq!(f.source_id.as_deref(), Some("a"));
    assert!(f.feature_vector.unwrap() & OC_PEER_REPORT != 0);
    assert!(f.peer_algo.is_some());
    let peer = first.reports(ReportType::Peer);
    assert_eq!(peer.len(), 1);
    assert_eq!(
        peer[0].source_id.as_deref(),
        Some("a"),
        "RFC 8581 §6.2.4 SourceID"
    );
    assert!(
        net.agent_mut("c")
            .core
            .ocs_entry(APP, ReportType::Peer, "a")
            .is_some()
    );

    // No alternative route: the client throttles 40 % of its traffic.
    let answers: Vec<Ans> = (0..5000)
        .map(|_| net.send(Req::realm("c", REALM)))
        .collect();
    let throttled = count(&answers, |a| a.path == ["c"]) as f64 / 5000.0;
    assert!(
        (throttled - 0.40).abs() < 0.025,
        "client throttled {throttled}"
    );
    assert!(
        answers
            .iter()
            .filter(|a| a.path == ["c"])
            .all(|a| a.code() == 3004)
    );
}

/// c with connections to a1 and a2, both in front of s.
fn redundant() -> Net {
    let mut net = Net::new();
    net.server("s", REALM);
    for a in ["a1", "a2"] {
        net.agent(a, DoicConfig::default(), &["c", "s"], false);
        net.realm_route(a, REALM, &[("s", Some("s"))]);
    }
    net.agent("c", DoicConfig::default(), &["a1", "a2"], true);
    net.realm_route("c", REALM, &[("a1", None), ("a2", None)]);
    net
}

#[test]
fn redundant_agents_divert_ten_percent_to_the_other_agent() {
    // RFC 8581 §4.1.2: a 10 % peer report from a1 sends 10 % of the traffic
    // that would have gone to a1 through a2; nothing is throttled.
    let mut net = redundant();
    let now = net.now();
    net.agent_mut("a1").core.set_own_peer_report(
        now,
        Some(Abatement::Loss { percent: 10 }),
        Duration::from_secs(60),
    );
    net.send(Req::realm("c", REALM));
    let answers: Vec<Ans> = (0..20_000)
        .map(|_| net.send(Req::realm("c", REALM)))
        .collect();
    assert_eq!(tally(&answers).get(&2001), Some(&20_000));
    let via_a2 = count(&answers, |a| a.path[1] == "a2") as f64 / 20_000.0;
    assert!(
        (via_a2 - 0.10).abs() < 0.01,
        "diverted through a2: {via_a2}"
    );
}

#[test]
fn redundant_agents_both_overloaded_throttle_the_combined_excess() {
    // RFC 8581 §4.1.2 last paragraph: both report; the client reduces traffic.
    let mut net = redundant();
    let now = net.now();
    for a in ["a1", "a2"] {
        net.agent_mut(a).core.set_own_peer_report(
            now,
            Some(Abatement::Loss { percent: 50 }),
            Duration::from_secs(60),
        );
    }
    net.send(Req::realm("c", REALM));
    net.send(Req::realm("c", REALM));
    let answers: Vec<Ans> = (0..20_000)
        .map(|_| net.send(Req::realm("c", REALM)))
        .collect();
    let thr = count(&answers, |a| a.path == ["c"]) as f64 / 20_000.0;
    let div = count(&answers, |a| {
        a.path.get(1).map(String::as_str) == Some("a2")
    }) as f64
        / 20_000.0;
    // Selected at a1 (50 %), then selected again at a2 (50 %): 25 % throttled,
    // 25 % diverted.
    assert!((thr - 0.25).abs() < 0.015, "throttled {thr}");
    assert!((div - 0.25).abs() < 0.015, "diverted {div}");
    assert!(
        answers
            .iter()
            .filter(|a| a.path == ["c"])
            .all(|a| a.code() == 3004)
    );
}

/// c -- {a11} -- {a21, a22} -- s (RFC 8581 §4.1.3 Figure 5, one side).
fn chain() -> Net {
    let mut net = Net::new();
    net.server("s", REALM);
    for a in ["a21", "a22"] {
        net.agent(a, DoicConfig::default(), &["a11", "s"], false);
        net.realm_route(a, REALM, &[("s", Some("s"))]);
    }
    net.agent("a11", DoicConfig::default(), &["c", "a21", "a22"], false);
    net.realm_route("a11", REALM, &[("a21", None), ("a22", None)]);
    net.agent("c", DoicConfig::default(), &["a11"], true);
    net.realm_route("c", REALM, &[("a11", None)]);
    net
}

#[test]
fn agent_chain_previous_hop_handles_next_agent_report() {
    // RFC 8581 §4.1.3: a21's overload is handled by a11, by diversion first;
    // the peer report never travels further than a11.
    let mut net = chain();
    let now = net.now();
    net.agent_mut("a21").core.set_own_peer_report(
        now,
        Some(Abatement::Loss { percent: 50 }),
        Duration::from_secs(60),
    );
    let first = net.send(Req::realm("c", REALM));
    assert!(
        first.reports(ReportType::Peer).is_empty(),
        "RFC 8581 §6.2.5: stripped at a11"
    );
    assert!(
        net.agent_mut("a11")
            .core
            .ocs_entry(APP, ReportType::Peer, "a21")
            .is_some()
    );
    assert!(
        net.agent_mut("c").core.ocs().is_empty(),
        "the client holds no state for a21"
    );
    let answers: Vec<Ans> = (0..10_000)
        .map(|_| net.send(Req::realm("c", REALM)))
        .collect();
    assert_eq!(
        tally(&answers).get(&2001),
        Some(&10_000),
        "diversion suffices"
    );
    let via_a22 = count(&answers, |a| {
        a.path.get(2).map(String::as_str) == Some("a22")
    }) as f64
        / 10_000.0;
    assert!((via_a22 - 0.5).abs() < 0.02, "diverted via a22: {via_a22}");
    assert!(
        answers
            .iter()
            .all(|a| a.reports(ReportType::Peer).is_empty())
    );
}

#[test]
fn agent_chain_both_next_agents_overloaded_previous_hop_throttles() {
    // RFC 8581 §4.1.3: "If both of the agents have requested a reduction in
    // traffic, then the previous-hop agent must start throttling", with the
    // error responses of RFC 7683 (3004: another path may succeed).
    let mut net = chain();
    let now = net.now();
    net.agent_mut("a21").core.set_own_peer_report(
        now,
        Some(Abatement::Loss { percent: 100 }),
        Duration::from_secs(60),
    );
    net.agent_mut("a22").core.set_own_peer_report(
        now,
        Some(Abatement::Loss { percent: 100 }),
        Duration::from_secs(60),
    );
    net.send(Req::realm("c", REALM));
    // a22's report arrives with the first diverted request's answer... which
    // cannot happen at 100 %: make a22 known by sending through it first.
    net.realm_route("a11", REALM, &[("a22", None), ("a21", None)]);
    net.send(Req::realm("c", REALM));
    net.realm_route("a11", REALM, &[("a21", None), ("a22", None)]);
    let answers: Vec<Ans> = (0..1000)
        .map(|_| net.send(Req::realm("c", REALM)))
        .collect();
    assert_eq!(
        tally(&answers).get(&3004),
        Some(&1000),
        "{:?}",
        tally(&answers)
    );
    assert!(
        answers.iter().all(|a| a.path == ["c", "a11"]),
        "throttled at a11"
    );
    let f = net
        .server_mut("s")
        .last
        .clone()
        .unwrap()
        .1
        .features
        .unwrap();
    assert_eq!(
        f.feature_vector.map(|v| v & OLR_DEFAULT_ALGO),
        Some(OLR_DEFAULT_ALGO)
    );
}

#[test]
fn agent_allocates_a_rate_to_each_downstream_peer() {
    // RFC 8582 §6.1 / RFC 8581 §6.2.1.1: the agent as reporting node sends each
    // reacting peer its own OC-Maximum-Rate; each client holds it to that rate.
    let mut net = Net::new();
    net.server("s", REALM);
    net.agent("a", DoicConfig::default(), &["c1", "c2", "s"], false);
    net.realm_route("a", REALM, &[("s", Some("s"))]);
    for c in ["c1", "c2"] {
        net.agent(c, DoicConfig::default(), &["a"], true);
        net.realm_route(c, REALM, &[("a", None)]);
    }
    let now = net.now();
    let a = &mut net.agent_mut("a").core;
    a.set_own_peer_report_for(
        now,
        "c1",
        Some(Abatement::Rate { per_second: 100 }),
        Duration::from_secs(60),
    );
    a.set_own_peer_report_for(
        now,
        "c2",
        Some(Abatement::Rate { per_second: 300 }),
        Duration::from_secs(60),
    );
    for (c, rate) in [("c1", 100u32), ("c2", 300)] {
        let first = net.send(Req::realm(c, REALM));
        let peer = first.reports(ReportType::Peer);
        assert_eq!(peer.len(), 1);
        assert_eq!(
            (peer[0].maximum_rate, peer[0].reduction_percentage),
            (Some(rate), None)
        );
        assert_eq!(
            first.features.clone().unwrap().peer_algo,
            Some(crate::features::OLR_RATE_ALGORITHM)
        );
        let o = net
            .agent_mut(c)
            .core
            .ocs_entry(APP, ReportType::Peer, "a")
            .unwrap()
            .abatement;
        assert_eq!(o, Abatement::Rate { per_second: rate });
    }
    // Offered 10x for 5 s each: each client sends about its own rate.
    for (c, rate) in [("c1", 100u64), ("c2", 300)] {
        let before = net.server_mut("s").received;
        let gap = Duration::from_nanos(1_000_000_000 / (rate * 10));
        for _ in 0..rate * 50 {
            net.advance(gap);
            net.send(Req::realm(c, REALM));
        }
        let sent = net.server_mut("s").received - before;
        let target = rate * 5;
        assert!(
            sent.abs_diff(target) * 50 <= target,
            "{c}: {sent} sent, target {target}"
        );
    }
}
