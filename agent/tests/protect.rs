//! Protection of an upstream server that knows no DOIC (docs/protect.md,
//! RFC 7683 §5.1.3), over real TCP with the default configuration (`[doic]`
//! present, `[doic.protect]` on by default, the default worker count): the
//! built-in server held to a capacity C (FIFO queue, or 3004 above C), a
//! client offering 3x C in bursts (open loop, many requests per write).
//! The excess is answered by the agent at once, what reaches the server
//! falls to within 10 % of C, and every request is answered.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use doic::DoicConfig;
use support::*;
use tools::loadgen::{Busy, Client, Pace, Report, ServerBehaviour, Traffic};

const C: u32 = 200;
const SERVER: &str = "server1.example.net";

fn traffic() -> Traffic {
    Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    }
}

/// One server of capacity `C` behaving as `busy`, behind an agent with
/// `[doic]` and otherwise the defaults, run as `run` says.
async fn protected(run: Run, busy: Busy) -> Setup {
    let b = ServerBehaviour {
        capacity: Some(C),
        busy,
        ..Default::default()
    };
    one_server(run, b, |c| c.doic = Some(DoicConfig::default())).await
}

/// What reached the server per second between `from` and `to` of a run at
/// `rate` for `secs`, the client's report, and the limit in force at `to`.
async fn offer(
    s: &Setup,
    c: &mut Client,
    rate: u64,
    secs: u64,
    (from, to): (u64, u64),
) -> (f64, Report, Option<f64>) {
    let stop = AtomicBool::new(false);
    let t = traffic();
    let run = c.run(
        &t,
        Pace::Open(rate),
        Duration::from_secs(secs),
        Duration::from_secs(6),
        &stop,
    );
    let server = &s.servers[0];
    let agent = s.agent();
    let sample = async {
        tokio::time::sleep(Duration::from_secs(from)).await;
        let a = server.stats.requests.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(to - from)).await;
        let b = server.stats.requests.load(Ordering::Relaxed);
        let limit = metric(agent, &format!("doic_protect_limit{{peer=\"{SERVER}\"}}"));
        ((b - a) as f64 / (to - from) as f64, limit)
    };
    let (r, (arrivals, limit)) = tokio::join!(run, sample);
    (arrivals, r.unwrap(), limit)
}

fn throttled(r: &Report) -> u64 {
    [3004, 5012, 5198]
        .iter()
        .filter_map(|c| r.by_code.get(c))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_server_offered_three_times_its_capacity_receives_it_and_no_more() {
    let s = protected(Run::Pinned, Busy::Queue).await;
    let mut c = s.client().await;
    let (arrivals, r, limit) = offer(&s, &mut c, 3 * u64::from(C), 10, (4, 10)).await;
    eprintln!(
        "fifo: {arrivals:.1}/s at the server, limit {limit:?}, p99 {} us, max {} us, {:?}",
        r.percentile_us(99.0),
        r.percentile_us(100.0),
        r.by_code
    );
    assert_eq!(
        r.sent, r.answered,
        "every request answered: {:?}",
        r.by_code
    );
    assert!(
        (0.9..=1.1).contains(&(arrivals / f64::from(C))),
        "{arrivals}/s reached the server of {C}/s: {:?}",
        r.by_code
    );
    let limit = limit.expect("a limit in force");
    assert!(
        (0.9..=1.1).contains(&(limit / f64::from(C))),
        "limit {limit}"
    );
    // The excess was answered by the agent, the rest served.
    let ok = r.by_code.get(&2001).copied().unwrap_or(0);
    assert!(throttled(&r) * 2 >= r.sent, "{:?}", r.by_code);
    assert_eq!(ok + throttled(&r), r.sent, "{:?}", r.by_code);
    // Nothing waited long in the server's queue: every 2001 came within
    // half the clients' 2 s timeout (the longest wait is the one tick of
    // 3x load before the first limit), so the goodput is all of them.
    assert!(
        r.percentile_us(100.0) < 1_000_000,
        "max latency {} us",
        r.percentile_us(100.0)
    );
    assert!(ok >= u64::from(C) * 9, "goodput {ok} in 10 s");
    assert!(
        metric(
            s.agent(),
            &format!("doic_protect_throttled_total{{peer=\"{SERVER}\"}}")
        )
        .is_some_and(|t| t > 0.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_answering_3004_above_its_capacity_is_held_to_it() {
    let s = protected(Run::Pinned, Busy::Reject { cost: 0.1 }).await;
    let mut c = s.client().await;
    let (arrivals, r, limit) = offer(&s, &mut c, 3 * u64::from(C), 10, (4, 10)).await;
    eprintln!(
        "3004: {arrivals:.1}/s at the server, limit {limit:?}, {:?}",
        r.by_code
    );
    assert_eq!(
        r.sent, r.answered,
        "every request answered: {:?}",
        r.by_code
    );
    assert!(
        (0.9..=1.1).contains(&(arrivals / f64::from(C))),
        "{arrivals}/s reached the server of {C}/s: {:?}",
        r.by_code
    );
    let rejected = s.servers[0].stats.rejected.load(Ordering::Relaxed);
    // Without protection two thirds of 6,000 would be the server's 3004s.
    assert!(rejected * 10 < r.sent, "{rejected} rejected by the server");
}
