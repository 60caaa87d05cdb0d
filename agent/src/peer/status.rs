//! What `GET /peers` shows of each peer (docs/status.md): its state under
//! the RFC 6733 §5.6 names, its RFC 3539 watchdog state, since when, why it
//! was last down, its pending requests, its DOIC mode and the worker of its
//! connection.
//!
//! Read from the slots' atomics, which the connection tasks write when a
//! state changes; the locks taken here (the remote address, the last
//! cause) are ones the request path never takes.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};

use diameter::codec::value::Time;
use diameter::peer::watchdog::WatchdogState;
use serde::Serialize;

use super::table::{PeerSlot, PeerTable, state};

/// The slot's status fields for `GET /peers`: each
/// written by the connection's task when it changes, read by the metrics
/// listener without a lock.
#[derive(Debug)]
pub(crate) struct Shown {
    /// A `[[peer]]` entry (else accepted by an `[accept]` pattern).
    pub(crate) configured: bool,
    /// The registered connection was dialled by the peer.
    pub(crate) responder: AtomicBool,
    /// The worker running the registered connection (`usize::MAX`: none
    /// yet).
    pub(crate) worker: AtomicUsize,
    /// The RFC 3539 watchdog state, [`WatchdogState::as_metric`].
    pub(crate) watchdog: AtomicU8,
    /// Unix time in milliseconds of the last change of the state or the
    /// watchdog state (0: never changed).
    pub(crate) since_ms: AtomicU64,
}

impl Shown {
    pub(super) fn new(configured: bool) -> Self {
        Self {
            configured,
            responder: AtomicBool::new(false),
            worker: AtomicUsize::new(usize::MAX),
            watchdog: AtomicU8::new(WatchdogState::Initial.as_metric()),
            since_ms: AtomicU64::new(0),
        }
    }

    /// Marks a change now (the wall clock: the time an operator reads).
    pub(super) fn changed(&self) {
        self.since_ms.store(unix_ms(), Ordering::Relaxed);
    }
}

/// One peer as `GET /peers` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerStatus {
    /// Its DiameterIdentity (Origin-Host).
    pub name: String,
    /// `configured` (a `[[peer]]`) or `accepted` (an `[accept]` pattern).
    pub kind: &'static str,
    /// The open connection's remote address, else where the agent dials.
    pub address: Option<String>,
    /// RFC 6733 §5.6 state: `Closed`, `Wait-I-CEA`, `I-Open`, `R-Open`,
    /// `Closing`.
    pub state: &'static str,
    /// RFC 3539 Appendix A watchdog state: `INITIAL`, `OKAY`, `SUSPECT`,
    /// `DOWN`, `REOPEN`.
    pub watchdog: &'static str,
    /// When the state or the watchdog state last changed, RFC 3339 UTC
    /// (`None`: never since the agent started).
    pub since: Option<String>,
    /// Seconds since then.
    pub since_seconds: Option<u64>,
    /// Why the peer was last down, as the `peer down` log line gives it.
    pub last_error: Option<String>,
    /// Requests sent to it and not yet answered.
    pub pending: u32,
    /// DOIC as configured and sensed (`None` when overload control is off).
    pub doic: Option<DoicStatus>,
    /// The worker running its connection (the last one, when closed).
    pub worker: Option<usize>,
}

/// A peer's DOIC as `GET /peers` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DoicStatus {
    /// `[[peer]] doic`: `auto`, `native` or `protect`.
    pub mode: doic::protect::Mode,
    /// What the agent found of it as an upstream server (docs/protect.md):
    /// `supports_doic` (its answers carry OC-Supported-Features),
    /// `limited` (protected, a limit in force), `no_doic_seen`; `None`
    /// when it is no upstream server the protection watches.
    pub sensed: Option<&'static str>,
}

/// The RFC 6733 §5.6 name of a slot's state.
fn fsm_name(slot: &PeerSlot) -> &'static str {
    let responder = slot.shown.responder.load(Ordering::Relaxed);
    match slot.state() {
        state::CONNECTING => "Wait-I-CEA",
        state::OKAY | state::SUSPECT if responder => "R-Open",
        state::OKAY | state::SUSPECT => "I-Open",
        state::CLOSING => "Closing",
        _ => "Closed",
    }
}

/// The RFC 3539 name of [`diameter::peer::watchdog::WatchdogState::as_metric`].
fn watchdog_name(n: u8) -> &'static str {
    match n {
        1 => "OKAY",
        2 => "SUSPECT",
        3 => "DOWN",
        4 => "REOPEN",
        _ => "INITIAL",
    }
}

/// Every peer present (accepted peers that are gone left out), in table
/// order, at Unix time `now_ms`; `doic` gives a peer's DOIC by name (the
/// metrics listener asks the overload control).
#[must_use]
pub fn peers(
    table: &PeerTable,
    doic: impl Fn(&str) -> Option<DoicStatus>,
    now_ms: u64,
) -> Vec<PeerStatus> {
    table
        .present()
        .into_iter()
        .map(|(_, slot)| {
            let shown = &slot.shown;
            let since_ms = shown.since_ms.load(Ordering::Relaxed);
            let since = (since_ms > 0).then_some(since_ms);
            let worker = shown.worker.load(Ordering::Relaxed);
            let doic = doic(&slot.host);
            PeerStatus {
                name: slot.host.clone(),
                kind: if shown.configured {
                    "configured"
                } else {
                    "accepted"
                },
                address: slot.remote().or(slot.connect).map(|a| a.to_string()),
                state: fsm_name(&slot),
                watchdog: watchdog_name(shown.watchdog.load(Ordering::Relaxed)),
                since: since.and_then(|ms| {
                    Time::from_unix(i64::try_from(ms / 1000).ok()?).map(Time::to_rfc3339)
                }),
                since_seconds: since.map(|ms| now_ms.saturating_sub(ms) / 1000),
                last_error: slot.down_cause(),
                pending: slot.outstanding.load(Ordering::Relaxed),
                doic,
                worker: (worker != usize::MAX).then_some(worker),
            }
        })
        .collect()
}

/// The Unix time in milliseconds (the wall clock an operator reads).
#[must_use]
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::test_link::Queue;

    #[test]
    fn states_are_named_as_rfc_6733_and_rfc_3539_name_them() {
        let slot = PeerSlot::configured("s.example.net", "example.net", None);
        assert_eq!(fsm_name(&slot), "Closed");
        let tx = Queue::new().link();
        assert!(slot.begin_connecting(1, tx.clone()));
        assert_eq!(fsm_name(&slot), "Wait-I-CEA", "§5.6: CER sent");
        assert!(slot.try_open(1, tx, false, "agent.example.com", None));
        slot.set_state(state::OKAY);
        assert_eq!(fsm_name(&slot), "I-Open", "the agent dialled");
        slot.set_state(state::CLOSING);
        assert_eq!(fsm_name(&slot), "Closing");
        slot.release(1);
        assert_eq!(fsm_name(&slot), "Closed");
        let tx = Queue::new().link();
        assert!(slot.try_open(2, tx, true, "agent.example.com", None));
        slot.set_state(state::SUSPECT);
        assert_eq!(fsm_name(&slot), "R-Open", "the peer dialled");
        for (w, name) in [
            (WatchdogState::Initial, "INITIAL"),
            (WatchdogState::Okay, "OKAY"),
            (WatchdogState::Suspect, "SUSPECT"),
            (WatchdogState::Down, "DOWN"),
            (WatchdogState::Reopen, "REOPEN"),
        ] {
            assert_eq!(watchdog_name(w.as_metric()), name);
        }
    }

    #[test]
    fn a_change_is_dated_and_a_repeat_is_not() {
        let table = PeerTable::default();
        let id = table
            .lookup_or_add("c.example.org", Some("example.org"))
            .unwrap();
        let slot = table.get(id).unwrap();
        assert!(slot.is_gone(), "accepted and not connected");
        assert!(peers(&table, |_| None, unix_ms()).is_empty());
        slot.set_state(state::OKAY);
        slot.set_watchdog_state(WatchdogState::Okay);
        let at = slot.shown.since_ms.load(Ordering::Relaxed);
        assert!(at > 0);
        slot.shown.since_ms.store(1_000, Ordering::Relaxed);
        slot.set_state(state::OKAY);
        slot.set_watchdog_state(WatchdogState::Okay);
        assert_eq!(
            slot.shown.since_ms.load(Ordering::Relaxed),
            1_000,
            "no change, no date"
        );
        let shown = peers(&table, |_| None, 61_000);
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].kind, "accepted");
        assert_eq!(shown[0].watchdog, "OKAY");
        assert_eq!(shown[0].since.as_deref(), Some("1970-01-01T00:00:01Z"));
        assert_eq!(shown[0].since_seconds, Some(60));
        slot.set_state(state::CLOSED);
        assert!(
            peers(&table, |_| None, unix_ms()).is_empty(),
            "gone: left out"
        );
    }
}
