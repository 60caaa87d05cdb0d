//! Idempotent installation of what the tests need: rustup components, Debian
//! packages, cargo tools. Each step checks first and installs only what is
//! missing, so a warm machine pays nothing.

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Once;

use anyhow::{Context, bail};

use crate::util::{have, run};

/// Installs everything every stage needs.
pub(crate) fn all() -> anyhow::Result<()> {
    rust_components()?;
    ebpf()?;
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

/// What the kernel telemetry program needs: Debian's bpftool and iproute2
/// (tests and benchmarks), nightly with rust-src (`-Z build-std=core`), and
/// bpf-linker built against the libLLVM inside the nightly toolchain, so that
/// its LLVM major matches rustc's without a system LLVM. Idempotent: a warm
/// machine pays two `rustc` calls and an `ldd`.
pub(crate) fn ebpf() -> anyhow::Result<()> {
    apt(&["bpftool", "iproute2", "procps"])?;
    let toolchains = output("rustup", &["toolchain", "list"])?;
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        // Only when absent: an update could move LLVM away from bpf-linker's.
        run(
            "rustup",
            &["toolchain", "install", "nightly", "--profile", "minimal"],
        )?;
    }
    let sysroot = PathBuf::from(output("rustc", &["+nightly", "--print", "sysroot"])?.trim());
    if !sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        run(
            "rustup",
            &["component", "add", "rust-src", "--toolchain", "nightly"],
        )?;
    }
    let version = output("rustc", &["+nightly", "-vV"])?;
    let major = version
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .context("no LLVM version in `rustc +nightly -vV`")?
        .to_owned();
    if bpf_linker_matches(&major) {
        return Ok(());
    }
    let home = PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?);
    let prefix = home.join(".local/share/bpf-llvm");
    let lib = prefix.join("lib");
    fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    // Copy, not link: a toolchain update deletes the original.
    let mut copied = None;
    for entry in fs::read_dir(sysroot.join("lib"))? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with(&format!("libLLVM.so.{major}")) {
            fs::copy(&path, lib.join(&name))
                .with_context(|| format!("copying {}", path.display()))?;
            copied = Some(name);
        }
    }
    let copied =
        copied.with_context(|| format!("no libLLVM.so.{major}* in {}/lib", sysroot.display()))?;
    let link = lib.join("libLLVM.so");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(&copied, &link)?;
    let mut cmd = Command::new("cargo");
    cmd.args([
        "install",
        "bpf-linker",
        "--locked",
        "--version",
        "=0.13.0",
        "--force",
    ])
    .args([
        "--no-default-features",
        "--features",
        &format!("llvm-{major}"),
    ])
    .env("LLVM_PREFIX", &prefix)
    .env_remove("RUSTUP_TOOLCHAIN");
    crate::util::run_cmd(&mut cmd)?;
    if !bpf_linker_matches(&major) {
        bail!("bpf-linker installed but it does not run against LLVM {major}");
    }
    Ok(())
}

/// True when `bpf-linker` runs and is linked against LLVM `major`.
fn bpf_linker_matches(major: &str) -> bool {
    let Some(path) = which("bpf-linker") else {
        return false;
    };
    let runs = Command::new(&path)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let linked = Command::new("ldd")
        .arg(&path)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    runs && (linked.contains(&format!("libLLVM.so.{major}"))
        || linked.contains(&format!("libLLVM-{major}")))
}

fn which(program: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !p.is_empty()).then(|| PathBuf::from(p))
}

/// Standard output of a command that must succeed.
fn output(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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
