//! A protected server that turns out to do DOIC itself, over real TCP with
//! two workers (docs/protect.md): the agent reports on behalf of a server
//! whose answers carry no OC-Supported-Features (RFC 7683 §5.1.3) while it
//! is overloaded (here: it answers 3004), in the server's answers; once its answers carry
//! OC-Supported-Features and its own HOST report, the agent stops
//! reporting for it and relays the server's report, whose sequence
//! numbers are the server's (RFC 7683 §5.2.1.1: one OCS per host, the
//! sequence numbers of its reporting node); the agent's report ends with
//! validity 0 under the agent's own sequence (§5.2.3) in the answers that
//! carry no report of the server's.

mod support;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use diameter::codec::doic::{OcOlr, ReportType};
use diameter::dictionary::doic::{OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};
use support::*;
use tools::loadgen::{Client, Identity, Pace, TEST_APP, Traffic};

const SERVER: &str = "server1.example.net";
/// The load: a client without DOIC.
const PLAIN: &str = "client2.example.org";
/// Another client without DOIC.
const OTHER: &str = "client3.example.org";

/// An answer's Origin-Host, Result-Code and reports, for a failure's message.
fn describe(m: &bytes::Bytes) -> String {
    let origin = diameter::codec::Routing::scan(m).ok().and_then(|r| {
        r.origin_host()
            .map(|h| String::from_utf8_lossy(h).into_owned())
    });
    format!(
        "{origin:?} {:?} {:?}",
        result_code(m),
        reports_in(std::slice::from_ref(m), ReportType::Host)
    )
}

fn host_reports(answers: &[bytes::Bytes]) -> Vec<OcOlr> {
    reports_in(answers, ReportType::Host)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_reports_itself_ends_the_agents_report_and_its_own_is_relayed() {
    let r = Reporter::spawn(SERVER).await;
    r.set(Script {
        result_code: Some(3004),
        ..Script::default()
    });
    let doic = format!("[doic.peers.\"{CLIENT}\"]\ntrusted = true\n");
    let config = agent_config(&[(&r, true)], Some(&doic), 2);
    let agent = start_agent(config, 1).await;
    let addr = agent.local_addrs()[0];
    let mut load = Client::connect(addr, Identity::new(PLAIN, "example.org"), vec![TEST_APP])
        .await
        .unwrap();
    let mut doic_client = connect(addr).await;
    let cf = client_features(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let halt = AtomicBool::new(false);
    let t = Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    };
    let run = load.run(
        &t,
        Pace::Open(100),
        Duration::from_secs(9),
        Duration::from_secs(3),
        &halt,
    );
    let probes = async {
        // Overloaded (3004) and without DOIC: the agent's report, in the
        // server's answers (never in the agent's own, whose Origin-Host is
        // the agent, RFC 7683 §5.2.1.3). A client new to the report passes
        // the rest of the limit with the client without DOIC.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let from_server = |m: &bytes::Bytes| {
            diameter::codec::Routing::scan(m).unwrap().origin_host() == Some(SERVER.as_bytes())
        };
        let mut a = Vec::new();
        for i in 0..40 {
            a.extend(exchange(&mut doic_client, 200 + i, 1, 1, Some(&cf)).await);
            if a.iter().filter(|m| from_server(m)).count() >= 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (servers_answers, agents_answers): (Vec<_>, Vec<_>) =
            a.into_iter().partition(|m| from_server(m));
        assert!(host_reports(&agents_answers).is_empty());
        assert_eq!(
            servers_answers.len(),
            5,
            "{} of the agent",
            agents_answers.len()
        );
        let agents = host_reports(&servers_answers);
        assert_eq!(agents.len(), 5, "{agents:?}");
        assert!(
            agents.iter().all(|o| o.sequence_number >= before),
            "{agents:?}"
        );
        let native = metric(&agent, &format!("doic_protect_native{{peer=\"{SERVER}\"}}"));
        assert_eq!(native, Some(0.0));
        // The server now does DOIC: its own report, sequence 5.
        let mut own = OcOlr::new(5, ReportType::Host);
        own.reduction_percentage = Some(30);
        own.validity_duration = Some(10);
        r.set(Script {
            features: Some(server_features(OLR_DEFAULT_ALGO, SERVER)),
            olrs: vec![own.clone()],
            ..Script::default()
        });
        // Detected at the first answer that passed the agent's limit.
        let mut native = None;
        for _ in 0..50 {
            native = metric(&agent, &format!("doic_protect_native{{peer=\"{SERVER}\"}}"));
            if native == Some(1.0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(native, Some(1.0), "the server is seen to do DOIC");
        // The agent's report ends (it may still ramp down until the
        // server's first report replaces it); from then on the server's
        // report is relayed, and no active report of the agent's.
        // The client's requests are realm-routed: the agent picks the server
        // and applies the server's 30 % to them itself (the host step of a
        // realm-routed request), so a burst of 5 may be answered by the
        // agent alone (0.3^5, about one run in 400). The server's answers
        // are gathered over bursts.
        let mut relayed = Vec::new();
        for i in 0..30 {
            let b = exchange(&mut doic_client, 10 + i, 1, 1, Some(&cf)).await;
            let h = host_reports(&b);
            if h.contains(&own) {
                for j in 0..10 {
                    let burst = exchange(&mut doic_client, 100 + 5 * j, 5, 5, Some(&cf)).await;
                    relayed.extend(burst.into_iter().filter(|m| from_server(m)));
                    if relayed.len() >= 5 {
                        break;
                    }
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(!relayed.is_empty(), "answers from the server");
        let servers = host_reports(&relayed);
        assert!(
            !servers.is_empty(),
            "the server's report relayed: {:?}",
            relayed.iter().map(describe).collect::<Vec<_>>()
        );
        assert!(
            servers
                .iter()
                .all(|o| *o == own
                    || (o.validity_duration == Some(0) && o.sequence_number >= before)),
            "only the server's report, or the agent's end: {servers:?}"
        );
        assert_eq!(
            metric(&agent, &format!("doic_protect_limit{{peer=\"{SERVER}\"}}")),
            None,
            "no limit for a server that reports itself"
        );
        // The server's 30 % governs the agent's abatement for a client
        // without DOIC (its report replaced the agent's in the agent's own
        // OCS too, RFC 7683 §5.1.3 reacting on the client's behalf).
        let mut other = Client::connect(addr, Identity::new(OTHER, "example.org"), vec![TEST_APP])
            .await
            .unwrap();
        let halt2 = AtomicBool::new(false);
        let o = other
            .run(
                &t,
                Pace::Open(200),
                Duration::from_secs(2),
                Duration::from_secs(3),
                &halt2,
            )
            .await
            .unwrap();
        let throttled: u64 = [3004, 5012, 5198]
            .iter()
            .filter_map(|c| o.by_code.get(c))
            .sum();
        let share = throttled as f64 / o.sent as f64;
        assert!(
            (0.15..=0.45).contains(&share),
            "{share} throttled: {:?}",
            o.by_code
        );
        // Its answers without a report: the agent's end, its own sequence.
        r.set(Script {
            features: Some(server_features(OLR_DEFAULT_ALGO, SERVER)),
            ..Script::default()
        });
        let c = exchange(&mut doic_client, 200, 5, 5, Some(&cf)).await;
        let last = agents.iter().map(|o| o.sequence_number).max().unwrap();
        let ends = host_reports(&c);
        assert!(!ends.is_empty(), "the agent's end");
        for e in &ends {
            assert_eq!(e.validity_duration, Some(0), "{e:?}");
            assert!(e.sequence_number > last, "{e:?} after {last}");
        }
    };
    let (report, ()) = tokio::join!(run, probes);
    let report = report.unwrap();
    assert_eq!(report.sent, report.answered, "{:?}", report.by_code);
    stop(agent);
}
