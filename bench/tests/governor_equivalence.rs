//! The RFC 8582 §8.3.1 bucket without priorities or randomisation is the
//! GCRA of ITU-T I.371 that governor also implements: with the same interval
//! T and tolerance TAU = (burst - 1)·T, both must decide every arrival the
//! same way. An independent implementation as the oracle for the one-word
//! representation (and a check that the benchmark compares like with like).

use std::num::NonZeroU32;
use std::time::Duration;

use doic::bucket::{Bucket, BucketConfig, Tolerance};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use proptest::prelude::*;

/// Rates whose interval is a whole number of nanoseconds, so that
/// governor's rounding (down) and the bucket's (up) agree.
fn rate() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![1u32, 2, 5, 10, 50, 125, 1000, 4000, 20_000, 1_000_000])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn same_decisions_as_governor(
        rate in rate(),
        burst in 1u16..20,
        // Gaps as fractions of T (in 1/8 T) so arrivals hit the boundaries.
        gaps in prop::collection::vec(0u64..24, 1..500),
    ) {
        let t = 1_000_000_000 / u64::from(rate);
        let config = BucketConfig::single(Tolerance::intervals(burst - 1)).with_randomise(false);
        let bucket = Bucket::new(0, rate, &config).unwrap();
        let clock = FakeRelativeClock::default();
        let quota = Quota::per_second(NonZeroU32::new(rate).unwrap())
            .allow_burst(NonZeroU32::new(u32::from(burst)).unwrap());
        let limiter = RateLimiter::direct_with_clock(quota, clock.clone());
        let mut now = 0;
        for (k, eighths) in gaps.into_iter().enumerate() {
            let gap = eighths * t / 8;
            now += gap;
            clock.advance(Duration::from_nanos(gap));
            let ours = bucket.try_admit(now, 0);
            let theirs = limiter.check().is_ok();
            prop_assert_eq!(ours, theirs, "arrival {} at {} ns", k, now);
        }
    }
}
