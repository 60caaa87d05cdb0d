//! The retry budget: how many requests the relay may send a second time,
//! after a 3004 DIAMETER_TOO_BUSY (RFC 6733 §7.1.3) or a failover with the T
//! flag (RFC 6733 §5.5.4), and to whom.
//!
//! RFC 7683 §8 lets a node that received 3004 try another peer, but a relay
//! that retries every 3004 turns an overload into more load: two servers at
//! ten times their capacity that answer 3004 would receive almost twice what
//! the clients sent. The budget follows Envoy's retry budgets
//! (`budget_percent`, `min_retry_concurrency`) with a rate instead of a
//! concurrency:
//!
//! - over a sliding window of [`WINDOW`], retries stay at or below
//!   `budget_percent` of the requests relayed, or `min_retries_per_second`
//!   when that is larger (so light traffic can always retry);
//! - a retry is never sent to a peer known to be overloaded: one that
//!   answered 3004 within the last `overloaded_seconds` (a DOIC OCS in force
//!   abates retries through the second treatment, RFC 8581 §5, in
//!   `Relay::dispatch`).
//!
//! Over the budget the 3004 goes to the client as it came (RFC 7683 §8: the
//! client decides). RFC 6733 §7.1.3 says a node receiving 3004 SHOULD try
//! an alternate peer; the budget keeps that SHOULD for light traffic and
//! the first retries of a burst, and drops it where RFC 7683 §8 warns that
//! "retrying would consume valuable resources during an occurrence of
//! overload". A failover after a connection loss or watchdog SUSPECT
//! is not refused (the pending requests were accepted and their peer can no
//! longer answer: each moves once, at most the pending table, whatever the
//! load), but it is counted, so that 3004 retries give way meanwhile.
//!
//! [`RetryBudget`] is sans-io: every input carries `now`, and its tests run
//! on a simulated clock. [`RetryGate`] shares one budget between the
//! workers: the request count is one relaxed atomic per request, the mutex
//! is taken only when a retry is considered or a 3004 arrives.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::routing::PeerId;

/// The sliding window the share is measured over.
pub const WINDOW: Duration = Duration::from_secs(1);
/// Slots of the window (each `WINDOW / SLOTS` long).
const SLOTS: usize = 10;
/// Peers remembered as overloaded at most (a bound; the oldest mark goes).
const MAX_MARKS: usize = 1024;

pub use crate::config::RetryConfig;

/// Why a retry is not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Retries already reached the share of the window.
    Budget,
}

/// One slot of the window.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// Which slot since the origin (`None`: never used).
    index: Option<u64>,
    /// The cumulative request count when the slot was first observed.
    requests_at: u64,
    /// Retries counted in the slot.
    retries: u64,
}

/// The budget of one agent (sans-io). Call [`RetryBudget::try_retry`]
/// before a 3004 retry, [`RetryBudget::refund`] when it found no peer,
/// [`RetryBudget::note_failover`] for each failover, and
/// [`RetryBudget::handle_too_busy`] for each 3004; `requests` is always the
/// cumulative count of requests relayed.
#[derive(Debug)]
pub struct RetryBudget {
    percent: f64,
    min: u64,
    overloaded_for: Duration,
    origin: Option<Instant>,
    latest: u64,
    slots: [Slot; SLOTS],
    marks: Vec<(PeerId, Instant)>,
}

impl RetryBudget {
    /// A budget for `cfg` (checked).
    #[must_use]
    pub fn new(cfg: &RetryConfig) -> Self {
        Self {
            percent: cfg.budget_percent,
            min: u64::from(cfg.min_retries_per_second),
            overloaded_for: Duration::from_secs_f64(cfg.overloaded_seconds),
            origin: None,
            latest: 0,
            slots: [Slot::default(); SLOTS],
            marks: Vec::new(),
        }
    }

    fn slot_len() -> Duration {
        WINDOW / SLOTS as u32
    }

    /// Brings the window to `now` and gives the current slot's position.
    fn observe(&mut self, now: Instant, requests: u64) -> usize {
        let origin = *self.origin.get_or_insert(now);
        let since = now.saturating_duration_since(origin);
        let index = u64::try_from(since.as_nanos() / Self::slot_len().as_nanos())
            .unwrap_or(u64::MAX)
            // Workers read the clock before the lock: never step back.
            .max(self.latest);
        self.latest = index;
        let pos = (index % SLOTS as u64) as usize;
        if self.slots[pos].index != Some(index) {
            self.slots[pos] = Slot {
                index: Some(index),
                requests_at: requests,
                retries: 0,
            };
        }
        pos
    }

    /// The slots of the window ending at the current slot.
    fn in_window(&self) -> impl Iterator<Item = &Slot> {
        let oldest = self.latest.saturating_sub(SLOTS as u64 - 1);
        self.slots
            .iter()
            .filter(move |s| s.index.is_some_and(|i| i >= oldest))
    }

    /// Retries the window allows at `requests`: the share of the requests
    /// relayed since its oldest slot, or the minimum.
    fn allowance(&self, requests: u64) -> u64 {
        let first = self
            .in_window()
            .map(|s| s.requests_at)
            .min()
            .unwrap_or(requests);
        let relayed = requests.saturating_sub(first);
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a share of a request count, non-negative and below it"
        )]
        let share = (relayed as f64 * self.percent / 100.0) as u64;
        share.max(self.min)
    }

    /// Retries counted over the window.
    #[must_use]
    pub fn retries(&self) -> u64 {
        self.in_window().map(|s| s.retries).sum()
    }

    /// Takes one retry out of the budget at `now`.
    ///
    /// # Errors
    /// [`Refusal::Budget`] when the window's retries already reached the
    /// allowance.
    pub fn try_retry(&mut self, now: Instant, requests: u64) -> Result<(), Refusal> {
        let pos = self.observe(now, requests);
        if self.retries() >= self.allowance(requests) {
            return Err(Refusal::Budget);
        }
        self.slots[pos].retries += 1;
        Ok(())
    }

    /// Gives back a retry taken at `now` that was not sent (no peer).
    pub fn refund(&mut self, now: Instant, requests: u64) {
        let pos = self.observe(now, requests);
        let s = &mut self.slots[pos];
        s.retries = s.retries.saturating_sub(1);
    }

    /// Counts a failover at `now` (never refused).
    pub fn note_failover(&mut self, now: Instant, requests: u64) {
        let pos = self.observe(now, requests);
        self.slots[pos].retries += 1;
    }

    /// `peer` answered 3004 at `now`.
    pub fn handle_too_busy(&mut self, now: Instant, peer: PeerId) {
        if self.overloaded_for.is_zero() {
            return;
        }
        if let Some(m) = self.marks.iter_mut().find(|(p, _)| *p == peer) {
            m.1 = m.1.max(now);
            return;
        }
        if self.marks.len() >= MAX_MARKS
            && let Some(oldest) = self
                .marks
                .iter()
                .enumerate()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(i, _)| i)
        {
            self.marks.swap_remove(oldest);
        }
        self.marks.push((peer, now));
    }

    /// True when `peer` answered 3004 within `overloaded_seconds` of `now`.
    #[must_use]
    pub fn is_overloaded(&self, now: Instant, peer: PeerId) -> bool {
        self.marks
            .iter()
            .any(|(p, at)| *p == peer && now.saturating_duration_since(*at) < self.overloaded_for)
    }

    /// The peers overloaded at `now`.
    pub fn overloaded(&self, now: Instant) -> impl Iterator<Item = PeerId> + '_ {
        self.marks
            .iter()
            .filter(move |(_, at)| now.saturating_duration_since(*at) < self.overloaded_for)
            .map(|(p, _)| *p)
    }
}

/// Retry counters, by reason, for `/metrics`.
#[derive(Debug, Default)]
pub struct RetryStats {
    /// Retries sent after 3004.
    pub too_busy: AtomicU64,
    /// Requests failed over with the T flag.
    pub failover: AtomicU64,
    /// 3004 retries refused: the budget was spent.
    pub refused_budget: AtomicU64,
    /// 3004 retries refused: every alternate was overloaded.
    pub refused_overloaded: AtomicU64,
    /// 3004 retries not sent: no alternate at all.
    pub refused_no_alternate: AtomicU64,
}

/// The budget shared by the workers.
#[derive(Debug)]
pub struct RetryGate {
    requests: AtomicU64,
    budget: Mutex<RetryBudget>,
    /// Counters.
    pub stats: RetryStats,
}

impl RetryGate {
    /// A gate for `cfg`.
    #[must_use]
    pub fn new(cfg: &RetryConfig) -> Self {
        Self {
            requests: AtomicU64::new(0),
            budget: Mutex::new(RetryBudget::new(cfg)),
            stats: RetryStats::default(),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut RetryBudget, u64) -> R) -> R {
        let requests = self.requests.load(Ordering::Relaxed);
        let mut b = self
            .budget
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut b, requests)
    }

    /// A request was relayed upstream for the first time.
    pub fn note_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// See [`RetryBudget::try_retry`].
    ///
    /// # Errors
    /// As [`RetryBudget::try_retry`].
    pub fn try_retry(&self, now: Instant) -> Result<(), Refusal> {
        self.with(|b, n| b.try_retry(now, n))
    }

    /// See [`RetryBudget::refund`].
    pub fn refund(&self, now: Instant) {
        self.with(|b, n| b.refund(now, n));
    }

    /// See [`RetryBudget::note_failover`]; counted in the metrics.
    pub fn note_failover(&self, now: Instant) {
        self.stats.failover.fetch_add(1, Ordering::Relaxed);
        self.with(|b, n| b.note_failover(now, n));
    }

    /// See [`RetryBudget::handle_too_busy`].
    pub fn handle_too_busy(&self, now: Instant, peer: PeerId) {
        self.with(|b, _| b.handle_too_busy(now, peer));
    }

    /// The peers overloaded at `now`, appended to `out` (once each).
    pub fn overloaded_into(&self, now: Instant, out: &mut Vec<PeerId>) -> usize {
        self.with(|b, _| {
            let before = out.len();
            for p in b.overloaded(now) {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
            out.len() - before
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(percent: f64, min: u32) -> RetryBudget {
        RetryBudget::new(&RetryConfig {
            budget_percent: percent,
            min_retries_per_second: min,
            overloaded_seconds: 1.0,
        })
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn light_traffic_retries_up_to_the_minimum() {
        let t0 = Instant::now();
        let mut b = budget(10.0, 3);
        // 4 requests, each answered 3004: 3 retries, not a fourth.
        for i in 0..3 {
            assert_eq!(b.try_retry(t0 + i * MS, i.into()), Ok(()));
        }
        assert_eq!(b.try_retry(t0 + 3 * MS, 4), Err(Refusal::Budget));
        // A window later the minimum is there again.
        assert_eq!(b.try_retry(t0 + WINDOW + 4 * MS, 5), Ok(()));
    }

    #[test]
    fn retries_stay_within_the_share_of_the_window() {
        // 10 requests per millisecond for 3 s, every one answered 3004 and
        // offered for a retry: at most 10 % of each window is retried.
        let t0 = Instant::now();
        let mut b = budget(10.0, 5);
        let (mut requests, mut retried) = (0u64, 0u64);
        let mut per_window = vec![0u64; 3];
        for ms in 0..3000u32 {
            for _ in 0..10 {
                requests += 1;
                if b.try_retry(t0 + ms * MS, requests).is_ok() {
                    retried += 1;
                    per_window[(ms / 1000) as usize] += 1;
                }
            }
        }
        // The first window grows from nothing; the steady ones hold the share.
        assert!(retried <= requests / 10 + 5, "{retried} of {requests}");
        for w in &per_window[1..] {
            assert!((900..=1000).contains(w), "{per_window:?}");
        }
    }

    #[test]
    fn failovers_are_never_refused_but_spend_the_budget() {
        let t0 = Instant::now();
        let mut b = budget(10.0, 2);
        for _ in 0..50 {
            b.note_failover(t0, 100);
        }
        assert_eq!(b.retries(), 50);
        assert_eq!(b.try_retry(t0 + MS, 200), Err(Refusal::Budget));
        // Once the failovers leave the window, 3004 retries come back.
        assert_eq!(b.try_retry(t0 + WINDOW + MS, 300), Ok(()));
    }

    #[test]
    fn a_refund_gives_the_retry_back() {
        let t0 = Instant::now();
        let mut b = budget(0.0, 1);
        assert_eq!(b.try_retry(t0, 0), Ok(()));
        assert_eq!(b.try_retry(t0, 0), Err(Refusal::Budget));
        b.refund(t0, 0);
        assert_eq!(b.try_retry(t0, 0), Ok(()));
    }

    #[test]
    fn a_clock_read_late_does_not_step_the_window_back() {
        let t0 = Instant::now();
        let mut b = budget(0.0, 1);
        assert_eq!(b.try_retry(t0 + 2 * WINDOW, 0), Ok(()));
        // Another worker read the clock earlier and took the lock later.
        assert_eq!(b.try_retry(t0 + WINDOW, 0), Err(Refusal::Budget));
    }

    #[test]
    fn a_peer_that_answered_3004_is_overloaded_for_a_while() {
        let t0 = Instant::now();
        let mut b = budget(10.0, 10);
        b.handle_too_busy(t0, 1);
        assert!(b.is_overloaded(t0 + 999 * MS, 1));
        assert!(!b.is_overloaded(t0, 0));
        assert_eq!(b.overloaded(t0).collect::<Vec<_>>(), vec![1]);
        assert!(!b.is_overloaded(t0 + WINDOW, 1));
        b.handle_too_busy(t0 + WINDOW, 1);
        assert!(b.is_overloaded(t0 + WINDOW + MS, 1));
        let mut off = RetryBudget::new(&RetryConfig {
            overloaded_seconds: 0.0,
            ..RetryConfig::default()
        });
        off.handle_too_busy(t0, 1);
        assert!(!off.is_overloaded(t0, 1));
    }

    #[test]
    fn marks_are_bounded() {
        let t0 = Instant::now();
        let mut b = budget(10.0, 10);
        for p in 0..MAX_MARKS + 10 {
            b.handle_too_busy(t0 + u32::try_from(p).unwrap() * MS / 100, p);
        }
        assert_eq!(b.marks.len(), MAX_MARKS);
        assert!(b.is_overloaded(t0 + 20 * MS, MAX_MARKS + 9));
        assert!(!b.is_overloaded(t0 + 20 * MS, 0), "the oldest went");
    }

    #[test]
    fn bad_values_are_named() {
        let bad = |c: RetryConfig| c.check().unwrap_err().key;
        let d = RetryConfig::default();
        assert!(d.check().is_ok());
        assert_eq!(
            bad(RetryConfig {
                budget_percent: 101.0,
                ..d
            }),
            "retry.budget_percent"
        );
        assert_eq!(
            bad(RetryConfig {
                budget_percent: f64::NAN,
                ..d
            }),
            "retry.budget_percent"
        );
        assert_eq!(
            bad(RetryConfig {
                overloaded_seconds: -1.0,
                ..d
            }),
            "retry.overloaded_seconds"
        );
        assert_eq!(
            bad(RetryConfig {
                min_retries_per_second: 2_000_000,
                ..d
            }),
            "retry.min_retries_per_second"
        );
    }
}
