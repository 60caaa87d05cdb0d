//! The audit log of a test agent read back (docs/operations.md): a fresh
//! directory, the log once a condition holds of it, `doic-agent audit` as
//! the binary runs it.

use std::path::Path;
use std::time::{Duration, Instant};

use clap::Parser as _;
use doic::audit::query::Log;
use tools::cli::{Cli, Command};

use super::scratch::Scratch;

/// An empty directory for the log of test `name`, removed with what it
/// holds when the test is done with it.
pub fn fresh_dir(name: &str) -> Scratch {
    Scratch::new(&format!("audit-test-{name}"))
}

/// `doic-agent audit --dir DIR ARGS...` as the binary runs it.
pub fn audit(dir: &Path, args: &[&str]) -> tools::audit::Output {
    ask(&["--dir", dir.to_str().unwrap()], args).unwrap()
}

/// `doic-agent audit SOURCE... ARGS...` as the binary runs it.
pub fn ask(
    source: &[&str],
    args: &[&str],
) -> Result<tools::audit::Output, tools::audit::AuditError> {
    let argv = ["doic-agent", "audit"]
        .into_iter()
        .chain(source.iter().copied())
        .chain(args.iter().copied());
    let Some(Command::Audit(a)) = Cli::try_parse_from(argv).unwrap().command else {
        panic!("not an audit command")
    };
    tools::audit::run(&a)
}

/// The log of `dir` once `done` holds of it (the writer flushes every
/// `flush_ms`; the control thread writes each second's counts), within
/// 20 s.
pub async fn log_when(dir: &Path, done: impl Fn(&Log) -> bool) -> Log {
    let t0 = Instant::now();
    loop {
        let (lines, bad) = agent::audit::read::read_dir(dir).unwrap();
        assert!(bad.is_empty(), "{bad:?}");
        let log = Log::read(&lines);
        if done(&log) {
            return log;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{log:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
