//! Fixtures shared by the DOIC simulations (RFC 7683 §5, §6.3; RFC 8581
//! §4.1.1, §6): agent `a` in front of two servers with a DOIC client behind
//! it, loss reports, trusted peers, answers and the agents' overload control
//! states.

use super::sim::{APP, Ans, Net, Req};
use crate::engine::AnswerView;
use crate::features::OcSupportedFeatures;
use crate::ocs::Ocs;
use crate::report::{Abatement, OcOlr, ReportType};
use crate::treatment::{Candidate, PendingTx, RequestView};
use crate::{DoicConfig, PeerPolicy};

/// The realm of both servers.
pub(super) const REALM: &str = "realm";

/// Agent `a` in front of `s1`, `s2`; DOIC client `c`; non-DOIC clients use
/// `send_via("a", ..)`.
pub(super) fn net() -> Net {
    let mut net = Net::new();
    net.server("s1", REALM);
    net.server("s2", REALM);
    net.agent("a", DoicConfig::default(), &["s1", "s2", "c"], false);
    net.realm_route("a", REALM, &[("s1", Some("s1")), ("s2", Some("s2"))]);
    net.agent("c", DoicConfig::default(), &["a"], true);
    net.realm_route("c", REALM, &[("a", None)]);
    net.host_route("c", "s1", &["a"]);
    net
}

/// A request of the non-DOIC client `n` for `host`, through agent `a`.
pub(super) fn host_n(net: &mut Net, host: &str) -> Ans {
    net.send_via("a", Req::host("n", REALM, host))
}

/// The loss algorithm abating `percent` % of the traffic (RFC 7683 §6).
pub(super) fn loss(percent: u32) -> Abatement {
    Abatement::Loss { percent }
}

/// The overload control state of `agent` for (`APP`, `rt`, `id`).
pub(super) fn ocs<'n>(net: &'n mut Net, agent: &str, rt: ReportType, id: &str) -> Option<&'n Ocs> {
    net.agent_mut(agent).core.ocs_entry(APP, rt, id)
}

/// `peer` is trusted and receives reports.
pub(super) fn trust(cfg: &mut DoicConfig, peer: &str) {
    cfg.peers.insert(
        peer.into(),
        PeerPolicy {
            trusted: true,
            receive_reports: true,
            ..PeerPolicy::default()
        },
    );
}

/// A 2001 answer from `s1` carrying these DOIC AVPs.
pub(super) fn answer_2001<'a>(
    features: Option<&'a OcSupportedFeatures>,
    olrs: &'a [OcOlr],
) -> AnswerView<'a> {
    AnswerView {
        app_id: APP,
        origin_host: "s1",
        origin_realm: REALM,
        result_code: Some(2001),
        experimental_result_code: None,
        features,
        olrs,
    }
}

/// A request (command 272) of the non-DOIC client `n` for host `s1`, with
/// DRMP priority `drmp` (RFC 7944).
pub(super) fn request_to_s1(drmp: Option<u8>) -> RequestView<'static> {
    RequestView {
        app_id: APP,
        command_code: 272,
        from_peer: "n",
        dest_realm: REALM,
        dest_host: Some("s1"),
        features: None,
        drmp,
    }
}

/// The one candidate next hop: peer `s1`, itself the server.
pub(super) fn via_s1() -> [Candidate<'static>; 1] {
    [Candidate {
        peer: "s1",
        server: Some("s1"),
    }]
}

/// The pending transaction of a request of `n` sent to `upstream`.
pub(super) fn tx(upstream: &str) -> PendingTx<'_> {
    PendingTx {
        app_id: APP,
        client: "n".into(),
        client_features: None,
        client_peer_report: false,
        dest_realm: REALM.into(),
        upstream: upstream.into(),
    }
}
