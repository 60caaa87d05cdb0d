//! Shared set-up of the integration tests (of `agent` and of `tools`, which
//! includes this module by path), one helper per job:
//!
//! | module | what it does |
//! | --- | --- |
//! | [`audit_log`] | the audit log read back: a fresh directory, the log once a condition holds, `doic-agent audit` as the binary runs it |
//! | [`node`] | the agent in front of loopback servers: its configuration, starting it on pinned workers or on the test's runtime (where a paused clock drives its timers), waiting for its peers, its metrics, stopping it |
//! | [`messages`] | test requests as a client sends them, reading answers, Result-Codes |
//! | [`reporting`] | a scripted DOIC reporting server and request/answer exchanges through the agent |
//! | [`offer`] | open-loop load through the agent, counting what reaches its servers |
//! | [`handmade`] | Diameter messages written byte by byte, for the kernel tests (no codec) |
//! | [`packets`] | hand-built frames for the kernel program's parse path |
//! | [`netns`] | network namespaces joined by a veth pair |
//! | [`capture`] | a packet capture counting segments per peer and direction |
//! | [`scratch`] | a test's own temporary directory, removed on drop |
//! | [`process`] | the binary as a child process: its stderr line by line, the runtime of the test's peers |
//! | [`pki`] | test certificates made at test time (rcgen): a CA, leaves, PEM files |
//! | [`tls`] | a raw TLS client doing the capabilities exchange |
//!
//! Test files `mod support; use support::*;` for the first four.

#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    reason = "each test binary uses its own part of the helpers"
)]

pub mod audit_log;
pub mod capture;
pub mod handmade;
pub mod messages;
pub mod netns;
pub mod node;
pub mod offer;
pub mod packets;
pub mod pki;
pub mod process;
pub mod reporting;
pub mod scratch;
pub mod tls;

pub use messages::*;
pub use node::*;
pub use offer::*;
pub use reporting::*;
