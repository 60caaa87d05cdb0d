//! The overload report, OC-OLR: RFC 7683 §7.3-§7.7 (sequence, validity,
//! report type, reduction percentage), RFC 8581 §7.2 (PEER_REPORT, SourceID) and
//! RFC 8582 §7.2.1 (OC-Maximum-Rate), with the normalisation a reacting node
//! applies before acting on one.

use std::time::Duration;

use super::features::Algorithm;

/// Default OC-Validity-Duration, RFC 7683 §7.5.
pub const DEFAULT_VALIDITY: Duration = Duration::from_secs(30);
/// Maximum OC-Validity-Duration in seconds, RFC 7683 §7.5.
pub const MAX_VALIDITY_SECS: u32 = 86_400;

/// OC-Report-Type (RFC 7683 §7.6, RFC 8581 §7.2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReportType {
    /// HOST_REPORT 0: applies to host-routed requests for the answer's Origin-Host.
    Host,
    /// REALM_REPORT 1: applies to realm-routed requests for the answer's Origin-Realm.
    Realm,
    /// PEER_REPORT 2: applies to all requests sent to the peer named in SourceID.
    Peer,
}

impl ReportType {
    /// The OC-Report-Type value.
    #[must_use]
    pub const fn code(self) -> u32 {
        match self {
            Self::Host => 0,
            Self::Realm => 1,
            Self::Peer => 2,
        }
    }

    /// The report type of an OC-Report-Type value, `None` when unknown.
    #[must_use]
    pub const fn from_code(code: u32) -> Option<Self> {
        match code {
            0 => Some(Self::Host),
            1 => Some(Self::Realm),
            2 => Some(Self::Peer),
            _ => None,
        }
    }
}

/// The content of one OC-OLR AVP as decoded from the wire; absent optional
/// sub-AVPs are `None`. `report_type` stays the raw code so that unknown types
/// can be recognised and ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Olr {
    /// OC-Sequence-Number (Unsigned64).
    pub sequence: u64,
    /// OC-Report-Type code.
    pub report_type: u32,
    /// OC-Reduction-Percentage.
    pub reduction: Option<u32>,
    /// OC-Validity-Duration in seconds.
    pub validity: Option<u32>,
    /// SourceID (peer reports).
    pub source_id: Option<String>,
    /// OC-Maximum-Rate in requests per second.
    pub max_rate: Option<u32>,
}

/// Why an OC-OLR is not acted upon.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OlrError {
    /// A report type this node does not support (RFC 7683 §7.6 unassigned values).
    #[error("unknown report type {code}")]
    UnknownType {
        /// The OC-Report-Type value.
        code: u32,
    },
    /// Loss selected but no usable OC-Reduction-Percentage (RFC 7683 §6.2 MUST;
    /// §7.7: values above 100 are ignored).
    #[error("loss report without a reduction percentage in 0..=100 (got {got:?})")]
    BadReduction {
        /// The value received, if any.
        got: Option<u32>,
    },
    /// Rate selected but no OC-Maximum-Rate (RFC 8582 §6.5 MUST).
    #[error("rate report without OC-Maximum-Rate")]
    MissingRate,
}

/// What an accepted report asks for, by algorithm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Abatement {
    /// Abate this percentage of matching requests (RFC 7683 §6).
    Loss {
        /// OC-Reduction-Percentage, 0..=100.
        percent: u32,
    },
    /// Send at most this many requests per second (RFC 8582 §8).
    Rate {
        /// OC-Maximum-Rate.
        per_second: u32,
    },
}

impl Abatement {
    /// The algorithm of this abatement.
    #[must_use]
    pub const fn algorithm(self) -> Algorithm {
        match self {
            Self::Loss { .. } => Algorithm::Loss,
            Self::Rate { .. } => Algorithm::Rate,
        }
    }

    /// Whether it asks for no traffic at all (100 % or rate 0).
    #[must_use]
    pub const fn is_total(self) -> bool {
        matches!(
            self,
            Self::Loss { percent: 100 } | Self::Rate { per_second: 0 }
        )
    }
}

/// A report normalised for the reacting node: type known, validity resolved,
/// algorithm parameters checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The report type.
    pub report_type: ReportType,
    /// OC-Sequence-Number.
    pub sequence: u64,
    /// Validity; zero ends the overload condition now (RFC 7683 §5.2.1.3).
    pub validity: Duration,
    /// What the report asks for.
    pub abatement: Abatement,
    /// SourceID, for peer reports.
    pub source_id: Option<String>,
}

/// RFC 7683 §7.5: absent means 30 s; above 86,400 s "the default value applies".
#[must_use]
pub fn effective_validity(secs: Option<u32>) -> Duration {
    match secs {
        None => DEFAULT_VALIDITY,
        Some(s) if s > MAX_VALIDITY_SECS => DEFAULT_VALIDITY,
        Some(s) => Duration::from_secs(u64::from(s)),
    }
}

impl Olr {
    /// Normalises this OLR for a reacting node that uses `algo` for it (the
    /// algorithm comes from the answer's OC-Supported-Features, RFC 7683
    /// §5.2.1.3 note: an "OLR" is the OC-OLR plus that algorithm).
    ///
    /// # Errors
    /// [`OlrError`] when the type is unknown or the algorithm's parameter is
    /// missing or out of range.
    pub fn normalise(&self, algo: Algorithm) -> Result<Report, OlrError> {
        let report_type = ReportType::from_code(self.report_type).ok_or(OlrError::UnknownType {
            code: self.report_type,
        })?;
        let validity = effective_validity(self.validity);
        let abatement = match algo {
            Algorithm::Loss => match self.reduction {
                Some(p) if p <= 100 => Abatement::Loss { percent: p },
                // A zero validity ends the condition whatever the parameters.
                _ if validity.is_zero() => Abatement::Loss { percent: 0 },
                got => return Err(OlrError::BadReduction { got }),
            },
            Algorithm::Rate => match self.max_rate {
                Some(r) => Abatement::Rate { per_second: r },
                None if validity.is_zero() => Abatement::Rate {
                    per_second: u32::MAX,
                },
                None => return Err(OlrError::MissingRate),
            },
        };
        Ok(Report {
            report_type,
            sequence: self.sequence,
            validity,
            abatement,
            source_id: self.source_id.clone(),
        })
    }
}

impl Report {
    /// The OC-OLR to send for this report (the inverse of [`Olr::normalise`]).
    #[must_use]
    pub fn to_olr(&self) -> Olr {
        let (reduction, max_rate) = match self.abatement {
            Abatement::Loss { percent } => (Some(percent), None),
            Abatement::Rate { per_second } => (None, Some(per_second)),
        };
        Olr {
            sequence: self.sequence,
            report_type: self.report_type.code(),
            reduction,
            validity: Some(u32::try_from(self.validity.as_secs()).unwrap_or(MAX_VALIDITY_SECS)),
            source_id: self.source_id.clone(),
            max_rate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn olr(reduction: Option<u32>, validity: Option<u32>) -> Olr {
        Olr {
            sequence: 1,
            report_type: 0,
            reduction,
            validity,
            ..Olr::default()
        }
    }

    #[test]
    fn validity_default_maximum_and_zero() {
        // RFC 7683 §7.5.
        assert_eq!(effective_validity(None), Duration::from_secs(30));
        assert_eq!(
            effective_validity(Some(86_400)),
            Duration::from_secs(86_400)
        );
        assert_eq!(effective_validity(Some(86_401)), Duration::from_secs(30));
        assert_eq!(effective_validity(Some(0)), Duration::ZERO);
    }

    #[test]
    fn reduction_above_100_is_ignored() {
        // RFC 7683 §7.7: values greater than 100 are ignored; §6.2: loss needs one.
        assert_eq!(
            olr(Some(101), None).normalise(Algorithm::Loss),
            Err(OlrError::BadReduction { got: Some(101) })
        );
        assert_eq!(
            olr(None, None).normalise(Algorithm::Loss),
            Err(OlrError::BadReduction { got: None })
        );
        let r = olr(Some(100), None).normalise(Algorithm::Loss).unwrap();
        assert_eq!(r.abatement, Abatement::Loss { percent: 100 });
        assert!(r.abatement.is_total());
    }

    #[test]
    fn rate_report_needs_maximum_rate() {
        // RFC 8582 §6.5: OC-Maximum-Rate MUST be included.
        assert_eq!(
            olr(Some(5), None).normalise(Algorithm::Rate),
            Err(OlrError::MissingRate)
        );
        let mut o = olr(None, None);
        o.max_rate = Some(0);
        assert!(o.normalise(Algorithm::Rate).unwrap().abatement.is_total());
    }

    #[test]
    fn unknown_report_type_is_rejected() {
        let mut o = olr(Some(5), None);
        o.report_type = 3;
        assert_eq!(
            o.normalise(Algorithm::Loss),
            Err(OlrError::UnknownType { code: 3 })
        );
    }

    #[test]
    fn to_olr_round_trips() {
        let mut o = olr(Some(40), Some(12));
        o.report_type = 1;
        let r = o.normalise(Algorithm::Loss).unwrap();
        assert_eq!(r.to_olr().normalise(Algorithm::Loss).unwrap(), r);
    }
}
