//! Small process helpers shared by the tasks.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

/// The workspace root (the parent of `xtask/`).
pub(crate) fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
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
