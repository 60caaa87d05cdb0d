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
        let answer = asked.ok().filter(|o| o.status.success()).map(|o| o.stdout);
        target_dir_of(answer.as_deref()).unwrap_or_else(|| {
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

/// The `target_directory` of `cargo metadata`'s answer (JSON), if it has one.
fn target_dir_of(metadata: Option<&[u8]>) -> Option<PathBuf> {
    let v = serde_json::from_slice::<serde_json::Value>(metadata?).ok()?;
    v["target_directory"].as_str().map(PathBuf::from)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_dir_is_read_from_cargo_metadata() {
        let answer = br#"{"packages":[],"target_directory":"/tmp/elsewhere","version":1}"#;
        assert_eq!(
            target_dir_of(Some(answer)),
            Some(PathBuf::from("/tmp/elsewhere"))
        );
        assert_eq!(target_dir_of(Some(b"{}")), None);
        assert_eq!(target_dir_of(Some(b"not json")), None);
        assert_eq!(target_dir_of(None), None);
    }

    /// What cargo itself reports for `CARGO_TARGET_DIR`, a relative one taken
    /// from the workspace root, as the tasks' cargo commands take it.
    #[test]
    fn target_dir_follows_cargo_target_dir() {
        let ask = |dir: &str| {
            let out = Command::new(env!("CARGO"))
                .args(["metadata", "--format-version", "1", "--no-deps"])
                .current_dir(root())
                .env("CARGO_TARGET_DIR", dir)
                .output()
                .expect("cargo runs");
            assert!(out.status.success(), "cargo metadata failed");
            target_dir_of(Some(&out.stdout)).expect("a target directory")
        };
        assert_eq!(
            ask("/tmp/doic-xtask-target"),
            PathBuf::from("/tmp/doic-xtask-target")
        );
        assert_eq!(ask("elsewhere"), root().join("elsewhere"));
    }

    /// No binary or artefact is looked up by a fixed `target/` path.
    #[test]
    fn no_fixed_target_paths() {
        // spelled in two pieces so that this file does not match itself
        const FIXED: &str = concat!("\"target", "/");
        fn walk(dir: &std::path::Path, found: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir)
                .expect("a source directory")
                .flatten()
            {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, found);
                } else if p.extension().is_some_and(|x| x == "rs")
                    && std::fs::read_to_string(&p).is_ok_and(|s| s.contains(FIXED))
                {
                    found.push(p);
                }
            }
        }
        let mut found = Vec::new();
        walk(&root().join("xtask").join("src"), &mut found);
        walk(&root().join("bench").join("src"), &mut found);
        assert!(found.is_empty(), "fixed target/ paths in {found:?}");
    }
}
