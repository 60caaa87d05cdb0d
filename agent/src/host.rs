//! What the host's kernel says of the agent's load, read without the
//! workers' help (docs/own-overload.md): each worker thread's CPU time and
//! the whole process's ([`thread`]), the CPU bandwidth limit of the
//! agent's own cgroup with how often it was throttled ([`cgroup`]), and
//! the bytes waiting unread in a connection's socket ([`socket`]). A
//! worker that runs without end in a small CPU share publishes nothing of
//! its own; these are what the control thread reads to find the agent's
//! own overload (RFC 8581 §6.2.4; RFC 7683 §5.2.1 leaves how a reporting
//! node knows it is overloaded to it).
//!
//! Linux only (procfs, cgroupfs, `FIONREAD`). A missing or unreadable
//! file is a [`HostError`], never a panic: the caller falls back and says
//! so once.

use std::path::{Path, PathBuf};

pub mod cgroup;
pub mod socket;
pub mod thread;

/// Why a CPU reading failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A procfs or cgroupfs file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// A file read but did not hold what it should.
    #[error("unexpected content in {path}: {what}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was missing or malformed.
        what: &'static str,
    },
    /// `/proc/self/cgroup` names no cgroup with the cpu controller mounted.
    #[error("no cgroup with the cpu controller found for this process")]
    NoCgroup,
    /// A system call failed.
    #[error("{call}: {source}")]
    Sys {
        /// The call.
        call: &'static str,
        /// What the kernel said.
        source: std::io::Error,
    },
}

/// Reads `path` whole.
fn read(path: &Path) -> Result<String, HostError> {
    std::fs::read_to_string(path).map_err(|source| HostError::Read {
        path: path.to_owned(),
        source,
    })
}

/// A parse error for `path`.
fn parse_error(path: &Path, what: &'static str) -> HostError {
    HostError::Parse {
        path: path.to_owned(),
        what,
    }
}
