//! A new `[doic]` section applied to a running core at one instant (a
//! reload of the configuration file), the overload state kept:
//!
//! - the OCS in force keep their versions, phases and buckets (RFC 7683
//!   §5.2: a reacting node honours a report it received until its validity
//!   ends); the new thresholds and timers apply from the next decision:
//!   `throttle_result` from the next throttled request (§8), the probe
//!   interval and ramp from the next controlled ending (§6.3), the rate
//!   tolerances from the next bucket made (RFC 8582 §8.3);
//! - the host and peer OCS of a peer no longer trusted end at once, each
//!   with an [`OcsEvent::Untrusted`](crate::audit::OcsEvent::Untrusted)
//!   record (§10.2: reports of untrusted peers are not honoured);
//! - the sequence numbers of the agent's own reports keep growing
//!   (§5.2.1.4): the counter is not reset;
//! - the keys read only at start keep their running values
//!   ([`DoicConfig::start_only_changes`]).

use std::time::{Duration, Instant};

use super::Doic;
use crate::config::{DoicConfig, DoicConfigError};
use crate::ocs::Ending;

impl Doic {
    /// Applies `new` at `now`; returns how many OCS ended because their
    /// peer is no longer trusted. A section that does not validate changes
    /// nothing.
    ///
    /// # Errors
    /// [`DoicConfigError`] when `new` is unusable ([`DoicConfig::validate`]).
    pub fn reconfigure(
        &mut self,
        now: Instant,
        new: &DoicConfig,
    ) -> Result<usize, DoicConfigError> {
        let cfg = new.clone().keeping_start_only(&self.cfg);
        cfg.validate()?;
        let bucket = cfg.rate.bucket_config()?;
        self.ocs.set_params(
            Ending {
                probe_interval: cfg.probe_interval,
                ramp: cfg.ramp,
            },
            bucket,
        );
        self.realms.set_params(
            cfg.divert_headroom,
            Duration::from_secs(u64::from(cfg.realm_report_validity)),
        );
        let running = &self.cfg;
        let distrusted = |id: &str| running.peer(id).trusted && !cfg.peer(id).trusted;
        let ended = self.ocs.remove_untrusted(now, distrusted, &mut self.audit);
        if ended > 0 {
            self.realms.invalidate();
        }
        self.cfg = cfg;
        self.config_id = super::idle::config_id();
        Ok(ended)
    }

    /// The configuration the core runs with.
    #[must_use]
    pub fn config(&self) -> &DoicConfig {
        &self.cfg
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use diameter::codec::doic::{OcOlr, ReportType};

    use crate::audit::OcsEvent;
    use crate::report::Abatement;
    use crate::{
        AnswerView, Candidate, Doic, DoicConfig, PeerPolicy, RequestView, ThrottleResult, Treatment,
    };

    const S1: &str = "s1.example";

    fn cfg(trusted: bool, result: ThrottleResult) -> DoicConfig {
        let mut cfg = DoicConfig::default();
        cfg.peers.insert(
            S1.into(),
            PeerPolicy {
                trusted,
                ..PeerPolicy::default()
            },
        );
        cfg.throttle_result = result;
        cfg
    }

    fn request() -> RequestView<'static> {
        RequestView {
            app_id: 4,
            command_code: 272,
            from_peer: "client.example",
            dest_realm: "example",
            dest_host: Some(S1),
            features: None,
            drmp: None,
        }
    }

    const ROUTE: [Candidate<'static>; 1] = [Candidate {
        peer: S1,
        server: Some(S1),
    }];

    /// A core holding s1's 100 % host report (sequence 7) received at `t0`,
    /// validity 30 s.
    fn overloaded(t0: Instant, result: ThrottleResult) -> Doic {
        let mut core = Doic::new("agent.example", cfg(true, result), 42, 1_000).unwrap();
        let Treatment::Forward { tx, .. } = core.treat(t0, &request(), &ROUTE) else {
            unreachable!()
        };
        let mut olr = OcOlr::new(7, ReportType::Host);
        olr.reduction_percentage = Some(100);
        olr.validity_duration = Some(30);
        let olrs = [olr];
        let answer = AnswerView {
            app_id: 4,
            origin_host: S1,
            origin_realm: "example",
            result_code: Some(2001),
            experimental_result_code: None,
            features: None,
            olrs: &olrs,
        };
        core.on_answer(t0, &tx, S1, &answer);
        core
    }

    fn throttled_with(core: &mut Doic, now: Instant) -> Option<u32> {
        match core.treat(now, &request(), &ROUTE) {
            Treatment::Throttle { result, .. } => Some(result.code()),
            _ => None,
        }
    }

    /// RFC 7683 §8 and §5.2: the answer code changes from the next
    /// throttled request, the report in force stays.
    #[test]
    fn a_new_throttle_result_applies_at_once_and_the_ocs_stays() {
        let t0 = Instant::now();
        let mut core = overloaded(t0, ThrottleResult::TooBusy);
        let t1 = t0 + Duration::from_millis(1);
        assert_eq!(throttled_with(&mut core, t1), Some(3004));
        let ended = core
            .reconfigure(t1, &cfg(true, ThrottleResult::RetryNotAllowed))
            .unwrap();
        assert_eq!(ended, 0);
        assert_eq!(throttled_with(&mut core, t1), Some(5198));
        let ocs = core.ocs_entry(4, ReportType::Host, S1).unwrap();
        assert_eq!((ocs.sequence, ocs.received_at), (7, t0));
        assert_eq!(ocs.expires_at, t0 + Duration::from_secs(30));
    }

    /// RFC 7683 §10.2: once s1 is no longer trusted its OCS ends at the
    /// reload's instant, with the reason recorded, and its next report is
    /// not honoured.
    #[test]
    fn a_peer_no_longer_trusted_loses_its_ocs_with_the_reason() {
        let t0 = Instant::now();
        let mut core = overloaded(t0, ThrottleResult::TooBusy);
        let t1 = t0 + Duration::from_millis(250);
        let ended = core
            .reconfigure(t1, &cfg(false, ThrottleResult::TooBusy))
            .unwrap();
        assert_eq!(ended, 1);
        assert!(core.ocs_entry(4, ReportType::Host, S1).is_none());
        let last = core.audit().versions().last().unwrap();
        assert_eq!(
            (last.event, last.at, last.sequence),
            (OcsEvent::Untrusted, t1, 7)
        );
        assert_eq!(throttled_with(&mut core, t1), None);
        // Trusted again: nothing comes back by itself (state is not kept
        // for an untrusted peer).
        core.reconfigure(t1, &cfg(true, ThrottleResult::TooBusy))
            .unwrap();
        assert!(core.ocs_entry(4, ReportType::Host, S1).is_none());
    }

    /// RFC 7683 §5.2.1.4: the agent's own report versions keep growing
    /// across a reload.
    #[test]
    fn own_report_sequence_numbers_keep_growing() {
        let t0 = Instant::now();
        let mut core = overloaded(t0, ThrottleResult::Auto);
        let abate = Some(Abatement::Loss { percent: 20 });
        core.set_own_peer_report(t0, abate, Duration::from_secs(10));
        let before = core.own_peer_report.as_ref().unwrap().0.sequence;
        core.reconfigure(t0, &cfg(true, ThrottleResult::TooBusy))
            .unwrap();
        core.set_own_peer_report(
            t0,
            Some(Abatement::Loss { percent: 30 }),
            Duration::from_secs(10),
        );
        assert!(core.own_peer_report.as_ref().unwrap().0.sequence > before);
    }

    /// A section that does not validate changes nothing; keys read at
    /// start keep their running values.
    #[test]
    fn a_bad_section_changes_nothing_and_start_only_keys_stay() {
        let t0 = Instant::now();
        let mut core = overloaded(t0, ThrottleResult::TooBusy);
        let mut bad = cfg(false, ThrottleResult::RetryNotAllowed);
        bad.probe_interval = Duration::ZERO;
        assert!(core.reconfigure(t0, &bad).is_err());
        assert_eq!(core.config().throttle_result, ThrottleResult::TooBusy);
        assert!(core.ocs_entry(4, ReportType::Host, S1).is_some());
        let mut other = cfg(true, ThrottleResult::TooBusy);
        other.max_ocs = 1;
        other.peer_report = false;
        assert_eq!(
            core.config().start_only_changes(&other),
            ["doic.peer_report", "doic.max_ocs"]
        );
        core.reconfigure(t0, &other).unwrap();
        assert_eq!(core.config().max_ocs, DoicConfig::default().max_ocs);
        assert!(core.config().peer_report);
    }
}
