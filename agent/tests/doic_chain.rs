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
//! OC-Maximum-Rate) and with loss (RFC 7683 §7.7).

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

/// 3x C host-routed through the chain for 8 s, the edge offering
/// `algorithms`, with the checks every run shares: every request answered,
/// every report taken by the edge, its host OCS for the server in force,
/// what reached the server at most 1.1 C per second and at least 0.2 C.
/// The lower bound is looser than `protect.rs`'s 0.6 C: on a machine at load
/// 7 on 2 cores the limit followed a starved server down to 0.26-0.57 C in 4
/// of 20 runs. The limit's precision is shown there and in
/// `doic/src/protect/tests.rs`; here, where the excess is answered.
async fn chain(algorithms: &str) -> Chain {
    let _one = SERIAL.lock().await;
    let b = ServerBehaviour {
        capacity: Some(C),
        busy: Busy::Queue,
        ..Default::default()
    };
    let servers = servers(1, b).await;
    let core = start_agent(
        agent_config(
            CORE,
            (SERVER, servers[0].addr),
            EDGE,
            "[\"loss\", \"rate\"]",
        ),
        1,
    )
    .await;
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
    let traffic = Traffic {
        destination_realm: "example.net".into(),
        destination_host: Some(SERVER.into()),
    };
    let host_ocs = format!("doic_ocs_active{{type=\"host\",target=\"{SERVER}\"}}");
    let during = async {
        tokio::time::sleep(Duration::from_secs(6)).await;
        metric(s.agent(), &host_ocs)
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
    assert_eq!(ocs, Some(1.0), "the edge holds the server's host OCS");
    assert!(
        (0.2..=1.1).contains(&(per_s[0] / f64::from(C))),
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
    let c = chain("[\"loss\", \"rate\"]").await;
    assert!(
        c.edge_throttled * 2.0 >= c.sent as f64,
        "edge throttled {} of {} ({:.1}/s at the server)",
        c.edge_throttled,
        c.sent,
        c.arrivals
    );
    assert!(
        c.core_throttled * 10.0 <= c.edge_throttled,
        "core throttled {}, edge {}",
        c.core_throttled,
        c.edge_throttled
    );
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
    let c = chain("[\"loss\"]").await;
    assert!(
        c.edge_throttled * 2.0 >= c.sent as f64,
        "edge throttled {} of {} ({:.1}/s at the server)",
        c.edge_throttled,
        c.sent,
        c.arrivals
    );
    // Aimed a little above its share (`doic::protect::behalf::OVER`), the
    // edge leaves about a tenth of the share to the agent next to the
    // server, with the onset and the random drop's peaks: 324-693 against
    // the edge's 2,476-2,854 in six runs.
    assert!(
        c.core_throttled * 3.0 <= c.edge_throttled,
        "core throttled {}, edge {}",
        c.core_throttled,
        c.edge_throttled
    );
}
