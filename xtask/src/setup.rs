//! Idempotent installation of what the tests need: rustup components, Debian
//! packages, cargo tools. Each step checks first and installs only what is
//! missing, so a warm machine pays nothing.

use std::process::Command;
use std::sync::Once;

use crate::util::{have, run};

/// Installs everything every stage needs.
pub(crate) fn all() -> anyhow::Result<()> {
    rust_components()?;
    Ok(())
}

/// rustfmt and clippy on the default toolchain.
pub(crate) fn rust_components() -> anyhow::Result<()> {
    if !(cargo_has("fmt") && cargo_has("clippy")) {
        run("rustup", &["component", "add", "rustfmt", "clippy"])?;
    }
    Ok(())
}

fn cargo_has(sub: &str) -> bool {
    Command::new("cargo")
        .args([sub, "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Installs the Debian packages that are not installed yet (`apt-get update`
/// runs at most once per process, and only when something is missing).
pub(crate) fn apt(packages: &[&str]) -> anyhow::Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
                .unwrap_or(false)
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    static UPDATE: Once = Once::new();
    let mut update = Ok(());
    UPDATE.call_once(|| update = run("apt-get", &["update", "-q"]));
    update?;
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend(missing.iter().copied());
    let mut cmd = Command::new("apt-get");
    cmd.args(&args).env("DEBIAN_FRONTEND", "noninteractive");
    crate::util::run_cmd(&mut cmd)
}

/// True when a cargo subcommand or program is available.
#[expect(dead_code, reason = "used by the stages that need cargo tools")]
pub(crate) fn have_tool(program: &str) -> bool {
    have(program)
}

/// The nightly toolchain and cargo-fuzz, for the `fuzz` stage.
pub(crate) fn cargo_fuzz() -> anyhow::Result<()> {
    let nightly = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !nightly {
        run(
            "rustup",
            &["toolchain", "install", "nightly", "--profile", "minimal"],
        )?;
    }
    if !cargo_has("fuzz") {
        run("cargo", &["install", "cargo-fuzz", "--locked"])?;
    }
    Ok(())
}
