//! DOIC capability announcement: RFC 7683 §5.1 (OC-Supported-Features,
//! OC-Feature-Vector, algorithm selection) and RFC 8581 §6.1 (OC_PEER_REPORT,
//! SourceID, OC-Peer-Algo), with the rate bit of RFC 8582 §5 and §7.1.1.
//!
//! These are decisions, not encodings: the relay asks what OC-Supported-Features
//! to put into a request or an answer and writes it with the codec.

use serde::{Deserialize, Serialize};

pub use diameter::codec::doic::OcSupportedFeatures;
pub use diameter::dictionary::doic::{OC_PEER_REPORT, OLR_DEFAULT_ALGO, OLR_RATE_ALGORITHM};

/// The feature bits that name abatement algorithms.
pub const ALGORITHM_BITS: u64 = OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM;

/// An overload abatement algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// The loss algorithm, RFC 7683 §6: a share of requests is abated.
    Loss,
    /// The rate algorithm, RFC 8582 §8: requests above a rate are abated.
    Rate,
}

impl Algorithm {
    /// The OC-Feature-Vector bit of this algorithm.
    #[must_use]
    pub const fn bit(self) -> u64 {
        match self {
            Self::Loss => OLR_DEFAULT_ALGO,
            Self::Rate => OLR_RATE_ALGORITHM,
        }
    }
}

/// Whether the node that sent `f` supports `algo`: loss always (RFC 7683
/// §6.1 "must be supported by all Diameter nodes that support DOIC"), others
/// when their OC-Feature-Vector bit is set.
#[must_use]
pub fn supports(f: &OcSupportedFeatures, algo: Algorithm) -> bool {
    algo == Algorithm::Loss || f.features() & algo.bit() != 0
}

/// Why an answer's algorithm selection cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// More than one algorithm bit set (RFC 7683 §5.1.2: "MUST select a single
    /// abatement algorithm").
    #[error("more than one abatement algorithm selected: {bits:#x}")]
    NotSingle {
        /// The algorithm bits found.
        bits: u64,
    },
    /// An algorithm the agent did not offer (RFC 7683 §5.1.2: "MUST be from
    /// the set of abatement algorithms contained in the request").
    #[error("selected algorithm {algo:?} was not offered")]
    NotOffered {
        /// The selected algorithm.
        algo: Algorithm,
    },
    /// No algorithm bit set in an explicit vector or OC-Peer-Algo.
    #[error("no known abatement algorithm selected: {bits:#x}")]
    Unknown {
        /// The bits found.
        bits: u64,
    },
}

/// The algorithm a reporting node selected for host and realm reports, read
/// from the OC-Supported-Features of its answer (RFC 7683 §5.1.2, §7.2).
///
/// No OC-Supported-Features or no OC-Feature-Vector means loss.
///
/// # Errors
/// [`SelectionError`] when the answer selects several algorithms, none, or one
/// the agent did not offer in `offered`.
pub fn selected_algorithm(
    answer: Option<&OcSupportedFeatures>,
    offered: u64,
) -> Result<Algorithm, SelectionError> {
    match answer.and_then(|f| f.feature_vector) {
        None => Ok(Algorithm::Loss),
        Some(v) => decode_single(v, offered),
    }
}

/// The algorithm a peer selected for its peer reports, read from OC-Peer-Algo
/// (RFC 8581 §6.2.3 last paragraph, RFC 8582 §5). Absent means loss.
///
/// # Errors
/// As [`selected_algorithm`].
pub fn selected_peer_algorithm(
    answer: Option<&OcSupportedFeatures>,
    offered: u64,
) -> Result<Algorithm, SelectionError> {
    match answer.and_then(|f| f.peer_algo) {
        None => Ok(Algorithm::Loss),
        Some(v) => decode_single(v, offered),
    }
}

fn decode_single(bits: u64, offered: u64) -> Result<Algorithm, SelectionError> {
    let algo_bits = bits & ALGORITHM_BITS;
    let algo = match algo_bits {
        OLR_DEFAULT_ALGO => Algorithm::Loss,
        OLR_RATE_ALGORITHM => Algorithm::Rate,
        0 => return Err(SelectionError::Unknown { bits }),
        _ => return Err(SelectionError::NotSingle { bits: algo_bits }),
    };
    if algo != Algorithm::Loss && offered & algo.bit() == 0 {
        return Err(SelectionError::NotOffered { algo });
    }
    Ok(algo)
}

/// The OC-Feature-Vector the agent announces in every request it sends
/// (RFC 7683 §5.1.1: loss always, other algorithms when configured; RFC 8582 §5:
/// rate implies loss too; RFC 8581 §6.1.1: OC_PEER_REPORT when supported).
#[must_use]
pub fn announced_vector(algorithms: &[Algorithm], peer_report: bool) -> u64 {
    let mut v = OLR_DEFAULT_ALGO;
    for a in algorithms {
        v |= a.bit();
    }
    if peer_report {
        v |= OC_PEER_REPORT;
    }
    v
}

/// The OC-Supported-Features to put in a request the agent relays, whatever
/// the request carried (RFC 7683 §5.1.3: an agent MUST add it to requests
/// without one and MAY modify it; RFC 8581 §6.1.1: a received SourceID MUST be
/// replaced by the agent's own DiameterIdentity).
#[must_use]
pub fn request_features(vector: u64, own_identity: &str) -> OcSupportedFeatures {
    OcSupportedFeatures {
        feature_vector: Some(vector),
        source_id: (vector & OC_PEER_REPORT != 0).then(|| own_identity.to_owned()),
        peer_algo: None,
    }
}

/// Whether the peer that sent a request supports peer reports: RFC 8581 §6.1.2,
/// "OC_PEER_REPORT feature bit set and with a SourceID AVP with a value that
/// matches the DiameterIdentity of the peer from which the request was
/// received".
#[must_use]
pub fn peer_supports_peer_report(request: Option<&OcSupportedFeatures>, from_peer: &str) -> bool {
    request.is_some_and(|f| {
        f.features() & OC_PEER_REPORT != 0 && f.source_id.as_deref() == Some(from_peer)
    })
}

/// Makes `f` (the agent's OC-Supported-Features in an answer) select
/// `algorithm` for the host and realm reports of that answer (RFC 7683
/// §5.1.2: a single algorithm; RFC 8582 §6.3), its other bits kept.
pub fn select(f: &mut OcSupportedFeatures, algorithm: Algorithm) {
    let vector = f.feature_vector.unwrap_or(OLR_DEFAULT_ALGO);
    f.feature_vector = Some((vector & !ALGORITHM_BITS) | algorithm.bit());
}

/// The OC-Supported-Features to put in an answer relayed toward a downstream
/// DOIC node, or `None` when the request came without one (RFC 7683 §5.1.2:
/// "MUST NOT include the OC-Supported-Features AVP, OC-OLR AVP, or any other
/// overload control AVPs ... where the request message does not include" it).
///
/// `selected` is the host/realm algorithm announced downstream. A received
/// SourceID is stripped (RFC 8581 §6.1.2); toward a peer that supports peer
/// reports the agent adds OC_PEER_REPORT, its SourceID and OC-Peer-Algo.
#[must_use]
pub fn answer_features(
    request: Option<&OcSupportedFeatures>,
    downstream_peer_report: bool,
    selected: Algorithm,
    own_peer_algo: Algorithm,
    own_identity: &str,
) -> Option<OcSupportedFeatures> {
    request?;
    let mut vector = selected.bit();
    let (source_id, peer_algo) = if downstream_peer_report {
        vector |= OC_PEER_REPORT;
        (Some(own_identity.to_owned()), Some(own_peer_algo.bit()))
    } else {
        (None, None)
    };
    Some(OcSupportedFeatures {
        feature_vector: Some(vector),
        source_id,
        peer_algo,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFFERED: u64 = OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM | OC_PEER_REPORT;

    fn sf(vector: Option<u64>) -> OcSupportedFeatures {
        OcSupportedFeatures {
            feature_vector: vector,
            ..OcSupportedFeatures::default()
        }
    }

    #[test]
    fn absent_features_or_vector_select_loss() {
        // RFC 7683 §7.2: absence of OC-Feature-Vector in answers means loss.
        assert_eq!(selected_algorithm(None, OFFERED), Ok(Algorithm::Loss));
        assert_eq!(
            selected_algorithm(Some(&sf(None)), OFFERED),
            Ok(Algorithm::Loss)
        );
    }

    #[test]
    fn exactly_one_algorithm_is_accepted() {
        // RFC 7683 §5.1.2: a single algorithm, from the offered set.
        assert_eq!(
            selected_algorithm(
                Some(&sf(Some(OLR_RATE_ALGORITHM | OC_PEER_REPORT))),
                OFFERED
            ),
            Ok(Algorithm::Rate)
        );
        assert_eq!(
            selected_algorithm(
                Some(&sf(Some(OLR_DEFAULT_ALGO | OLR_RATE_ALGORITHM))),
                OFFERED
            ),
            Err(SelectionError::NotSingle { bits: 0x5 })
        );
        assert_eq!(
            selected_algorithm(Some(&sf(Some(OC_PEER_REPORT))), OFFERED),
            Err(SelectionError::Unknown { bits: 0x10 })
        );
        assert_eq!(
            selected_algorithm(Some(&sf(Some(OLR_RATE_ALGORITHM))), OLR_DEFAULT_ALGO),
            Err(SelectionError::NotOffered {
                algo: Algorithm::Rate
            })
        );
    }

    #[test]
    fn peer_algo_selects_peer_report_algorithm() {
        // RFC 8581 §6.2.3: the algorithm comes from OC-Peer-Algo.
        let f = OcSupportedFeatures {
            feature_vector: Some(OLR_DEFAULT_ALGO),
            source_id: Some("a".into()),
            peer_algo: Some(OLR_RATE_ALGORITHM),
        };
        assert_eq!(
            selected_peer_algorithm(Some(&f), OFFERED),
            Ok(Algorithm::Rate)
        );
        assert_eq!(selected_algorithm(Some(&f), OFFERED), Ok(Algorithm::Loss));
        assert_eq!(selected_peer_algorithm(None, OFFERED), Ok(Algorithm::Loss));
    }

    #[test]
    fn request_without_vector_means_loss_only() {
        // RFC 7683 §7.2: absence in requests means only loss is supported.
        let f = sf(None);
        assert!(supports(&f, Algorithm::Loss));
        assert!(!supports(&f, Algorithm::Rate));
    }

    #[test]
    fn announced_vector_always_has_loss() {
        // RFC 7683 §5.1.1 and RFC 8582 §5: rate support implies loss.
        assert_eq!(announced_vector(&[Algorithm::Rate], false), 0x5);
        assert_eq!(announced_vector(&[], true), 0x11);
    }

    #[test]
    fn relayed_request_source_id_is_replaced() {
        // RFC 8581 §6.1.1: replace SourceID with the agent's own identity.
        let f = request_features(0x15, "agent.example");
        assert_eq!(f.source_id.as_deref(), Some("agent.example"));
        assert_eq!(request_features(0x5, "agent.example").source_id, None);
    }

    #[test]
    fn peer_report_support_needs_matching_source_id() {
        // RFC 8581 §6.1.2.
        let f = OcSupportedFeatures {
            feature_vector: Some(0x11),
            source_id: Some("c1".into()),
            peer_algo: None,
        };
        assert!(peer_supports_peer_report(Some(&f), "c1"));
        assert!(!peer_supports_peer_report(Some(&f), "c2"));
        assert!(!peer_supports_peer_report(Some(&sf(Some(0x1))), "c1"));
        assert!(!peer_supports_peer_report(None, "c1"));
    }

    #[test]
    fn no_doic_avp_in_answer_to_request_without_one() {
        // RFC 7683 §5.1.2.
        assert_eq!(
            answer_features(None, true, Algorithm::Loss, Algorithm::Rate, "a"),
            None
        );
        let f = answer_features(
            Some(&sf(None)),
            false,
            Algorithm::Loss,
            Algorithm::Rate,
            "a",
        )
        .unwrap();
        assert_eq!(
            f.source_id, None,
            "SourceID stripped when relaying (RFC 8581 §6.1.2)"
        );
        assert_eq!(f.peer_algo, None);
        let f =
            answer_features(Some(&sf(None)), true, Algorithm::Loss, Algorithm::Rate, "a").unwrap();
        assert_eq!(f.source_id.as_deref(), Some("a"));
        assert_eq!(f.peer_algo, Some(OLR_RATE_ALGORITHM));
        assert_eq!(f.feature_vector, Some(OLR_DEFAULT_ALGO | OC_PEER_REPORT));
    }
}
