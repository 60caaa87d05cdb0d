//! The throughput yardstick: freeDiameter test_app client to the fD server
//! directly and through the fD relay, in interleaved rounds.
//!
//! The short test runs in the `interop` stage and checks the machinery
//! (every request answered 2001 on each path). The full measurement is
//! ignored by default; run it with
//! `DOIC_BENCH_SECONDS=10 DOIC_BENCH_ROUNDS=3 cargo test -p interop --test bench_paths -- --ignored --nocapture`.

use interop::bench::PathBench;
use interop::fd::{FdRelay, FdServer};

fn env(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn every_path_answers_every_request() {
    let server = FdServer::builder().threads(2).start().unwrap();
    let relay = FdRelay::builder(server.target(), server.realm())
        .threads(2)
        .start()
        .unwrap();
    let report = PathBench::new()
        .seconds(1)
        .concurrency(20)
        .rounds(1)
        .run(&server, Some(&relay))
        .unwrap();
    eprintln!("{report}");
    for p in &report.paths {
        assert!(p.all_answered_ok(), "{report}");
        assert!(p.median_answers_per_s() > 0.0, "{report}");
    }
}

#[test]
#[ignore = "a 1-2 minute measurement; run explicitly"]
fn measure_direct_vs_fd_relay() {
    let server = FdServer::builder().start().unwrap();
    let relay = FdRelay::builder(server.target(), server.realm())
        .start()
        .unwrap();
    let report = PathBench::new()
        .seconds(env("DOIC_BENCH_SECONDS", 10))
        .rounds(env("DOIC_BENCH_ROUNDS", 3))
        .concurrency(env("DOIC_BENCH_CONCURRENCY", 100))
        .run(&server, Some(&relay))
        .unwrap();
    println!("{report}");
    assert!(report.paths.iter().all(|p| p.all_answered_ok()), "{report}");
}
