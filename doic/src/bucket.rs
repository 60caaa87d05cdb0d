//! RFC 8582 §8.3 reacting-node leaky bucket, lock-free and shared by all
//! workers: the default algorithm of §8.3.1, the priority thresholds of
//! §8.3.2 generalised to n levels, and the randomised phase of §8.3.3.
//!
//! # Representation
//!
//! The RFC keeps two variables, the counter X and the last compliance time
//! LCT, and computes `X' = X - (ta - LCT)` at each arrival `ta`. Only their
//! sum matters: with the theoretical arrival time `TAT = LCT + X`,
//!
//! ```text
//! X' = TAT - ta
//! admit   <=>  X' <= TAU_p                      (TAU_p: threshold of the request's level)
//! then    X = max(0, X') + T, LCT = ta   <=>   TAT = max(TAT, ta) + T
//! ```
//!
//! so the whole state is one `u64` of integer nanoseconds (the GCRA of
//! ITU-T I.371, on which §8.3.1 is based), updated by one compare-and-swap
//! when a request is admitted and only read when it is abated. The interval
//! T = ceil(10^9 / OC-Maximum-Rate) ns lives in a second word that a new
//! report replaces ([`Bucket::set_rate`]); the thresholds are fixed multiples
//! of T, each at least a floor in nanoseconds ([`BucketConfig::floor_ns`]),
//! stored with T, so the decision reads T, its threshold and the state and
//! nothing else.
//!
//! # Call contract
//!
//! * `now_ns` is monotonic nanoseconds (the agent's `clock::monotonic_ns`, or `clock::coarse_ns`
//!   when its tick is short enough), read by the caller once per batch of
//!   requests; the bucket reads no clock. Times must stay below 2^63 ns
//!   (292 years), as monotonic clocks do. Successive batch times should be
//!   at most [`Bucket::max_time_step_ns`] (TAU1) apart while requests keep
//!   arriving, or the admitted rate falls short of OC-Maximum-Rate; a
//!   caller whose batches come further apart than a few T at the rates it
//!   meets sets [`BucketConfig::floor_ns`].
//!   Callers on several threads may pass slightly different or even slightly
//!   older times: the bucket stays safe (never admits more than the bound of
//!   §8.3.1), it just cannot tell which arrival came "first".
//! * One bucket per controlled target (an overload control state with the
//!   rate algorithm), shared by reference (`Arc<Bucket>`) between workers.
//! * [`Bucket::try_admit`] answers true (forward) or false (apply abatement
//!   treatment). Level 0 is the lowest priority; how DRMP (RFC 7944) or
//!   configured rules map to levels is the caller's choice.

mod config;
mod rng;

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

pub use config::{BucketConfig, ConfigError, MAX_LEVELS, Tolerance};
pub use rng::seed_thread_rng;

use config::scale;

/// Nanoseconds per second.
const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The interval T = 1 / OC-Maximum-Rate in whole nanoseconds, rounded up so
/// that the admitted rate never exceeds the reported one; 0 for rate 0.
#[must_use]
pub const fn interval_ns(rate_per_s: u32) -> u64 {
    if rate_per_s == 0 {
        0
    } else {
        NANOS_PER_SEC.div_ceil(rate_per_s as u64)
    }
}

/// The theoretical arrival time on a cache line of its own: the only word
/// admissions write, so it shares its line with nothing that is only read.
#[repr(align(64))]
struct StateLine(AtomicU64);

/// One RFC 8582 §8.3 leaky bucket for one controlled target. See the
/// [module documentation](self) for the representation and call contract.
///
/// ```
/// use doic::bucket::{Bucket, BucketConfig};
///
/// // OC-Maximum-Rate 1000/s (T = 1 ms), TAU = 4T, activated at t = 0.
/// let config = BucketConfig::default().with_randomise(false);
/// let bucket = Bucket::new(0, 1000, &config).unwrap();
/// // A burst at t = 0 gets 1 + TAU/T = 5 requests through.
/// let admitted = (0..100).filter(|_| bucket.try_admit(0, 0)).count();
/// assert_eq!(admitted, 5);
/// // One interval later, exactly one more.
/// assert!(bucket.try_admit(1_000_000, 0));
/// assert!(!bucket.try_admit(1_000_000, 0));
/// ```
pub struct Bucket {
    /// TAT = LCT + X, nanoseconds on the caller's monotonic clock.
    tat: StateLine,
    /// T in nanoseconds; 0 means OC-Maximum-Rate 0 (admit nothing).
    interval: AtomicU64,
    /// The OC-Maximum-Rate T was derived from, for reporting.
    rate: AtomicU32,
    /// Thresholds per level in units of T / 65536, padded to `MAX_LEVELS`.
    multipliers: [u32; MAX_LEVELS],
    /// The least threshold per level, ns ([`BucketConfig::floor_ns`]).
    floors: [u64; MAX_LEVELS],
    /// The threshold per level at the interval in force, ns: the larger of
    /// its multiple of T and its floor. Written with T, read per decision.
    taus: [AtomicU64; MAX_LEVELS],
    /// TAU0 in units of T / 65536.
    tau0: u32,
    /// §8.3.3 randomisation on.
    randomise: bool,
}

impl Bucket {
    /// Activates control at `now_ns` with OC-Maximum-Rate `rate_per_s`
    /// (§8.3.1: "LCT is set to the time of activation, and the leaky bucket
    /// counter is initialized to the parameter TAU0"; with randomisation,
    /// §8.3.3, to TAU0 plus a uniform share of T).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when `config` breaks a rule of §8.3
    /// ([`BucketConfig::validate`]).
    pub fn new(now_ns: u64, rate_per_s: u32, config: &BucketConfig) -> Result<Bucket, ConfigError> {
        config.validate()?;
        let bucket = Bucket {
            tat: StateLine(AtomicU64::new(now_ns)),
            interval: AtomicU64::new(interval_ns(rate_per_s)),
            rate: AtomicU32::new(rate_per_s),
            multipliers: config.multipliers(),
            floors: config.floors(),
            taus: std::array::from_fn(|_| AtomicU64::new(0)),
            tau0: config.tau0.raw(),
            randomise: config.randomise,
        };
        bucket.store_taus(interval_ns(rate_per_s));
        bucket.activate(now_ns);
        Ok(bucket)
    }

    /// Decides one request of priority `level` arriving at `now_ns`: true to
    /// forward it, false to apply abatement treatment. A `level` above the
    /// configured ones counts as the highest.
    ///
    /// Lock-free: one read of T, one read of the state and, only when the
    /// request is admitted, one compare-and-swap (retried if another worker
    /// admitted a request in between). No clock read, no allocation, no
    /// floating point.
    #[inline]
    #[must_use]
    pub fn try_admit(&self, now_ns: u64, level: u8) -> bool {
        let t = self.interval.load(Relaxed);
        if t == 0 {
            // §8.3.1: OC-Maximum-Rate 0 means abatement for 100% of requests.
            return false;
        }
        let index = usize::from(level).min(MAX_LEVELS - 1);
        // Thresholds are at most 65536 T < 2^46 ns (or a floor, clamped to
        // i64::MAX when stored), so the cast is lossless.
        #[expect(clippy::cast_possible_wrap, reason = "at most i64::MAX, see above")]
        let tau = self.taus[index].load(Relaxed) as i64;
        // Relaxed suffices: the bucket publishes no other data, and
        // read-modify-writes of one atomic are totally ordered.
        let mut tat = self.tat.0.load(Relaxed);
        loop {
            // Xp = X - (ta - LCT)
            #[expect(clippy::cast_possible_wrap, reason = "signed difference of two times")]
            let x = tat.wrapping_sub(now_ns) as i64;
            // §8.3.2: if (AnyRequestReceived && Xp <= TAU1) || (PriorityRequestReceived
            //         && Xp <= TAU2 && Xp > TAU1)  -- generalised: Xp <= TAU_level
            if x > tau {
                // Reject Diameter request; do not update X and LCT.
                return false;
            }
            // X = max(0, Xp) + T; LCT = ta  <=>  TAT = max(TAT, ta) + T,
            // with the increment T + uT of §8.3.3 when the bucket had emptied.
            // The draw is read ahead and taken only once the admission is
            // written, so a lost compare-and-swap does not use one up.
            let drawn = x <= 0 && self.randomise;
            let next = if x > 0 {
                tat.wrapping_add(t)
            } else if drawn {
                now_ns.wrapping_add(rng::peek_jittered(t))
            } else {
                now_ns.wrapping_add(t)
            };
            match self
                .tat
                .0
                .compare_exchange_weak(tat, next, Relaxed, Relaxed)
            {
                Ok(_) => {
                    if drawn {
                        rng::take();
                    }
                    return true;
                }
                Err(current) => tat = current,
            }
        }
    }

    /// Applies the OC-Maximum-Rate of a newer report from the next decision on,
    /// without a lock and without losing the bucket's phase: the content X
    /// (and so the time of the next admission) is kept, and only clipped to
    /// the new capacity TAU + T (§8.3.1: "the capacity of the bucket ... is
    /// (T + TAU)"; TAU + 3T/2 with randomisation, §8.3.3) so that a higher
    /// rate is not held back by content accumulated under a lower one.
    /// Rate 0 abates every request until a positive rate arrives.
    ///
    /// The clip is measured from `now_ns`, so `now_ns` should be the clock the
    /// workers read, not older than their latest decision: a `now_ns` that is
    /// late by `d` nanoseconds can give back at most `d / T + 1` admissions,
    /// once per call. A later `now_ns` only makes the clip milder.
    pub fn set_rate(&self, now_ns: u64, rate_per_s: u32) {
        let t = interval_ns(rate_per_s);
        self.rate.store(rate_per_s, Relaxed);
        // The thresholds, then T: a decision between the two stores pairs
        // the new thresholds with the old T, a difference of one decision.
        self.store_taus(t);
        self.interval.store(t, Relaxed);
        if t != 0 {
            self.tat
                .0
                .fetch_min(now_ns.saturating_add(self.capacity_for(t)), Relaxed);
        }
    }

    /// Re-activates control at `now_ns` (a new overload report after the
    /// previous one expired): the content is set to TAU0 as at activation,
    /// randomised by §8.3.3 if configured. Not needed for a mere rate change.
    ///
    /// §8.3.3 reads "initialize it to TAU0 + uT" and promises that with
    /// TAU0 = TAU "the time until the first request admitted by each reacting
    /// node would be uniformly distributed over \[0,T\]"; the literal formula
    /// (u in [-1/2, +1/2]) would admit half of all buckets at once, so this
    /// implements the stated property: X = TAU0 + vT with v uniform in [0, 1).
    pub fn activate(&self, now_ns: u64) {
        let t = self.interval.load(Relaxed);
        let mut x0 = scale(t, self.tau0);
        if self.randomise {
            x0 += rng::uniform_below(t);
        }
        self.tat.0.store(now_ns.saturating_add(x0), Relaxed);
    }

    /// The content of the bucket at `now_ns`, max(0, X'), in nanoseconds.
    #[must_use]
    pub fn content_ns(&self, now_ns: u64) -> u64 {
        self.tat.0.load(Relaxed).saturating_sub(now_ns)
    }

    /// The OC-Maximum-Rate in force (requests per second).
    #[must_use]
    pub fn rate(&self) -> u32 {
        self.rate.load(Relaxed)
    }

    /// The interval T in force, in nanoseconds (0 for rate 0).
    #[must_use]
    pub fn interval(&self) -> u64 {
        self.interval.load(Relaxed)
    }

    /// The threshold of priority `level` for the interval in force, in ns.
    #[must_use]
    pub fn threshold_ns(&self, level: u8) -> u64 {
        self.threshold_for(self.interval(), usize::from(level).min(MAX_LEVELS - 1))
    }

    /// Level `index`'s threshold at interval `t`: its multiple of T, at
    /// least its floor.
    fn threshold_for(&self, t: u64, index: usize) -> u64 {
        scale(t, self.multipliers[index]).max(self.floors[index])
    }

    fn store_taus(&self, t: u64) {
        for (index, tau) in self.taus.iter().enumerate() {
            tau.store(self.threshold_for(t, index).min(i64::MAX as u64), Relaxed);
        }
    }

    /// The largest step by which the caller's `now` may advance between
    /// batches without costing admitted rate: the lowest threshold TAU1 at
    /// the interval in force. Requests of one batch share one arrival time;
    /// after a step longer than TAU the bucket has emptied and the time
    /// beyond is lost to the long-run rate (with TAU = 4T and a 4 ms clock
    /// tick that caps a bucket at 1250/s). Compare with
    /// the agent's `clock::coarse_resolution_ns` to decide whether
    /// `clock::coarse_ns` will do; otherwise read `clock::monotonic_ns` once
    /// per batch.
    #[must_use]
    pub fn max_time_step_ns(&self) -> u64 {
        self.threshold_for(self.interval(), 0)
    }

    /// The largest content an admission can leave at the interval in
    /// force: TAU + T, plus T/2 with randomisation (§8.3.3: "The maximum
    /// occupancy is TAU + (3/2)T").
    #[must_use]
    pub fn capacity_ns(&self) -> u64 {
        self.capacity_for(self.interval())
    }

    fn capacity_for(&self, t: u64) -> u64 {
        let tau = self.threshold_for(t, MAX_LEVELS - 1);
        tau.saturating_add(t + if self.randomise { t / 2 } else { 0 })
    }
}

impl fmt::Debug for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bucket")
            .field("tat", &self.tat.0.load(Relaxed))
            .field("rate", &self.rate())
            .field("interval", &self.interval())
            .field("randomise", &self.randomise)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
