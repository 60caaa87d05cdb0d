//! Tests of the RFC 8582 §8.3 leaky bucket against the RFC text: the
//! pseudo-code of §8.3.1/§8.3.2 transcribed literally as a model, the burst
//! bound, the long-run rate, priority shares and the §8.3.3 phase spread.
//! Time is simulated: every `now` is an argument.

use proptest::prelude::*;

use super::*;

const SEC: u64 = 1_000_000_000;

/// The RFC 8582 §8.3.2 reference algorithm as printed (X and LCT kept
/// separately, signed), generalised to n thresholds, with the §8.3.3
/// increment drawn from the same per-thread generator as the bucket.
struct RfcModel {
    x: i64,
    lct: i64,
    t: i64,
    config: BucketConfig,
}

#[expect(clippy::cast_possible_wrap, reason = "simulated times are small")]
impl RfcModel {
    fn new(now: u64, rate: u32, config: &BucketConfig) -> RfcModel {
        let t = interval_ns(rate);
        // §8.3.1: "LCT is set to the time of activation, and the leaky
        // bucket counter is initialized to the parameter TAU0" (+ vT, §8.3.3).
        let mut x = config.tau0.nanos(t);
        if config.randomise {
            x += rng::uniform_below(t);
        }
        RfcModel {
            x: x as i64,
            lct: now as i64,
            t: t as i64,
            config: config.clone(),
        }
    }

    fn arrive(&mut self, ta: u64, level: u8) -> bool {
        if self.t == 0 {
            return false;
        }
        let ta = ta as i64;
        let level = usize::from(level).min(self.config.thresholds.len() - 1);
        let tau = self.config.thresholds[level].nanos(self.t as u64) as i64;
        // Xp = X - (ta - LCT);
        let xp = self.x - (ta - self.lct);
        if xp <= tau {
            // §8.3.3: if X' > 0, then u=0; else u uniform in [-1/2, +1/2].
            let increment = if xp <= 0 && self.config.randomise {
                rng::jittered(self.t as u64) as i64
            } else {
                self.t
            };
            // X = max (0, Xp) + T; LCT = ta;
            self.x = xp.max(0) + increment;
            self.lct = ta;
            true
        } else {
            false
        }
    }

    fn set_rate(&mut self, now: u64, rate: u32) {
        self.t = interval_ns(rate) as i64;
        if self.t == 0 {
            return;
        }
        let t = self.t as u64;
        let cap = self.config.max_threshold().nanos(t)
            + t
            + if self.config.randomise { t / 2 } else { 0 };
        let overflow = self.lct + self.x - (now as i64 + cap as i64);
        if overflow > 0 {
            self.x -= overflow;
        }
    }
}

/// A small deterministic generator for simulated arrival times.
struct Arrivals(u64);

impl Arrivals {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n].
    fn upto(&mut self, n: u64) -> u64 {
        self.next() % (n + 1)
    }
}

fn no_random(config: BucketConfig) -> BucketConfig {
    config.with_randomise(false)
}

#[test]
fn rfc_8_3_1_worked_sequence() {
    // OC-Maximum-Rate 1000/s: T = 1 ms; TAU = 4T; TAU0 = 0.
    let ms = 1_000_000;
    let b = Bucket::new(0, 1000, &no_random(BucketConfig::default())).unwrap();
    assert_eq!(b.interval(), ms);
    assert_eq!(b.threshold_ns(0), 4 * ms);
    // X = 0 at activation: five admissions at t = 0 take X to 5T; the
    // sixth sees X' = 5T > TAU.
    for k in 1..=5 {
        assert!(b.try_admit(0, 0), "admission {k}");
        assert_eq!(b.content_ns(0), k * ms);
    }
    assert!(!b.try_admit(0, 0));
    // An abated request leaves X and LCT unchanged.
    assert_eq!(b.content_ns(0), 5 * ms);
    // At 0.5T, X' = 4.5T > TAU: abated.
    assert!(!b.try_admit(ms / 2, 0));
    // At T, X' = 4T <= TAU: admitted, X = 5T again, LCT = T.
    assert!(b.try_admit(ms, 0));
    assert_eq!(b.content_ns(ms), 5 * ms);
    // After a long silence X' < 0: X = max(0, X') + T = T.
    assert!(b.try_admit(100 * ms, 0));
    assert_eq!(b.content_ns(100 * ms), ms);
}

#[test]
fn rfc_8_3_2_two_thresholds() {
    // T = 1 ms, TAU1 = 5T, TAU2 = 10T.
    let ms = 1_000_000;
    let b = Bucket::new(0, 1000, &no_random(BucketConfig::two_priorities())).unwrap();
    // "All new requests would be admitted when the leaky bucket counter is
    // at or below TAU1": six non-priority admissions (X' = 0..5T).
    let low = (0..20).filter(|_| b.try_admit(0, 0)).count();
    assert_eq!(low, 6);
    // "Only higher priority requests would be admitted when the leaky
    // bucket counter is between TAU1 and TAU2": five more (X' = 6T..10T).
    let high = (0..20).filter(|_| b.try_admit(0, 1)).count();
    assert_eq!(high, 5);
    // "All requests would be rejected when the bucket counter is above TAU2."
    assert!(!b.try_admit(0, 1));
    assert!(!b.try_admit(0, 0));
    // Levels above the configured ones count as the highest.
    assert!(!b.try_admit(0, 200));
    assert!(b.try_admit(ms, 7));
}

#[test]
fn rate_zero_admits_nothing_until_a_positive_rate() {
    let b = Bucket::new(0, 0, &BucketConfig::two_priorities()).unwrap();
    for k in 0..1000u64 {
        assert!(!b.try_admit(k * SEC / 10, u8::try_from(k % 3).unwrap()));
    }
    b.set_rate(100 * SEC, 10);
    assert!(b.try_admit(100 * SEC, 0));
    b.set_rate(100 * SEC, 0);
    assert!(!b.try_admit(200 * SEC, 255));
}

#[test]
fn new_rate_applies_to_the_next_decision_and_keeps_the_phase() {
    let ms = 1_000_000;
    let config = no_random(BucketConfig::single(Tolerance::ZERO));
    // Classic gapping at 1000/s: one admission per ms.
    let b = Bucket::new(0, 1000, &config).unwrap();
    assert!(b.try_admit(0, 0));
    assert!(!b.try_admit(ms / 2, 0));
    // Same rate again: nothing changes, the next admission is still at T.
    b.set_rate(ms / 2, 1000);
    assert!(!b.try_admit(ms - 1, 0));
    assert!(b.try_admit(ms, 0));
    // Lower rate (T = 10 ms): the content already accumulated stays, the
    // next increment is the new T.
    b.set_rate(ms + 1, 100);
    assert!(!b.try_admit(2 * ms - 1, 0));
    assert!(b.try_admit(2 * ms, 0));
    assert!(!b.try_admit(12 * ms - 1, 0));
    assert!(b.try_admit(12 * ms, 0));
    // Higher rate (T = 0.1 ms): the content of 10 ms is clipped to the new
    // capacity TAU + T = 0.1 ms, so admission resumes within 0.1 ms.
    b.set_rate(12 * ms + 1, 10_000);
    assert!(b.content_ns(12 * ms + 1) <= ms / 10);
    assert!(b.try_admit(12 * ms + 1 + ms / 10, 0));
}

/// Admissions in 10 s at 10x the rate when `now` only moves in steps of
/// `step` ns (a clock read once per batch, or a coarse clock).
fn admitted_with_clock_step(rate: u32, step: u64) -> u64 {
    let bucket = Bucket::new(0, rate, &no_random(BucketConfig::default())).unwrap();
    let gap = interval_ns(rate) / 10;
    let mut arrivals = Arrivals(5);
    let (mut t, mut n) = (0, 0);
    while t < 10 * SEC {
        let now = t - t % step;
        n += u64::from(bucket.try_admit(now, 0));
        t += arrivals.upto(2 * gap).max(1);
    }
    n
}

#[test]
fn clock_steps_up_to_tau_keep_the_rate_and_longer_ones_lose_it() {
    // T = 100 us, TAU = 400 us.
    let rate = 10_000;
    let b = Bucket::new(0, rate, &BucketConfig::default()).unwrap();
    assert_eq!(b.max_time_step_ns(), 400_000);
    for step in [1, 10_000, 100_000, 400_000] {
        let n = admitted_with_clock_step(rate, step);
        assert!(within(n, 100_000, 1), "step {step} ns: {n}");
    }
    // A 4 ms tick: the bucket empties every tick and admits TAU/T + 1 = 5
    // per tick, 1250/s instead of 10000/s.
    let n = admitted_with_clock_step(rate, 4_000_000);
    assert!(within(n, 12_500, 1), "4 ms ticks: {n}");
}

#[test]
fn config_errors_reach_the_constructor() {
    let mut config = BucketConfig::default();
    config.thresholds.clear();
    assert_eq!(
        Bucket::new(0, 10, &config).err(),
        Some(ConfigError::NoThreshold)
    );
}

/// The critical value of the one-sample Kolmogorov-Smirnov statistic at
/// significance 0.001 (asymptotic: sqrt(-ln(0.0005) / 2) / sqrt(n)).
fn ks_critical_001(n: usize) -> f64 {
    1.949 / (n as f64).sqrt()
}

/// Largest distance between the empirical distribution of `samples` (in
/// units of T, sorted) and the uniform distribution on [0, 1].
fn ks_uniform(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len() as f64;
    samples
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let x = x.clamp(0.0, 1.0);
            (x - i as f64 / n).abs().max(((i + 1) as f64 / n - x).abs())
        })
        .fold(0.0, f64::max)
}

/// Times (in units of T) from a common activation to the first admission
/// of `n` buckets under a request every T/1000.
fn first_admissions(n: usize, config: &BucketConfig, seed: u64) -> Vec<f64> {
    seed_thread_rng(seed);
    let rate = 1000;
    let t = interval_ns(rate);
    let step = t / 1000;
    (0..n)
        .map(|_| {
            let b = Bucket::new(0, rate, config).unwrap();
            let k = (0..=2000u64)
                .find(|k| b.try_admit(k * step, 0))
                .expect("a bucket admits within 2T");
            (k * step) as f64 / t as f64
        })
        .collect()
}

#[test]
fn rfc_8_3_3_first_admissions_spread_uniformly_over_t() {
    // "If TAU0 is chosen to be equal to TAU and all sources activate control
    // at the same time due to an extremely high request rate, then the time
    // until the first request admitted by each reacting node would be
    // uniformly distributed over [0,T]".
    let tau = Tolerance::intervals(4);
    let config = BucketConfig::single(tau).with_tau0(tau);
    let n = 2000;
    for seed in [1, 2, 3] {
        let mut firsts = first_admissions(n, &config, seed);
        let d = ks_uniform(&mut firsts);
        assert!(
            d < ks_critical_001(n),
            "seed {seed}: KS distance {d:.4} from uniform[0,T] (critical {:.4})",
            ks_critical_001(n)
        );
    }
    // Without randomisation every bucket admits at the same instant: the
    // lockstep the enhancement exists to avoid, and what the test detects.
    let mut lockstep = first_admissions(n, &config.clone().with_randomise(false), 1);
    assert!(lockstep.iter().all(|&f| f == lockstep[0]));
    assert!(ks_uniform(&mut lockstep) > 0.99);
}

#[test]
fn rfc_8_3_3_gapping_interval_is_uniform_between_half_and_three_halves_t() {
    // "For the special case of "classic gapping", where TAU=0, then the
    // minimum time between admissions is uniformly distributed over
    // [T/2, 3T/2]".
    seed_thread_rng(11);
    let rate = 1000;
    let t = interval_ns(rate);
    let step = t / 1000;
    let b = Bucket::new(0, rate, &BucketConfig::single(Tolerance::ZERO)).unwrap();
    let mut last = None;
    let mut gaps = Vec::new();
    let mut now = 0;
    while gaps.len() < 2000 {
        if b.try_admit(now, 0) {
            if let Some(prev) = last {
                gaps.push((now - prev) as f64 / t as f64 - 0.5);
            }
            last = Some(now);
        }
        now += step;
    }
    let d = ks_uniform(&mut gaps);
    assert!(d < ks_critical_001(2000), "KS distance {d:.4}");
}

/// Strategy for a valid configuration with 1 to 4 levels whose thresholds
/// are at least `min_q` (in units of T / 65536) and below 12T.
fn config_strategy(min_q: u32) -> impl Strategy<Value = BucketConfig> {
    (
        // Whole multiples of T half of the time, so that the content lands
        // exactly on a threshold (the "<=" of the pseudo-code).
        prop::collection::vec(
            prop_oneof![min_q..(12 << 16), ((min_q >> 16)..12).prop_map(|k| k << 16)],
            1..=4,
        ),
        0u32..=(1 << 16),
        any::<bool>(),
    )
        .prop_map(|(mut raw, tau0_share, randomise)| {
            raw.sort_unstable();
            let thresholds: Vec<Tolerance> = raw
                .iter()
                .map(|&q| Tolerance::from_ratio(q, 1 << 16).unwrap())
                .collect();
            let max = u64::from(raw[raw.len() - 1]);
            let tau0 = u32::try_from((max * u64::from(tau0_share)) >> 16).unwrap();
            BucketConfig {
                thresholds,
                tau0: Tolerance::from_ratio(tau0, 1 << 16).unwrap(),
                randomise,
                floor_ns: 0,
            }
        })
}

/// One simulated event: an arrival (gap in ns, level) or a new rate.
#[derive(Clone, Debug)]
enum Event {
    Arrival { gap: u64, level: u8 },
    Rate(u32),
}

/// Rates whose interval is a whole number of 125 us half of the time.
fn rate_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        1u32..10_000,
        prop::sample::select(vec![1u32, 8, 125, 500, 1000, 2000, 4000, 8000]),
    ]
}

/// Gaps between arrivals: arbitrary, or whole multiples of 125 us so that
/// arrivals fall exactly on the times the bucket drains to a threshold.
fn gap_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..5_000_000, (0u64..40).prop_map(|k| k * 125_000)]
}

fn events_strategy() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(
        prop_oneof![
            20 => (gap_strategy(), 0u8..6).prop_map(|(gap, level)| Event::Arrival { gap, level }),
            1 => rate_strategy().prop_map(Event::Rate),
        ],
        1..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The one-word representation (TAT = LCT + X) decides exactly as the
    /// printed pseudo-code, for every configuration, arrival pattern,
    /// priority mix and rate change.
    #[test]
    fn decides_exactly_as_the_rfc_pseudocode(
        config in config_strategy(0),
        rate in rate_strategy(),
        events in events_strategy(),
        seed in any::<u64>(),
    ) {
        seed_thread_rng(seed);
        let bucket = Bucket::new(1_000, rate, &config).unwrap();
        let mut now = 1_000;
        let mut ours = Vec::new();
        for e in &events {
            match *e {
                Event::Arrival { gap, level } => {
                    now += gap;
                    ours.push(bucket.try_admit(now, level));
                }
                Event::Rate(r) => bucket.set_rate(now, r),
            }
        }
        seed_thread_rng(seed);
        let mut model = RfcModel::new(1_000, rate, &config);
        let mut now = 1_000;
        let mut rfc = Vec::new();
        for e in &events {
            match *e {
                Event::Arrival { gap, level } => {
                    now += gap;
                    rfc.push(model.arrive(now, level));
                }
                Event::Rate(r) => model.set_rate(now, r),
            }
        }
        prop_assert_eq!(ours, rfc);
    }

    /// Any input, however odd (times out of order or near the ends of the
    /// u64 range, any rate, any level), gives an answer and never panics
    /// (tests run with overflow checks on).
    #[test]
    fn never_panics(
        config in config_strategy(0),
        rate in any::<u32>(),
        calls in prop::collection::vec((any::<u64>(), any::<u8>(), any::<u32>(), 0u8..8), 1..200),
    ) {
        let bucket = Bucket::new(calls[0].0, rate, &config).unwrap();
        for (now, level, new_rate, what) in calls {
            match what {
                0 => bucket.set_rate(now, new_rate),
                1 => bucket.activate(now),
                _ => {
                    let _ = bucket.try_admit(now, level);
                }
            }
            let _ = (bucket.content_ns(now), bucket.capacity_ns(), bucket.max_time_step_ns());
            let _ = bucket.threshold_ns(level);
        }
    }

    /// §8.3.1 burst bound: over any window of W ns the admitted count is at
    /// most W/T + TAU/T + 1 (the brief's W/T + TAU/T + 2 with one to spare),
    /// and with §8.3.3 randomisation the content never exceeds TAU + 3T/2.
    #[test]
    fn never_admits_more_than_the_window_bound(
        config in config_strategy(0),
        rate in 1u32..100_000,
        gaps in prop::collection::vec((0u64..200_000, 0u8..6), 1..2_000),
        seed in any::<u64>(),
    ) {
        seed_thread_rng(seed);
        let t = interval_ns(rate);
        let tau = config.max_threshold().nanos(t);
        let bucket = Bucket::new(0, rate, &config).unwrap();
        let mut now = 0;
        let mut admitted = Vec::new();
        for (gap, level) in gaps {
            now += gap;
            if bucket.try_admit(now, level) {
                admitted.push(now);
                // §8.3.3: "The maximum occupancy is TAU + (3/2)T, rather
                // than TAU + T without randomization".
                prop_assert!(bucket.content_ns(now) <= bucket.capacity_ns());
            }
        }
        for i in 0..admitted.len() {
            for j in i..admitted.len() {
                let w = admitted[j] - admitted[i];
                let count = (j - i + 1) as u64;
                let bound = if config.randomise {
                    // Emptied buckets may take increments down to T/2.
                    2 * (w + tau) / t + 1
                } else {
                    (w + tau) / t + 1
                };
                prop_assert!(
                    count <= bound,
                    "{} admissions in {} ns, T {} TAU {}", count, w, t, tau
                );
            }
        }
    }
}

/// Runs `secs` simulated seconds of arrivals with mean inter-arrival time
/// `mean_gap` per level (uniform jitter in [0, 2·mean]), returning the
/// admitted and offered counts per level.
fn simulate(bucket: &Bucket, mean_gaps: &[u64], secs: u64, seed: u64) -> (Vec<u64>, Vec<u64>) {
    let mut arrivals = Arrivals(seed);
    let end = secs * SEC;
    let mut next: Vec<u64> = mean_gaps.iter().map(|&g| arrivals.upto(2 * g)).collect();
    let mut admitted = vec![0; mean_gaps.len()];
    let mut offered = vec![0; mean_gaps.len()];
    loop {
        let (level, &now) = next
            .iter()
            .enumerate()
            .min_by_key(|&(_, &t)| t)
            .expect("at least one level");
        if now >= end {
            break;
        }
        offered[level] += 1;
        if bucket.try_admit(now, u8::try_from(level).unwrap()) {
            admitted[level] += 1;
        }
        next[level] = now + arrivals.upto(2 * mean_gaps[level]).max(1);
    }
    (admitted, offered)
}

fn within(actual: u64, expected: u64, percent: u64) -> bool {
    actual.abs_diff(expected) * 100 <= expected * percent
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Under an offered load of 10 times OC-Maximum-Rate for 10 s, the
    /// admitted rate is within 1% of OC-Maximum-Rate (§8.3.1: "the
    /// long-term rate remains below 1/T"; "At high load, randomization
    /// rarely occurs. Therefore, there is no loss of precision"). TAU is at
    /// least T here: with TAU = 0 ("classic gapping") admissions are T plus
    /// the residual inter-arrival time apart, as §8.3.3 notes ("the mean time
    /// between admissions is ... T+1/R"), and §8.3.1 says TAU is what brings
    /// the admitted rate close to the ideal.
    #[test]
    fn admitted_rate_converges_to_the_maximum_rate(
        config in config_strategy(1 << 16),
        rate in 1_000u32..20_000,
        seed in any::<u64>(),
    ) {
        seed_thread_rng(seed);
        let bucket = Bucket::new(0, rate, &config).unwrap();
        let t = interval_ns(rate);
        let (admitted, _) = simulate(&bucket, &[t / 10], 10, seed);
        let expected = 10 * u64::from(rate);
        prop_assert!(
            within(admitted[0], expected, 1),
            "admitted {} of an expected {}", admitted[0], expected
        );
        // And never above the bound: 10 s / T + TAU / T + 1.
        let tau = config.max_threshold().nanos(t);
        prop_assert!(admitted[0] <= (10 * SEC + tau) / t + 1 + u64::from(config.randomise));
    }

    /// §8.3.2: with priority traffic below the maximum rate, priority
    /// requests keep their share (all but a few are admitted) while
    /// non-priority requests are abated first and take only what is left.
    #[test]
    fn priority_traffic_keeps_its_share(
        rate in 1_000u32..10_000,
        share in 10u64..70,
        randomise in any::<bool>(),
        seed in any::<u64>(),
    ) {
        seed_thread_rng(seed);
        let config = BucketConfig::two_priorities().with_randomise(randomise);
        let bucket = Bucket::new(0, rate, &config).unwrap();
        let t = interval_ns(rate);
        // Non-priority offered at 10x the rate, priority at share% of it.
        let (admitted, offered) = simulate(&bucket, &[t / 10, t * 100 / share], 10, seed);
        let total = admitted[0] + admitted[1];
        prop_assert!(within(total, 10 * u64::from(rate), 1), "total {}", total);
        prop_assert!(
            admitted[1] * 100 >= offered[1] * 98,
            "priority admitted {} of {}", admitted[1], offered[1]
        );
        // Non-priority gets the remainder, not more.
        let remainder = 10 * u64::from(rate) - admitted[1].min(10 * u64::from(rate));
        prop_assert!(admitted[0] <= remainder + remainder / 100 + 10);
    }

    /// §8.3.2 when the priority traffic alone exceeds the rate: the bucket
    /// stays above TAU1, non-priority requests are all but shut out and the
    /// priority ones get the rate.
    #[test]
    fn non_priority_is_abated_first(
        rate in 1_000u32..10_000,
        randomise in any::<bool>(),
        seed in any::<u64>(),
    ) {
        seed_thread_rng(seed);
        let config = BucketConfig::two_priorities().with_randomise(randomise);
        let bucket = Bucket::new(0, rate, &config).unwrap();
        let t = interval_ns(rate);
        let (admitted, _) = simulate(&bucket, &[t / 10, t / 2], 10, seed);
        let expected = 10 * u64::from(rate);
        prop_assert!(within(admitted[1], expected, 1), "priority {}", admitted[1]);
        prop_assert!(admitted[0] * 100 <= expected, "non-priority {}", admitted[0]);
    }

    /// The n-level generalisation: three levels with thresholds 4T < 8T <
    /// 12T; the two upper levels (30% and 40% of the rate) keep their
    /// traffic, the lowest (offered at 10x) gets the remaining 30%.
    #[test]
    fn n_levels_are_served_in_order(
        rate in 1_000u32..10_000,
        seed in any::<u64>(),
    ) {
        seed_thread_rng(seed);
        let config = BucketConfig {
            thresholds: vec![Tolerance::intervals(4), Tolerance::intervals(8), Tolerance::intervals(12)],
            tau0: Tolerance::ZERO,
            randomise: true,
            floor_ns: 0,
        };
        let bucket = Bucket::new(0, rate, &config).unwrap();
        let t = interval_ns(rate);
        let (admitted, offered) =
            simulate(&bucket, &[t / 10, t * 10 / 4, t * 10 / 3], 10, seed);
        prop_assert!(admitted[2] * 100 >= offered[2] * 98, "level 2 {:?} {:?}", admitted, offered);
        prop_assert!(admitted[1] * 100 >= offered[1] * 98, "level 1 {:?} {:?}", admitted, offered);
        let expected = 10 * u64::from(rate);
        prop_assert!(within(admitted.iter().sum(), expected, 1), "total {:?}", admitted);
        prop_assert!(within(admitted[0], expected * 3 / 10, 5), "level 0 {:?}", admitted);
    }

    /// A new rate takes effect without losing accuracy: 5 s at one rate,
    /// then 10 s at another, each within 1% of its OC-Maximum-Rate.
    #[test]
    fn rate_changes_take_effect_at_once(
        first in 1_000u32..20_000,
        second in 1_000u32..20_000,
        randomise in any::<bool>(),
        seed in any::<u64>(),
    ) {
        seed_thread_rng(seed);
        let config = BucketConfig::default().with_randomise(randomise);
        let bucket = Bucket::new(0, first, &config).unwrap();
        let load = interval_ns(first.max(second)) / 10;
        let (a, _) = simulate(&bucket, &[load], 5, seed);
        prop_assert!(within(a[0], 5 * u64::from(first), 1), "first {}", a[0]);
        bucket.set_rate(5 * SEC, second);
        // Continue from t = 5 s: shift by simulating on an offset bucket time.
        let mut arrivals = Arrivals(seed ^ 1);
        let mut now = 5 * SEC;
        let mut n = 0u64;
        while now < 15 * SEC {
            if bucket.try_admit(now, 0) {
                n += 1;
            }
            now += arrivals.upto(2 * load).max(1);
        }
        prop_assert!(within(n, 10 * u64::from(second), 1), "second {} at {}", n, second);
    }
}

/// Batches of `per_batch` requests, one time per batch, `step_ns` apart,
/// for one second at `rate`: how many the bucket admits.
fn admitted_in_batches(config: &BucketConfig, rate: u32, step_ns: u64, per_batch: usize) -> usize {
    let bucket = Bucket::new(0, rate, config).unwrap();
    (0..1_000_000_000 / step_ns)
        .map(|i| {
            (0..per_batch)
                .filter(|_| bucket.try_admit(i * step_ns, 0))
                .count()
        })
        .sum()
}

#[test]
fn batches_further_apart_than_tau1_admit_less_than_the_rate_without_a_floor() {
    // 5,000/s (T = 200 µs), TAU1 = 5T = 1 ms; an agent's worker reads a
    // client every 2 ms, 20 requests a read: 1 + TAU1/T = 6 a batch.
    let rfc = no_random(BucketConfig::two_priorities());
    let got = admitted_in_batches(&rfc, 5_000, 2_000_000, 20);
    assert!((2_900..=3_100).contains(&got), "{got}");
    // TAU1 at least 10 ms: the rate, within a batch.
    let floored = rfc.with_floor_ns(10_000_000);
    let got = admitted_in_batches(&floored, 5_000, 2_000_000, 20);
    assert!((4_990..=5_060).contains(&got), "{got}");
}

#[test]
fn the_floor_keeps_tau2_over_tau1_and_yields_to_longer_multiples() {
    let c = no_random(BucketConfig::two_priorities()).with_floor_ns(10_000_000);
    // 5,000/s: 5T = 1 ms and 10T = 2 ms, below the floors of 10 and 20 ms.
    let b = Bucket::new(0, 5_000, &c).unwrap();
    assert_eq!(b.threshold_ns(0), 10_000_000);
    assert_eq!(b.threshold_ns(1), 20_000_000);
    assert_eq!(b.max_time_step_ns(), 10_000_000);
    // 100/s: 5T = 50 ms is above the floor, which then does nothing.
    b.set_rate(0, 100);
    assert_eq!(b.threshold_ns(0), 50_000_000);
    assert_eq!(b.threshold_ns(1), 100_000_000);
    // A burst at 100/s: 1 + TAU1/T as without a floor.
    let b = Bucket::new(0, 100, &c).unwrap();
    assert_eq!((0..100).filter(|_| b.try_admit(0, 0)).count(), 6);
}
