//! Builds the kernel program (`agent-ebpf/`) for `bpfel-unknown-none` and puts
//! the object at `$OUT_DIR/agent-ebpf.o`, where `src/ebpf.rs` embeds it.
//!
//! The nested build needs the nightly toolchain with `rust-src` and
//! `bpf-linker` (`cargo xtask setup` installs both). Where they are absent, or
//! when `DOIC_EBPF_SKIP=1` (or `AYA_BUILD_SKIP=1`) is set, an empty object is
//! written instead: `cargo check`, `clippy` and `test` keep working and the
//! loader reports "program not built" at run time.
//!
//! The nested build uses one target directory for every host profile
//! (`<target>/bpf`), so `check`, `clippy`, `test` and `build --release` share
//! one compiled object, and this script reruns only when the kernel sources
//! change.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

const TARGET: &str = "bpfel-unknown-none";
const BIN: &str = "agent-ebpf";

fn main() -> anyhow::Result<()> {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?);
    let root = manifest
        .parent()
        .context("agent/ has a parent")?
        .to_path_buf();
    let kernel = root.join("agent-ebpf");
    let out = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR")?);
    let dest = out.join("agent-ebpf.o");

    for var in ["DOIC_EBPF_SKIP", "AYA_BUILD_SKIP"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    for path in [
        "src",
        "Cargo.toml",
        "Cargo.lock",
        "common/src",
        "common/Cargo.toml",
        ".cargo/config.toml",
    ] {
        println!("cargo:rerun-if-changed={}", kernel.join(path).display());
    }

    let skip = ["DOIC_EBPF_SKIP", "AYA_BUILD_SKIP"]
        .iter()
        .any(|v| env::var(v).is_ok_and(|s| s == "1" || s == "true"));
    if skip {
        return write_if_changed(&dest, &[]);
    }
    let linker = find_on_path("bpf-linker");
    match &linker {
        Some(path) => println!("cargo:rerun-if-changed={}", path.display()),
        // Rerun when a cargo tool is installed, e.g. by `cargo xtask setup`.
        None => {
            if let Some(bin) = cargo_bin_dir() {
                println!("cargo:rerun-if-changed={}", bin.display());
            }
        }
    }
    if let Some(missing) = missing_toolchain(linker.is_some()) {
        println!(
            "cargo:warning=kernel program not built ({missing}); \
             run `cargo xtask setup` to install the eBPF toolchain"
        );
        return write_if_changed(&dest, &[]);
    }

    // <target>/<profile>/build/agent-<hash>/out -> <target>/bpf
    let target_dir = out
        .ancestors()
        .nth(4)
        .map(|t| t.join("bpf"))
        .unwrap_or_else(|| out.join("bpf"));
    let mut cmd = Command::new("cargo");
    cmd.args([
        "+nightly",
        "build",
        "--release",
        "--locked",
        "-Z",
        "build-std=core",
    ])
    .args(["--target", TARGET, "--bin", BIN])
    .arg("--manifest-path")
    .arg(kernel.join("Cargo.toml"))
    .arg("--target-dir")
    .arg(&target_dir)
    .current_dir(&kernel);
    scrub_env(&mut cmd);
    let output = cmd.output().context("cannot run cargo +nightly")?;
    if !output.status.success() {
        bail!(
            "building the kernel program failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let object = target_dir.join(TARGET).join("release").join(BIN);
    let bytes = fs::read(&object).with_context(|| format!("reading {}", object.display()))?;
    write_if_changed(&dest, &bytes)
}

/// Writes `bytes` to `path` unless it already holds them, so that an
/// unchanged object does not make rustc recompile the crate.
fn write_if_changed(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// Why the nested build cannot run, or `None` when it can.
fn missing_toolchain(have_linker: bool) -> Option<&'static str> {
    if !have_linker {
        return Some("bpf-linker not found");
    }
    let sysroot = Command::new("rustc")
        .args(["+nightly", "--print", "sysroot"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output();
    let Ok(sysroot) = sysroot else {
        return Some("rustup not found");
    };
    if !sysroot.status.success() {
        return Some("nightly toolchain not installed");
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if !sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        return Some("rust-src not installed for nightly");
    }
    None
}

/// Removes what the outer cargo exported, so the nested build is a plain
/// nightly build (no clippy wrapper, no host flags, no outer target dir).
fn scrub_env(cmd: &mut Command) {
    let keep = |k: &str| k == "CARGO_HOME";
    for (key, _) in env::vars_os() {
        let k = key.to_string_lossy();
        let drop = (k.starts_with("CARGO") && !keep(&k))
            || k.starts_with("RUSTC")
            || matches!(
                &*k,
                "RUSTFLAGS"
                    | "RUSTDOCFLAGS"
                    | "RUSTUP_TOOLCHAIN"
                    | "DEBUG"
                    | "OPT_LEVEL"
                    | "PROFILE"
                    | "TARGET"
                    | "HOST"
                    | "OUT_DIR"
                    | "NUM_JOBS"
            );
        if drop {
            cmd.env_remove(&key);
        }
    }
}

fn cargo_bin_dir() -> Option<PathBuf> {
    env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|h| h.join("bin"))
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .chain(cargo_bin_dir())
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}
