//! The rate algorithm's reacting side, RFC 8582 §8.3, on the shared lock-free
//! leaky bucket of [`crate::bucket`]: configuration of TAU0, TAU1 <= TAU2
//! (§8.3.2) and the randomised phase (§8.3.3), the mapping of request
//! priorities to bucket levels, and the conversion of `Instant`s to the
//! bucket's nanosecond clock.

use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::bucket::{Bucket, BucketConfig, ConfigError, Tolerance};

/// Two request classes of RFC 8582 §8.3.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Candidate for reduction; admitted while X' <= TAU1 (bucket level 0).
    Normal,
    /// Admitted while X' <= TAU2 (bucket level 1).
    High,
}

impl Priority {
    /// The bucket level of this priority.
    #[must_use]
    pub const fn level(self) -> u8 {
        match self {
            Self::Normal => 0,
            Self::High => 1,
        }
    }
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
    /// The least TAU1 in milliseconds, whatever the rate (TAU2 keeps its
    /// ratio to TAU1). The agent stamps each batch of requests it reads
    /// with one time, and a batch at a high rate holds more than 1 + TAU1/T
    /// requests: at 5T, batches 2 ms apart admitted about 2,900/s whatever
    /// the rate above it. 0: thresholds in multiples of T only.
    pub tau1_floor_ms: f64,
}

impl Default for RateParams {
    fn default() -> Self {
        Self {
            tau0: 0.0,
            tau1: 5.0,
            tau2: 10.0,
            randomise_phase: true,
            tau1_floor_ms: 10.0,
        }
    }
}

/// Why rate parameters are unusable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RateParamsError {
    /// A tolerance is negative, not a number, or too large.
    #[error("rate tolerance {name} = {value} is not a usable multiple of T")]
    Tolerance {
        /// Which one.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// The floor of TAU1 is negative, not a number, or above a second.
    #[error("rate tau1_floor_ms = {value} is not in [0, 1000]")]
    Floor {
        /// What was given.
        value: f64,
    },
    /// The bucket rejects the combination (e.g. TAU1 > TAU2, TAU0 > TAU2).
    #[error("invalid rate bucket parameters")]
    Bucket(#[source] ConfigError),
}

/// The largest [`RateParams::tau1_floor_ms`]: a second of the rate as one
/// burst.
const MAX_FLOOR_MS: f64 = 1000.0;

impl RateParams {
    /// The bucket configuration: level 0 tests TAU1, level 1 tests TAU2.
    ///
    /// # Errors
    /// [`RateParamsError`] when a value breaks RFC 8582 §8.3 (TAU1 <= TAU2,
    /// 0 <= TAU0 <= TAU).
    pub fn bucket_config(&self) -> Result<BucketConfig, RateParamsError> {
        let tol = |name, value: f64| {
            Tolerance::from_intervals_f64(value).ok_or(RateParamsError::Tolerance { name, value })
        };
        let floor = self.tau1_floor_ms;
        if !(0.0..=MAX_FLOOR_MS).contains(&floor) {
            return Err(RateParamsError::Floor { value: floor });
        }
        let c = BucketConfig {
            thresholds: vec![tol("tau1", self.tau1)?, tol("tau2", self.tau2)?],
            tau0: tol("tau0", self.tau0)?,
            randomise: self.randomise_phase,
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "checked to lie in 0..=MAX_FLOOR_MS"
            )]
            floor_ns: (floor * 1e6).round() as u64,
        };
        c.validate().map_err(RateParamsError::Bucket)?;
        Ok(c)
    }
}

/// The rate control of one OCS: a shared bucket and the clock origin that
/// turns `Instant`s into the bucket's nanoseconds.
#[derive(Clone, Debug)]
pub struct RateControl {
    bucket: Arc<Bucket>,
    epoch: Instant,
}

fn nanos(epoch: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

impl RateControl {
    /// Activates control at `now` for OC-Maximum-Rate `per_second`
    /// (RFC 8582 §8.3.1: on the first answer indicating activation).
    #[must_use]
    pub fn new(epoch: Instant, now: Instant, per_second: u32, config: &BucketConfig) -> Self {
        // The configuration was validated when the core was built.
        let bucket = Bucket::new(nanos(epoch, now), per_second, config)
            .unwrap_or_else(|_| unreachable_config());
        Self {
            bucket: Arc::new(bucket),
            epoch,
        }
    }

    /// Applies the rate of a newer report, keeping the bucket's phase.
    pub fn set_rate(&self, now: Instant, per_second: u32) {
        self.bucket.set_rate(nanos(self.epoch, now), per_second);
    }

    /// Activates control again at `now` (RFC 8582 §8.3.1: LCT set to the
    /// time of activation, the counter to TAU0), at OC-Maximum-Rate
    /// `per_second`.
    pub fn activate(&self, now: Instant, per_second: u32) {
        let ns = nanos(self.epoch, now);
        self.bucket.set_rate(ns, per_second);
        self.bucket.activate(ns);
    }

    /// Whether a request of `priority` at `now` may be sent (RFC 8582 §8.3.2).
    #[must_use]
    pub fn admit(&self, now: Instant, priority: Priority) -> bool {
        self.bucket
            .try_admit(nanos(self.epoch, now), priority.level())
    }

    /// The shared bucket, for workers that decide in parallel.
    #[must_use]
    pub fn bucket(&self) -> &Arc<Bucket> {
        &self.bucket
    }
}

#[cold]
fn unreachable_config() -> Bucket {
    // `RateParams::bucket_config` validated the configuration; a bucket that
    // admits nothing is the safe side should that ever be violated.
    Bucket::new(0, 0, &BucketConfig::two_priorities())
        .unwrap_or_else(|_| unreachable!("the built-in two-priority configuration is valid"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn default_params_are_the_rfc_values() {
        // RFC 8582 §8.3.2: TAU0 = 0, TAU1 = TAU2 / 2, TAU2 = 10T; TAU1 at
        // least 10 ms.
        let c = RateParams::default().bucket_config().unwrap();
        assert_eq!(c, BucketConfig::two_priorities().with_floor_ns(10_000_000));
    }

    #[test]
    fn a_floor_outside_a_second_is_refused() {
        for value in [-1.0, 1000.5, f64::NAN] {
            let p = RateParams {
                tau1_floor_ms: value,
                ..RateParams::default()
            };
            assert!(
                matches!(p.bucket_config(), Err(RateParamsError::Floor { .. })),
                "{value}"
            );
        }
    }

    #[test]
    fn inverted_thresholds_are_rejected() {
        let p = RateParams {
            tau1: 10.0,
            tau2: 5.0,
            ..RateParams::default()
        };
        assert!(matches!(p.bucket_config(), Err(RateParamsError::Bucket(_))));
        let p = RateParams {
            tau0: -1.0,
            ..RateParams::default()
        };
        assert!(matches!(
            p.bucket_config(),
            Err(RateParamsError::Tolerance { name: "tau0", .. })
        ));
    }

    #[test]
    fn priority_band_between_tau1_and_tau2() {
        // RFC 8582 §8.3.2: a burst admits normal requests up to TAU1 and
        // priority requests up to TAU2.
        let cfg = RateParams {
            randomise_phase: false,
            ..RateParams::default()
        }
        .bucket_config()
        .unwrap();
        let t0 = Instant::now();
        let rc = RateControl::new(t0, t0, 10, &cfg);
        let normal = (0..20).filter(|_| rc.admit(t0, Priority::Normal)).count();
        assert_eq!(normal, 6, "1 + TAU1/T");
        let high = (0..20).filter(|_| rc.admit(t0, Priority::High)).count();
        assert_eq!(high, 5, "up to TAU2 = 10T");
        // After one interval, one more normal request.
        let t1 = t0 + Duration::from_millis(100) * 6;
        assert!(rc.admit(t1, Priority::Normal));
    }
}
