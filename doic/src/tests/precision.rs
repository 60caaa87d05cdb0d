//! Precision of the abatement algorithms, measured on the sans-io core through
//! the simulated network.

use std::time::Duration;

use super::sim::{Ans, Net, Req};
use crate::DoicConfig;
use crate::report::{Abatement, ReportType};

const REALM: &str = "realm";

/// Non-DOIC clients behind agent `a`, host-routed to server `s`.
fn net() -> Net {
    let mut net = Net::new();
    net.server("s", REALM);
    net.agent("a", DoicConfig::default(), &["s"], false);
    net
}

#[test]
fn loss_share_within_one_point_over_100k_requests() {
    // RFC 7683 §6.3: "apply abatement treatment to the requested percentage".
    for percent in [7, 37, 93] {
        let mut net = net();
        net.overload("s", ReportType::Host, 1, Abatement::Loss { percent }, 3600);
        net.send_via("a", Req::host("n", REALM, "s"));
        let n = 100_000;
        let throttled = (0..n)
            .map(|_| net.send_via("a", Req::host("n", REALM, "s")))
            .filter(|a: &Ans| a.path == ["a"] && a.code() == 5012)
            .count();
        let share = throttled as f64 * 100.0 / f64::from(n);
        eprintln!("loss {percent} %: throttled {share:.3} % of {n}");
        assert!(
            (share - f64::from(percent)).abs() <= 1.0,
            "requested {percent} %, throttled {share:.3} %"
        );
    }
}

#[test]
fn report_takes_effect_on_first_request_after_its_answer() {
    // RFC 7683 §5.2.2: every request sent after the OCS exists must be matched.
    let mut net = net();
    for _ in 0..10 {
        assert_eq!(net.send_via("a", Req::host("n", REALM, "s")).code(), 2001);
    }
    net.overload(
        "s",
        ReportType::Host,
        1,
        Abatement::Loss { percent: 100 },
        30,
    );
    // This answer carries the report...
    let carrying = net.send_via("a", Req::host("n", REALM, "s"));
    assert_eq!(carrying.code(), 2001);
    // ...and the very next request is abated.
    let next = net.send_via("a", Req::host("n", REALM, "s"));
    assert_eq!(
        (next.path.as_slice(), next.code()),
        (&["a".to_owned()][..], 5012)
    );
}

#[test]
fn rate_at_ten_times_offered_load_within_two_percent_over_ten_seconds() {
    // RFC 8582 §8.3.1: the reacting node limits traffic to OC-Maximum-Rate.
    for rate in [50u32, 200, 1000] {
        let mut net = net();
        net.overload(
            "s",
            ReportType::Host,
            1,
            Abatement::Rate { per_second: rate },
            3600,
        );
        // The answer that activates control.
        net.send_via("a", Req::host("n", REALM, "s"));
        let before = net.server_mut("s").received;
        let offered = u64::from(rate) * 10;
        let gap = Duration::from_nanos(1_000_000_000 / offered);
        for _ in 0..offered * 10 {
            net.advance(gap);
            net.send_via("a", Req::host("n", REALM, "s"));
        }
        let sent = (net.server_mut("s").received - before) as f64;
        let target = f64::from(rate) * 10.0;
        eprintln!("rate {rate}/s at 10x offered: {sent} sent in 10 s (target {target})");
        assert!(
            (sent - target).abs() / target <= 0.02,
            "rate {rate}/s: {sent} sent in 10 s, target {target}"
        );
    }
}
