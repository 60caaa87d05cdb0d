//! The `[doic]` section of the agent's TOML configuration (serde types only;
//! the relay embeds them in its configuration file). The defaults follow the
//! RFCs: loss always (RFC 7683 §6.1), TAU values of RFC 8582 §8.3.2, error
//! codes of RFC 7683 §8.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::features::Algorithm;
use super::protect::{Mode, ProtectConfig, ProtectConfigError};
use super::rate::{Priority, RateParams, RateParamsError};

/// How throttled requests are answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThrottleResult {
    /// RFC 7683 §8: 3004 DIAMETER_TOO_BUSY when the request may succeed on a
    /// different path, 5012 DIAMETER_UNABLE_TO_COMPLY when it will not.
    #[default]
    Auto,
    /// Always 3004 DIAMETER_TOO_BUSY.
    TooBusy,
    /// Always 5012 DIAMETER_UNABLE_TO_COMPLY.
    UnableToComply,
    /// Experimental-Result 5198 DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY
    /// (vendor practice, seed 004).
    RetryNotAllowed,
}

/// A configured priority rule for the rate algorithm (RFC 8582 §8.3.2): requests
/// of this application (and command, when given) get `priority`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityRule {
    /// Application-ID.
    pub app_id: u32,
    /// Command-Code; any command when absent.
    #[serde(default)]
    pub command: Option<u32>,
    /// The priority given.
    pub priority: Priority,
}

/// DOIC policy for one peer (RFC 7683 §10.4: operators select which peers are
/// trusted to deliver overload reports and which may receive them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeerPolicy {
    /// Its overload reports are believed; otherwise they are stripped and ignored.
    pub trusted: bool,
    /// It may receive overload reports.
    pub receive_reports: bool,
    /// Whether the agent protects it as a server without DOIC
    /// ([`crate::protect`]; `[[peer]] doic`).
    pub protect: Mode,
}

impl Default for PeerPolicy {
    fn default() -> Self {
        Self {
            trusted: false,
            receive_reports: true,
            protect: Mode::Auto,
        }
    }
}

/// The `[doic]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DoicConfig {
    /// Overload control in the relay; `false` relays as if the section were
    /// absent (the anchor of the throughput comparison).
    pub enabled: bool,
    /// The agent's own capacity in requests per second: above it, the agent
    /// sends peer reports with the rate algorithm to its DOIC clients
    /// (RFC 8581 §6.2.4, RFC 8582 §6.1; [`super::own_load`]); absent means
    /// never.
    pub own_capacity: Option<u32>,
    /// Algorithms advertised and accepted; loss is always included.
    pub algorithms: Vec<Algorithm>,
    /// Support peer reports (RFC 8581).
    pub peer_report: bool,
    /// The algorithm the agent selects for its own peer reports (OC-Peer-Algo).
    pub peer_algo: Algorithm,
    /// How throttled requests are answered.
    pub throttle_result: ThrottleResult,
    /// Rate bucket tolerances (RFC 8582 §8.3).
    pub rate: RateParams,
    /// DRMP values (RFC 7944, lower is more important) at or below this are
    /// high priority for the rate algorithm.
    pub drmp_high_at_most: u8,
    /// Priority rules by application and command; the first match wins and
    /// takes precedence over DRMP.
    pub priority_rules: Vec<PriorityRule>,
    /// Controlled ending: interval between probe requests after a total
    /// (100 %) reduction ends (RFC 7683 §6.3).
    #[serde(with = "secs_f64")]
    pub probe_interval: Duration,
    /// Controlled ending: duration of the linear ramp back to full traffic.
    #[serde(with = "secs_f64")]
    pub ramp: Duration,
    /// Upper bound on the number of OCS entries (RFC 7683 §10.2 defence).
    pub max_ocs: usize,
    /// Capacity assumed for a realm server without any report, as a multiple
    /// of its fair share of realm-routed traffic; used to decide when diversion
    /// can no longer carry the realm (seed 002) and a realm report is made.
    pub divert_headroom: f64,
    /// Validity of the realm reports the agent makes itself, in seconds.
    pub realm_report_validity: u32,
    /// Per-peer policy by DiameterIdentity; unknown peers get the default
    /// (not trusted, may receive reports).
    pub peers: BTreeMap<String, PeerPolicy>,
    /// Records kept in the audit trail.
    pub audit_records: usize,
    /// Most OC-OLR AVPs in one answer relayed to a DOIC client; absent means
    /// no limit. RFC 8581 carries a peer report next to a host or realm
    /// report, and the agent may add its own realm report (seed 002), but an
    /// application whose command grammar has a single `[ OC-OLR ]` refuses a
    /// second one: set 1 for such clients. The agent's own peer report goes
    /// first (only the client can act on it); a host or realm report left
    /// out is not marked delivered, so the agent keeps abating for the
    /// client.
    pub olrs_per_answer: Option<u8>,
    /// Protection of upstream servers without DOIC (`[doic.protect]`,
    /// [`crate::protect`]).
    pub protect: ProtectConfig,
}

impl Default for DoicConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            own_capacity: None,
            algorithms: vec![Algorithm::Loss, Algorithm::Rate],
            peer_report: true,
            peer_algo: Algorithm::Rate,
            throttle_result: ThrottleResult::Auto,
            rate: RateParams::default(),
            drmp_high_at_most: 4,
            priority_rules: Vec::new(),
            probe_interval: Duration::from_secs(1),
            ramp: Duration::from_secs(10),
            max_ocs: 4096,
            divert_headroom: 1.5,
            realm_report_validity: 30,
            peers: BTreeMap::new(),
            audit_records: 10_000,
            olrs_per_answer: None,
            protect: ProtectConfig::default(),
        }
    }
}

/// Why a `[doic]` section is unusable; one precise line each.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DoicConfigError {
    /// The rate bucket parameters break RFC 8582 §8.3.
    #[error("doic.rate: {0}")]
    Rate(#[from] RateParamsError),
    /// `divert_headroom` below 1 would declare realms overloaded with no report.
    #[error("doic.divert_headroom = {value}: must be a number of at least 1")]
    Headroom {
        /// The value given.
        value: f64,
    },
    /// A zero probe interval would send every request as a probe.
    #[error("doic.probe_interval must be greater than 0")]
    ProbeInterval,
    /// No room for any overload control state.
    #[error("doic.max_ocs must be at least 1")]
    MaxOcs,
    /// A zero capacity would declare the agent overloaded by any request.
    #[error("doic.own_capacity must be at least 1 (requests per second)")]
    OwnCapacity,
    /// An answer limited to no OC-OLR could carry no report at all.
    #[error("doic.olrs_per_answer must be at least 1 (absent: no limit)")]
    OlrsPerAnswer,
    /// Realm reports need a validity within RFC 7683 §7.5 (1..=86400 s).
    #[error("doic.realm_report_validity = {value}: must be 1..=86400 seconds")]
    RealmValidity {
        /// The value given.
        value: u32,
    },
    /// A `[doic.protect]` value out of its range.
    #[error(transparent)]
    Protect(#[from] ProtectConfigError),
}

impl DoicConfig {
    /// Checks the section.
    ///
    /// # Errors
    /// The first [`DoicConfigError`] found.
    pub fn validate(&self) -> Result<(), DoicConfigError> {
        self.rate.bucket_config()?;
        if !(self.divert_headroom >= 1.0 && self.divert_headroom.is_finite()) {
            return Err(DoicConfigError::Headroom {
                value: self.divert_headroom,
            });
        }
        if self.probe_interval.is_zero() {
            return Err(DoicConfigError::ProbeInterval);
        }
        if self.max_ocs == 0 {
            return Err(DoicConfigError::MaxOcs);
        }
        if self.own_capacity == Some(0) {
            return Err(DoicConfigError::OwnCapacity);
        }
        if self.olrs_per_answer == Some(0) {
            return Err(DoicConfigError::OlrsPerAnswer);
        }
        if !(1..=diameter::dictionary::doic::MAX_VALIDITY_SECS)
            .contains(&self.realm_report_validity)
        {
            return Err(DoicConfigError::RealmValidity {
                value: self.realm_report_validity,
            });
        }
        self.protect.validate()?;
        Ok(())
    }

    /// The keys of `self` read only when the agent starts whose values in
    /// `new` differ: a reload keeps their running values
    /// ([`DoicConfig::keeping_start_only`]). `enabled` (the cores exist or
    /// not), `algorithms` and `peer_report` (the OC-Supported-Features
    /// every relayed request carries, encoded once), `max_ocs` (the size
    /// of the shared realm board), `audit_records` (the trail of each core)
    /// and `own_capacity` (the agent's own load controller).
    #[must_use]
    pub fn start_only_changes(&self, new: &DoicConfig) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut differ = |changed: bool, key| {
            if changed {
                keys.push(key);
            }
        };
        differ(self.enabled != new.enabled, "doic.enabled");
        differ(self.algorithms != new.algorithms, "doic.algorithms");
        differ(self.peer_report != new.peer_report, "doic.peer_report");
        differ(self.max_ocs != new.max_ocs, "doic.max_ocs");
        differ(
            self.audit_records != new.audit_records,
            "doic.audit_records",
        );
        differ(self.own_capacity != new.own_capacity, "doic.own_capacity");
        keys
    }

    /// `self` with the values of the keys read only at start taken from
    /// `running` ([`DoicConfig::start_only_changes`]).
    #[must_use]
    pub fn keeping_start_only(self, running: &DoicConfig) -> DoicConfig {
        DoicConfig {
            enabled: running.enabled,
            algorithms: running.algorithms.clone(),
            peer_report: running.peer_report,
            max_ocs: running.max_ocs,
            audit_records: running.audit_records,
            own_capacity: running.own_capacity,
            ..self
        }
    }

    /// The policy for `peer`.
    #[must_use]
    pub fn peer(&self, peer: &str) -> PeerPolicy {
        self.peers.get(peer).copied().unwrap_or_default()
    }

    /// The rate-algorithm priority of a request (RFC 8582 §8.3.2): configured
    /// rules first, then DRMP.
    #[must_use]
    pub fn priority(&self, app_id: u32, command: u32, drmp: Option<u8>) -> Priority {
        if let Some(r) = self
            .priority_rules
            .iter()
            .find(|r| r.app_id == app_id && r.command.is_none_or(|c| c == command))
        {
            return r.priority;
        }
        match drmp {
            Some(d) if d <= self.drmp_high_at_most => Priority::High,
            _ => Priority::Normal,
        }
    }
}

pub(crate) mod secs_f64 {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doic_section_parses() {
        let text = r#"
            algorithms = ["loss", "rate"]
            peer_report = true
            throttle_result = "retry_not_allowed"
            ramp = 4.5
            [[priority_rules]]
            app_id = 16777238
            command = 272
            priority = "high"
            [peers."s1.example"]
            trusted = true
        "#;
        let c: DoicConfig = toml::from_str(text).unwrap();
        assert_eq!(c.throttle_result, ThrottleResult::RetryNotAllowed);
        assert_eq!(c.ramp, Duration::from_millis(4500));
        assert!(c.peer("s1.example").trusted);
        assert!(!c.peer("other").trusted, "unknown peers are not trusted");
        assert_eq!(c.priority(16_777_238, 272, None), Priority::High);
        assert_eq!(c.priority(16_777_238, 271, Some(9)), Priority::Normal);
        assert_eq!(c.priority(4, 271, Some(2)), Priority::High);
    }

    #[test]
    fn validation_names_the_bad_key() {
        assert_eq!(DoicConfig::default().validate(), Ok(()));
        let c: DoicConfig = toml::from_str("divert_headroom = 0.5").unwrap();
        let e = c.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "doic.divert_headroom = 0.5: must be a number of at least 1"
        );
        let c: DoicConfig = toml::from_str("[rate]\ntau1 = 20.0\ntau2 = 10.0").unwrap();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .starts_with("doic.rate: ")
        );
        let c: DoicConfig = toml::from_str("probe_interval = 0").unwrap();
        assert_eq!(c.validate(), Err(DoicConfigError::ProbeInterval));
        let c: DoicConfig = toml::from_str("own_capacity = 0").unwrap();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "doic.own_capacity must be at least 1 (requests per second)"
        );
        let c: DoicConfig = toml::from_str("olrs_per_answer = 0").unwrap();
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "doic.olrs_per_answer must be at least 1 (absent: no limit)"
        );
        let c: DoicConfig = toml::from_str("olrs_per_answer = 1").unwrap();
        assert_eq!((c.validate(), c.olrs_per_answer), (Ok(()), Some(1)));
        let c: DoicConfig = toml::from_str("own_capacity = 5000").unwrap();
        assert_eq!((c.validate(), c.own_capacity), (Ok(()), Some(5000)));
        let c: DoicConfig = toml::from_str("realm_report_validity = 0").unwrap();
        assert!(matches!(
            c.validate(),
            Err(DoicConfigError::RealmValidity { value: 0 })
        ));
    }

    #[test]
    fn design_note_example_is_valid() {
        // The `[doic]` example of docs/doic.md parses and validates.
        let doc = include_str!("../../docs/doic.md");
        let start = doc.find("```toml\n[doic]").unwrap() + "```toml\n".len();
        let len = doc[start..].find("```").unwrap();
        #[derive(Deserialize)]
        struct File {
            doic: DoicConfig,
        }
        let f: File = toml::from_str(&doc[start..start + len]).unwrap();
        assert_eq!(f.doic.validate(), Ok(()));
        assert!(f.doic.peer("hss1.example").trusted);
        let defaults = DoicConfig {
            priority_rules: f.doic.priority_rules.clone(),
            peers: f.doic.peers.clone(),
            ..DoicConfig::default()
        };
        assert_eq!(f.doic, defaults, "the example shows the defaults");
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let e = toml::from_str::<DoicConfig>("algoritms = []").unwrap_err();
        assert!(e.to_string().contains("algoritms"), "{e}");
    }
}
