//! The stages of `cargo xtask test`, in the order they run.

use anyhow::bail;

use crate::setup;
use crate::util::{have, run};

/// One named stage of the test run.
struct Stage {
    name: &'static str,
    about: &'static str,
    run: fn() -> anyhow::Result<()>,
}

const STAGES: &[Stage] = &[
    Stage {
        name: "setup",
        about: "install rustup components, Debian packages and cargo tools",
        run: setup::all,
    },
    Stage {
        name: "fmt",
        about: "cargo fmt --check",
        run: fmt,
    },
    Stage {
        name: "clippy",
        about: "cargo clippy --all-targets -- -D warnings",
        run: clippy,
    },
    Stage {
        name: "unit",
        about: "unit, property, simulation and integration tests of the workspace",
        run: unit,
    },
    Stage {
        name: "interop",
        about: "install the third-party peers, then run the interop harness tests against them",
        run: interop,
    },
    Stage {
        name: "bench-relay",
        about: "client -> server direct, via a freeDiameter relay, via the agent (1 and 2 workers): answers/s, p50/p99, ratios",
        run: bench_relay,
    },
    Stage {
        name: "fuzz",
        about: "cargo-fuzz the Diameter decoder for 60 s from the seed corpus; fails on a crash",
        run: fuzz,
    },
    Stage {
        name: "bench-codec",
        about: "time the codec (relay fast path, full walk, encode); one of 3 runs must meet the targets",
        run: bench_codec,
    },
];

/// Runs the selected stages in order; stops at the first failure.
pub(crate) fn run_all(only: &[String], skip: &[String], list: bool) -> anyhow::Result<()> {
    for name in only.iter().chain(skip) {
        if !STAGES.iter().any(|s| s.name == name) {
            bail!("unknown stage {name:?}; `cargo xtask test --list` shows them");
        }
    }
    if list {
        for s in STAGES {
            println!("{:<10} {}", s.name, s.about);
        }
        return Ok(());
    }
    for s in STAGES {
        if (!only.is_empty() && !only.iter().any(|n| n == s.name))
            || skip.iter().any(|n| n == s.name)
        {
            continue;
        }
        eprintln!("== stage {}: {}", s.name, s.about);
        (s.run)()?;
    }
    eprintln!("== all selected stages passed");
    Ok(())
}

fn fmt() -> anyhow::Result<()> {
    run("cargo", &["fmt", "--all", "--", "--check"])
}

fn clippy() -> anyhow::Result<()> {
    run(
        "cargo",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )
}

fn unit() -> anyhow::Result<()> {
    if have("cargo-nextest") {
        run(
            "cargo",
            &[
                "nextest",
                "run",
                "--workspace",
                "--exclude",
                "interop",
                "--no-fail-fast",
            ],
        )?;
    } else {
        run(
            "cargo",
            &[
                "test",
                "--workspace",
                "--exclude",
                "interop",
                "--no-fail-fast",
            ],
        )?;
    }
    run("cargo", &["test", "--workspace", "--doc"])
}

/// The third-party peers (freeDiameter, Erlang/OTP, tshark) are installed as
/// part of this stage, so `--only interop` works on a fresh machine. The
/// harness tests spawn daemons and capture on `lo`; they run one test binary
/// at a time but tests inside it in parallel (free ports per test).
fn interop() -> anyhow::Result<()> {
    let t0 = std::time::Instant::now();
    crate::peers::install()?;
    let t_setup = t0.elapsed();
    let dir = crate::peers::dir();
    let mut cmd = std::process::Command::new("cargo");
    if have("cargo-nextest") {
        cmd.args(["nextest", "run", "-p", "interop", "--no-fail-fast"]);
    } else {
        cmd.args(["test", "-p", "interop", "--no-fail-fast"]);
    }
    cmd.env("DOIC_PEERS_DIR", &dir);
    crate::util::run_cmd(&mut cmd)?;
    eprintln!(
        "interop: setup {:.1}s, tests {:.1}s",
        t_setup.as_secs_f64(),
        (t0.elapsed() - t_setup).as_secs_f64()
    );
    Ok(())
}

/// The relay benchmark (release build): the agent must reach 0.8 of the
/// direct path's answers/s, measured in the same run.
fn bench_relay() -> anyhow::Result<()> {
    crate::peers::install()?;
    run(
        "cargo",
        &["build", "--release", "-p", "bench", "--bin", "bench-relay"],
    )?;
    let mut cmd =
        std::process::Command::new(crate::util::root().join("target/release/bench-relay"));
    cmd.args(["--seconds", "4", "--rounds", "3", "--require", "0.8"]);
    cmd.env("DOIC_PEERS_DIR", crate::peers::dir());
    crate::util::run_cmd(&mut cmd)
}

/// Seconds the `fuzz` stage runs the decoder target.
const FUZZ_SECS: u32 = 60;

fn fuzz() -> anyhow::Result<()> {
    setup::cargo_fuzz()?;
    // new inputs go to a scratch directory; the committed seeds stay as they are
    let scratch = crate::util::root().join("target/fuzz-corpus/decode");
    std::fs::create_dir_all(&scratch)?;
    let scratch = scratch.to_string_lossy().into_owned();
    let max_time = format!("-max_total_time={FUZZ_SECS}");
    run(
        "cargo",
        &[
            "+nightly",
            "fuzz",
            "run",
            "decode",
            &scratch,
            "fuzz/corpus/decode",
            "--",
            &max_time,
            "-rss_limit_mb=2048",
            // an input that takes this long is a hang, reported as a crash
            "-timeout=10",
        ],
    )
}

fn bench_codec() -> anyhow::Result<()> {
    run(
        "cargo",
        &[
            "run",
            "--release",
            "--quiet",
            "-p",
            "bench",
            "--bin",
            "codec-check",
            "--",
            "--check",
        ],
    )
}
