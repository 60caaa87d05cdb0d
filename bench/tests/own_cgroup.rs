//! The agent finds its own capacity by measurement and holds its clients
//! to it (RFC 8581 §6.2.4, RFC 8582 §6.1 and §7.2), end to end: the
//! `doic-agent` process held to a twentieth of a CPU by a cgroup, `[doic]`
//! without `own_capacity`, the default worker count and kernel program;
//! over TCP on loopback a DOIC client that ignores the agent's peer report
//! and a client without DOIC, together at least two and a half times the
//! capacity the agent measures in that share, open loop: the agent finds
//! itself overloaded, what reaches the server stays within the capacity it
//! measured (the capacity in force over the time), every request is
//! answered, and the DOIC client received the
//! agent's reports. Root (cgroups, the kernel program) and a release build
//! of `doic-agent` next to this test's directory: run by `cargo xtask test
//! --only bench-own`.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bench::own::{Rig, Setup, Subject, gauge, metrics_page, offer};
use tools::loadgen::Pace;

/// `doic-agent` of the same profile: `target/<profile>/deps/<test>` runs
/// this test.
fn agent_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let bin = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target/<profile>")
        .join("doic-agent");
    assert!(
        bin.exists(),
        "{} not found: cargo build --release -p tools --bin doic-agent",
        bin.display()
    );
    bin
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("runtime")
}

/// How long the measurement waits for the agent to find itself
/// overloaded after the warm-up. One clean-clone run waited 4 s and more:
/// the agent relayed both clients' 25,300/s for the whole warm-up and 4 s
/// after it, then found its overload with a capacity of 20,316/s, and the
/// samples began before it (overloaded 0, 0, 1, 1, 1, 1).
const ONSET_WITHIN: Duration = Duration::from_secs(8);

/// How long the load lasts after the onset, for the six samples a second
/// apart: longer than five seconds when the saturated share is slow to
/// serve `/metrics`. Two runs in twelve took 11 s and more; with the load
/// over before the last sample, that sample read the agent out of
/// overload.
const SAMPLED_WITHIN: Duration = Duration::from_secs(15);

/// Requests per second each client offers. Held to a twentieth of a CPU
/// the agent measured itself at 1,681-15,511/s with its throttle answers'
/// DOIC AVPs encoded once, so 2 x 25,000/s is at least 2.5 times that; it
/// answered every request at that load in eleven runs of eleven. (Before
/// that encoding, two clients at 27,630/s each left it behind and even
/// 20,000/s did once in eight: docs/own-overload.md.)
const PER_CLIENT: u64 = 25_000;

#[test]
#[ignore = "root, cgroups and a release build: cargo xtask test --only bench-own"]
fn clients_above_the_measured_capacity_are_held_to_it() {
    let setup = Setup {
        agent_bin: agent_bin(),
        cpu_share: 0.05,
        period_us: 100_000,
        // One announces DOIC and ignores the reports, one does not.
        clients: 2,
        timeout: Duration::from_secs(2),
        // Found overloaded within two measurements, the reports out at
        // the next, the DOIC client held a second after: steady by then.
        warmup: 6.0,
        // The wait for the onset, then the samples.
        seconds: 6.0 + ONSET_WITHIN.as_secs_f64() + SAMPLED_WITHIN.as_secs_f64(),
        drain: Duration::from_secs(3),
        server_protect: "native".into(),
        edge_node: String::new(),
        agent_node: String::new(),
    };
    let (peers, clients) = (runtime(1), runtime(2));
    // Each client at a fixed rate, not three times a calibration's: the
    // closed-loop calibration bench-own uses (eight clients of 32
    // outstanding) measured the share at 3,236-10,648/s, its 2001 rate
    // falling as the agent throttled those clients too, while the agent
    // then measured itself at up to 17,764/s: three times the calibration
    // was, in a run in six, less than 2.5 times that, and at 27,630/s each
    // and more (a fast calibration) requests went unanswered. The agent
    // measured itself at or below 14,982/s in eighteen runs of nineteen;
    // that the two offer at least 2.5 times what it measures is checked
    // below.
    let rig = Rig::start(&peers, &setup, Subject::Agent).expect("the agent in its cgroup");
    let metrics = rig.agent.as_ref().expect("an agent").metrics;
    let requests = || rig.server.stats.requests.load(Ordering::Relaxed);
    // At the start of the measurement and once a second during it: when,
    // the capacity the agent measured, and whether it holds itself
    // overloaded by measurement.
    let mut samples: Vec<(Instant, Option<f64>, Option<f64>)> = Vec::new();
    let mut reached = (0, 0.0);
    let outcome = offer(
        &clients,
        &setup,
        &rig,
        Pace::Open(PER_CLIENT),
        setup.seconds,
        || {
            // The measurement starts once the agent finds itself
            // overloaded: it may keep up with the load for a while first.
            let onset = Instant::now();
            while onset.elapsed() < ONSET_WITHIN
                && metrics_page(metrics).and_then(|p| gauge(&p, "doic_own_measured_overload"))
                    != Some(1.0)
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            let (n0, t0) = (requests(), Instant::now());
            for i in 0..=5 {
                if i > 0 {
                    std::thread::sleep(Duration::from_secs(1));
                }
                let page = metrics_page(metrics).unwrap_or_default();
                samples.push((
                    Instant::now(),
                    gauge(&page, "doic_own_capacity_rps"),
                    gauge(&page, "doic_own_measured_overload"),
                ));
            }
            reached = (requests() - n0, t0.elapsed().as_secs_f64());
        },
    )
    .expect("the load");
    let log = rig.agent.as_ref().map(|a| a.log_tail()).unwrap_or_default();
    drop(rig);
    let r = &outcome.report;
    let capacity: Vec<Option<f64>> = samples.iter().map(|s| s.1).collect();
    let overloaded: Vec<Option<f64>> = samples.iter().map(|s| s.2).collect();
    // The capacity in force over the measurement: each sample's until the
    // next (a second apart, longer when the saturated share is slow to
    // serve /metrics), averaged over the time.
    let in_force = samples
        .windows(2)
        .map(|w| w[0].1.unwrap_or(0.0) * w[1].0.duration_since(w[0].0).as_secs_f64())
        .sum::<f64>()
        / samples[5].0.duration_since(samples[0].0).as_secs_f64();
    let context = format!(
        "offered 2 x {PER_CLIENT}/s; capacity measured {capacity:?} (in force {in_force:.0}/s), \
         overloaded {overloaded:?}; reached the server {} in {:.2} s; codes {:?}, sent {}, \
         answered {}, with OC-OLR {}\n{}\n{log}",
        reached.0, reached.1, r.by_code, r.sent, r.answered, r.with_olr, outcome.digest
    );
    eprintln!("own capacity by measurement in 0.05 CPU: {context}");
    // Overloaded by measurement all along, its capacity found below what
    // the share relays flat out.
    assert_eq!(overloaded, vec![Some(1.0); 6], "{context}");
    assert!(
        capacity.iter().all(Option::is_some) && in_force > 0.0,
        "{context}"
    );
    // Offered at least two and a half times that capacity.
    assert!(2.0 * PER_CLIENT as f64 >= 2.5 * in_force, "{context}");
    // What reached the server: no more than the capacity in force (10 %
    // for the bucket's tolerance and the second a new capacity takes to
    // reach the clients' limits). Not as much either: answering the
    // excess 3004 costs the share a part of a relay for each, so the
    // estimate leaves room for it and falls while the excess lasts
    // (docs/own-overload.md, "Held to a twentieth of a CPU").
    let rate = reached.0 as f64 / reached.1;
    assert!(
        rate <= 1.10 * in_force,
        "{rate:.0}/s reached the server for a capacity of {in_force:.0}/s in force: {context}"
    );
    // Every request answered, the excess 3004 at once.
    assert_eq!(r.answered, r.sent, "{context}");
    assert!(r.by_code.get(&3004).copied().unwrap_or(0) > 0, "{context}");
    assert_eq!(
        r.by_code.keys().copied().collect::<Vec<_>>(),
        vec![2001, 3004],
        "{context}"
    );
    // The DOIC client received the agent's reports (the other client
    // announced nothing: no report goes to it, RFC 7683 §5.2.1).
    assert!(r.with_olr > 0, "{context}");
}
