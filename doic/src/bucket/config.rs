//! Parameters of the RFC 8582 §8.3 leaky bucket: the tolerances TAU
//! (§8.3.1), the priority thresholds TAU1 < TAU2 < ... (§8.3.2), the initial
//! content TAU0 (§8.3.1) and the randomised phase (§8.3.3).
//!
//! Every tolerance is a multiple of the interval T = 1 / OC-Maximum-Rate, as
//! the RFC's recommended values are (TAU = 4T, TAU2 = 10T, TAU1 = TAU2 / 2,
//! TAU0 = 0). A report that changes the rate then scales all thresholds with
//! it, and the decision needs to read only one changing number, T.

use std::fmt;

use thiserror::Error;

/// The most priority levels a bucket distinguishes: one threshold per level.
///
/// Sixteen covers the sixteen DRMP priorities of RFC 7944.
pub const MAX_LEVELS: usize = 16;

/// Fixed-point shift of [`Tolerance`]: multiples of T in units of 2^-16 T.
pub(crate) const FRACTION_BITS: u32 = 16;

/// A tolerance expressed as a multiple of the interval T = 1 / OC-Maximum-Rate
/// (RFC 8582 §8.3.1: "TAU can assume any positive real number value and is
/// not necessarily bounded by T").
///
/// Stored in fixed point with 16 fractional bits, so any multiple from 0 to
/// just under 65536 T is representable to within T / 65536.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tolerance(u32);

impl Tolerance {
    /// No tolerance (RFC 8582 §8.3.3 "classic gapping" when used as TAU).
    pub const ZERO: Tolerance = Tolerance(0);

    /// `n` whole intervals, n·T.
    ///
    /// # Panics
    ///
    /// Panics if `n` is 65536 or more (the multiple would not fit); use
    /// [`Tolerance::from_ratio`] for a fallible constructor.
    #[must_use]
    pub const fn intervals(n: u16) -> Tolerance {
        Tolerance((n as u32) << FRACTION_BITS)
    }

    /// `num / den` intervals, rounded down to a multiple of T / 65536; `None`
    /// when `den` is zero or the multiple is 65536 T or more.
    #[must_use]
    pub fn from_ratio(num: u32, den: u32) -> Option<Tolerance> {
        if den == 0 {
            return None;
        }
        let q = (u64::from(num) << FRACTION_BITS) / u64::from(den);
        u32::try_from(q).ok().map(Tolerance)
    }

    /// A real multiple of T, as a configuration file gives it; `None` when it
    /// is negative, not a number, or 65536 T or more. Only for configuration:
    /// the decision itself uses no floating point.
    #[must_use]
    pub fn from_intervals_f64(multiple: f64) -> Option<Tolerance> {
        let q = (multiple * f64::from(1u32 << FRACTION_BITS)).floor();
        if !(0.0..=f64::from(u32::MAX)).contains(&q) {
            return None;
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "q is a whole number checked to lie in 0..=u32::MAX"
        )]
        Some(Tolerance(q as u32))
    }

    /// The tolerance as a multiple of T, for display and configuration dumps.
    #[must_use]
    pub fn as_intervals_f64(self) -> f64 {
        f64::from(self.0) / f64::from(1u32 << FRACTION_BITS)
    }

    /// The tolerance in nanoseconds for an interval of `t_ns` nanoseconds
    /// (saturating at `u64::MAX` for intervals no rate produces).
    #[must_use]
    pub const fn nanos(self, t_ns: u64) -> u64 {
        t_ns.saturating_mul(self.0 as u64) >> FRACTION_BITS
    }

    /// The raw fixed-point multiplier (units of T / 65536).
    pub(crate) const fn raw(self) -> u32 {
        self.0
    }
}

/// `t · q / 2^16`, exact for every interval a `u32` rate yields: T <= 10^9
/// ns < 2^30 and q < 2^32, so the product stays below 2^62 (callers never
/// pass a larger `t`; the multiplication wraps rather than checks, as it is
/// on every decision).
#[inline(always)]
pub(crate) const fn scale(t_ns: u64, q: u32) -> u64 {
    t_ns.wrapping_mul(q as u64) >> FRACTION_BITS
}

impl fmt::Debug for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}T", self.as_intervals_f64())
    }
}

/// Parameters of one leaky bucket (RFC 8582 §8.3).
///
/// `thresholds[p]` is the limit a request of priority level `p` is tested
/// against: it is admitted when the provisional content X' is at or below
/// it. Level 0 is the lowest priority (abated first); a level above the last
/// is treated as the last. One threshold is the plain algorithm of §8.3.1
/// (TAU); two are TAU1 and TAU2 of §8.3.2; more generalise it to n levels
/// ("This can be generalized to n priorities using n thresholds").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketConfig {
    /// Admission thresholds, lowest priority first, non-decreasing
    /// (§8.3.2: "always set TAU1 <= TAU2"); 1 to [`MAX_LEVELS`] entries.
    pub thresholds: Vec<Tolerance>,
    /// Initial content of the bucket at activation, TAU0 (§8.3.1: "0 or
    /// larger but less than or equal to TAU"; here at most the last threshold).
    pub tau0: Tolerance,
    /// Randomise the bucket phase at activation and whenever the bucket
    /// empties (§8.3.3, avoidance of resonance).
    pub randomise: bool,
    /// The least the lowest threshold may be, in nanoseconds, whatever the
    /// rate (0: none, the thresholds are multiples of T alone). The higher
    /// thresholds keep their ratio to it. A caller that stamps a batch of
    /// requests with one time needs TAU1 at least the time between its
    /// batches ([`crate::bucket::Bucket::max_time_step_ns`]); at a high rate
    /// a few T are shorter than that, and the bucket would admit about
    /// `1 + TAU1/T` per batch, whatever the rate.
    pub floor_ns: u64,
}

impl BucketConfig {
    /// §8.3.1 without priorities: one tolerance `tau`, TAU0 = 0, randomised.
    #[must_use]
    pub fn single(tau: Tolerance) -> BucketConfig {
        BucketConfig {
            thresholds: vec![tau],
            tau0: Tolerance::ZERO,
            randomise: true,
            floor_ns: 0,
        }
    }

    /// §8.3.2 with the RFC's reasonable values: TAU2 = 10T, TAU1 = TAU2 / 2,
    /// TAU0 = 0, randomised. Level 0 is non-priority, level 1 priority.
    #[must_use]
    pub fn two_priorities() -> BucketConfig {
        BucketConfig {
            thresholds: vec![Tolerance::intervals(5), Tolerance::intervals(10)],
            tau0: Tolerance::ZERO,
            randomise: true,
            floor_ns: 0,
        }
    }

    /// The same configuration with randomisation switched on or off.
    #[must_use]
    pub fn with_randomise(mut self, randomise: bool) -> BucketConfig {
        self.randomise = randomise;
        self
    }

    /// The same configuration with the lowest threshold at least `floor_ns`
    /// nanoseconds ([`BucketConfig::floor_ns`]).
    #[must_use]
    pub fn with_floor_ns(mut self, floor_ns: u64) -> BucketConfig {
        self.floor_ns = floor_ns;
        self
    }

    /// The same configuration with another TAU0.
    #[must_use]
    pub fn with_tau0(mut self, tau0: Tolerance) -> BucketConfig {
        self.tau0 = tau0;
        self
    }

    /// The highest threshold (TAU, or TAUn with n priority levels).
    #[must_use]
    pub fn max_threshold(&self) -> Tolerance {
        self.thresholds.last().copied().unwrap_or(Tolerance::ZERO)
    }

    /// Checks the configuration against RFC 8582 §8.3.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when there is no threshold or more than
    /// [`MAX_LEVELS`], when the thresholds decrease, or when TAU0 exceeds the
    /// highest threshold.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let levels = self.thresholds.len();
        if levels == 0 {
            return Err(ConfigError::NoThreshold);
        }
        if levels > MAX_LEVELS {
            return Err(ConfigError::TooManyLevels { levels });
        }
        if let Some(level) = self.thresholds.windows(2).position(|w| w[0] > w[1]) {
            return Err(ConfigError::Decreasing {
                level: level + 1,
                below: self.thresholds[level],
                above: self.thresholds[level + 1],
            });
        }
        if self.tau0 > self.max_threshold() {
            return Err(ConfigError::Tau0AboveTau {
                tau0: self.tau0,
                tau: self.max_threshold(),
            });
        }
        Ok(())
    }

    /// The thresholds as fixed-point multipliers, padded to [`MAX_LEVELS`]
    /// with the last one so that any level indexes without a bounds check.
    pub(crate) fn multipliers(&self) -> [u32; MAX_LEVELS] {
        let last = self.max_threshold().raw();
        let mut m = [last; MAX_LEVELS];
        for (slot, t) in m.iter_mut().zip(&self.thresholds) {
            *slot = t.raw();
        }
        m
    }

    /// The least each level's threshold may be, in ns: [`Self::floor_ns`]
    /// for the lowest, in proportion to it for the others (TAU2 / TAU1
    /// kept, §8.3.2).
    pub(crate) fn floors(&self) -> [u64; MAX_LEVELS] {
        let m = self.multipliers();
        let base = u128::from(m[0]);
        m.map(|q| {
            (u128::from(self.floor_ns) * u128::from(q))
                .checked_div(base)
                .map_or(self.floor_ns, |f| u64::try_from(f).unwrap_or(u64::MAX))
        })
    }
}

impl Default for BucketConfig {
    /// RFC 8582 §8.3.1 defaults: TAU = 4T, TAU0 = 0, randomised (§8.3.3).
    fn default() -> BucketConfig {
        BucketConfig::single(Tolerance::intervals(4))
    }
}

/// A [`BucketConfig`] that RFC 8582 §8.3 does not allow.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The bucket needs at least one threshold (TAU).
    #[error("a leaky bucket needs at least one threshold")]
    NoThreshold,
    /// More thresholds than [`MAX_LEVELS`].
    #[error("{levels} priority thresholds, at most {MAX_LEVELS} are supported")]
    TooManyLevels {
        /// How many thresholds were given.
        levels: usize,
    },
    /// A threshold is below the one of the level under it (§8.3.2: TAU1 <= TAU2).
    #[error("threshold of level {level} ({above:?}) is below the one of level {} ({below:?})", level - 1)]
    Decreasing {
        /// The level whose threshold is too low.
        level: usize,
        /// The threshold of the level below it.
        below: Tolerance,
        /// Its own threshold.
        above: Tolerance,
    },
    /// TAU0 exceeds the highest threshold (§8.3.1: TAU0 <= TAU).
    #[error("initial content TAU0 ({tau0:?}) exceeds the tolerance TAU ({tau:?})")]
    Tau0AboveTau {
        /// The configured TAU0.
        tau0: Tolerance,
        /// The highest threshold.
        tau: Tolerance,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_defaults() {
        let c = BucketConfig::default();
        assert_eq!(c.thresholds, vec![Tolerance::intervals(4)]);
        assert_eq!(c.tau0, Tolerance::ZERO);
        assert!(c.validate().is_ok());
        // §8.3.2: TAU1 = 1/2 TAU2, TAU2 = 10T.
        let p = BucketConfig::two_priorities();
        assert_eq!(p.thresholds[1], Tolerance::intervals(10));
        assert_eq!(p.thresholds[0].raw() * 2, p.thresholds[1].raw());
        assert!(p.validate().is_ok());
    }

    #[test]
    fn tolerance_arithmetic() {
        assert_eq!(Tolerance::intervals(4).nanos(1_000), 4_000);
        assert_eq!(Tolerance::from_ratio(1, 2).unwrap().nanos(1_000), 500);
        assert_eq!(Tolerance::from_ratio(1, 0), None);
        assert_eq!(Tolerance::from_ratio(u32::MAX, 1), None);
        assert_eq!(
            Tolerance::from_intervals_f64(2.5).unwrap().nanos(1_000),
            2_500
        );
        assert_eq!(Tolerance::from_intervals_f64(-0.5), None);
        assert_eq!(Tolerance::from_intervals_f64(f64::NAN), None);
        assert_eq!(Tolerance::from_intervals_f64(70_000.0), None);
        // The largest interval a u32 rate gives (1 s) times the largest multiple.
        assert_eq!(
            Tolerance::intervals(u16::MAX).nanos(1_000_000_000),
            65_535 * 1_000_000_000
        );
    }

    #[test]
    fn invalid_configs_are_named() {
        let mut c = BucketConfig::two_priorities();
        c.thresholds.clear();
        assert_eq!(c.validate(), Err(ConfigError::NoThreshold));
        c.thresholds = vec![Tolerance::intervals(1); MAX_LEVELS + 1];
        assert_eq!(c.validate(), Err(ConfigError::TooManyLevels { levels: 17 }));
        c.thresholds = vec![Tolerance::intervals(10), Tolerance::intervals(5)];
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Decreasing { level: 1, .. })
        ));
        let c = BucketConfig::default().with_tau0(Tolerance::intervals(5));
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Tau0AboveTau { .. })
        ));
        // TAU0 = TAU is allowed (§8.3.3 uses it).
        let c = BucketConfig::default().with_tau0(Tolerance::intervals(4));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn multipliers_pad_with_the_last_level() {
        let m = BucketConfig::two_priorities().multipliers();
        assert_eq!(m[0], 5 << FRACTION_BITS);
        assert!(m[1..].iter().all(|&q| q == 10 << FRACTION_BITS));
    }
}
