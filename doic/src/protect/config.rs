//! The `[doic.protect]` section: whether the agent protects upstream
//! servers that know no DOIC (on by default with `[doic]`), the
//! estimator's knobs ([`super::ProtectParams`], docs/protect.md) and the
//! validity of the HOST reports it makes on their behalf (RFC 7683 §5.1.3,
//! §7.5).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ProtectParams;
use crate::config::secs_f64;

/// The `[doic.protect]` section.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProtectConfig {
    /// Protect servers without DOIC (`[[peer]] doic` chooses per peer).
    pub enabled: bool,
    /// Queueing when the delay exceeds `baseline * (1 + tolerance) + slack`.
    pub tolerance: f64,
    /// Absolute allowance on the latency target, seconds.
    #[serde(with = "secs_f64")]
    pub slack: Duration,
    /// Time constant of the gradient decrease, seconds.
    #[serde(with = "secs_f64")]
    pub drain: Duration,
    /// Additive increase per second, as a fraction of the capacity.
    pub probe: f64,
    /// Multiplicative decrease on 3004 or a timeout.
    pub backoff: f64,
    /// Least fraction of the completion rate a decrease keeps.
    pub floor: f64,
    /// Least limit, requests per second.
    pub min_limit: u32,
    /// Rate measurement window, seconds.
    #[serde(with = "secs_f64")]
    pub window: Duration,
    /// How long the unloaded latency is remembered, seconds.
    #[serde(with = "secs_f64")]
    pub baseline_window: Duration,
    /// The limit ends when the offered load stays below this fraction of it ...
    pub end_below: f64,
    /// ... for this long, seconds.
    #[serde(with = "secs_f64")]
    pub end_after: Duration,
    /// OC-Validity-Duration of the reports made on a server's behalf,
    /// seconds (renewed at half of it while the limit lasts).
    pub validity: u32,
}

impl Default for ProtectConfig {
    fn default() -> Self {
        let p = ProtectParams::default();
        Self {
            enabled: true,
            tolerance: p.tolerance,
            slack: p.slack,
            drain: p.drain,
            probe: p.probe,
            backoff: p.backoff,
            floor: p.floor,
            min_limit: p.min_limit,
            window: p.window,
            baseline_window: p.baseline_window,
            end_below: p.end_below,
            end_after: p.end_after,
            validity: 10,
        }
    }
}

/// A `[doic.protect]` value out of its range; the message names the key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("doic.protect.{key} = {value}: {reason}")]
pub struct ProtectConfigError {
    /// The key.
    pub key: &'static str,
    /// The value given.
    pub value: String,
    /// What it must be.
    pub reason: &'static str,
}

impl ProtectConfig {
    /// The estimator's parameters.
    #[must_use]
    pub fn params(&self) -> ProtectParams {
        ProtectParams {
            tolerance: self.tolerance,
            slack: self.slack,
            drain: self.drain,
            probe: self.probe,
            backoff: self.backoff,
            floor: self.floor,
            min_limit: self.min_limit,
            window: self.window,
            baseline_window: self.baseline_window,
            min_samples: ProtectParams::default().min_samples,
            end_below: self.end_below,
            end_after: self.end_after,
        }
    }

    /// The validity of the reports made on a server's behalf.
    #[must_use]
    pub fn validity(&self) -> Duration {
        Duration::from_secs(u64::from(self.validity))
    }

    /// Checks every knob.
    ///
    /// # Errors
    /// The first value out of its range.
    pub fn validate(&self) -> Result<(), ProtectConfigError> {
        let fraction = |key, v: f64, lo: f64, hi: f64, reason| {
            if v.is_finite() && v >= lo && v <= hi {
                Ok(())
            } else {
                Err(ProtectConfigError {
                    key,
                    value: v.to_string(),
                    reason,
                })
            }
        };
        let positive = |key, d: Duration| {
            if d.is_zero() {
                Err(ProtectConfigError {
                    key,
                    value: "0".into(),
                    reason: "must be greater than 0 seconds",
                })
            } else {
                Ok(())
            }
        };
        fraction(
            "tolerance",
            self.tolerance,
            0.0,
            100.0,
            "must be in [0, 100]",
        )?;
        fraction("probe", self.probe, 0.0, 10.0, "must be in [0, 10]")?;
        fraction("backoff", self.backoff, 0.0, 0.9, "must be in [0, 0.9]")?;
        fraction("floor", self.floor, 0.01, 1.0, "must be in [0.01, 1]")?;
        fraction("end_below", self.end_below, 0.0, 1.0, "must be in [0, 1]")?;
        positive("drain", self.drain)?;
        positive("window", self.window)?;
        positive("baseline_window", self.baseline_window)?;
        if self.min_limit == 0 {
            return Err(ProtectConfigError {
                key: "min_limit",
                value: "0".into(),
                reason: "must be at least 1 (RFC 8582 §7.2.1: a rate of 0 stops a client)",
            });
        }
        if !(1..=diameter::dictionary::doic::MAX_VALIDITY_SECS).contains(&self.validity) {
            return Err(ProtectConfigError {
                key: "validity",
                value: self.validity.to_string(),
                reason: "must be 1..=86400 seconds (RFC 7683 §7.5)",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_estimators_and_valid() {
        let c = ProtectConfig::default();
        assert!(c.enabled);
        assert_eq!(c.params(), ProtectParams::default());
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn a_bad_knob_is_named() {
        let c: ProtectConfig = toml::from_str("floor = 0\n").unwrap();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "doic.protect.floor = 0: must be in [0.01, 1]"
        );
        let c: ProtectConfig = toml::from_str("validity = 0\n").unwrap();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .starts_with("doic.protect.validity = 0")
        );
        assert!(toml::from_str::<ProtectConfig>("algorithm = 1\n").is_err());
        let c: ProtectConfig = toml::from_str("slack = 0.01\nenabled = false\n").unwrap();
        assert_eq!((c.slack, c.enabled), (Duration::from_millis(10), false));
    }
}
