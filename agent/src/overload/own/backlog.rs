//! The agent's queue delay as the kernel holds it: the bytes each peer
//! sent that wait unread in its connection's socket
//! ([`crate::peer::table::PeerSlot::unread`]), over the rate the agent read
//! that peer's bytes at since the last reading (Little's law: the time the
//! agent needs to get through what waits for it). The control thread
//! reads it every tick, whatever the worker that owns the connection does:
//! a worker that never yields in a small CPU share reads less and less of
//! a socket that fills, and the delay grows with the backlog.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::peer::table::PeerTable;

/// The longest delay one reading gives (a socket that was not read for
/// a whole interval says little more than that it waits).
const MAX_DELAY: Duration = Duration::from_secs(10);

/// What the backlog reading keeps between ticks: per peer, its bytes read
/// and unread at the last reading.
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    last: HashMap<String, (u64, usize)>,
    at: Option<Instant>,
}

impl Backlog {
    /// The longest backlog delay of any peer at `now` (control thread).
    pub(crate) fn handle_tick(&mut self, table: &PeerTable, now: Instant) -> Duration {
        let dt = self
            .at
            .replace(now)
            .map(|at| now.saturating_duration_since(at));
        let mut longest = Duration::ZERO;
        let mut seen = HashMap::with_capacity(self.last.len());
        for (_, slot) in table.all() {
            let Some(unread) = slot.unread() else {
                continue;
            };
            let read = slot.stats.bytes_in.load(Ordering::Relaxed);
            if let (Some(dt), Some(&(before, waiting))) = (dt, self.last.get(&slot.host)) {
                longest = longest.max(delay(unread, waiting, read.saturating_sub(before), dt));
            }
            seen.insert(slot.host.clone(), (read, unread));
        }
        self.last = seen;
        longest
    }
}

/// The delay of `unread` bytes waiting, when `read` bytes were read in the
/// last `dt` and `waiting` bytes waited at its start: `unread` at the rate
/// of `read` per `dt`; with nothing read, `dt` if bytes already waited at
/// its start (they waited all of it), else none (they just arrived).
pub(crate) fn delay(unread: usize, waiting: usize, read: u64, dt: Duration) -> Duration {
    if unread == 0 {
        return Duration::ZERO;
    }
    if read == 0 {
        return if waiting > 0 {
            dt.min(MAX_DELAY)
        } else {
            Duration::ZERO
        };
    }
    #[expect(clippy::cast_precision_loss, reason = "byte counts")]
    let d = dt.as_secs_f64() * unread as f64 / read as f64;
    Duration::from_secs_f64(d.min(MAX_DELAY.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_delay_is_what_waits_at_the_rate_it_is_read() {
        let tick = Duration::from_millis(100);
        // Nothing waits: no delay, whatever was read.
        assert_eq!(delay(0, 5000, 100, tick), Duration::ZERO);
        // 2 MB wait, 200 kB read in 100 ms: a second's backlog.
        assert_eq!(delay(2_000_000, 0, 200_000, tick), Duration::from_secs(1));
        // Bytes that just arrived at an idle connection: no delay.
        assert_eq!(delay(120, 0, 0, tick), Duration::ZERO);
        // Bytes that waited the whole interval, none read: the interval.
        assert_eq!(delay(120, 120, 0, tick), tick);
        // Bounded.
        assert_eq!(delay(usize::MAX, 1, 1, tick), MAX_DELAY);
    }
}
