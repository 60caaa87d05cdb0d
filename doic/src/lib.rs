//! Diameter overload control (DOIC), sans-io: RFC 7683 (capability
//! announcement, host and realm reports, loss algorithm), RFC 8581 (peer
//! reports, treatment order of §5) and RFC 8582 (rate algorithm).
//!
//! The relay calls [`Doic::treat`] for every request and [`Doic::on_answer`]
//! for every answer matching a pending request; both take `now` and return
//! decisions ([`Treatment`], [`AnswerActions`]) that the relay applies with
//! the codec. Nothing here does I/O or reads a clock. See docs/doic.md.
//!
//! | module | what it implements |
//! | --- | --- |
//! | [`features`] | OC-Supported-Features decisions, RFC 7683 §5.1, RFC 8581 §6.1 |
//! | [`report`] | OC-OLR normalisation, RFC 7683 §7.3-§7.7, RFC 8582 §7.2.1 |
//! | [`ocs`] | reacting-node OCS, sequence and validity, controlled ending |
//! | [`own_load`] | the agent's own overload: per-peer rate allocation, RFC 8581 §6.2.4, RFC 8582 §6.1 |
//! | [`protect`] | the adaptive limit of an upstream server without DOIC, RFC 7683 §5.1.3 |
//! | [`fxhash`] | fast hash for the OCS tables |
//! | [`loss`] | loss algorithm, RFC 7683 §6 |
//! | [`rate`] | rate algorithm leaky bucket, RFC 8582 §8.3 |
//! | [`realm`] | realm reports made by the agent (seed 002), one version for all cores ([`realm::RealmBoard`]) |
//! | [`treatment`] | request/answer views and decisions, RFC 7683 §8 codes |
//! | [`engine`] | the core: treatment order of RFC 8581 §5, answer handling, the idle fast path |
//! | [`config`] | the `[doic]` configuration section |
//! | [`bucket`] | RFC 8582 §8.3 leaky bucket: lock-free, shared by all workers, priorities and randomised phase |
//! | [`audit`] | evidence records: reports, OCS versions, treatment counters |
//! | [`avps`] | reading DOIC AVPs of scanned messages, applying decisions to relayed buffers |

#![warn(missing_docs, unreachable_pub)]

pub mod audit;
pub mod avps;
pub mod bucket;
pub mod config;
pub mod engine;
pub mod features;
pub mod fxhash;
pub mod loss;
pub mod ocs;
pub mod own_load;
pub mod protect;
pub mod rate;
pub mod realm;
pub mod report;
pub mod treatment;

#[cfg(test)]
mod tests;

pub use config::{DoicConfig, DoicConfigError, PeerPolicy, ThrottleResult};
pub use engine::{AnswerFeatures, AnswerView, ClientMemo, Doic, IdleAnswer, IdleAvps, Offer};
pub use features::{Algorithm, OcSupportedFeatures};
pub use report::{OcOlr, ReportType};
pub use treatment::{
    AnswerActions, Candidate, Cause, PendingTx, RequestView, ThrottleAnswer, Treatment, TxState,
};
