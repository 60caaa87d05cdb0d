//! Per-client enforcement of the shares of the HOST report the agent makes
//! on behalf of a server that knows no DOIC (docs/protect.md, RFC 7683
//! §5.1.3, RFC 8582 §6.1), over real TCP with 2 workers: each DOIC client
//! sent the report is held to its own share of the server's limit by its
//! own bucket, the clients without DOIC to the rest, so a DOIC client that
//! abates to its share loses nothing to another's excess.

mod support;

use std::time::{Duration, Instant};

use diameter::codec::Routing;
use diameter::codec::doic::{OcOlr, OcSupportedFeatures, ReportType};
use diameter::dictionary::doic::{OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};
use doic::DoicConfig;
use doic::config::PeerPolicy;
use support::*;
use tools::loadgen::{Busy, Client, Identity, ServerBehaviour, TEST_APP, Traffic};

const C: u32 = 200;
const LIGHT: &str = "client2.example.org";
const SERVER: &str = "server1.example.net";

/// One test at a time: each runs an agent, a server and a client at
/// 600 requests/s, and the machine has few cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A FIFO server of capacity `C` behind an agent with `[doic]` and 2
/// workers, `CLIENT` and `LIGHT` trusted DOIC clients.
async fn protected() -> Setup {
    let b = ServerBehaviour {
        capacity: Some(C),
        busy: Busy::Queue,
        ..Default::default()
    };
    let s = one_server(Run::Pinned, b, |c| {
        c.node.workers = Some(2);
        let mut d = DoicConfig::default();
        for h in [CLIENT, LIGHT] {
            let p = PeerPolicy {
                trusted: true,
                ..PeerPolicy::default()
            };
            d.peers.insert(h.into(), p);
        }
        c.doic = Some(d);
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    s
}

fn rate_features(host: &str) -> OcSupportedFeatures {
    OcSupportedFeatures {
        feature_vector: Some(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM),
        source_id: Some(host.into()),
        peer_algo: None,
    }
}

fn origin_host(m: &[u8]) -> String {
    let r = Routing::scan(m).unwrap();
    String::from_utf8_lossy(r.origin_host().unwrap_or_default()).into_owned()
}

/// What the light client saw: each answer with when it came (from the
/// start of the run), its Result-Code, and the share its HOST report gave.
struct Seen {
    at: Duration,
    code: u32,
    share: Option<u32>,
}

/// A DOIC rate client of demand `demand` requests/s that abates at the
/// source (RFC 8582 §7.2): one request at a time, paced at the least of its
/// demand and the OC-Maximum-Rate of the last HOST report it received, for
/// `run`.
async fn abating_client(mut c: Client, demand: f64, run: Duration) -> Vec<Seen> {
    let f = rate_features(LIGHT);
    let t0 = Instant::now();
    let mut share: Option<u32> = None;
    let mut seen = Vec::new();
    let mut hbh = 1;
    while t0.elapsed() < run {
        let a = exchange(&mut c, hbh, 1, 1, Some(&f)).await;
        hbh += 1;
        let host: Vec<OcOlr> = reports_in(&a, ReportType::Host);
        if let Some(r) = host.iter().find_map(|o| o.maximum_rate) {
            share = Some(r);
        }
        seen.push(Seen {
            at: t0.elapsed(),
            code: code_of(&a[0]),
            share,
        });
        let rate = share.map_or(demand, |s| demand.min(f64::from(s)));
        tokio::time::sleep(Duration::from_secs_f64(1.0 / rate.max(0.5))).await;
    }
    seen
}

/// A DOIC client that keeps sending 3x C (it announces loss and rate but
/// does not abate) is held to its share, while a light DOIC rate client of
/// 40 requests/s abating to its share (about 13/s) has every request
/// from its first report on answered 2001: before, one bucket at the limit
/// for both let the heavy client's excess take the light client's
/// allocation. Its share holds across versions, and what reaches the
/// server stays at the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_doic_client_above_its_share_is_held_to_it_and_one_within_it_loses_nothing() {
    let _one = SERIAL.lock().await;
    let s = protected().await;
    let light = Client::connect(s.addr, Identity::new(LIGHT, "example.org"), vec![TEST_APP])
        .await
        .unwrap();
    let mut heavy = s.client().await;
    heavy.announce_doic();
    let traffic = Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    };
    // The light client starts first: its demand is in the first version's
    // split.
    let light_run = tokio::spawn(abating_client(light, 40.0, Duration::from_secs(10)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (r, per_s, ()) = offer_open(
        &s,
        &mut heavy,
        &traffic,
        (3 * u64::from(C), 9),
        (4, 9),
        async {},
    )
    .await;
    let seen = light_run.await.unwrap();
    let ok = r.by_code.get(&2001).copied().unwrap_or(0);
    eprintln!(
        "heavy: {ok} 2001 of {}, {:?}; {:.1}/s at the server",
        r.sent, r.by_code, per_s[0]
    );
    assert_eq!(
        r.sent, r.answered,
        "every request answered: {:?}",
        r.by_code
    );
    // At most the limit; the lower bound is as loose as doic_chain.rs's
    // (0.2 C): at load 6-8 on 2 cores the loopback server is starved and
    // the limit follows it down to 0.3-0.55 C (the limit's precision is
    // shown in protect.rs and doic/src/protect/tests.rs).
    assert!(
        (0.2..=1.1).contains(&(per_s[0] / f64::from(C))),
        "{}/s reached the server of {C}/s",
        per_s[0]
    );
    // The heavy client: held to its share, the rest answered by the agent.
    assert!(ok < r.sent / 2, "{:?}", r.by_code);
    // The light client: once it has its share, every answer 2001.
    let first = seen
        .iter()
        .position(|x| x.share.is_some())
        .expect("a HOST report with the light client's share");
    let settled = seen[first].at + Duration::from_secs(1);
    let after: Vec<&Seen> = seen.iter().filter(|x| x.at > settled).collect();
    let shares: Vec<u32> = after.iter().filter_map(|x| x.share).collect();
    let codes: Vec<u32> = after.iter().map(|x| x.code).collect();
    eprintln!(
        "light: {} answers, first share at {:?}, shares {:?}..{:?}",
        seen.len(),
        seen[first].at,
        shares.iter().min(),
        shares.iter().max()
    );
    assert!(
        after.len() >= 10,
        "{} answers after {settled:?}",
        after.len()
    );
    assert!(
        codes.iter().all(|c| *c == 2001),
        "light client within its share: {codes:?}"
    );
    // Its share, split by demand as measured when the overload began (it
    // arrives at 10 to 25/s then, its one request at a time slowed by the
    // server's queue: 2 to 13 of 200/s against the heavy client's demand,
    // itself still rising), does not collapse to 1/s because it abates to
    // it (split by its arrivals, it would halve at each version). On a
    // loaded machine it still follows the limit down with a starved server
    // and the client's own pace; its stability is shown on a simulated
    // clock (`doic/src/protect/gates.rs`).
    let first_share = seen[first].share.unwrap();
    let late = &shares[shares.len() / 2..];
    assert!(
        late.iter().all(|s| *s >= 2),
        "light shares {shares:?} after {first_share}"
    );
}

/// RFC 7683 §5.1.3, §5.2.1.3: the HOST report the agent makes on the
/// server's behalf goes only in answers that come from the server (its
/// Origin-Host), never in the agent's own throttle answers (whose
/// Origin-Host is the agent): a reacting node keys a HOST report by the
/// answer's Origin-Host, so one in the agent's answer would be held for the
/// agent itself (an edge agent in front would abate realm-routed requests
/// twice, by that OCS and by the server's). A DOIC client that keeps
/// sending above its share sees both kinds of answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_made_on_the_servers_behalf_is_only_in_the_servers_answers() {
    let _one = SERIAL.lock().await;
    let s = protected().await;
    let heavy = Client::connect(s.addr, Identity::new(LIGHT, "example.org"), vec![TEST_APP])
        .await
        .unwrap();
    let answers = send_regardless(
        heavy,
        3.0 * f64::from(C),
        Duration::from_secs(6),
        Some(rate_features(LIGHT)),
    )
    .await;
    let (mut from_server, mut from_agent) = (0, 0);
    let mut reported = 0;
    for a in &answers {
        let host = reports_in(std::slice::from_ref(a), ReportType::Host);
        match origin_host(a).as_str() {
            SERVER => {
                from_server += 1;
                reported += usize::from(!host.is_empty());
            }
            AGENT => {
                from_agent += 1;
                assert!(
                    host.is_empty(),
                    "a HOST report in the agent's own answer ({}): {host:?}",
                    code_of(a)
                );
                assert!([3004, 5012, 5198].contains(&code_of(a)), "{}", code_of(a));
            }
            other => panic!("an answer from {other}"),
        }
    }
    eprintln!(
        "{from_server} from the server ({reported} with the report), {from_agent} from the agent"
    );
    assert!(
        from_agent * 2 >= answers.len(),
        "{from_agent} of {}",
        answers.len()
    );
    // Once the limit binds, the server's answers carry it.
    assert!(reported * 2 >= from_server, "{reported} of {from_server}");
}
