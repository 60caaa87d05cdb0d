//! The evidence of seed 003 split where each decision is made: throttled
//! requests by the Result-Code of their answer (RFC 7683 §8: 5012 for a
//! host or realm report, 3004 for a peer report, 5198 where configured),
//! diverted ones by the peer they went to (RFC 7683 §5.2.3, RFC 8581
//! §6.2.5), per OCS version and agent-wide, against what the client got.

use super::fixtures::{REALM, host_n, loss, net};
use super::sim::{Ans, Req, tally};
use crate::audit::OcsEvent;
use crate::report::ReportType;

#[test]
fn throttles_split_by_result_code_and_diversions_by_destination() {
    let mut net = net();
    net.overload("s1", ReportType::Host, 1, loss(40), 60);
    net.overload("s2", ReportType::Peer, 1, loss(30), 60);
    host_n(&mut net, "s1");
    let mut answers: Vec<Ans> = Vec::new();
    for _ in 0..2000 {
        answers.push(host_n(&mut net, "s1"));
        answers.push(net.send_via("a", Req::realm("n", REALM)));
        answers.push(host_n(&mut net, "s2"));
    }
    // New versions close the counts of the first ones into the trail.
    net.overload("s1", ReportType::Host, 2, loss(10), 60);
    net.overload("s2", ReportType::Peer, 2, loss(10), 60);
    host_n(&mut net, "s1");
    host_n(&mut net, "s2");
    let core = &net.agent_mut("a").core;
    let audit = core.audit();
    let closed = |rt: ReportType| {
        audit
            .versions()
            .find(|v| v.event == OcsEvent::Updated && v.key.report_type == rt)
            .unwrap()
            .closed_counts
    };
    let host = closed(ReportType::Host);
    let named = host.split.named(audit.peers());
    assert!(host.diverted > 0 && host.throttled > 0, "{host:?}");
    assert_eq!(
        named.diverted_to.into_iter().collect::<Vec<_>>(),
        [("s2".to_owned(), host.diverted)],
        "s1's realm traffic diverted to s2"
    );
    assert_eq!(
        named.throttled_by.into_iter().collect::<Vec<_>>(),
        [("5012".to_owned(), host.throttled)],
        "a host report's throttles are answered 5012"
    );
    let peer = closed(ReportType::Peer);
    let named = peer.split.named(audit.peers());
    assert!(peer.throttled > 0, "{peer:?}");
    assert_eq!(named.throttled_by.get("3004"), Some(&peer.throttled));
    // Agent-wide: every throttle by the code the client received.
    let t = audit.totals;
    let wide = t.split.named(audit.peers());
    let got = tally(&answers);
    for code in [3004, 5012] {
        let client = got.get(&code).copied().unwrap_or(0) as u64;
        assert_eq!(
            wide.throttled_by
                .get(&code.to_string())
                .copied()
                .unwrap_or(0),
            client,
            "{code}"
        );
    }
    assert_eq!(wide.throttled_by.values().sum::<u64>(), t.throttled);
    assert_eq!(wide.diverted_to.values().sum::<u64>(), t.diverted);
    assert_eq!(wide.diverted_to.get("s2").copied(), Some(t.diverted));
}
