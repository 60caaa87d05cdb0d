//! The status pages of the metrics listener (docs/status.md): `GET /peers`
//! (each peer's RFC 6733 §5.6 and RFC 3539 state, [`crate::peer::status`]),
//! `GET /health` (ready or not, for load balancers and probes), and the
//! `doic_build_info` gauge.

use std::fmt::Write as _;

use serde_json::json;

use super::Sources;
use crate::peer::status::{DoicStatus, peers, unix_ms};
use crate::peer::table::state;

/// The agent's version (the crate's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit the agent was built from, when the build gave one
/// (`DOIC_AGENT_GIT_HASH` in the environment of `cargo build`); a build from
/// a source tarball has none and the label is left out.
pub const GIT_HASH: Option<&str> = option_env!("DOIC_AGENT_GIT_HASH");

/// The agent crate's Cargo features in this build.
const FEATURES: &[(&str, bool)] = &[("probe", cfg!(feature = "probe"))];

/// `GET /peers`: a JSON array, one object per peer present.
pub(super) fn peers_json(src: &Sources) -> String {
    let ov = src.overload.as_deref();
    let protected = ov.map(crate::overload::protect_view).unwrap_or_default();
    let doic = |host: &str| {
        ov.map(|ov| DoicStatus {
            mode: ov.config().peer(host).protect,
            sensed: protected.iter().find(|v| v.peer == host).map(|v| {
                if v.native {
                    "supports_doic"
                } else if v.limit.is_some() {
                    "limited"
                } else {
                    "no_doic_seen"
                }
            }),
        })
    };
    let list = peers(&src.table, doic, unix_ms());
    serde_json::to_string(&list).unwrap_or_else(|_| String::from("[]"))
}

/// `GET /health`: whether the agent is ready, and the body saying why.
///
/// Ready when it listens and, if routes are configured, at least one route
/// has a peer up (OKAY: it takes requests). The routes with no peer up are
/// named either way.
pub(super) fn health(src: &Sources) -> (bool, String) {
    let table = &src.table;
    let mut routes = 0usize;
    let (mut down, mut names) = (Vec::new(), Vec::new());
    let held = src.routes.held();
    for (realm, application, peers) in held.router().routes() {
        routes += 1;
        let up = peers
            .iter()
            .any(|&p| table.get(p).is_some_and(|s| s.state() == state::OKAY));
        if !up {
            names.push(application.map_or_else(|| realm.to_owned(), |a| format!("{realm}/{a}")));
            down.push(json!({
                "realm": realm,
                "application": application,
                "peers": table.describe_down(&peers),
            }));
        }
    }
    let reason = if src.listen.is_empty() {
        Some(String::from("not listening"))
    } else if routes > 0 && down.len() == routes {
        Some(format!("no route has a peer up: {}", names.join(", ")))
    } else {
        None
    };
    let listen: Vec<String> = src.listen.iter().map(ToString::to_string).collect();
    let body = json!({
        "status": if reason.is_some() { "not_ready" } else { "ready" },
        "reason": reason,
        "listen": listen,
        "routes": routes,
        "routes_without_peer_up": down,
    });
    (reason.is_none(), body.to_string())
}

/// The `doic_build_info` gauge: 1, labelled with the version, the commit
/// when known and the features.
pub(super) fn render_build_info(o: &mut String) {
    let features: Vec<&str> = FEATURES
        .iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| *name)
        .collect();
    let git = GIT_HASH.map_or(String::new(), |g| format!(",git=\"{g}\""));
    let _ = writeln!(
        o,
        "# HELP doic_build_info The agent's build: version, commit (when the build knew it), Cargo features.\n# TYPE doic_build_info gauge\ndoic_build_info{{version=\"{VERSION}\"{git},features=\"{}\"}} 1",
        features.join(",")
    );
}
