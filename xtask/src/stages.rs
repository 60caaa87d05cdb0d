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
        name: "bench-bucket",
        about: "leaky bucket against governor; fails if any ratio is above 1.0",
        run: bench_bucket,
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
            &["nextest", "run", "--workspace", "--no-fail-fast"],
        )?;
    } else {
        run("cargo", &["test", "--workspace", "--no-fail-fast"])?;
    }
    run("cargo", &["test", "--workspace", "--doc"])
}

/// The RFC 8582 §8.3 bucket against governor (bench/benches/bucket.rs):
/// medians of interleaved runs; the bench exits non-zero when the agent is
/// slower in any case. Figures land in target/bench-bucket.json.
fn bench_bucket() -> anyhow::Result<()> {
    run(
        "cargo",
        &[
            "bench", "-p", "bench", "--bench", "bucket", "--", "--check", "--rounds", "7",
            "--iters", "1000000",
        ],
    )
}
