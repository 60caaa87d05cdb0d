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
            &["nextest", "run", "--workspace", "--no-fail-fast"],
        )?;
    } else {
        run("cargo", &["test", "--workspace", "--no-fail-fast"])?;
    }
    run("cargo", &["test", "--workspace", "--doc"])
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
