//! The agent holds every client to the rate it allocated it (RFC 8582
//! §6.1: a rate per reacting node; §7.2: the reporting node's allocation):
//! a DOIC client that keeps sending above its allocation after the peer
//! report (RFC 8581 §6.2.4) and every client that cannot receive one (no
//! DOIC, no peer-report support: RFC 7683 §5.2.3, no report of a type it
//! did not announce) has its excess answered at once, before routing and
//! DOIC treatment, with `[doic] throttle_result` (3004 DIAMETER_TOO_BUSY by
//! default, RFC 7683 §5.2.2; with the agent's own report toward a client
//! that supports peer reports, RFC 8581 §6.2.4).
//!
//! Each client's limit is a rate-algorithm bucket ([`RateControl`], RFC
//! 8582 §8.3) at its allocation, two priorities (§8.3.2: DRMP, RFC 7944,
//! and `[doic] priority` rules): higher-priority requests are throttled
//! last. Its tolerances are [`TOLERANCE_FACTOR`] times the reacting
//! node's, TAU1 at least [`MIN_TOLERANCE_MS`]. The limit lives in the
//! client's peer slot; its connection is handled on one worker, so its
//! bucket is not shared.
//!
//! The request path reads one relaxed flag ([`ClientLimits::enforcing`])
//! while the agent is not overloaded; the control thread sets the limits
//! once a second ([`update`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::super::Overload;
use super::super::cores::with_core;
use super::super::request::{Route, put_throttle_answer};
pub use crate::peer::limit::ClientLimit;
use crate::peer::table::PeerSlot;
use diameter::codec::{Header, Routing};
use doic::OcSupportedFeatures;
use doic::RequestView;
use doic::own_load::OwnLoad;
use doic::rate::RateControl;
use doic::treatment::{Cause, ThrottleAnswer};

/// How long a client that supports peer reports has, after its limit is
/// set, before its excess is answered: the report reaches it in the next
/// answer, and a reacting node abates from then (RFC 8582 §8.3.1).
pub const GRACE: Duration = Duration::from_secs(1);

/// The client's bucket tolerates this many times the reacting node's
/// tolerances (`[doic.rate]`, RFC 8582 §8.3.2: TAU1 = 5 T, TAU2 = 10 T by
/// default): a DOIC client that abates with its own bucket, randomised
/// (§8.3.3), at exactly its allocation is never answered for its jitter, and
/// a client that writes many requests at once keeps its allocation.
pub const TOLERANCE_FACTOR: f64 = 5.0;

/// The least TAU1 of a client's bucket in milliseconds, whatever its rate:
/// the CFS scheduler's default period. A worker reads a connection's
/// requests in batches and a batch comes in one burst; held to a CPU share
/// it reads about once per cgroup period, and a bucket then passes at most
/// its tolerance's worth per read. With the reacting node's 10 ms floor a
/// client of the agent in 1 ms per 50 ms, allocated 5,726/s and keeping to
/// it, had 1,303/s relayed and the rest answered 3004, and the agent, whose
/// estimate counts those 3004s, measured itself down to a third of what it
/// relays (docs/own-overload.md). The rate over a second is still the
/// allocation; a client idle for a while may send 100 ms of it at once.
pub(crate) const MIN_TOLERANCE_MS: f64 = 100.0;

/// The rate parameters of a client's bucket: the reacting node's
/// (`[doic.rate]`) with [`TOLERANCE_FACTOR`] and [`MIN_TOLERANCE_MS`].
pub(crate) fn client_params(rate: doic::rate::RateParams) -> doic::rate::RateParams {
    doic::rate::RateParams {
        tau1: rate.tau1 * TOLERANCE_FACTOR,
        tau2: rate.tau2 * TOLERANCE_FACTOR,
        tau1_floor_ms: rate.tau1_floor_ms.max(MIN_TOLERANCE_MS),
        ..rate
    }
}

/// Whether any client is held to its allocation: the request path's one
/// relaxed load, on a line of its own.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct ClientLimits {
    enforcing: AtomicBool,
}

impl ClientLimits {
    /// Whether any client's limit is set.
    #[inline]
    pub(crate) fn enforcing(&self) -> bool {
        self.enforcing.load(Ordering::Relaxed)
    }
}

fn nanos(ov: &Overload, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(ov.origin).as_nanos()).unwrap_or(u64::MAX)
}

/// The request from `slot`'s client, when it exceeds its limit: the answer
/// the agent sends at once, appended to `out` (the client connection's
/// output), and its Result-Code. `None`: it goes on, `out` untouched.
/// Called only while [`ClientLimits::enforcing`].
#[cold]
pub(crate) fn enforce(
    out: &mut BytesMut,
    ov: &Overload,
    route: &Route<'_>,
    slot: &PeerSlot,
    msg: &Bytes,
    head: Header,
    routing: &Routing<'_>,
) -> Option<u32> {
    let limit = &slot.own_limit;
    if !limit.active.load(Ordering::Relaxed) {
        return None;
    }
    let rate = limit.rate.get()?;
    let now = ov.clock.now();
    let features = routing
        .oc_supported_features()
        .and_then(|a| OcSupportedFeatures::from_raw(&a).ok());
    // The worker's core holds the `[doic]` in force (a reload replaces it,
    // `Overload::reconfigure`), without a lock.
    let (result, act) = with_core(ov, |core, _| {
        let cfg = core.config();
        let policy = cfg.peer(&slot.host);
        let receives = cfg.peer_report
            && policy.trusted
            && policy.receive_reports
            && doic::features::peer_supports_peer_report(features.as_ref(), &slot.host);
        if receives {
            if !limit.receives.load(Ordering::Relaxed) {
                limit.receives.store(true, Ordering::Relaxed);
            }
            if nanos(ov, now) < limit.grace_until.load(Ordering::Relaxed) {
                return None;
            }
        }
        let drmp = routing.drmp().and_then(|d| u8::try_from(d).ok());
        let priority = cfg.priority(head.application_id, head.command_code, drmp);
        if rate.admit(now, priority) {
            return None;
        }
        limit.throttled.fetch_add(1, Ordering::Relaxed);
        let result = ThrottleAnswer::for_cause(Cause::Peer, cfg.throttle_result);
        let view = RequestView {
            app_id: head.application_id,
            command_code: head.command_code,
            from_peer: &slot.host,
            dest_realm: "",
            dest_host: None,
            features: features.as_ref(),
            drmp,
        };
        // The report this answer carries is the one in force now: a
        // worker that relays without end in a small CPU share may not have
        // run its tick since the controller published it (the tick applies
        // it too), and an answer without it leaves the client unaware
        // (RFC 8581 §6.2.4: the report in every answer to the client).
        super::apply(ov, core, now);
        let act = core.local_answer(now, &view);
        // In the agent-wide totals of the audit log and /metrics.
        core.count_throttled_before_treatment(result);
        Some((result, act))
    })??;
    tracing::trace!(peer = %slot.host, code = result.code(), "own overload: client above its allocation");
    put_throttle_answer(out, route, msg, result, &act);
    Some(result.code())
}

/// Sets every client's limit to its allocation while `load` reports, and
/// lifts them when it does not (control thread, once a second, after the
/// controller ran).
pub(super) fn update<'a>(
    ov: &Overload,
    load: &OwnLoad,
    slots: impl Iterator<Item = &'a PeerSlot>,
    now: Instant,
) {
    let mut any = false;
    for slot in slots {
        let limit = &slot.own_limit;
        let allocation = load.allocation(&slot.host).filter(|_| load.is_reporting());
        let Some(a) = allocation else {
            if limit.active.swap(false, Ordering::Relaxed) {
                tracing::debug!(peer = %slot.host, "own overload: client limit lifted");
            }
            continue;
        };
        any = true;
        if limit.active.load(Ordering::Relaxed) {
            if limit.allocated.swap(a, Ordering::Relaxed) != a
                && let Some(r) = limit.rate.get()
            {
                r.set_rate(now, a);
            }
            continue;
        }
        let config = match client_params(ov.config().rate).bucket_config() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(peer = %slot.host, cause = %e, "own overload: client limit not set");
                continue;
            }
        };
        let r = limit
            .rate
            .get_or_init(|| RateControl::new(ov.origin, now, a, &config));
        r.activate(now, a);
        limit.allocated.store(a, Ordering::Relaxed);
        let grace = u64::try_from(GRACE.as_nanos()).unwrap_or(u64::MAX);
        limit
            .grace_until
            .store(nanos(ov, now).saturating_add(grace), Ordering::Relaxed);
        limit.active.store(true, Ordering::Release);
        tracing::info!(peer = %slot.host, allocation = a, "own overload: client held to its allocation");
    }
    ov.own.limits.enforcing.store(any, Ordering::Relaxed);
}

#[cfg(test)]
mod tests;
