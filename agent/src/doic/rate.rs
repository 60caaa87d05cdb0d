//! The rate algorithm's reacting side, RFC 8582 §8.3: the leaky bucket of
//! §8.3.1, two priority thresholds TAU1 <= TAU2 of §8.3.2 and the randomised
//! bucket phase of §8.3.3, with time as an argument.
//!
//! Units are nanoseconds: T = 1e9 / OC-Maximum-Rate, X and TAU in ns.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::loss::Prng;

/// Two request classes of RFC 8582 §8.3.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Candidate for reduction; admitted while X' <= TAU1.
    Normal,
    /// Admitted while X' <= TAU2.
    High,
}

/// Tolerances as multiples of T (RFC 8582 §8.3.2: "TAU0 = 0, TAU1 = 1/2 *
/// TAU2, and TAU2 = 10 * T"); randomised phase on by default (§8.3.3).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateParams {
    /// TAU0 / T: initial bucket content at activation.
    pub tau0: f64,
    /// TAU1 / T: threshold for normal requests.
    pub tau1: f64,
    /// TAU2 / T: threshold for high-priority requests.
    pub tau2: f64,
    /// Randomise the bucket phase at activation and when it empties (§8.3.3).
    pub randomise_phase: bool,
}

impl Default for RateParams {
    fn default() -> Self {
        Self {
            tau0: 0.0,
            tau1: 5.0,
            tau2: 10.0,
            randomise_phase: true,
        }
    }
}

/// One leaky bucket for one controlled target (RFC 8582 §8.3).
#[derive(Clone, Debug)]
pub struct RateBucket {
    t_ns: f64,
    tau1_ns: f64,
    tau2_ns: f64,
    x_ns: f64,
    lct: Instant,
    total: bool,
    randomise: bool,
}

impl RateBucket {
    /// A bucket activated at `now` for `per_second` requests per second.
    /// RFC 8582 §8.3.1: "LCT is set to the time of activation, and the leaky
    /// bucket counter is initialized to the parameter TAU0"; with §8.3.3 it is
    /// TAU0 + uT, u uniform in [-1/2, 1/2].
    #[must_use]
    pub fn new(now: Instant, per_second: u32, params: &RateParams, rng: &mut Prng) -> Self {
        let t_ns = if per_second == 0 {
            f64::INFINITY
        } else {
            1e9 / f64::from(per_second)
        };
        let mut b = Self {
            t_ns,
            tau1_ns: params.tau1.min(params.tau2) * t_ns,
            tau2_ns: params.tau2.max(params.tau1) * t_ns,
            x_ns: 0.0,
            lct: now,
            total: per_second == 0,
            randomise: params.randomise_phase,
        };
        if !b.total {
            let u = if b.randomise { rng.unit() - 0.5 } else { 0.0 };
            b.x_ns = (params.tau0 * t_ns + u * t_ns).max(0.0);
        }
        b
    }

    /// The maximum rate in requests per second (0 when all is abated).
    #[must_use]
    pub fn per_second(&self) -> f64 {
        if self.total { 0.0 } else { 1e9 / self.t_ns }
    }

    /// Whether a request of `priority` arriving at `now` may be sent; admits
    /// and updates the bucket, or leaves it unchanged for an abated request.
    ///
    /// RFC 8582 §8.3.2:
    /// ```text
    /// Xp = X - (ta - LCT);
    /// if (AnyRequestReceived && Xp <= TAU1) || (PriorityRequestReceived &&
    ///  Xp <= TAU2 && Xp > TAU1) { X = max (0, Xp) + T; LCT = ta; }
    /// ```
    pub fn admit(&mut self, now: Instant, priority: Priority, rng: &mut Prng) -> bool {
        if self.total {
            return false;
        }
        let elapsed = now.saturating_duration_since(self.lct);
        #[expect(
            clippy::cast_precision_loss,
            reason = "nanoseconds of a test run fit in f64"
        )]
        let xp = self.x_ns - elapsed.as_nanos() as f64;
        let limit = match priority {
            Priority::Normal => self.tau1_ns,
            Priority::High => self.tau2_ns,
        };
        if xp > limit {
            return false;
        }
        // §8.3.3: u = 0 if X' > 0, else uniform in [-1/2, 1/2]; add T + uT.
        let u = if xp <= 0.0 && self.randomise {
            rng.unit() - 0.5
        } else {
            0.0
        };
        self.x_ns = xp.max(0.0) + self.t_ns + u * self.t_ns;
        self.lct = now;
        true
    }

    /// The bucket capacity bound, TAU2 + 3/2 T (§8.3.3 characteristics).
    #[must_use]
    pub fn capacity(&self) -> Duration {
        Duration::from_nanos(
            // Saturating float to int conversion is the intent here.
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "bounded, non-negative"
            )]
            {
                (self.tau2_ns + 1.5 * self.t_ns).min(u64::MAX as f64) as u64
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rate: u32, offered_per_s: u64, secs: u64, params: &RateParams, high: bool) -> u64 {
        let start = Instant::now();
        let mut rng = Prng::new(11);
        let mut b = RateBucket::new(start, rate, params, &mut rng);
        let n = offered_per_s * secs;
        let gap = Duration::from_nanos(1_000_000_000 / offered_per_s);
        let prio = if high {
            Priority::High
        } else {
            Priority::Normal
        };
        (0..n)
            .filter(|i| b.admit(start + gap * u32::try_from(*i).unwrap(), prio, &mut rng))
            .count() as u64
    }

    #[test]
    fn admitted_rate_follows_maximum_rate() {
        // RFC 8582 §8.3.1: long-term admitted rate <= 1/T at high offered load.
        let p = RateParams::default();
        let got = run(100, 1000, 10, &p, false);
        assert!((990..=1010).contains(&got), "admitted {got}");
    }

    #[test]
    fn below_rate_everything_passes() {
        let p = RateParams::default();
        assert_eq!(run(100, 50, 10, &p, false), 500);
    }

    #[test]
    fn zero_rate_abates_everything() {
        // RFC 8582 §7.2.1: zero means no traffic is to be sent.
        let p = RateParams::default();
        assert_eq!(run(0, 100, 1, &p, true), 0);
    }

    #[test]
    fn priority_threshold_admits_high_when_normal_is_refused() {
        // RFC 8582 §8.3.2: between TAU1 and TAU2 only priority requests pass.
        let start = Instant::now();
        let mut rng = Prng::new(5);
        let p = RateParams {
            randomise_phase: false,
            ..RateParams::default()
        };
        let mut b = RateBucket::new(start, 10, &p, &mut rng);
        // A burst at one instant: normal passes while X <= 5T (6 admits).
        let normal = (0..20)
            .filter(|_| b.admit(start, Priority::Normal, &mut rng))
            .count();
        assert_eq!(normal, 6);
        let high = (0..20)
            .filter(|_| b.admit(start, Priority::High, &mut rng))
            .count();
        assert_eq!(high, 5, "high fills up to TAU2 = 10T");
        assert!(!b.admit(start, Priority::High, &mut rng));
    }

    #[test]
    fn randomised_phase_spreads_first_admission() {
        // RFC 8582 §8.3.3 with TAU0 = TAU = 0 ("classic gapping"): the initial
        // content is uT, so sources activated together start at different times.
        let p = RateParams {
            tau0: 0.0,
            tau1: 0.0,
            tau2: 0.0,
            randomise_phase: true,
        };
        let start = Instant::now();
        let mut rng = Prng::new(9);
        let firsts: Vec<u64> = (0..50)
            .map(|_| {
                let mut b = RateBucket::new(start, 10, &p, &mut rng);
                (0..200u64)
                    .find(|ms| {
                        b.admit(
                            start + Duration::from_millis(*ms),
                            Priority::Normal,
                            &mut rng,
                        )
                    })
                    .unwrap()
            })
            .collect();
        let distinct: std::collections::BTreeSet<_> = firsts.iter().collect();
        assert!(distinct.len() > 10, "first admissions {firsts:?}");
        assert!(firsts.iter().all(|ms| *ms <= 50), "within T/2: {firsts:?}");
    }
}
