//! What a request costs the busiest worker, relayed or answered by the
//! agent itself, found from the measurements in which that worker was
//! saturated (RFC 8582 §6.1 leaves to the reporting node how it knows what
//! it can take; this is part of how the agent knows).
//!
//! A saturated worker is busy all the time it has (`u` at 1, or close),
//! and what it handled in that time is what it could: `u = x * r + y * a`
//! for `r` requests per second relayed and `a` answered, at the unknown
//! costs `x` of a relayed request and `y` of an answer (shares of the
//! worker per request per second). Per request handled,
//! `z = u / (r + a)` is linear in the share relayed `s = r / (r + a)`:
//! `z = y + (x - y) * s`. A weighted least-squares line through the
//! recent saturated measurements (exponential forgetting) gives `y` at
//! `s = 0` and `x` at `s = 1`. A line needs measurements at different
//! shares (relaying all before the agent began to answer, then held to an
//! allocation): until then nothing is known, and after, while they all sit
//! at one share, the costs stay those last found. Measurements below
//! saturation are left out: the worker's idle time in them says nothing of
//! what a request costs, and one from before a change in the machine
//! would bend the line.
//!
//! The costs differ most between machines where it matters most: held to
//! a small CPU share, each wake-up's cost dominates and an answer costs
//! about what a relay does; with a whole CPU and requests read in batches
//! an answer costs a fraction of it.

/// Weight of the measurements before the last, per measurement.
const FORGET: f64 = 0.9;

/// The least spread (standard deviation) of the share relayed over the
/// weighted measurements for a line through them to say anything.
const MIN_SPREAD: f64 = 0.1;

/// An answer's cost as a share of a relayed request's is held within this:
/// an answer is neither free nor dearer than a relay (it skips routing,
/// the upstream write and the answer's relay).
const RATIO: std::ops::RangeInclusive<f64> = 0.05..=1.0;

/// The running regression; see the module documentation.
#[derive(Clone, Debug, Default)]
pub(super) struct AnswerCost {
    /// Sums of weights, `s`, `z`, `s * s` and `s * z`.
    w: f64,
    s: f64,
    z: f64,
    ss: f64,
    sz: f64,
    /// The costs last found: a relayed request's and an answer's.
    costs: Option<(f64, f64)>,
}

impl AnswerCost {
    /// Takes one measurement with the busiest worker saturated: its
    /// utilisation `u`, requests per second `relayed` and `answered` by the
    /// agent itself.
    pub(super) fn observe(&mut self, u: f64, relayed: f64, answered: f64) {
        let (relayed, answered) = (relayed.max(0.0), answered.max(0.0));
        let n = relayed + answered;
        if n <= 0.0 || !u.is_finite() || u <= 0.0 {
            return;
        }
        let (s, z) = (relayed / n, u / n);
        for sum in [
            &mut self.w,
            &mut self.s,
            &mut self.z,
            &mut self.ss,
            &mut self.sz,
        ] {
            *sum *= FORGET;
        }
        self.w += 1.0;
        self.s += s;
        self.z += z;
        self.ss += s * s;
        self.sz += s * z;
        let (mean_s, mean_z) = (self.s / self.w, self.z / self.w);
        let var = self.ss / self.w - mean_s * mean_s;
        if var < MIN_SPREAD * MIN_SPREAD {
            return;
        }
        let slope = (self.sz / self.w - mean_s * mean_z) / var;
        let answer = mean_z - slope * mean_s;
        let relay = answer + slope;
        if answer.is_finite() && relay > 0.0 {
            let answer = answer.clamp(RATIO.start() * relay, RATIO.end() * relay);
            self.costs = Some((relay, answer));
        }
    }

    /// The costs of a relayed request and of an answer (share of the
    /// busiest worker per request per second), once found.
    pub(super) fn costs(&self) -> Option<(f64, f64)> {
        self.costs
    }
}

#[cfg(test)]
mod tests {
    use super::AnswerCost;

    /// A worker whose relayed requests cost `x` and answers `y`, saturated:
    /// the utilisation of what it handled.
    fn u(x: f64, y: f64, relayed: f64, answered: f64) -> f64 {
        x * relayed + y * answered
    }

    #[test]
    fn the_costs_are_found_once_the_share_relayed_moves() {
        for ratio in [0.1, 0.5, 1.0] {
            let (x, y) = (1e-3, ratio * 1e-3);
            let mut c = AnswerCost::default();
            // Relaying only: nothing said of answers yet.
            for _ in 0..5 {
                c.observe(u(x, y, 1_000.0, 0.0), 1_000.0, 0.0);
            }
            assert_eq!(c.costs(), None);
            // Then held to 400/s with the rest answered.
            for answered in [1_000.0, 3_000.0, 3_000.0, 2_000.0] {
                c.observe(u(x, y, 400.0, answered), 400.0, answered);
            }
            let (rx, ry) = c.costs().expect("found");
            assert!(
                (rx - x).abs() < 1e-9 && (ry - y).abs() < 1e-9,
                "{ratio}: {rx} {ry}"
            );
        }
    }

    #[test]
    fn one_share_alone_keeps_the_last_costs_and_bounds_hold() {
        let mut c = AnswerCost::default();
        for _ in 0..50 {
            c.observe(0.9, 300.0, 2_700.0);
        }
        assert_eq!(c.costs(), None);
        // Answers that would cost more than a relay (1,000/s relayed, or
        // 100/s relayed and 400/s answered): held to a relay's.
        let mut c = AnswerCost::default();
        c.observe(1.0, 1_000.0, 0.0);
        c.observe(1.0, 100.0, 400.0);
        let (x, y) = c.costs().expect("found");
        assert!((x - y).abs() < 1e-12, "{x} {y}");
        // Then at one share: the costs stay. Nothing measured, or a
        // nonsense utilisation: no change either.
        for _ in 0..50 {
            c.observe(1.0, 100.0, 400.0);
        }
        c.observe(0.0, 0.0, 0.0);
        c.observe(f64::NAN, 10.0, 10.0);
        let (x2, y2) = c.costs().expect("kept");
        assert!((x2 / x - 1.0).abs() < 1e-9 && (y2 / y - 1.0).abs() < 1e-9);
    }
}
