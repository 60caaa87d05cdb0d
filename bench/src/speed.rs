//! Absolute per-operation targets on a machine whose speed varies.
//!
//! Some targets are given in nanoseconds "on this machine" (the codec's,
//! the kernel program's). The machines are virtual and shared: on an idle
//! system the same binary was measured 1.4 to 1.8 times slower for minutes
//! at a time (the codec's copy anchor went from 8.8 to 16.0 ns between two
//! runs), which no amount of repetition removes. So each round times an
//! anchor next to the operation, and an operation that misses its target in
//! nanoseconds still meets it when its cost in anchors, times the anchor's
//! cost on a quiet machine of this kind (the reference), is within the
//! target: it meets the target at the reference speed. A real regression
//! raises the cost in anchors as well and fails both ways.

/// How a median compares with its target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// Within the target in nanoseconds.
    Met,
    /// Over the target in nanoseconds, within it at the reference speed:
    /// `at_reference` is the median cost in anchors times the reference.
    MetAtReferenceSpeed {
        /// The median's cost in anchors times the reference anchor, ns.
        at_reference: f64,
    },
    /// Over the target both ways.
    Missed {
        /// The median's cost in anchors times the reference anchor, ns.
        at_reference: f64,
    },
}

impl Verdict {
    /// Judges a median of `ns` whose median cost in anchors (per-round ratio
    /// to the anchor timed in the same round) is `in_anchors`, against
    /// `bound` ns, with `reference_anchor_ns` the anchor's cost on a quiet
    /// machine.
    pub fn judge(ns: f64, in_anchors: f64, bound: f64, reference_anchor_ns: f64) -> Self {
        let at_reference = in_anchors * reference_anchor_ns;
        if ns <= bound {
            Self::Met
        } else if at_reference <= bound {
            Self::MetAtReferenceSpeed { at_reference }
        } else {
            Self::Missed { at_reference }
        }
    }

    /// True unless missed.
    pub fn passed(self) -> bool {
        !matches!(self, Self::Missed { .. })
    }

    /// A short phrase for a report line.
    pub fn describe(self, bound: f64) -> String {
        match self {
            Self::Met => format!("<= {bound:.0} ns: ok"),
            Self::MetAtReferenceSpeed { at_reference } => format!(
                "<= {bound:.0} ns: ok at the reference speed ({at_reference:.1} ns; this machine is slower now)"
            ),
            Self::Missed { at_reference } => format!(
                "<= {bound:.0} ns: MISSED (also at the reference speed: {at_reference:.1} ns)"
            ),
        }
    }
}

/// The median of `v` (the upper one for an even count); `v` is sorted.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_median_within_the_target_is_met() {
        assert_eq!(Verdict::judge(95.0, 20.0, 100.0, 9.0), Verdict::Met);
    }

    #[test]
    fn a_slow_machine_is_judged_at_the_reference_speed() {
        // 136 ns now, 8.6 anchors; 8.6 * 8.8 = 75.7 ns at the reference.
        let v = Verdict::judge(136.0, 8.6, 100.0, 8.8);
        assert!(
            matches!(v, Verdict::MetAtReferenceSpeed { at_reference } if (at_reference - 75.68).abs() < 1e-9)
        );
        assert!(v.passed());
    }

    #[test]
    fn a_regression_misses_both_ways() {
        // 20 % costlier in anchors than the target allows at the reference.
        let v = Verdict::judge(136.0, 12.0 * 1.2, 100.0, 8.8);
        assert!(!v.passed());
        assert!(v.describe(100.0).contains("MISSED"));
    }

    #[test]
    fn median_is_the_middle_value() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 3.0);
    }
}
