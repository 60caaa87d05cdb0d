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
        name: "ebpf",
        about: "kernel program: parse path by test run; exact counts in netns over XDP native/generic and TC; SYN guard; detach (root)",
        run: ebpf,
    },
    Stage {
        name: "bench-ebpf",
        about: "per-packet cost of the kernel program against an empty XDP program; fails above target (root)",
        run: bench_ebpf,
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

/// Fails with a clear message unless running as root.
fn require_root(stage: &str) -> anyhow::Result<()> {
    let uid = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    if uid != "0" {
        bail!(
            "stage {stage} needs root (network namespaces, BPF); skipped: run `sudo -E cargo xtask test --only {stage}`"
        );
    }
    Ok(())
}

fn ebpf() -> anyhow::Result<()> {
    require_root("ebpf")?;
    setup::ebpf()?;
    // The kernel crate is outside the host workspace: lint it for its target.
    let kernel = crate::util::root().join("agent-ebpf");
    crate::util::run_cmd(
        std::process::Command::new("cargo")
            .args(["+nightly", "fmt", "--check"])
            .current_dir(&kernel),
    )?;
    crate::util::run_cmd(
        std::process::Command::new("cargo")
            .args([
                "+nightly",
                "clippy",
                "--release",
                "--locked",
                "-Z",
                "build-std=core",
            ])
            .args([
                "--target",
                "bpfel-unknown-none",
                "--target-dir",
                "../target/bpf",
            ])
            .args(["--", "-D", "warnings"])
            .current_dir(&kernel),
    )?;
    run(
        "cargo",
        &[
            "test",
            "-p",
            "agent",
            "--test",
            "ebpf_parse",
            "--test",
            "ebpf_netns",
            "--",
            "--ignored",
            "--test-threads=1",
        ],
    )
}

fn bench_ebpf() -> anyhow::Result<()> {
    require_root("bench-ebpf")?;
    setup::ebpf()?;
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    if !mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("/sys/fs/bpf"))
    {
        run("mount", &["-t", "bpf", "bpf", "/sys/fs/bpf"])?;
    }
    let dir = format!("/sys/fs/bpf/doic-bench-{}", std::process::id());
    run(
        "cargo",
        &[
            "run",
            "--release",
            "--quiet",
            "-p",
            "bench",
            "--bin",
            "ebpf-prog-run",
            "--",
            &dir,
        ],
    )?;
    // Live traffic through the kernel's run statistics: figures, no target.
    run(
        "cargo",
        &[
            "test",
            "-p",
            "agent",
            "--test",
            "ebpf_live_cost",
            "--",
            "--ignored",
            "--nocapture",
        ],
    )
}
