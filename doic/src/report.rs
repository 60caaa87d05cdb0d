//! The overload report as a reacting node acts on it: RFC 7683 §7.3-§7.7
//! (sequence, validity, report type, reduction percentage), RFC 8581 §7.2
//! (PEER_REPORT, SourceID) and RFC 8582 §7.2.1 (OC-Maximum-Rate). The wire form
//! is the codec's [`OcOlr`]; this module checks it against the algorithm in
//! force and turns it into a [`Report`].

use std::time::{Duration, Instant};

pub use diameter::codec::doic::{OcOlr, ReportType};
use diameter::dictionary::doic::{DEFAULT_VALIDITY_SECS, MAX_VALIDITY_SECS};

use super::features::Algorithm;

/// Default OC-Validity-Duration, RFC 7683 §7.5.
pub const DEFAULT_VALIDITY: Duration = Duration::from_secs(DEFAULT_VALIDITY_SECS as u64);

/// The three report types the core knows, as an index (for small tables).
#[must_use]
pub const fn slot(rt: ReportType) -> usize {
    match rt {
        ReportType::Host => 0,
        ReportType::Realm => 1,
        ReportType::Peer | ReportType::Other(_) => 2,
    }
}

/// Why an OC-OLR is not acted upon.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OlrError {
    /// A report type this node does not support (RFC 7683 §7.6 unassigned values).
    #[error("unknown report type {value}")]
    UnknownType {
        /// The OC-Report-Type value.
        value: i32,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The report type (never `Other`).
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

/// The sequence numbers of the reports the agent makes itself (RFC 7683
/// §5.2.1.4: a new one for every new content, and greater across restarts):
/// milliseconds since the Unix epoch, or the last one plus one when two
/// versions fall in the same millisecond.
#[derive(Clone, Copy, Debug)]
pub struct Sequencer {
    origin: Instant,
    base_ms: u64,
    last: u64,
}

impl Sequencer {
    /// Numbers from `base_ms`, the Unix time in milliseconds at `origin`.
    #[must_use]
    pub fn new(origin: Instant, base_ms: u64) -> Self {
        Self {
            origin,
            base_ms,
            last: 0,
        }
    }

    /// The number of a new version made at `now`, strictly greater than the
    /// last one.
    pub fn next(&mut self, now: Instant) -> u64 {
        let elapsed = u64::try_from(now.saturating_duration_since(self.origin).as_millis())
            .unwrap_or(u64::MAX / 2);
        let s = self.base_ms.saturating_add(elapsed).max(self.last + 1);
        self.last = s;
        s
    }

    /// The last number given (0 before the first).
    #[must_use]
    pub fn last(&self) -> u64 {
        self.last
    }
}

/// RFC 7683 §7.5: absent means 30 s; above 86,400 s "the default value applies".
#[must_use]
pub fn effective_validity(secs: Option<u32>) -> Duration {
    match secs {
        Some(s) if s <= MAX_VALIDITY_SECS => Duration::from_secs(u64::from(s)),
        _ => DEFAULT_VALIDITY,
    }
}

/// Normalises a received OLR for a reacting node that uses `algo` for it (the
/// algorithm comes from the answer's OC-Supported-Features, RFC 7683 §5.2.1.3
/// note: an "OLR" is the OC-OLR plus that algorithm).
///
/// # Errors
/// [`OlrError`] when the type is unknown or the algorithm's parameter is
/// missing or out of range.
pub fn normalise(olr: &OcOlr, algo: Algorithm) -> Result<Report, OlrError> {
    if let ReportType::Other(value) = olr.report_type {
        return Err(OlrError::UnknownType { value });
    }
    let validity = effective_validity(olr.validity_duration);
    let abatement = match algo {
        Algorithm::Loss => match olr.reduction_percentage {
            Some(p) if p <= 100 => Abatement::Loss { percent: p },
            // A zero validity ends the condition whatever the parameters.
            _ if validity.is_zero() => Abatement::Loss { percent: 0 },
            got => return Err(OlrError::BadReduction { got }),
        },
        Algorithm::Rate => match olr.maximum_rate {
            Some(r) => Abatement::Rate { per_second: r },
            None if validity.is_zero() => Abatement::Rate {
                per_second: u32::MAX,
            },
            None => return Err(OlrError::MissingRate),
        },
    };
    Ok(Report {
        report_type: olr.report_type,
        sequence: olr.sequence_number,
        validity,
        abatement,
        source_id: olr.source_id.clone(),
    })
}

impl Report {
    /// The OC-OLR to send for this report (RFC 8582 §6.5: a rate report
    /// carries OC-Maximum-Rate and no OC-Reduction-Percentage).
    #[must_use]
    pub fn to_olr(&self) -> OcOlr {
        let mut o = OcOlr::new(self.sequence, self.report_type);
        match self.abatement {
            Abatement::Loss { percent } => o.reduction_percentage = Some(percent),
            Abatement::Rate { per_second } => o.maximum_rate = Some(per_second),
        }
        o.validity_duration =
            Some(u32::try_from(self.validity.as_secs()).unwrap_or(MAX_VALIDITY_SECS));
        o.source_id.clone_from(&self.source_id);
        o
    }
}

/// What an OCS entry is identified by: Application-ID, report type and the
/// host's DiameterIdentity, the realm, or the peer's DiameterIdentity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OcsKey {
    /// Application-ID.
    pub app_id: u32,
    /// Report type.
    pub report_type: ReportType,
    /// Host DiameterIdentity, realm, or peer DiameterIdentity.
    pub id: String,
}

impl OcsKey {
    /// A key.
    #[must_use]
    pub fn new(app_id: u32, report_type: ReportType, id: &str) -> Self {
        Self {
            app_id,
            report_type,
            id: id.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn olr(reduction: Option<u32>, validity: Option<u32>) -> OcOlr {
        let mut o = OcOlr::new(1, ReportType::Host);
        o.reduction_percentage = reduction;
        o.validity_duration = validity;
        o
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
            normalise(&olr(Some(101), None), Algorithm::Loss),
            Err(OlrError::BadReduction { got: Some(101) })
        );
        assert_eq!(
            normalise(&olr(None, None), Algorithm::Loss),
            Err(OlrError::BadReduction { got: None })
        );
        let r = normalise(&olr(Some(100), None), Algorithm::Loss).unwrap();
        assert_eq!(r.abatement, Abatement::Loss { percent: 100 });
        assert!(r.abatement.is_total());
    }

    #[test]
    fn rate_report_needs_maximum_rate() {
        // RFC 8582 §6.5: OC-Maximum-Rate MUST be included.
        assert_eq!(
            normalise(&olr(Some(5), None), Algorithm::Rate),
            Err(OlrError::MissingRate)
        );
        let mut o = olr(None, None);
        o.maximum_rate = Some(0);
        assert!(normalise(&o, Algorithm::Rate).unwrap().abatement.is_total());
    }

    #[test]
    fn unknown_report_type_is_rejected() {
        let mut o = olr(Some(5), None);
        o.report_type = ReportType::Other(3);
        assert_eq!(
            normalise(&o, Algorithm::Loss),
            Err(OlrError::UnknownType { value: 3 })
        );
    }

    #[test]
    fn rate_report_carries_maximum_rate_not_reduction() {
        // RFC 8582 §6.5: OC-Maximum-Rate MUST be included and
        // OC-Reduction-Percentage MUST NOT.
        let r = Report {
            report_type: ReportType::Peer,
            sequence: 9,
            validity: Duration::from_secs(5),
            abatement: Abatement::Rate { per_second: 120 },
            source_id: Some("agent".into()),
        };
        let o = r.to_olr();
        assert_eq!((o.maximum_rate, o.reduction_percentage), (Some(120), None));
        assert_eq!(o.source_id.as_deref(), Some("agent"));
    }

    #[test]
    fn to_olr_round_trips() {
        let mut o = olr(Some(40), Some(12));
        o.report_type = ReportType::Realm;
        let r = normalise(&o, Algorithm::Loss).unwrap();
        assert_eq!(normalise(&r.to_olr(), Algorithm::Loss).unwrap(), r);
        assert_eq!(r.to_olr(), o);
    }
}
