//! The loss algorithm, RFC 7683 §6.3: "apply abatement treatment to the
//! requested percentage of request messages sent", chosen uniformly at random
//! (the §6.1 step 4 approach), with a cheap per-worker PRNG and no syscalls.

/// A small, fast pseudo-random generator (SplitMix64). One per worker; seeded
/// by the caller so simulations are reproducible.
#[derive(Clone, Debug)]
pub struct Prng {
    state: u64,
}

impl Prng {
    /// A generator started from `seed`.
    #[must_use]
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform value in `0..n` (Lemire's multiply-shift; bias below 2^-32
    /// for the small `n` used here).
    pub fn below(&mut self, n: u32) -> u32 {
        let x = self.next_u64() >> 32;
        u32::try_from((x * u64::from(n)) >> 32).unwrap_or(0)
    }

    /// A uniform value in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        // 53 random bits into the mantissa.
        #[expect(clippy::cast_precision_loss, reason = "53 bits fit exactly in f64")]
        let x = (self.next_u64() >> 11) as f64;
        x / (1u64 << 53) as f64
    }
}

/// RFC 7683 §6.1 step 4: pick a uniform number in 1..=100 and abate when it is
/// at most the reduction percentage.
pub fn select_percent(rng: &mut Prng, percent: u32) -> bool {
    match percent {
        0 => false,
        p if p >= 100 => true,
        p => rng.below(100) < p,
    }
}

/// Abates a fraction `share` in `[0, 1]` of requests; used where the share is
/// not an integer percentage (the ramp, and the peer step of RFC 8581 §5 that
/// accounts for what the host/realm step already throttled).
pub fn select_share(rng: &mut Prng, share: f64) -> bool {
    if share <= 0.0 {
        false
    } else if share >= 1.0 {
        true
    } else {
        rng.unit() < share
    }
}

/// The reduction percentage (RFC 7683 §7.7, OC-Reduction-Percentage) that
/// brings a `demand` of requests per second down to `rate`: `1 - rate /
/// demand`, rounded up to a whole percent so that what passes is at most
/// `rate`; 0 when the demand is within it.
#[must_use]
pub fn reduction_to(rate: f64, demand: f64) -> u32 {
    if demand <= rate.max(0.0) || demand <= 0.0 {
        return 0;
    }
    let pct = (100.0 * (1.0 - rate.max(0.0) / demand)).ceil();
    // Bounded to [0, 100] just above.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "clamped to 0..=100"
    )]
    let pct = pct.clamp(0.0, 100.0) as u32;
    pct
}

/// The additional share the peer step must abate so that the share of
/// requests toward the peer removed by both steps equals `requested`
/// (RFC 8581 §5: "take into consideration the number of messages already
/// throttled by the handling of the host/realm report abatement").
///
/// With `already` the share throttled by the first step, survivors are
/// `1 - already`; abating `x` of them removes `already + x (1 - already)` in
/// total, so `x = (requested - already) / (1 - already)`, floored at zero.
#[must_use]
pub fn remaining_share(requested: f64, already: f64) -> f64 {
    if already >= 1.0 {
        return 0.0;
    }
    ((requested - already) / (1.0 - already)).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extremes_are_exact() {
        let mut r = Prng::new(1);
        assert!((0..1000).all(|_| !select_percent(&mut r, 0)));
        assert!((0..1000).all(|_| select_percent(&mut r, 100)));
    }

    #[test]
    fn share_is_close_to_percentage() {
        // RFC 7683 §6.3: the requested percentage of requests is abated.
        let mut r = Prng::new(7);
        for p in [1, 10, 33, 50, 90] {
            let n = 100_000;
            let hit = (0..n).filter(|_| select_percent(&mut r, p)).count();
            let share = hit as f64 / n as f64 * 100.0;
            assert!((share - f64::from(p)).abs() < 1.0, "p={p} share={share}");
        }
    }

    #[test]
    fn the_reduction_to_a_rate_passes_at_most_that_rate() {
        // RFC 7683 §7.7: 3x the rate is cut by two thirds, rounded up.
        assert_eq!(reduction_to(200.0, 600.0), 67);
        assert_eq!(reduction_to(500.0, 2500.0), 80);
        assert_eq!(reduction_to(200.0, 150.0), 0);
        assert_eq!(reduction_to(0.0, 10.0), 100);
        assert_eq!(reduction_to(10.0, 0.0), 0);
        for (rate, demand) in [(200.0, 601.0), (7.0, 9.0), (499.0, 5000.0)] {
            let p = f64::from(reduction_to(rate, demand));
            assert!(
                demand * (1.0 - p / 100.0) <= rate + 1e-9,
                "{rate} {demand} {p}"
            );
            assert!(
                demand * (1.0 - (p - 1.0) / 100.0) > rate,
                "{rate} {demand} {p}"
            );
        }
    }

    #[test]
    fn remaining_share_accounts_for_first_step() {
        assert!((remaining_share(0.5, 0.0) - 0.5).abs() < 1e-12);
        assert!((remaining_share(0.5, 0.5) - 0.0).abs() < 1e-12);
        assert!((remaining_share(0.5, 0.8)).abs() < 1e-12);
        // 20 % already throttled, 50 % requested: 37.5 % of the survivors.
        assert!((remaining_share(0.5, 0.2) - 0.375).abs() < 1e-12);
        assert!(remaining_share(1.0, 1.0).abs() < 1e-12);
    }

    #[test]
    fn unit_is_in_range() {
        let mut r = Prng::new(3);
        assert!(
            (0..10_000)
                .map(|_| r.unit())
                .all(|x| (0.0..1.0).contains(&x))
        );
    }
}
