//! A client's own-overload limit, as its peer slot holds it: the rate the
//! agent allocated it (RFC 8582 §6.1, §7.2), its bucket (§8.3) and what it
//! was answered for exceeding it. The state only: the enforcement and the
//! once-a-second update are in `overload::own` (RFC 8581 §6.2.4).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use doic::rate::RateControl;

/// One client's limit (in its peer slot).
#[derive(Debug, Default)]
pub struct ClientLimit {
    pub(crate) active: AtomicBool,
    pub(crate) rate: OnceLock<RateControl>,
    pub(crate) allocated: AtomicU32,
    /// Until when (nanoseconds since the agent's origin) a client that
    /// supports peer reports is not held to it ([`crate::overload::own::GRACE`]).
    pub(crate) grace_until: AtomicU64,
    pub(crate) throttled: AtomicU64,
    /// Whether its requests announce peer-report support (it receives the
    /// agent's own report).
    pub(crate) receives: AtomicBool,
}

impl ClientLimit {
    /// Its allocation, while held to it.
    #[must_use]
    pub fn allocated(&self) -> Option<u32> {
        self.active
            .load(Ordering::Relaxed)
            .then(|| self.allocated.load(Ordering::Relaxed))
    }

    /// Requests answered for exceeding it, since the agent started.
    #[must_use]
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    /// Whether its requests, while held to a limit, announced peer-report
    /// support.
    #[must_use]
    pub fn receives(&self) -> bool {
        self.receives.load(Ordering::Relaxed)
    }
}
