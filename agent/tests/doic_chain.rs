//! The RFC 8581 agent chain over real TCP: a client without DOIC, an edge
//! agent (the client's reacting node, RFC 7683 §5.1.3), an agent protecting
//! a server that knows no DOIC (the reporting node on its behalf), and the
//! server, held to a capacity C. Both agents run the default configuration
//! with `[doic]` (default worker count, pinned workers).
//!
//! The protecting agent reports for the server in the server's answers; the
//! edge accepts the report and abates at the source, so the excess is
//! answered by the edge and what reaches the server falls to C: with the
//! rate algorithm (RFC 8582: the answer selects rate, §6.3, and carries
//! OC-Maximum-Rate) and with loss (RFC 7683 §7.7). The same chain with the
//! agent next to the server overloaded itself (`own_capacity`): its peer
//! report (RFC 8581 §6.2.4) is honoured by the edge, which abates at the
//! source.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use agent::config::Config;
use support::*;
use tools::loadgen::{Busy, ServerBehaviour, Traffic};

const C: u32 = 200;
const SERVER: &str = "server1.example.net";
const CORE: &str = "core.example.com";
const EDGE: &str = "edge.example.com";

/// One test at a time: each runs two agents on pinned workers.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An agent `host` relaying example.net to `upstream`, trusting `peer` for
/// DOIC reports both ways, offering `algorithms`.
fn agent_config(host: &str, upstream: (&str, SocketAddr), peer: &str, algorithms: &str) -> Config {
    let t = format!(
        "[node]\norigin_host = \"{host}\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\ntc_seconds = 1\n\
         [[peer]]\nhost = \"{}\"\nrealm = \"example.net\"\nconnect = \"{}\"\n\
         [[route]]\nrealm = \"example.net\"\npeers = [\"{}\"]\n\
         [accept]\nhosts = [\"*.example.org\", \"*.example.com\"]\n\
         [doic]\nalgorithms = {algorithms}\n\
         [doic.peers.\"{peer}\"]\ntrusted = true\nreceive_reports = true\n",
        upstream.0, upstream.1, upstream.0
    );
    Config::from_str_named(&t, Path::new("chain.toml")).unwrap()
}

fn count(agent: &agent::agent::Agent, sample: &str) -> f64 {
    metric(agent, sample).unwrap_or(0.0)
}

/// What one run through the chain gave.
struct Chain {
    /// Requests the client sent.
    sent: u64,
    /// What reached the server per second, from 3 s to 8 s.
    arrivals: f64,
    /// Requests the edge answered itself (abated at the source).
    edge_throttled: f64,
    /// Requests the agent next to the server answered itself.
    core_throttled: f64,
}

/// Who is overloaded in a run of the chain.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Overloaded {
    /// The server, held to C; the agent next to it reports for it (HOST
    /// reports, host-routed requests).
    Server,
    /// The agent next to the server, `own_capacity` C; it reports for
    /// itself (a PEER report); the server has no limit.
    Agent,
}

/// 3x C through the chain for 8 s, the edge offering `algorithms`, with the
/// checks every run shares: every request answered, every report taken by
/// the edge, its OCS for the overloaded node in force (host OCS of the
/// server, or peer OCS of the agent), what reached the server at most 1.1 C
/// per second and at least 0.2 C (0.6 C when the agent is the one
/// overloaded: its capacity is configured, not measured). The lower bound is
/// looser than `protect.rs`'s 0.6 C: on a machine at load 7 on 2 cores the
/// limit followed a starved server down to 0.26-0.57 C in 4 of 20 runs. The
/// limit's precision is shown there and in `doic/src/protect/tests.rs`;
/// here, where the excess is answered.
async fn chain(algorithms: &str, overloaded: Overloaded) -> Chain {
    let _one = SERIAL.lock().await;
    let b = match overloaded {
        Overloaded::Server => ServerBehaviour {
            capacity: Some(C),
            busy: Busy::Queue,
            ..Default::default()
        },
        Overloaded::Agent => ServerBehaviour::default(),
    };
    let servers = servers(1, b).await;
    let mut core_cfg = agent_config(
        CORE,
        (SERVER, servers[0].addr),
        EDGE,
        "[\"loss\", \"rate\"]",
    );
    if overloaded == Overloaded::Agent {
        core_cfg.doic.as_mut().unwrap().own_capacity = Some(C);
    }
    let core = start_agent(core_cfg, 1).await;
    let edge = start_agent(
        agent_config(EDGE, (CORE, core.local_addrs()[0]), CORE, algorithms),
        1,
    )
    .await;
    // A running agent has measured its servers before the load comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let addr = edge.local_addrs()[0];
    let s = Setup {
        agent: Some(edge),
        servers,
        addr,
    };
    let mut c = s.client().await;
    let (traffic, ocs_in_force, low) = match overloaded {
        Overloaded::Server => (
            Traffic {
                destination_realm: "example.net".into(),
                destination_host: Some(SERVER.into()),
            },
            format!("doic_ocs_active{{type=\"host\",target=\"{SERVER}\"}}"),
            0.2,
        ),
        Overloaded::Agent => (
            Traffic {
                destination_realm: "example.net".into(),
                destination_host: None,
            },
            format!("doic_ocs_active{{type=\"peer\",target=\"{CORE}\"}}"),
            0.6,
        ),
    };
    let during = async {
        tokio::time::sleep(Duration::from_secs(6)).await;
        metric(s.agent(), &ocs_in_force)
    };
    let (r, per_s, ocs) =
        offer_open(&s, &mut c, &traffic, (3 * u64::from(C), 8), (3, 8), during).await;
    let edge = s.agent();
    let throttled = "doic_requests_treated_total{treatment=\"throttled\"}";
    let (edge_throttled, core_throttled) = (count(edge, throttled), count(&core, throttled));
    let invalid = count(edge, "doic_reports_received_total{outcome=\"invalid\"}");
    eprintln!(
        "{algorithms}: {:.1}/s at the server, edge throttled {edge_throttled}, core throttled {core_throttled}, reports refused by the edge {invalid}, {:?}",
        per_s[0], r.by_code
    );
    stop(core);
    assert_eq!(
        r.sent, r.answered,
        "every request answered: {:?}",
        r.by_code
    );
    // The edge took every report it was sent (RFC 7683 §5.2.1.3) ...
    assert_eq!(invalid, 0.0, "reports refused by the edge");
    assert_eq!(ocs, Some(1.0), "the edge holds {ocs_in_force}");
    assert!(
        (low..=1.1).contains(&(per_s[0] / f64::from(C))),
        "{}/s reached the server of {C}/s",
        per_s[0]
    );
    Chain {
        sent: r.sent,
        arrivals: per_s[0],
        edge_throttled,
        core_throttled,
    }
}

/// Rate: the excess (two thirds of 3x) is answered by the edge, the agent
/// next to the server answers next to nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_offering_rate_abates_at_the_source_on_the_report_made_for_the_server() {
    let c = chain("[\"loss\", \"rate\"]", Overloaded::Server).await;
    c.answered_at_the_edge(0.5, 0.1);
}

impl Chain {
    /// The edge answered at least `share` of what was sent, and the agent
    /// next to the server at most `core` of what the edge did.
    fn answered_at_the_edge(&self, share: f64, core: f64) {
        assert!(
            self.edge_throttled >= share * self.sent as f64,
            "edge throttled {} of {} ({:.1}/s at the server)",
            self.edge_throttled,
            self.sent,
            self.arrivals
        );
        assert!(
            self.core_throttled <= core * self.edge_throttled,
            "core throttled {}, edge {}",
            self.core_throttled,
            self.edge_throttled
        );
    }
}

/// Loss: the excess is answered by the edge, the agent next to the server
/// answers what the edge's random drop lets through above the server's share
/// (and the onset, before the first correction). The percentage the edge is
/// sent is the cut of its demand to its share, corrected by what arrives
/// (`doic::protect::ClientLoss`): a cut of the load reaching that agent,
/// already cut by the edge, settled at 1 - sqrt(1/3) = 42 % at 3x, and the
/// agent next to the server answered a third (edge 2,119, core 1,021).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_offering_loss_abates_at_the_source_on_the_report_made_for_the_server() {
    let c = chain("[\"loss\"]", Overloaded::Server).await;
    // Aimed at its share, and held by a gate with the loss client's
    // tolerance (`doic::protect::gates::LOSS_TOLERANCE`), the edge leaves
    // the agent next to the server the onset and the peaks of its random
    // drop beyond a tenth of a second: 163-282 against the edge's
    // 2,953-3,072 in 20 of 21 runs, and once 667 against 2,467 (a late
    // first correction: the onset's share varies); 324-693 against
    // 2,476-2,854 when it aimed at 1.10 x its share, its excess trimmed by
    // a 10 ms bucket. A bound of 0.15 failed on such a run, so the bound
    // stays where it was.
    c.answered_at_the_edge(0.5, 1.0 / 3.0);
}

/// The agent next to the server overloaded itself (`[doic] own_capacity`
/// C, the server without a limit), a client without DOIC at 3x C through
/// the edge offering rate: the agent's peer report (RFC 8581 §6.2.4, rate
/// with OC-Maximum-Rate, RFC 8582 §5) reaches the edge, which holds a peer
/// OCS for it and answers the excess itself, so what reaches the agent and
/// the server falls to about C.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_abates_at_the_source_on_the_overloaded_agent_s_own_peer_report() {
    let c = chain("[\"loss\", \"rate\"]", Overloaded::Agent).await;
    // Two thirds of what follows the report's arrival (about a second in,
    // one control tick and one answer) is the excess: 2,286-2,406 of about
    // 4,800 sent in 8 s, 0 at the agent, in the runs this was written with.
    c.answered_at_the_edge(0.3, 0.1);
}
