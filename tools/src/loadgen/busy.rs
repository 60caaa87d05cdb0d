//! What a capacity-limited [`Server`](super::Server) does with the requests
//! it has no time for, the two ways RFC 7068 §2 describes an overloaded
//! server: it queues them (one server-wide FIFO served at C/s, so latency
//! grows without bound when offered more), or it rejects the excess with
//! 3004 DIAMETER_TOO_BUSY (RFC 6733 §7.1.3), each rejection costing a
//! fraction of a request's service time. Both count work server-wide, over
//! all its connections, on tokio's clock (so a test may pause it).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// What a server of `capacity` does above it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Busy {
    /// Answer 3004 at once above the capacity; a rejection costs `cost`
    /// (0..=1) of one request's service time, taken from the capacity left
    /// for the others. Up to a tenth of a second's capacity may come in one
    /// burst.
    Reject {
        /// Share of a request's service time one rejection takes.
        cost: f64,
    },
    /// Serve every request, one after another at the capacity, from one
    /// FIFO queue: each answer leaves when its turn is done.
    Queue,
}

impl Default for Busy {
    fn default() -> Self {
        Busy::Reject { cost: 0.0 }
    }
}

/// The burst a rejecting server takes before its first 3004: a tenth of a
/// second of work.
const BURST: Duration = Duration::from_millis(100);

/// The server-wide work clock: the instant its one worker is free again.
#[derive(Debug, Default)]
pub(crate) struct Work {
    free_at: Mutex<Option<Instant>>,
}

/// What to do with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Answer as configured, now.
    Serve,
    /// Answer 3004 now.
    Reject,
    /// Answer as configured at this instant (its turn in the queue done).
    At(Instant),
}

impl Work {
    /// The verdict on a request arriving `now` at a server of `capacity`
    /// requests per second behaving as `busy`.
    pub(crate) fn admit(&self, now: Instant, capacity: u32, busy: Busy) -> Verdict {
        let service = Duration::from_secs_f64(1.0 / f64::from(capacity.max(1)));
        let mut free_at = self
            .free_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = free_at.map_or(now, |f| f.max(now));
        match busy {
            Busy::Queue => {
                let done = start + service;
                *free_at = Some(done);
                Verdict::At(done)
            }
            Busy::Reject { cost } => {
                if start + service <= now + BURST {
                    *free_at = Some(start + service);
                    Verdict::Serve
                } else {
                    *free_at = Some(start + service.mul_f64(cost.clamp(0.0, 1.0)));
                    Verdict::Reject
                }
            }
        }
    }

    /// How long a request arriving `now` would wait before its service
    /// begins.
    pub(crate) fn backlog(&self, now: Instant) -> Duration {
        self.free_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .map_or(Duration::ZERO, |f| f.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_serves_one_after_another_at_the_capacity() {
        let w = Work::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // 100/s: 10 ms each, queued behind one another.
        assert_eq!(w.admit(t0, 100, Busy::Queue), Verdict::At(t0 + ms(10)));
        assert_eq!(w.admit(t0, 100, Busy::Queue), Verdict::At(t0 + ms(20)));
        assert_eq!(w.backlog(t0), ms(20));
        // After an idle spell the next one starts at once.
        assert_eq!(
            w.admit(t0 + ms(100), 100, Busy::Queue),
            Verdict::At(t0 + ms(110))
        );
    }

    #[test]
    fn rejection_takes_its_cost_from_the_capacity() {
        let t0 = Instant::now();
        // 100/s: a tenth of a second's burst is 10 requests.
        let served = |cost: f64| {
            let w = Work::default();
            let mut served = 0;
            // 1,000/s offered (ten times the capacity) for one second.
            for i in 0..1000u64 {
                let now = t0 + Duration::from_millis(i);
                if w.admit(now, 100, Busy::Reject { cost }) == Verdict::Serve {
                    served += 1;
                }
            }
            served
        };
        let free = served(0.0);
        assert!((100..=111).contains(&free), "{free}");
        // Each of ~900 rejections takes 5 % of a request: about 45 fewer
        // served (a = C - 0.05 (10 C - a)).
        let costly = served(0.05);
        assert!((55..=70).contains(&costly), "{costly}");
    }
}
