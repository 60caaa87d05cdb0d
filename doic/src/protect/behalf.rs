//! The HOST report the agent makes on behalf of a protected server (RFC
//! 7683 §5.1.3: a DOIC agent may act as the reporting node for a server
//! that does not support DOIC), one per server, with the OCS maintenance of
//! RFC 7683 §5.2.1.4 and §5.2.3:
//!
//! - a new version (a new sequence number, [`Sequencer`]: milliseconds
//!   since the Unix epoch, so they grow across restarts) when the limit
//!   starts, when the rate moves by more than 2 % or the loss percentage
//!   by 5 points, and at half of the validity
//!   while the limit lasts (a reacting node ignores a version it already
//!   has, RFC 8581 §6.2.3, so renewing takes a new one);
//! - an end version with validity 0 when the limit is lifted (§5.2.3), kept
//!   for one validity period so that every reacting node that held the
//!   report sees it end, then dropped.
//!
//! The version holds both the rate (RFC 8582 OC-Maximum-Rate, for clients
//! that announced rate) and the loss percentage (RFC 7683 §7.7, for the
//! others); each client receives the one its algorithm takes.

use std::time::{Duration, Instant};

use crate::report::{Abatement, Report, ReportType, Sequencer};

/// One version of the report made on a server's behalf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BehalfReport {
    /// The report: type HOST, the agent's sequence number, rate abatement.
    pub report: Report,
    /// The loss percentage of the same version, for loss clients.
    pub loss_percent: u32,
    /// When this version was made.
    pub made_at: Instant,
    /// Until when it goes in answers (its validity, or for an end version
    /// the period it is kept).
    pub until: Instant,
}

impl BehalfReport {
    /// Whether it ends the report (validity 0).
    #[must_use]
    pub fn is_end(&self) -> bool {
        self.report.validity.is_zero()
    }

    /// The rate it asks for, requests per second.
    #[must_use]
    pub fn rate(&self) -> u32 {
        match self.report.abatement {
            Abatement::Rate { per_second } => per_second,
            Abatement::Loss { .. } => 0,
        }
    }

    /// The report as a client of `algorithm` receives it: rate, or loss
    /// with the version's percentage.
    #[must_use]
    pub fn for_algorithm(&self, algorithm: crate::Algorithm) -> Report {
        let mut r = self.report.clone();
        if algorithm != crate::Algorithm::Rate {
            r.abatement = Abatement::Loss {
                percent: self.loss_percent,
            };
        }
        r
    }
}

/// The versions of one server's report. Call [`OnBehalf::handle_limit`]
/// once per control tick; read [`OnBehalf::current`].
#[derive(Clone, Debug)]
pub struct OnBehalf {
    sequencer: Sequencer,
    validity: Duration,
    material: f64,
    current: Option<BehalfReport>,
}

impl OnBehalf {
    /// Reports of `validity`, numbered from `base_ms` (Unix time in
    /// milliseconds at `origin`).
    #[must_use]
    pub fn new(origin: Instant, base_ms: u64, validity: Duration) -> Self {
        Self {
            sequencer: Sequencer::new(origin, base_ms),
            validity,
            // A reacting node follows each version's rate exactly (RFC 8582
            // §8.3): coarser steps would be a sawtooth at the server (at 10 %
            // the chain's arrivals swung between 0.9 and 1.1 of the limit).
            material: 0.02,
            current: None,
        }
    }

    /// The version in force (active or ending), if any.
    #[must_use]
    pub fn current(&self) -> Option<&BehalfReport> {
        self.current.as_ref()
    }

    /// Follows the server's limit (`None`: not limited) and the loss
    /// percentage it means at `now`; true when a new version was made or
    /// the ended one was dropped.
    pub fn handle_limit(&mut self, now: Instant, limit: Option<u32>, loss_percent: u32) -> bool {
        match (limit, &self.current) {
            (Some(rate), Some(c)) if !c.is_end() => {
                let old = f64::from(c.rate().max(1));
                let moved = (f64::from(rate) - old).abs() / old > self.material
                    || c.loss_percent.abs_diff(loss_percent) >= 5;
                let renew = now.saturating_duration_since(c.made_at) >= self.validity / 2;
                if moved || renew {
                    self.make(now, rate, loss_percent, self.validity);
                    return true;
                }
                false
            }
            (Some(rate), _) => {
                self.make(now, rate, loss_percent, self.validity);
                true
            }
            (None, Some(c)) if !c.is_end() => {
                let (rate, loss) = (c.rate(), c.loss_percent);
                self.make(now, rate, loss, Duration::ZERO);
                true
            }
            (None, Some(c)) if now >= c.until => {
                self.current = None;
                true
            }
            (None, _) => false,
        }
    }

    fn make(&mut self, now: Instant, rate: u32, loss_percent: u32, validity: Duration) {
        let report = Report {
            report_type: ReportType::Host,
            sequence: self.sequencer.next(now),
            validity,
            abatement: Abatement::Rate {
                per_second: rate.max(1),
            },
            source_id: None,
        };
        // An end version is kept for the validity it ends.
        let until = now
            + if validity.is_zero() {
                self.validity
            } else {
                validity
            };
        self.current = Some(BehalfReport {
            report,
            loss_percent,
            made_at: now,
            until,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_start_renew_change_and_end_with_growing_sequence_numbers() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut b = OnBehalf::new(t0, 1_700_000_000_000, Duration::from_secs(10));
        assert!(!b.handle_limit(t0, None, 0));
        // Start (RFC 7683 §5.2.1.4: a new sequence number).
        assert!(b.handle_limit(ms(100), Some(500), 75));
        let first = b.current().unwrap().clone();
        assert_eq!(first.report.sequence, 1_700_000_000_100);
        assert_eq!(first.report.report_type, ReportType::Host);
        assert_eq!(first.report.validity, Duration::from_secs(10));
        assert_eq!(first.rate(), 500);
        assert_eq!(
            first.for_algorithm(crate::Algorithm::Loss).abatement,
            Abatement::Loss { percent: 75 }
        );
        // Small moves make no version (at most 2 %); a material one does.
        assert!(!b.handle_limit(ms(200), Some(509), 76));
        assert!(!b.handle_limit(ms(250), Some(491), 74));
        assert!(b.handle_limit(ms(300), Some(600), 70));
        assert!(b.current().unwrap().report.sequence > first.report.sequence);
        // Renewed at half the validity.
        assert!(!b.handle_limit(ms(5_000), Some(600), 70));
        assert!(b.handle_limit(ms(5_300), Some(600), 70));
        // Ended with validity 0 (§5.2.3), kept for a validity period.
        assert!(b.handle_limit(ms(6_000), None, 0));
        let end = b.current().unwrap().clone();
        assert!(end.is_end() && end.report.validity.is_zero());
        assert!(!b.handle_limit(ms(15_000), None, 0));
        assert!(b.handle_limit(ms(16_000), None, 0));
        assert!(b.current().is_none());
        // Two versions in one millisecond still grow.
        assert!(b.handle_limit(ms(16_000), Some(10), 0));
        let s1 = b.current().unwrap().report.sequence;
        assert!(b.handle_limit(ms(16_000), None, 0));
        assert!(b.current().unwrap().report.sequence > s1);
    }

    #[test]
    fn sequence_numbers_grow_across_a_restart() {
        // RFC 7683 §5.2.1.4: a restarted agent's first version is above the
        // last one before the restart (the Unix clock moved on).
        let t0 = Instant::now();
        let mut before = OnBehalf::new(t0, 1_700_000_000_000, Duration::from_secs(10));
        before.handle_limit(t0 + Duration::from_secs(60), Some(100), 0);
        let last = before.current().unwrap().report.sequence;
        let t1 = Instant::now();
        let mut after = OnBehalf::new(t1, 1_700_000_061_000, Duration::from_secs(10));
        after.handle_limit(t1, Some(100), 0);
        assert!(after.current().unwrap().report.sequence > last);
    }
}
