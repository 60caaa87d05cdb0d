//! DOIC precision and cost through the running agent (release build; run by
//! `cargo xtask test --only bench-doic`). Each figure is printed and checked:
//!
//! - rate algorithm (RFC 8582 §8.3.1): at 10x offered load, the rate reaching
//!   the reporting server is within 2 % of OC-Maximum-Rate over 10 s;
//! - loss algorithm (RFC 7683 §6): the throttled share is within 1 percentage
//!   point of OC-Reduction-Percentage over 100,000 requests;
//! - a report takes effect on the first request routed after its answer
//!   (RFC 7683 §5.2.2);
//! - the relay's throughput with DOIC active and no overload is at least 95 %
//!   of the relay's with `[doic] enabled = false`: two agents in the same
//!   run, measured back to back in 11 rounds of alternating order; the
//!   figures are medians of the per-round ratios. Two are checked: the
//!   relay's capacity (the inverse ratio of its worker thread's CPU time per
//!   answered request, exact from the scheduler, what limits a saturated
//!   relay) and the end-to-end rate of the closed loop (load client and
//!   server on the same cores).

mod reporting;

// The allocator of the agent's binaries (main.rs, bench-relay).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use doic_agent::codec::doic::{OcOlr, OcSupportedFeatures, ReportType};
use doic_agent::dictionary::doic::{OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};
use doic_agent::loadgen::{Identity, Pace, TEST_APP, Traffic};
use reporting::*;

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
        experimental: None,
        result_code: None,
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
    let agent = start(agent_config(&[(&s1, true)], Some(""), 2), 1).await;
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
    let agent = start(agent_config(&[(&s1, true)], Some(""), 2), 1).await;
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
    let agent = start(cfg, 1).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: cargo xtask test --only bench-doic"]
async fn throughput_with_doic_active_is_at_least_95_percent_of_without() {
    const ROUNDS: usize = 11;
    let servers = [
        doic_agent::loadgen::Server::spawn(
            "127.0.0.1:0".parse().unwrap(),
            Identity::new(S1, "example.net"),
            doic_agent::loadgen::ServerBehaviour::default(),
        )
        .await
        .unwrap(),
        doic_agent::loadgen::Server::spawn(
            "127.0.0.1:0".parse().unwrap(),
            Identity::new(S1, "example.net"),
            doic_agent::loadgen::ServerBehaviour::default(),
        )
        .await
        .unwrap(),
    ];
    let config = |addr: std::net::SocketAddr, doic: &str| {
        let t = format!(
            "[node]\norigin_host = \"{AGENT}\"\norigin_realm = \"example.com\"\nlisten = [\"127.0.0.1:0\"]\nworkers = 1\ntc_seconds = 0.2\ntw_seconds = 6\n[[peer]]\nhost = \"{S1}\"\nrealm = \"example.net\"\nconnect = \"{addr}\"\ntrusted = true\n[[route]]\nrealm = \"example.net\"\npeers = [\"{S1}\"]\n[accept]\nhosts = [\"*.example.org\"]\n[doic]\n{doic}\n"
        );
        doic_agent::config::Config::from_str_named(&t, std::path::Path::new("bench.toml")).unwrap()
    };
    let anchor = start(config(servers[0].addr, "enabled = false"), 1).await;
    let doic = start(config(servers[1].addr, "enabled = true"), 1).await;
    let (mut rates, mut ratios) = ([Vec::new(), Vec::new()], Vec::new());
    // The relay's own cost: its worker thread's CPU time per answered
    // request, paired per round like the rates.
    let mut cpu_ratios = Vec::new();
    let mut per_request = [Vec::new(), Vec::new()];
    let stop = AtomicBool::new(false);
    for round in 0..ROUNDS {
        // Each round measures both, in alternating order, back to back: the
        // ratio of the pair cancels the machine's load of the moment.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut pair = [0.0; 2];
        let mut cpu_pair = [0.0; 2];
        for i in order {
            let a = [&anchor, &doic][i];
            let mut c = doic_agent::loadgen::Client::connect(
                a.local_addrs()[0],
                Identity::new(CLIENT, "example.org"),
                vec![TEST_APP],
            )
            .await
            .unwrap();
            let cpu0 = a.shared().worker_cpu_time(0).expect("worker CPU time");
            let r = c
                .run(
                    &traffic(),
                    Pace::Closed(64),
                    Duration::from_millis(700),
                    Duration::from_secs(2),
                    &stop,
                )
                .await
                .unwrap();
            assert_eq!(r.by_code.get(&2001).copied(), Some(r.answered));
            let cpu = a.shared().worker_cpu_time(0).expect("worker CPU time") - cpu0;
            cpu_pair[i] = cpu.as_secs_f64() * 1e9 / r.answered.max(1) as f64;
            per_request[i].push(cpu_pair[i]);
            pair[i] = r.rate();
            rates[i].push(r.rate());
        }
        ratios.push(pair[1] / pair[0]);
        // Capacity with / without: the inverse ratio of CPU per request.
        cpu_ratios.push(cpu_pair[0] / cpu_pair[1]);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, d) = (median(&mut rates[0]), median(&mut rates[1]));
    let ratio = median(&mut ratios);
    // CPU per request of the relay's worker; its inverse is the relay's
    // throughput when the relay is what limits it (a saturated worker).
    let capacity = median(&mut cpu_ratios);
    let (per0, per1) = (median(&mut per_request[0]), median(&mut per_request[1]));
    println!(
        "bench-doic throughput: without DOIC {a:.0}/s, with DOIC (no overload) {d:.0}/s, end-to-end ratio {ratio:.3} (median of {ROUNDS} paired rounds; ratios {:.3} .. {:.3}); relay worker CPU per request {:.0} ns without, {:.0} ns with: relay capacity ratio {capacity:.3} (median of paired rounds)",
        ratios[0],
        ratios[ROUNDS - 1],
        per0,
        per1
    );
    assert!(
        capacity >= 0.95,
        "DOIC costs the relay too much: capacity ratio {capacity:.3}"
    );
    assert!(
        ratio >= 0.95,
        "DOIC costs too much end to end: ratio {ratio:.3}"
    );
    stop_agent(anchor);
    stop_agent(doic);
    for s in &servers {
        s.stop();
    }
}

fn stop_agent(agent: doic_agent::agent::Agent) {
    reporting::stop(agent);
}
