//! What the relay is told to do with a request or an answer, and the error
//! answer for a throttled request (RFC 7683 §5.2.2, §8; RFC 8581 §6.2.5;
//! Experimental-Result 5198 of seed 004).

use std::borrow::Cow;
use std::num::NonZeroU64;

use super::config::ThrottleResult;
use super::features::OcSupportedFeatures;
use super::rate::RateControl;
use super::report::{OcOlr, Report, ReportType};

/// Vendor Experimental-Result-Code DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY,
/// from the dictionary.
pub use diameter::dictionary::result::OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY as DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY;
/// DIAMETER_TOO_BUSY (RFC 6733 §7.1.3), from the dictionary.
pub use diameter::dictionary::result::TOO_BUSY as DIAMETER_TOO_BUSY;
/// DIAMETER_UNABLE_TO_COMPLY (RFC 6733 §7.1.5), from the dictionary.
pub use diameter::dictionary::result::UNABLE_TO_COMPLY as DIAMETER_UNABLE_TO_COMPLY;

/// Whether a request may be retried on an alternate path after an answer
/// with this Experimental-Result-Code: not after 5198 (seed 004).
#[must_use]
pub fn retry_allowed(experimental_result_code: Option<u32>) -> bool {
    experimental_result_code != Some(DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY)
}

/// A request as the overload core needs to see it (decoded by the relay).
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    /// Application-ID of the header.
    pub app_id: u32,
    /// Command-Code.
    pub command_code: u32,
    /// The DiameterIdentity of the downstream peer that sent it.
    pub from_peer: &'a str,
    /// Destination-Realm.
    pub dest_realm: &'a str,
    /// Destination-Host, when host-routed.
    pub dest_host: Option<&'a str>,
    /// OC-Supported-Features as received, if any.
    pub features: Option<&'a OcSupportedFeatures>,
    /// DRMP priority (RFC 7944), if present.
    pub drmp: Option<u8>,
}

/// A next hop the relay could send a request to, in its order of preference.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    /// The peer's DiameterIdentity.
    pub peer: &'a str,
    /// The server the request reaches through this peer, when known (the peer
    /// itself for a directly connected server); host reports of that server
    /// steer realm-routed requests (seed 002).
    pub server: Option<&'a str>,
}

/// Why a request was throttled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A host or realm report (the destination itself is overloaded).
    Destination(ReportType),
    /// A peer report of the next hop with no capacity elsewhere.
    Peer,
}

/// How a throttled request is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThrottleAnswer {
    /// Result-Code 3004 DIAMETER_TOO_BUSY.
    TooBusy,
    /// Result-Code 5012 DIAMETER_UNABLE_TO_COMPLY.
    UnableToComply,
    /// Experimental-Result-Code 5198 DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY.
    RetryNotAllowed,
}

impl ThrottleAnswer {
    /// The code to put in Result-Code, or in Experimental-Result-Code for
    /// [`ThrottleAnswer::RetryNotAllowed`].
    #[must_use]
    pub const fn code(self) -> u32 {
        match self {
            Self::TooBusy => DIAMETER_TOO_BUSY,
            Self::UnableToComply => DIAMETER_UNABLE_TO_COMPLY,
            Self::RetryNotAllowed => DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY,
        }
    }

    /// Its slot in the throttled counts ([`crate::audit::Split`]).
    #[must_use]
    pub const fn slot(self) -> usize {
        match self {
            Self::TooBusy => 0,
            Self::UnableToComply => 1,
            Self::RetryNotAllowed => 2,
        }
    }

    /// The answer of a slot of the throttled counts.
    #[must_use]
    pub const fn of_slot(slot: usize) -> Self {
        match slot {
            0 => Self::TooBusy,
            1 => Self::UnableToComply,
            _ => Self::RetryNotAllowed,
        }
    }

    /// Whether the code goes in Experimental-Result.
    #[must_use]
    pub const fn is_experimental(self) -> bool {
        matches!(self, Self::RetryNotAllowed)
    }

    /// The answer for a request throttled for `cause` under `policy`.
    ///
    /// `Auto` follows RFC 7683 §8: "DIAMETER_TOO_BUSY ... if it can assume
    /// that the same request may succeed on a different path", otherwise
    /// DIAMETER_UNABLE_TO_COMPLY. A host or realm report means the destination
    /// itself is overloaded: any other path ends there too (5012; also the §8
    /// example of an agent reacting for a non-supporting client). A peer report
    /// means only this next hop is overloaded: a path through another agent may
    /// succeed (3004).
    #[must_use]
    pub const fn for_cause(cause: Cause, policy: ThrottleResult) -> Self {
        match policy {
            ThrottleResult::TooBusy => Self::TooBusy,
            ThrottleResult::UnableToComply => Self::UnableToComply,
            ThrottleResult::RetryNotAllowed => Self::RetryNotAllowed,
            ThrottleResult::Auto => match cause {
                Cause::Destination(_) => Self::UnableToComply,
                Cause::Peer => Self::TooBusy,
            },
        }
    }
}

/// What the relay keeps with a request it forwarded, and gives back to
/// [`crate::Doic::on_answer`] with the matching answer.
///
/// The names borrow from the request as [`crate::Doic::treat`] saw
/// it: the per-request path allocates nothing. A relay that keeps the
/// request's bytes (and the client's and next hop's identities) until the
/// answer keeps only [`PendingTx::to_state`] and rebuilds the borrowed form
/// with [`TxState::pending`]; tests and simulations own their names.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingTx<'a> {
    /// Application-ID.
    pub app_id: u32,
    /// The downstream peer the request came from.
    pub client: Cow<'a, str>,
    /// Its OC-Supported-Features when it is a DOIC node trusted for DOIC;
    /// `None` makes the agent the reacting node on its behalf.
    pub client_features: Option<Cow<'a, OcSupportedFeatures>>,
    /// Whether it supports peer reports (RFC 8581 §6.1.2 transaction state).
    pub client_peer_report: bool,
    /// Destination-Realm of the request.
    pub dest_realm: Cow<'a, str>,
    /// The peer the request was sent to.
    pub upstream: Cow<'a, str>,
}

impl PendingTx<'_> {
    /// What the relay must keep beyond the request itself (`Copy`: no
    /// allocation). Of the client's OC-Supported-Features only what the
    /// answer needs is kept: its feature vector (the algorithms it supports,
    /// [`super::features::supports`]); whether its SourceID named it is in
    /// `client_peer_report`.
    #[must_use]
    pub fn to_state(&self) -> TxState {
        TxState {
            app_id: self.app_id,
            client_features: self
                .client_features
                .as_ref()
                .map(|f| kept_vector(f.features())),
            client_peer_report: self.client_peer_report,
        }
    }
}

/// The part of a [`PendingTx`] that is not in the request: kept by the relay
/// with the forwarded request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxState {
    /// Application-ID.
    pub app_id: u32,
    /// The OC-Feature-Vector of the client's OC-Supported-Features (absent
    /// vector: loss only, RFC 7683 §5.1.1), when it is a DOIC node trusted
    /// for DOIC ([`PendingTx::client_features`]); `None` otherwise. Kept by
    /// [`kept_vector`] (non-zero: the state stays 16 bytes, it travels with
    /// every relayed request).
    pub client_features: Option<NonZeroU64>,
    /// [`PendingTx::client_peer_report`].
    pub client_peer_report: bool,
}

impl TxState {
    /// The pending transaction of a request from `client` for `dest_realm`,
    /// sent to `upstream`.
    #[must_use]
    pub fn pending<'a>(
        &'a self,
        client: &'a str,
        dest_realm: &'a str,
        upstream: &'a str,
    ) -> PendingTx<'a> {
        PendingTx {
            app_id: self.app_id,
            client: Cow::Borrowed(client),
            client_features: self
                .client_features
                .map(|v| Cow::Owned(features_of(v.get()))),
            client_peer_report: self.client_peer_report,
            dest_realm: Cow::Borrowed(dest_realm),
            upstream: Cow::Borrowed(upstream),
        }
    }
}

/// A client's OC-Feature-Vector as a [`TxState`] keeps it: a vector of 0 as
/// loss (bit 1, OLR_DEFAULT_ALGO), which supports the same algorithms (loss
/// is always supported, RFC 7683 §6.1; no other bit is set) and is all the
/// answer needs once peer-report support is recorded.
#[must_use]
pub const fn kept_vector(vector: u64) -> NonZeroU64 {
    match NonZeroU64::new(vector) {
        Some(v) => v,
        None => NonZeroU64::MIN,
    }
}

/// The client's OC-Supported-Features as kept in a [`TxState`]: its
/// feature vector (no SourceID: the string would allocate, and only
/// `client_peer_report` needs it).
#[must_use]
pub const fn features_of(vector: u64) -> OcSupportedFeatures {
    OcSupportedFeatures {
        feature_vector: Some(vector),
        source_id: None,
        peer_algo: None,
    }
}

/// The treatment of one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Treatment<'a> {
    /// Send to `candidates[index]`, the first choice, with the agent's
    /// OC-Supported-Features ([`crate::Doic::request_features`])
    /// replacing any received one.
    Forward {
        /// Index into the candidates.
        index: usize,
        /// Transaction state to keep.
        tx: PendingTx<'a>,
    },
    /// Send to `candidates[index]` instead of the first choice, with the
    /// agent's OC-Supported-Features as for [`Treatment::Forward`].
    Divert {
        /// Index into the candidates.
        index: usize,
        /// Transaction state to keep.
        tx: PendingTx<'a>,
    },
    /// Answer locally with this error; nothing is sent upstream.
    Throttle {
        /// The error answer.
        result: ThrottleAnswer,
        /// Why.
        cause: Cause,
    },
    /// No candidate: the relay answers 3002 DIAMETER_UNABLE_TO_DELIVER.
    NoRoute,
}

/// What one worker's core hands to the other workers' cores
/// ([`crate::Doic::replicate`]), so that the agent acts as one node.
#[derive(Clone, Debug)]
pub enum Replica {
    /// A report accepted from upstream.
    Report(ReportReplica),
    /// A version of the agent's own realm report, or a client it was sent
    /// to (seed 002; one sequence space for the agent, RFC 7683 §5.2.1.4).
    Realm(crate::realm::RealmReplica),
    /// A probe of a version was answered clean: every worker ramps.
    Ramp(RampReplica),
}

/// The clean answer to a probe of one version (RFC 7683 §6.3, docs/doic.md
/// "The ramp"): the other workers' entries of that version, probing too,
/// ramp from `at`, so that every worker abates the same share.
#[derive(Clone, Debug)]
pub struct RampReplica {
    /// When the answer was handled: the ramp's start.
    pub at: std::time::Instant,
    /// Application-ID.
    pub app_id: u32,
    /// The OCS's report type.
    pub report_type: crate::report::ReportType,
    /// Host, realm or peer the OCS is for.
    pub id: String,
    /// The version whose probe was answered.
    pub sequence: u64,
}

/// A report one worker accepted, for the other workers' cores: the same
/// sequence rules apply there, and a rate OCS shares the one bucket so the
/// maximum rate holds across workers.
#[derive(Clone, Debug)]
pub struct ReportReplica {
    /// When the answer carrying it was handled.
    pub at: std::time::Instant,
    /// Application-ID.
    pub app_id: u32,
    /// Host, realm or peer the OCS is for.
    pub id: String,
    /// The accepted report.
    pub report: Report,
    /// The rate control to share, for a rate report.
    pub rate: Option<RateControl>,
    /// A DOIC client the report was forwarded to (it abates at the source).
    pub delivered_to: Option<String>,
}

/// What to do with an answer before relaying it downstream.
#[derive(Clone, Debug, Default)]
pub struct AnswerActions {
    /// Remove every OC-Supported-Features and OC-OLR AVP received.
    pub strip: bool,
    /// OC-Supported-Features to add (`None`: add none, RFC 7683 §5.1.2).
    pub add_features: Option<OcSupportedFeatures>,
    /// OC-OLR AVPs to add: host and realm reports forwarded or made by the
    /// agent, and its own peer report. Upstream peer reports never appear
    /// (RFC 8581 §6.2.5).
    pub forward_reports: Vec<OcOlr>,
    /// Whether the relay may retry the request on an alternate path; false
    /// after Experimental-Result 5198 (seed 004).
    pub retry_on_alternate: bool,
    /// Reports accepted from this answer, to hand to the other workers.
    pub replicate: Vec<Replica>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_result_follows_rfc7683_section_8() {
        let auto = ThrottleResult::Auto;
        assert_eq!(
            ThrottleAnswer::for_cause(Cause::Destination(ReportType::Host), auto).code(),
            5012
        );
        assert_eq!(
            ThrottleAnswer::for_cause(Cause::Destination(ReportType::Realm), auto).code(),
            5012
        );
        assert_eq!(ThrottleAnswer::for_cause(Cause::Peer, auto).code(), 3004);
        let r = ThrottleAnswer::for_cause(Cause::Peer, ThrottleResult::RetryNotAllowed);
        assert_eq!((r.code(), r.is_experimental()), (5198, true));
        assert_eq!(
            ThrottleAnswer::for_cause(Cause::Peer, ThrottleResult::UnableToComply).code(),
            5012
        );
    }
}
