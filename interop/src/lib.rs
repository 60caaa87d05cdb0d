//! Harness for interoperability tests of the DOIC edge agent against the
//! Diameter stacks operators run (RFC 6733 peers over TCP, on loopback only):
//! freeDiameter 1.2.1 with its `test_app`, Erlang/OTP `diameter` (with its
//! RFC 7683 dictionary), and tshark as an independent decoder.
//!
//! The peers are installed and built by `cargo xtask test --only interop`
//! (Debian packages, `apt-get source freediameter`, `test_app.fdx`, the
//! loopback bind shim); this crate starts them, reads their results and
//! decodes what they put on the wire. It is test-only: the `unit` stage
//! excludes it and the `interop` stage runs it.
//!
//! # Map of the modules
//!
//! | module | what it does |
//! | --- | --- |
//! | [`bench`] | interleaved throughput rounds: direct, via the fD relay, via a path under test |
//! | [`compare`] | field-by-field agreement of the agent's codec and tshark on one message |
//! | [`process`] | run dirs, free ports, spawned daemons (stopped on drop), bounded waits |
//! | [`fd`] | freeDiameter: test_app echo server, `rt_default` relay, test_app benchmark client |
//! | [`erl`] | the Erlang/OTP `diameter` peer (`peers/dpeer.escript`): server and client, DOIC options |
//! | [`tshark`] | capture on `lo`, decode to per-message AVP trees, malformed/expert detection |
//! | [`pcap`] | a libpcap writer (Ethernet/IPv4/TCP, correct checksums) to hand bytes to tshark |
//!
//! # Identities
//!
//! Every peer defaults to the names of the benchmark setup: the fD server is
//! `server1.example.net` (realm `example.net`), the fD relay
//! `relay1.example.com`, the fD client `client1.example.org`, the Erlang
//! server `erl-server.example.net`, the Erlang client
//! `erl-client.example.org`. Ports are free ports chosen per test, so tests
//! run in parallel.
//!
//! # Example: an agent between a freeDiameter client and server
//!
//! ```no_run
//! use interop::fd::{BenchSpec, FdServer, PeerTarget};
//! # fn main() -> Result<(), interop::Error> {
//! let server = FdServer::builder().start()?;
//! // ... start the agent, forwarding realm example.net to server.target() ...
//! let agent = PeerTarget::loopback("agent.example.com", 3868);
//! let result = BenchSpec::new(agent).seconds(2).concurrency(20).run()?;
//! assert!(result.all_answered_ok());
//! # drop(server); Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Builder setters, one per `name(arg: Type) => field = value;` entry: a
/// `#[must_use] pub fn name(mut self, arg: Type) -> Self` that sets `field`
/// to `value`, with the entry's doc comment.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty) => $field:ident = $value:expr;)*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $name(mut self, $arg: $ty) -> Self {
                self.$field = $value;
                self
            }
        )*
    };
}

pub mod bench;
pub mod compare;
pub mod erl;
pub mod fd;
pub mod pcap;
pub mod process;
pub mod tshark;

/// What can go wrong while running or reading a third-party peer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or socket operation failed.
    #[error("i/o on {path}: {source}")]
    Io {
        /// The file, directory or address concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A peer artefact or tool is missing.
    #[error("{path} is missing ({hint})")]
    Missing {
        /// What was looked for.
        path: PathBuf,
        /// How to get it.
        hint: String,
    },
    /// A peer process ended when it should have been running.
    #[error("{name} exited ({status}); log tail:\n{log_tail}")]
    Exited {
        /// The peer.
        name: String,
        /// Its exit status.
        status: String,
        /// The last lines of its log.
        log_tail: String,
    },
    /// Something did not happen in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The bound.
        after: Duration,
    },
    /// Something did not happen in time; the peer's log tells why.
    #[error("timed out after {after:?} waiting for {what}; log tail:\n{log_tail}")]
    TimeoutLog {
        /// What was awaited.
        what: String,
        /// The bound.
        after: Duration,
        /// The last lines of the peer's log.
        log_tail: String,
    },
    /// Output of a peer or of tshark could not be understood.
    #[error("cannot parse {what}: {detail}")]
    Parse {
        /// Whose output.
        what: String,
        /// What was wrong.
        detail: String,
    },
    /// An address outside loopback was given; the harness only talks to loopback.
    #[error("refusing non-loopback address {0}")]
    NotLoopback(String),
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn parse(what: &str, detail: impl Into<String>) -> Self {
        Self::Parse {
            what: what.to_owned(),
            detail: detail.into(),
        }
    }
}
