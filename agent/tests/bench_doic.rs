//! DOIC precision and cost through the running agent (release build; run by
//! `cargo xtask test --only bench-doic`). Each figure is printed and checked:
//!
//! - rate algorithm (RFC 8582 §8.3.1): at 10x offered load, the rate reaching
//!   the reporting server is within 2 % of OC-Maximum-Rate over 10 s;
//! - loss algorithm (RFC 7683 §6): the throttled share is within 1 percentage
//!   point of OC-Reduction-Percentage over 100,000 requests;
//! - a report takes effect on the first request routed after its answer
//!   (RFC 7683 §5.2.2);
//!
//! The relay's throughput with DOIC active and no overload against without is
//! measured side by side by `bench-relay-ab --subject doic` (same stage).

mod support;

// The allocator of the agent's binaries (main.rs, bench-relay).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use diameter::codec::doic::{OcOlr, OcSupportedFeatures, ReportType};
use diameter::dictionary::doic::{OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};
use support::*;
use tools::loadgen::{Pace, Traffic};

const S1: &str = "server1.example.net";

fn once(s: &Reporter, vector: u64, olr: OcOlr) {
    s.set(Script {
        features: Some(OcSupportedFeatures {
            feature_vector: Some(vector),
            source_id: Some(s.host.clone()),
            peer_algo: None,
        }),
        olrs: vec![olr],
        once: true,
        ..Script::default()
    });
}

fn traffic() -> Traffic {
    Traffic {
        destination_realm: "example.net".into(),
        destination_host: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: cargo xtask test --only bench-doic"]
async fn rate_within_two_percent_at_ten_times_offered_load() {
    const RATE: u32 = 500;
    let s1 = Reporter::spawn(S1).await;
    let agent = start_agent(agent_config(&[(&s1, true)], Some(""), 2), 1).await;
    let mut c = connect(agent.local_addrs()[0]).await;
    let mut r = OcOlr::new(1, ReportType::Host);
    r.maximum_rate = Some(RATE);
    r.validity_duration = Some(3600);
    once(&s1, OLR_RATE_ALGORITHM, r);
    exchange(&mut c, 1, 1, 1, None).await;
    let before = s1.requests();
    let secs = 10.0;
    let stop = AtomicBool::new(false);
    let report = c
        .run(
            &traffic(),
            Pace::Open(u64::from(RATE) * 10),
            Duration::from_secs_f64(secs),
            Duration::from_secs(2),
            &stop,
        )
        .await
        .unwrap();
    let reached = (s1.requests() - before) as f64 / secs;
    let offered = report.sent as f64 / secs;
    let err = (reached / f64::from(RATE) - 1.0) * 100.0;
    println!(
        "bench-doic rate: OC-Maximum-Rate {RATE}/s, offered {offered:.0}/s, reached the server {reached:.1}/s ({err:+.2} %), answered {}/{}",
        report.answered, report.sent
    );
    assert_eq!(report.answered, report.sent, "one answer per request");
    assert!(offered >= 9.5 * f64::from(RATE), "offered load {offered}/s");
    assert!(err.abs() <= 2.0, "rate off by {err:.2} %");
    stop_agent(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: cargo xtask test --only bench-doic"]
async fn loss_share_within_one_point_over_100k_requests() {
    const PERCENT: u32 = 37;
    let s1 = Reporter::spawn(S1).await;
    let agent = start_agent(agent_config(&[(&s1, true)], Some(""), 2), 1).await;
    let mut c = connect(agent.local_addrs()[0]).await;
    let mut r = OcOlr::new(1, ReportType::Host);
    r.reduction_percentage = Some(PERCENT);
    r.validity_duration = Some(3600);
    once(&s1, OLR_DEFAULT_ALGO, r);
    exchange(&mut c, 1, 1, 1, None).await;
    let before = s1.requests();
    let n = 100_000u32;
    let a = exchange(&mut c, 10, n, 128, None).await;
    let throttled = a.iter().filter(|m| code_of(m) == 5012).count();
    let passed = a.iter().filter(|m| code_of(m) == 2001).count();
    let share = throttled as f64 * 100.0 / f64::from(n);
    println!(
        "bench-doic loss: OC-Reduction-Percentage {PERCENT} %, throttled {share:.3} % of {n} ({:+.3} pp)",
        share - f64::from(PERCENT)
    );
    assert_eq!(throttled + passed, n as usize);
    assert_eq!((s1.requests() - before) as usize, passed);
    assert!((share - f64::from(PERCENT)).abs() <= 1.0);
    stop_agent(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: cargo xtask test --only bench-doic"]
async fn report_takes_effect_on_the_first_request_after_its_answer() {
    let s1 = Reporter::spawn(S1).await;
    let cfg = agent_config(&[(&s1, true)], Some("ramp = 0.0\nprobe_interval = 0.01"), 2);
    let agent = start_agent(cfg, 1).await;
    let mut c = connect(agent.local_addrs()[0]).await;
    let rounds = 5u32;
    let mut hits = 0;
    let mut hbh = 1;
    for k in 0..rounds {
        // A 100 % report valid 1 s, on the next answer only.
        let mut r = OcOlr::new(u64::from(k) + 1, ReportType::Host);
        r.reduction_percentage = Some(100);
        r.validity_duration = Some(1);
        once(&s1, OLR_DEFAULT_ALGO, r);
        let carrying = exchange(&mut c, hbh, 1, 1, None).await;
        assert_eq!(code_of(&carrying[0]), 2001);
        // The very next request (2 workers: maybe on the other one).
        let next = exchange(&mut c, hbh + 1, 1, 1, None).await;
        hbh += 2;
        if code_of(&next[0]) == 5012 {
            hits += 1;
        }
        // Wait for the expiry and the controlled ending to let traffic by.
        let t0 = std::time::Instant::now();
        loop {
            let a = exchange(&mut c, hbh, 1, 1, None).await;
            hbh += 1;
            if code_of(&a[0]) == 2001 {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the OCS never ended"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    println!(
        "bench-doic first request: {hits}/{rounds} requests right after the carrying answer throttled"
    );
    assert_eq!(hits, rounds);
    stop_agent(agent);
}

fn stop_agent(agent: agent::agent::Agent) {
    stop(agent);
}
