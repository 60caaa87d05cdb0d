//! Small process helpers shared by the tasks.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, bail};

/// The workspace root (the parent of `xtask/`).
pub(crate) fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// Cargo's target directory for this workspace, where every build of the
/// tasks lands: what `cargo metadata` reports as `target_directory` (it
/// follows `CARGO_TARGET_DIR`, a relative one taken from the workspace root
/// as the tasks' cargo commands take it, and `build.target-dir`), or
/// `<root>/target` should cargo not answer. Asked once per run.
pub(crate) fn target_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let asked = Command::new("cargo")
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .current_dir(root())
            .output();
        asked
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
            .and_then(|v| v["target_directory"].as_str().map(PathBuf::from))
            .unwrap_or_else(|| {
                let fallback = root().join("target");
                eprintln!(
                    "cargo metadata gave no target directory; using {}",
                    fallback.display()
                );
                fallback
            })
    })
    .clone()
}

/// Runs `program args...` in the workspace root, inheriting stdio; fails on a
/// non-zero exit status.
pub(crate) fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    run_cmd(Command::new(program).args(args))
}

/// Runs a prepared command (its working directory defaults to the workspace
/// root), inheriting stdio; fails on a non-zero exit status.
pub(crate) fn run_cmd(cmd: &mut Command) -> anyhow::Result<()> {
    if cmd.get_current_dir().is_none() {
        cmd.current_dir(root());
    }
    eprintln!("+ {}", describe(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", describe(cmd)))?;
    if !status.success() {
        bail!("{} failed: {status}", describe(cmd));
    }
    Ok(())
}

/// True when `program` is found on PATH.
pub(crate) fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program} >/dev/null 2>&1")])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}
