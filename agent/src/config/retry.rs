//! The `[retry]` section: the retry budget of 3004 retries and failovers
//! (`crate::relay::budget`, RFC 6733 §7.1.3, RFC 7683 §8).

use serde::Deserialize;

/// A `[retry]` value the budget cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {why}")]
pub struct RetryConfigError {
    /// The dotted key.
    pub key: &'static str,
    /// Why.
    pub why: String,
}

/// The `[retry]` section.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// Retries allowed, in percent of the requests relayed over the window.
    #[serde(default = "default_percent")]
    pub budget_percent: f64,
    /// Retries allowed per second whatever the share.
    #[serde(default = "default_min")]
    pub min_retries_per_second: u32,
    /// How long a 3004 marks its peer as overloaded (no retry goes there); 0
    /// turns the mark off.
    #[serde(default = "default_overloaded")]
    pub overloaded_seconds: f64,
}

fn default_percent() -> f64 {
    10.0
}
fn default_min() -> u32 {
    20
}
fn default_overloaded() -> f64 {
    1.0
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            budget_percent: default_percent(),
            min_retries_per_second: default_min(),
            overloaded_seconds: default_overloaded(),
        }
    }
}

impl RetryConfig {
    /// Checks the values serde accepts but the budget cannot use.
    ///
    /// # Errors
    /// The key and why, for `check-config`.
    pub fn check(&self) -> Result<(), RetryConfigError> {
        let bad = |key, why| Err(RetryConfigError { key, why });
        let p = self.budget_percent;
        if !(p.is_finite() && (0.0..=100.0).contains(&p)) {
            return bad(
                "retry.budget_percent",
                format!("{p} is not a percentage in [0, 100]"),
            );
        }
        if self.min_retries_per_second > 1_000_000 {
            return bad(
                "retry.min_retries_per_second",
                format!("{} is above 1000000", self.min_retries_per_second),
            );
        }
        let s = self.overloaded_seconds;
        if !(s.is_finite() && (0.0..=3600.0).contains(&s)) {
            return bad(
                "retry.overloaded_seconds",
                format!("{s} is not a duration in [0, 3600] seconds"),
            );
        }
        Ok(())
    }
}
