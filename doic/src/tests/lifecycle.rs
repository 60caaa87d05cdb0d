//! The life of an overload control state through the agent: sequence rules,
//! "absence of OLR means no change", expiry, validity 0 and the controlled
//! ending (RFC 7683 §5.2.1.3, §5.2.2, §6.3; RFC 8581 §6.2.5).

use std::time::Duration;

use super::fixtures::{REALM, host_n, loss, net, ocs};
use super::sim::{APP, Net, Req};
use crate::audit::{OcsEvent, Verdict};
use crate::ocs::Phase;
use crate::report::{Abatement, ReportType};

#[test]
fn answer_without_olr_changes_nothing() {
    // RFC 7683 §5.2.1.3: absence of OLR means no change.
    let mut net = net();
    net.overload("s1", ReportType::Host, 7, loss(100), 60);
    net.send(Req::realm("c", REALM));
    net.server_mut("s1").reports.clear();
    // Realm traffic (not affected by a host report for DR requests to s2).
    for _ in 0..20 {
        net.send_via("a", Req::realm("n", REALM));
    }
    let o = ocs(&mut net, "a", ReportType::Host, "s1").unwrap();
    assert_eq!(
        (o.sequence, o.abatement),
        (7, Abatement::Loss { percent: 100 })
    );
    assert_eq!(host_n(&mut net, "s1").code(), 5012, "still abated");
}

#[test]
fn sequence_update_and_stale_reports_through_the_agent() {
    // RFC 7683 §5.2.1.3: greater sequence updates, equal/smaller ignored.
    let mut net = net();
    net.overload("s1", ReportType::Host, 5, loss(10), 60);
    host_n(&mut net, "s1");
    net.overload("s1", ReportType::Host, 6, loss(100), 60);
    host_n(&mut net, "s1");
    assert_eq!(host_n(&mut net, "s1").code(), 5012);
    // A report with the old sequence (e.g. from a restarted node's backlog).
    net.overload("s1", ReportType::Host, 5, loss(0), 60);
    // Host-routed requests are all throttled; use realm traffic to reach s1.
    net.realm_route("a", REALM, &[("s1", None)]);
    net.send_via("a", Req::realm("n", REALM));
    let core = &net.agent_mut("a").core;
    assert_eq!(
        core.ocs_entry(APP, ReportType::Host, "s1")
            .unwrap()
            .sequence,
        6
    );
    assert_eq!(
        core.audit().reports().last().unwrap().verdict,
        Verdict::Stale
    );
}

#[test]
fn expiry_probes_then_ramps_to_full_traffic() {
    // RFC 7683 §5.2.2 / §6.3: after a 100 % report times out, end in a
    // controlled fashion: probes, then a ramp (docs/doic.md).
    let mut net = net();
    net.overload("s1", ReportType::Host, 1, loss(100), 2);
    host_n(&mut net, "s1");
    net.server_mut("s1").reports.clear();
    let per_100ms = |net: &mut Net, secs: u64| -> Vec<u32> {
        (0..secs * 10)
            .map(|_| {
                net.advance(Duration::from_millis(100));
                (0..10)
                    .map(|_| u32::from(host_n(net, "s1").code() == 2001))
                    .sum()
            })
            .collect()
    };
    // Active for 2 s: nothing passes.
    let active = per_100ms(&mut net, 1);
    assert!(active.iter().all(|x| *x == 0), "{active:?}");
    net.advance(Duration::from_secs(1));
    // Expired: the first request is a probe; its clean answer starts the ramp.
    let ramp = per_100ms(&mut net, 12);
    let first_second: u32 = ramp[..10].iter().sum();
    let last_second: u32 = ramp[90..100].iter().sum();
    assert!(first_second < 30, "slow start: {first_second} of 100");
    assert!(
        last_second > 80,
        "near full at the end of the ramp: {last_second} of 100"
    );
    assert!(
        ramp[100..].iter().all(|x| *x == 10),
        "full traffic after the ramp"
    );
    let core = &net.agent_mut("a").core;
    // Expiry is recorded at the instant the validity ran out (2 s after the
    // report), even though it was noticed later.
    let expired = core
        .audit()
        .versions()
        .find(|v| v.event == OcsEvent::Expired)
        .unwrap();
    let received = core
        .audit()
        .versions()
        .find(|v| v.event == OcsEvent::Created)
        .unwrap();
    assert_eq!(expired.at - received.at, Duration::from_secs(2));
    assert!(
        core.audit()
            .versions()
            .any(|v| v.event == OcsEvent::Ramping)
    );
    assert!(
        core.audit()
            .versions()
            .any(|v| v.event == OcsEvent::Removed)
    );
    assert!(core.ocs().is_empty());
}

#[test]
fn probes_continue_while_the_target_still_reports() {
    let mut net = net();
    net.overload("s1", ReportType::Host, 1, loss(100), 1);
    host_n(&mut net, "s1");
    net.advance(Duration::from_secs(2));
    // The probe's answer carries a new 100 % report: active again.
    net.overload("s1", ReportType::Host, 2, loss(100), 30);
    assert_eq!(host_n(&mut net, "s1").code(), 2001, "probe");
    let o = ocs(&mut net, "a", ReportType::Host, "s1").unwrap();
    assert_eq!((o.sequence, o.phase), (2, Phase::Active));
    assert_eq!(host_n(&mut net, "s1").code(), 5012);
}

#[test]
fn zero_validity_ends_with_a_ramp() {
    // RFC 7683 §5.2.1.3 / RFC 8581 §6.2.5: validity 0 expires the OCS; the
    // ending is controlled.
    let mut net = net();
    net.overload("s1", ReportType::Host, 1, loss(60), 30);
    host_n(&mut net, "s1");
    net.overload("s1", ReportType::Host, 2, loss(60), 0);
    while host_n(&mut net, "s1").code() != 2001 {}
    let o = ocs(&mut net, "a", ReportType::Host, "s1").unwrap();
    assert!(matches!(o.phase, Phase::Ramping { from, .. } if (from - 0.6).abs() < 1e-9));
}
