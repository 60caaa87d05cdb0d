//! What a reload of the configuration file changes (SIGHUP, `doic-agent
//! reload`): the running configuration and the new one in, a [`Plan`] out.
//! Sans-io: no peer is dialled and no table touched here; the runtime
//! applies the plan (`crate::runtime::reload`).
//!
//! Live: the peer table (`[[peer]]`, RFC 6733 §2.6: an added peer is
//! dialled, a removed one is sent DPR, §5.4, and closed once its pending
//! requests are answered or the drain ends; a peer whose `realm` or
//! `connect` changed is removed and added), the routing table (`[[route]]`,
//! §2.7), `[accept]` and `[doic]` with the `trusted` and `doic` keys of
//! each `[[peer]]` (RFC 7683: every worker's core and the control thread
//! take the new section at one instant each, the overload state kept,
//! `doic::Doic::reconfigure`), but for the `[doic]` keys read only at start
//! (`doic::DoicConfig::start_only_changes`) and turning DOIC on or off (the
//! cores exist or not). Everything else is read once at start and is
//! reported as needing a restart ([`Plan::needs_restart`]).

use super::{Config, PeerConfig};

/// What a reload does, from the running configuration to the new one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// `[[peer]]` entries to add and dial (new hosts, and hosts whose
    /// `realm` or `connect` changed), in the new file's order.
    pub add: Vec<PeerConfig>,
    /// Hosts of the running `[[peer]]` entries to remove: DPR, drain, close
    /// (RFC 6733 §5.4), in the running file's order.
    pub remove: Vec<String>,
    /// The routing table is rebuilt from the new `[[route]]` entries (the
    /// routes changed, or peers came or went).
    pub routes: bool,
    /// `[accept]` changed: the new patterns admit peers from the next CER.
    pub accept: bool,
    /// The effective `[doic]` changed (the section, or a peer's `trusted`
    /// or `doic`) while DOIC stays on: the cores take the new one.
    pub doic: bool,
    /// Keys that changed but are read only at start: the running values
    /// stay until a restart.
    pub needs_restart: Vec<&'static str>,
}

impl Plan {
    /// The plan from `running` to `new` (both valid).
    #[must_use]
    pub fn between(running: &Config, new: &Config) -> Plan {
        let same_peer = |a: &PeerConfig, b: &PeerConfig| {
            a.host.eq_ignore_ascii_case(&b.host) && a.realm == b.realm && a.connect == b.connect
        };
        let add: Vec<PeerConfig> = new
            .peers
            .iter()
            .filter(|p| !running.peers.iter().any(|o| same_peer(o, p)))
            .cloned()
            .collect();
        let remove: Vec<String> = running
            .peers
            .iter()
            .filter(|o| !new.peers.iter().any(|p| same_peer(o, p)))
            .map(|o| o.host.clone())
            .collect();
        let routes = running.routes != new.routes || !add.is_empty() || !remove.is_empty();
        let doic = matches!(
            (running.doic_effective(), new.doic_effective()),
            (Some(a), Some(b)) if a != b
        );
        Plan {
            routes,
            accept: running.accept != new.accept,
            doic,
            needs_restart: needs_restart(running, new),
            add,
            remove,
        }
    }

    /// True when the reload changes nothing that runs.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.remove.is_empty() && !self.routes && !self.accept && !self.doic
    }
}

/// The keys read only at start whose values differ.
fn needs_restart(running: &Config, new: &Config) -> Vec<&'static str> {
    let (a, b) = (&running.node, &new.node);
    let mut keys = Vec::new();
    if a.listen != b.listen {
        keys.push("node.listen");
    }
    if a.workers != b.workers {
        keys.push("node.workers");
    }
    let rest = |n: &super::Node| super::Node {
        listen: Vec::new(),
        workers: None,
        ..n.clone()
    };
    if rest(a) != rest(b) {
        keys.push("node");
    }
    if running.metrics.as_ref().map(|m| m.listen) != new.metrics.as_ref().map(|m| m.listen) {
        keys.push("metrics.listen");
    }
    if running.ebpf != new.ebpf {
        keys.push("ebpf");
    }
    if running.retry != new.retry {
        keys.push("retry");
    }
    // DOIC turned on or off: the cores exist or not. Otherwise the keys of
    // `[doic]` read only at start.
    match (running.doic_effective(), new.doic_effective()) {
        (Some(a), Some(b)) => keys.extend(a.start_only_changes(&b)),
        (None, None) => {}
        _ => keys.push("doic"),
    }
    keys
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// Two servers, both routed for example.net, clients `*.example.org`.
    const BASE: &str = crate::config::DEMO_CONFIG;

    fn parse(text: &str) -> Config {
        Config::from_str_named(text, Path::new("t.toml")).unwrap()
    }

    fn hosts(p: &[PeerConfig]) -> Vec<&str> {
        p.iter().map(|p| p.host.as_str()).collect()
    }

    #[test]
    fn the_same_file_changes_nothing() {
        let plan = Plan::between(&parse(BASE), &parse(BASE));
        assert!(plan.is_empty(), "{plan:?}");
        assert!(plan.needs_restart.is_empty());
    }

    #[test]
    fn a_peer_and_a_route_added_another_peer_removed() {
        let new = BASE
            .replace(
                "host = \"server2.example.net\"\nrealm = \"example.net\"\nconnect = \"127.0.0.1:3870\"",
                "host = \"n.new.example\"\nrealm = \"new.example\"\nconnect = \"127.0.0.1:3871\"",
            )
            .replace(
                "peers = [\"server1.example.net\", \"server2.example.net\"]\n",
                "peers = [\"server1.example.net\"]\n[[route]]\nrealm = \"new.example\"\npeers = [\"n.new.example\"]\n",
            );
        let plan = Plan::between(&parse(BASE), &parse(&new));
        assert_eq!(hosts(&plan.add), ["n.new.example"]);
        assert_eq!(plan.remove, ["server2.example.net"]);
        assert!(plan.routes);
        assert!(!plan.accept);
        assert!(plan.needs_restart.is_empty(), "{:?}", plan.needs_restart);
    }

    #[test]
    fn a_changed_address_is_a_removal_and_an_addition() {
        let new = BASE.replace("127.0.0.1:3870", "127.0.0.1:3880");
        let plan = Plan::between(&parse(BASE), &parse(&new));
        assert_eq!(hosts(&plan.add), ["server2.example.net"]);
        assert_eq!(plan.add[0].connect, "127.0.0.1:3880".parse().ok());
        assert_eq!(plan.remove, ["server2.example.net"]);
        // The host's case is not a change (DiameterIdentity, RFC 6733 §4.3.1).
        let plan = Plan::between(
            &parse(BASE),
            &parse(&BASE.replace("server1.example", "Server1.Example")),
        );
        assert!(plan.add.is_empty() && plan.remove.is_empty(), "{plan:?}");
    }

    #[test]
    fn routes_and_accept_change_live() {
        let new = BASE.replace(
            "peers = [\"server1.example.net\", \"server2.example.net\"]",
            "peers = [{ host = \"server1.example.net\", priority = 1 }, \"server2.example.net\"]",
        )
        .replace("*.example.org", "*.example.edu");
        let plan = Plan::between(&parse(BASE), &parse(&new));
        assert!(plan.add.is_empty() && plan.remove.is_empty());
        assert!(plan.routes && plan.accept);
        assert!(plan.needs_restart.is_empty());
    }

    #[test]
    fn what_is_read_at_start_only_needs_a_restart() {
        let new = BASE
            .replace("127.0.0.1:3868", "127.0.0.1:3999")
            .replace("127.0.0.1:9464", "127.0.0.1:9465")
            .replace("tw_seconds = 6", "workers = 3\ntw_seconds = 12")
            + "[ebpf]\nmode = \"off\"\n[retry]\nbudget_percent = 5\n[doic]\n";
        let plan = Plan::between(&parse(BASE), &parse(&new));
        assert!(plan.is_empty(), "{plan:?}");
        // `[doic]` added: DOIC turned on needs the cores built at start.
        assert_eq!(
            plan.needs_restart,
            [
                "node.listen",
                "node.workers",
                "node",
                "metrics.listen",
                "ebpf",
                "retry",
                "doic"
            ]
        );
        // Keys of `[doic]` read at start.
        let with_doic = format!("{BASE}[doic]\n");
        let plan = Plan::between(
            &parse(&with_doic),
            &parse(&format!("{with_doic}max_ocs = 10\npeer_report = false\n")),
        );
        assert_eq!(plan.needs_restart, ["doic.peer_report", "doic.max_ocs"]);
    }

    /// RFC 7683 §10.4, §8: a peer's trust and the answer to a throttled
    /// request change live; DOIC stays on.
    #[test]
    fn doic_changes_live() {
        let with_doic = format!("{BASE}[doic]\n");
        let trusted = with_doic.replace(
            "connect = \"127.0.0.1:3869\"",
            "connect = \"127.0.0.1:3869\"\ntrusted = true",
        );
        let plan = Plan::between(&parse(&with_doic), &parse(&trusted));
        assert!(plan.doic && !plan.is_empty(), "{plan:?}");
        assert!(plan.needs_restart.is_empty(), "{:?}", plan.needs_restart);
        let result = format!(
            "{with_doic}throttle_result = \"retry_not_allowed\"\n[doic.protect]\nbackoff = 0.8\n"
        );
        let plan = Plan::between(&parse(&with_doic), &parse(&result));
        assert!(plan.doic && plan.needs_restart.is_empty(), "{plan:?}");
        assert!(plan.add.is_empty() && !plan.routes && !plan.accept);
        // DOIC turned off: needs a restart, nothing live.
        let off = format!("{BASE}[doic]\nenabled = false\n");
        let plan = Plan::between(&parse(&with_doic), &parse(&off));
        assert!(!plan.doic);
        assert_eq!(plan.needs_restart, ["doic"]);
    }
}
