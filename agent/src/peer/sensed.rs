//! What the relay senses of an upstream peer for its protection
//! (docs/protect.md, [`doic::protect`]): every answer's latency and outcome,
//! the requests the agent throttled for it, and the application of its
//! traffic, accumulated between two control ticks.
//!
//! The answers of one upstream connection are handled on one worker, so
//! the counters' cache line is written by one thread and read by the
//! control thread every 100 ms; they sit on a line of their own, apart from
//! the slot's other counters. The answers' counter is never reset: the
//! worker adds with a plain load and store, no locked instruction, and
//! [`Sensed::take`] takes the difference from the value it saw last.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use doic::protect::{Outcome, Samples};

/// The accumulators of one peer since the last control tick.
///
/// The common answer costs a plain load and store (count and latency
/// packed in one word, [`ANSWER`]) and two plain loads (the minimum and the
/// application rarely change).
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct Sensed {
    /// Answers in the bits from [`ANSWER`] up, the sum of their latencies
    /// in microseconds below, since the start (wrapping): written by the
    /// upstream connection's worker alone.
    answered: AtomicU64,
    /// `answered` as [`Sensed::take`] saw it last: the control thread's.
    answered_taken: AtomicU64,
    busy: AtomicU64,
    timeouts: AtomicU64,
    with_features: AtomicU64,
    /// `u64::MAX` when no answer came.
    min_latency_ns: AtomicU64,
    throttled: AtomicU64,
    app: AtomicU32,
}

/// What [`Sensed::take`] returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// The answers.
    pub samples: Samples,
    /// Requests for the peer the agent answered itself.
    pub throttled: u64,
    /// The Application-ID of the last answer (0: none yet).
    pub app: u32,
}

/// One answer in [`Sensed::answered`]: the latency sum in microseconds
/// takes the 44 bits below (200 days of latency per tick), the count the
/// 20 above. The difference of two readings is exact while it stays below
/// 2^63 (half a million answers per tick); a larger one can only be a
/// reading that went back (two writers at once, a connection replaced on
/// another worker), counted as nothing.
const ANSWER: u64 = 1 << 44;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1)
}

impl Sensed {
    /// Counters with nothing recorded.
    #[must_use]
    pub fn new() -> Self {
        Self {
            min_latency_ns: AtomicU64::new(u64::MAX),
            ..Self::default()
        }
    }

    /// One answer to a request of application `app` sent `latency` ago (or
    /// its timeout); `features`: it carried OC-Supported-Features.
    pub fn record(&self, latency: Duration, outcome: Outcome, features: bool, app: u32) {
        match outcome {
            Outcome::Answered => {
                let ns = nanos(latency);
                let us = (ns / 1000).min(ANSWER - 1);
                // One writer: no locked add (see the module's docs).
                let sum = self.answered.load(Ordering::Relaxed);
                self.answered
                    .store(sum.wrapping_add(ANSWER + us), Ordering::Relaxed);
                if ns < self.min_latency_ns.load(Ordering::Relaxed) {
                    self.min_latency_ns.fetch_min(ns, Ordering::Relaxed);
                }
            }
            Outcome::Busy => {
                self.busy.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Timeout => {
                self.timeouts.fetch_add(1, Ordering::Relaxed);
            }
        }
        if features {
            self.with_features.fetch_add(1, Ordering::Relaxed);
        }
        if self.app.load(Ordering::Relaxed) != app {
            self.app.store(app, Ordering::Relaxed);
        }
    }

    /// A request for the peer answered by the agent (its limit bound).
    pub fn record_throttled(&self) {
        self.throttled.fetch_add(1, Ordering::Relaxed);
    }

    /// Everything recorded since the last call, the counters reset (the
    /// answers' taken as a difference). Called by one thread, the control
    /// thread.
    pub fn take(&self) -> Taken {
        let min = self.min_latency_ns.swap(u64::MAX, Ordering::Relaxed);
        let now = self.answered.load(Ordering::Relaxed);
        let mut answered = now.wrapping_sub(self.answered_taken.load(Ordering::Relaxed));
        if answered >> 63 == 0 {
            self.answered_taken.store(now, Ordering::Relaxed);
        } else {
            answered = 0;
        }
        Taken {
            samples: Samples {
                answered: answered / ANSWER,
                busy: self.busy.swap(0, Ordering::Relaxed),
                timeouts: self.timeouts.swap(0, Ordering::Relaxed),
                with_features: self.with_features.swap(0, Ordering::Relaxed),
                min_latency: (min != u64::MAX).then(|| Duration::from_nanos(min)),
                latency_sum: Duration::from_micros(answered % ANSWER),
            },
            throttled: self.throttled.swap(0, Ordering::Relaxed),
            app: self.app.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_then_takes_and_resets() {
        let s = Sensed::new();
        assert_eq!(s.take(), Taken::default());
        s.record(Duration::from_millis(4), Outcome::Answered, false, 4);
        s.record(Duration::from_millis(2), Outcome::Answered, true, 4);
        s.record(Duration::from_millis(1), Outcome::Busy, false, 16_777_238);
        s.record(Duration::from_secs(10), Outcome::Timeout, false, 16_777_238);
        s.record_throttled();
        let t = s.take();
        assert_eq!(
            (t.samples.answered, t.samples.busy, t.samples.timeouts),
            (2, 1, 1)
        );
        assert_eq!(t.samples.with_features, 1);
        assert_eq!(t.samples.min_latency, Some(Duration::from_millis(2)));
        assert_eq!(t.samples.latency_sum, Duration::from_millis(6));
        assert_eq!((t.throttled, t.app), (1, 16_777_238));
        let again = s.take();
        assert_eq!(again.samples, Samples::default());
        assert_eq!(again.app, 16_777_238);
    }

    #[test]
    fn answers_are_taken_as_differences_across_the_counter_wrapping() {
        let s = Sensed::new();
        // Just below the wrap of the 64-bit word: 2^20 answers.
        s.answered.store(u64::MAX - ANSWER, Ordering::Relaxed);
        s.answered_taken.store(u64::MAX - ANSWER, Ordering::Relaxed);
        for _ in 0..3 {
            s.record(Duration::from_millis(1), Outcome::Answered, false, 4);
        }
        let t = s.take();
        assert_eq!(t.samples.answered, 3);
        assert_eq!(t.samples.latency_sum, Duration::from_millis(3));
        assert_eq!(s.take().samples.answered, 0);
        // A reading that went back is nothing, and the next is measured
        // from the higher one.
        let high = s.answered.load(Ordering::Relaxed);
        s.answered.store(high - ANSWER, Ordering::Relaxed);
        assert_eq!(s.take().samples.answered, 0);
        s.answered.store(high + 2 * ANSWER, Ordering::Relaxed);
        assert_eq!(s.take().samples.answered, 2);
    }
}
