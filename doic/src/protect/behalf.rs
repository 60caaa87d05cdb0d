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
//! others); each client receives the one its algorithm takes. Once the
//! limit is split among the clients ([`OnBehalf::set_losses`]), a loss
//! client is sent the percentage that brings the demand it was split from
//! to its share: the load offered at the agent is already cut by the
//! clients abating the last version, and a percentage of it would settle at
//! `1 - sqrt(limit / demand)` (42 % at 3x where 67 % is right).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::report::{Abatement, Report, ReportType, Sequencer};

/// One version of the report made on a server's behalf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BehalfReport {
    /// The report: type HOST, the agent's sequence number, rate abatement.
    pub report: Report,
    /// The loss percentage of the same version, for loss clients without
    /// one of their own in `losses`.
    pub loss_percent: u32,
    /// Each client's own loss percentage: the reduction of the demand it
    /// was split from to its share.
    pub losses: Arc<BTreeMap<String, u32>>,
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

    /// The loss percentage `client` is sent: its own, else the version's.
    #[must_use]
    pub fn loss_for(&self, client: &str) -> u32 {
        self.losses
            .get(client)
            .copied()
            .unwrap_or(self.loss_percent)
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

    /// Sets each client's loss percentage in the version in force (not in
    /// an end version), as [`ClientLoss::revise`] gives them.
    pub fn set_losses(&mut self, losses: BTreeMap<String, u32>) {
        if let Some(c) = self.current.as_mut().filter(|c| !c.is_end()) {
            c.losses = Arc::new(losses);
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
            losses: Arc::default(),
            made_at: now,
            until,
        });
    }
}

/// Each client's share of the limit as a loss percentage (RFC 7683 §7.7),
/// for the clients that take loss: the fraction of its requests a client
/// is to send on, kept across versions for the episode.
///
/// The agent sees what a client sends after its own abatement, so the
/// fraction is corrected by what arrives: a client passing `f` of its
/// demand and arriving at `a` should pass `f * share / a`. The arrival rate
/// lags a change of the fraction (it is smoothed over a few ticks), so the
/// correction is made only once the last one has had `settle` to show;
/// in between, the demand is taken as unchanged, or as the arrivals where
/// they show more (a client new to the split, its arrival rate still
/// rising). A client first split passes `share / arrivals` (it was not
/// abating).
///
/// A client that does not abate (its arrivals did not fall after its
/// fraction was cut by a tenth or more) would be driven toward 100 % by the
/// correction, and once it complied would drop everything: it is instead
/// sent the cut of its arrivals to its share (its gate holds it there
/// either way) until its arrivals fall, the sign that it complies.
///
/// The fraction aims at the share itself: what random drops let through
/// varies around its mean (RFC 7683 §6), and the client's gate, a bucket at
/// its share with the loss client's tolerance
/// ([`crate::protect::gates::LOSS_TOLERANCE`]), lets those peaks pass. (It
/// aimed at 1.10 x the share while the gate had the rate client's 10 ms
/// tolerance: the gate then trimmed the excess to the share and shaped what
/// reached the server as a rate client's bucket would, docs/overload.md.)
#[derive(Clone, Debug, Default)]
pub struct ClientLoss {
    clients: BTreeMap<String, Passing>,
}

/// One client's fraction and what it was corrected from.
#[derive(Clone, Copy, Debug)]
struct Passing {
    /// The fraction of its demand it is to send.
    pass: f64,
    /// Its demand as estimated at the last correction, requests/s.
    demand: f64,
    /// Its arrivals at the last correction, and the fraction in force while
    /// they were measured (none at its first split: its arrival rate may
    /// still be rising).
    measured: Option<(f64, f64)>,
    /// When it was last corrected.
    since: Instant,
    /// It did not abate when its fraction was cut.
    ignores: bool,
}

/// The least fraction a loss client is asked to pass: what a complying
/// client then sends still shows its demand.
const MIN_PASS: f64 = 0.01;

impl ClientLoss {
    /// The loss percentage of every client of `shares` (client to
    /// requests/s) at `now`, from each one's request arrival rate at the
    /// agent (`arrivals`, `None`: none measured), correcting a fraction at
    /// most once per `settle`.
    pub fn revise(
        &mut self,
        now: Instant,
        shares: &BTreeMap<String, u32>,
        arrivals: impl Fn(&str) -> Option<f64>,
        settle: Duration,
    ) -> BTreeMap<String, u32> {
        self.clients.retain(|c, _| shares.contains_key(c));
        let mut out = BTreeMap::new();
        for (client, &share) in shares {
            let aim = f64::from(share.max(1));
            // Not measured (a client held between two requests keeps its
            // share): nothing to correct from.
            let measured = arrivals(client);
            let a = measured.unwrap_or(0.0).max(0.0);
            let next = match self.clients.get(client) {
                None => Passing {
                    pass: 1.0,
                    demand: a,
                    measured: None,
                    since: now,
                    ignores: false,
                },
                Some(p)
                    if measured.is_some() && now.saturating_duration_since(p.since) >= settle =>
                {
                    let ignores = p.measured.is_some_and(|(a0, f0)| {
                        if p.ignores {
                            a >= 0.9 * a0
                        } else {
                            p.pass < 0.9 * f0 && a0 > 0.0 && a >= 0.95 * a0
                        }
                    });
                    Passing {
                        pass: p.pass,
                        demand: if ignores { a } else { a / p.pass },
                        measured: Some((a, p.pass)),
                        since: now,
                        ignores,
                    }
                }
                Some(p) => Passing {
                    demand: if p.ignores { p.demand } else { p.demand.max(a) },
                    ..*p
                },
            };
            let pass = if next.demand > 0.0 {
                (aim / next.demand).clamp(MIN_PASS, 1.0)
            } else {
                1.0
            };
            self.clients
                .insert(client.clone(), Passing { pass, ..next });
            // The whole percent at or below the cut (RFC 7683 §7.7 has no
            // finer): at 5x a percent is a twentieth of the share, and a
            // percentage rounded up leaves that much of it unused while the
            // client's gate holds what passes above it (in the core's chain
            // simulation, rounded to the nearest: 0.94 C, rounded down:
            // 0.96 C).
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "in 0..=100"
            )]
            let percent = ((1.0 - pass) * 100.0).floor() as u32;
            out.insert(client.clone(), percent);
        }
        out
    }

    /// Forgets every client (the episode is over).
    pub fn clear(&mut self) {
        self.clients.clear();
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

    /// The percentage that passes `fraction` of a demand: the whole
    /// percent at or below the cut, so that at least `fraction` passes.
    fn passing(fraction: f64) -> u32 {
        ((1.0 - fraction.min(1.0)) * 100.0).floor() as u32
    }

    #[test]
    fn a_loss_client_is_sent_the_cut_of_its_demand_to_its_share() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let settle = Duration::from_secs(1);
        let shares = BTreeMap::from([("c1".to_owned(), 200)]);
        let mut cl = ClientLoss::default();
        let at = |cl: &mut ClientLoss, t: u64, shares: &BTreeMap<String, u32>, a: f64| {
            cl.revise(ms(t), shares, |_| Some(a), settle)["c1"]
        };
        // One client of 600/s, its share 200/s, first split while it sent
        // its demand: cut by about two thirds (aiming at its share).
        let third = 200.0 / 600.0;
        assert_eq!(at(&mut cl, 0, &shares, 600.0), passing(third));
        assert!((60..=67).contains(&passing(third)), "{}", passing(third));
        // Split at the onset, its arrivals read 400/s of its 600/s and
        // still rising; within `settle` the demand follows them up.
        let mut cl = ClientLoss::default();
        assert_eq!(at(&mut cl, 0, &shares, 400.0), passing(200.0 / 400.0));
        let f = 200.0 / 450.0;
        assert_eq!(at(&mut cl, 300, &shares, 450.0), passing(f));
        // Passing f of 600/s once settled: corrected to two thirds, where
        // a cut of what reaches the agent (already cut) would be 27 %.
        assert_eq!(at(&mut cl, 1_100, &shares, 600.0 * f), passing(third));
        // Abating exactly, it keeps its percentage.
        assert_eq!(at(&mut cl, 2_200, &shares, 600.0 * third), passing(third));
        // A larger share between corrections, its demand unchanged.
        let more = BTreeMap::from([("c1".to_owned(), 300)]);
        let half = 300.0 / 600.0;
        assert_eq!(at(&mut cl, 2_300, &more, 600.0 * third), passing(half));
        // Its demand halved: passing half of 300/s, it is not cut.
        assert_eq!(at(&mut cl, 3_400, &more, 300.0 * half), 0);

        // A client that ignores the report: one correction cuts further,
        // the next finds its arrivals did not fall and sends it the cut of
        // its arrivals to its share, not 100 %.
        let mut cl = ClientLoss::default();
        assert_eq!(at(&mut cl, 0, &shares, 600.0), passing(third));
        let deeper = at(&mut cl, 1_100, &shares, 600.0);
        assert_eq!(deeper, passing(third * third));
        for t in [2_200, 3_300, 4_400] {
            assert_eq!(at(&mut cl, t, &shares, 600.0), passing(third), "at {t} ms");
        }
        // It complies at last: its arrivals fall, and it keeps the cut of
        // its demand.
        assert_eq!(at(&mut cl, 5_500, &shares, 600.0 * third), passing(third));
        assert_eq!(at(&mut cl, 6_600, &shares, 600.0 * third), passing(third));

        // Its arrivals not measured at a correction (held between two
        // requests): its cut stays, it is not read as a demand of 0.
        let mut cl = ClientLoss::default();
        assert_eq!(at(&mut cl, 0, &shares, 600.0), passing(third));
        let unmeasured = cl.revise(ms(1_100), &shares, |_| None, settle)["c1"];
        assert_eq!(unmeasured, passing(third));
        assert_eq!(at(&mut cl, 1_200, &shares, 600.0 * third), passing(third));

        // A client no longer split is forgotten.
        let none = BTreeMap::new();
        assert!(
            cl.revise(ms(9_000), &none, |_| Some(600.0), settle)
                .is_empty()
        );
        assert!(cl.clients.is_empty());
    }

    #[test]
    fn the_losses_go_in_the_version_in_force_not_in_an_end() {
        let t0 = Instant::now();
        let mut b = OnBehalf::new(t0, 1_700_000_000_000, Duration::from_secs(10));
        b.handle_limit(t0, Some(300), 42);
        b.set_losses(BTreeMap::from([("c1".to_owned(), 67)]));
        let v = b.current().unwrap();
        assert_eq!(v.loss_for("c1"), 67);
        assert_eq!(v.loss_for("c3"), 42, "a client not split: the version's");
        b.handle_limit(t0 + Duration::from_secs(1), None, 0);
        b.set_losses(BTreeMap::from([("c1".to_owned(), 67)]));
        assert!(b.current().unwrap().losses.is_empty());
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
