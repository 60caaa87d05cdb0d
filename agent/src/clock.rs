//! The time base of the RFC 8582 §8.3 leaky bucket: monotonic nanoseconds,
//! read by the caller once per batch of requests and passed to every
//! decision as `now_ns` (the bucket itself never reads a clock).
//!
//! All clocks below count from the same origin (Linux `CLOCK_MONOTONIC`, the
//! time since boot), so values from any of them may be mixed in one bucket;
//! the coarse one lags the precise one by less than its resolution.
//!
//! The request path reads [`Clock`]: the CPU's invariant time-stamp counter
//! scaled to nanoseconds, as `governor` reads time through `quanta`. A read
//! of `CLOCK_MONOTONIC` through the vDSO orders the counter read with a
//! fence and a sequence lock, and costs about twice as much (see
//! `docs/bucket.md`, "Which clock").
//!
//! An agent on a caller's runtime ([`crate::agent::Agent::start_on`]) reads
//! that runtime's time instead ([`Clock::following`]), so that a test which
//! pauses tokio's clock pauses the request path's too.

use std::time::{Duration, Instant};

/// The request path's clock: the CPU's invariant counter (x86-64 `rdtsc`,
/// AArch64 `cntvct_el0`) through `quanta`, scaled to nanoseconds on the
/// origin of `CLOCK_MONOTONIC`: one counter read, one multiply, a shift by a
/// constant and an add per reading, no compare against a base (8.5 ns per
/// [`Clock::now_ns`] on the development machine, nearly all of it the
/// counter read, against 8.7 ns for governor's `QuantaClock`, 16.8 ns for
/// [`monotonic_ns`] and 16.6 ns for `Instant::now`; `cargo bench -p bench
/// --bench bucket` prints the figures of the machine it runs on). Where the CPU has no invariant counter, `quanta` reads
/// `CLOCK_MONOTONIC` instead, so the clock is never worse than that.
///
/// Readings on one thread never go back. Readings on different cores may
/// be a few nanoseconds out of order (the counter read is not serialised),
/// which the bucket tolerates by contract. The scale is `quanta`'s, which
/// calibrates it once per process against `CLOCK_MONOTONIC` (within 10 ns
/// over the calibration; it drifts from it by the calibration's error, a
/// few parts per million at most), so one component should take all its
/// times from one `Clock`.
#[derive(Clone, Debug)]
pub struct Clock {
    source: Source,
    /// `now_ns` at the clock's making, for [`Clock::now`].
    base_ns: u64,
    base: Instant,
}

/// What a [`Clock`] reads.
#[derive(Clone, Debug)]
enum Source {
    /// The CPU's counter (production): nanoseconds are
    /// `(raw * scale) >> SCALE_SHIFT` plus `offset` (wrapping).
    Counter {
        clock: quanta::Clock,
        scale: u64,
        offset: u64,
    },
    /// Another clock's `Instant`s: the time of the runtime the agent runs
    /// on ([`Clock::following`]).
    Following(fn() -> Instant),
}

/// The fixed point of [`Source::Counter`]'s scale: nanoseconds per counter
/// tick times 2^52. A tick is at most a few nanoseconds, so the scale fits
/// in 64 bits, the rounding errs by less than 2^-52 ns per tick (under a
/// nanosecond per month at 3 GHz), and `raw * scale` fits in 128 bits for
/// any counter value.
const SCALE_SHIFT: u32 = 52;

impl Clock {
    /// A clock anchored at the current time. The first clock of a process
    /// calibrates the counter (under a millisecond usually, at most 200 ms):
    /// make it at start-up, not on the request path.
    #[must_use]
    pub fn new() -> Clock {
        let clock = quanta::Clock::new();
        // quanta's scale at 52 bits: the nanoseconds of 2^52 ticks.
        let scale = clock.delta_as_nanos(0, 1 << SCALE_SHIFT);
        let scaled = |raw: u64| {
            let ns = (u128::from(raw) * u128::from(scale)) >> SCALE_SHIFT;
            u64::try_from(ns).unwrap_or(u64::MAX)
        };
        // The counter's reading between two reads of the monotonic clocks,
        // from the tightest of a few tries (a preemption between the reads
        // would put the midpoint off by half of it).
        let anchor = || {
            let (before_ns, before) = (monotonic_ns(), Instant::now());
            let raw = clock.raw();
            let (after_ns, after) = (monotonic_ns(), Instant::now());
            let gap = after_ns.saturating_sub(before_ns);
            (gap, raw, before_ns + gap / 2, before + (after - before) / 2)
        };
        let mut best = anchor();
        for _ in 0..16 {
            let next = anchor();
            if next.0 < best.0 {
                best = next;
            }
        }
        let (_, raw, base_ns, base) = best;
        Clock {
            source: Source::Counter {
                clock,
                scale,
                offset: base_ns.wrapping_sub(scaled(raw)),
            },
            base_ns,
            base,
        }
    }

    /// A clock that reads `now` instead of the CPU's counter: the agent on
    /// a caller's runtime ([`crate::agent::Agent::start_on`]) follows that
    /// runtime's time (`tokio::time::Instant`), which a test may pause and
    /// advance. [`Clock::now`] is then `now()` itself, and [`Clock::now_ns`]
    /// counts from `CLOCK_MONOTONIC` at the clock's making, advancing as
    /// `now` does. Each reading costs a call of `now` (the production
    /// [`Clock::new`] reads the counter, with no call).
    #[must_use]
    pub fn following(now: fn() -> Instant) -> Clock {
        Clock {
            source: Source::Following(now),
            base_ns: monotonic_ns(),
            base: now(),
        }
    }

    /// [`Clock::now_ns`] of a followed clock, out of the counter's way.
    #[cold]
    #[inline(never)]
    fn followed_ns(&self, now: fn() -> Instant) -> u64 {
        let d = now().saturating_duration_since(self.base);
        self.base_ns
            .wrapping_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Monotonic nanoseconds on the origin of [`monotonic_ns`], for
    /// [`Bucket::try_admit`](doic::bucket::Bucket::try_admit).
    #[inline]
    #[must_use]
    pub fn now_ns(&self) -> u64 {
        match &self.source {
            Source::Counter {
                clock,
                scale,
                offset,
            } => {
                // At most 2^64 * 2^64 before the shift: no overflow; after
                // it, below 2^64 for any counter value of a few ns a tick.
                #[expect(
                    clippy::cast_possible_truncation,
                    reason = "below 2^64, see above; the origin is in `offset`"
                )]
                let ns = ((u128::from(clock.raw()) * u128::from(*scale)) >> SCALE_SHIFT) as u64;
                ns.wrapping_add(*offset)
            }
            Source::Following(now) => self.followed_ns(*now),
        }
    }

    /// The same reading as an `Instant`, for cores that keep `Instant`s.
    #[inline]
    #[must_use]
    pub fn now(&self) -> Instant {
        self.base + Duration::from_nanos(self.now_ns().saturating_sub(self.base_ns))
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC`: precise (vDSO, about 16 ns per read).
#[must_use]
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// Nanoseconds of `CLOCK_MONOTONIC_COARSE`: the time of the last scheduler
/// tick, cheaper to read than [`monotonic_ns`] but only as fine as
/// [`coarse_resolution_ns`] (1 to 4 ms on usual kernels).
///
/// Suitable as the per-batch `now` only when the tick is at most the
/// bucket's lowest tolerance ([`Bucket::max_time_step_ns`](doic::bucket::Bucket::max_time_step_ns)):
/// arrivals of one tick share one arrival time, and a longer tick empties
/// the bucket between ticks, losing admitted rate (see `docs/bucket.md`).
#[must_use]
pub fn coarse_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC_COARSE)
}

/// The resolution of [`coarse_ns`] in nanoseconds.
#[must_use]
pub fn coarse_resolution_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &raw mut ts) };
    if rc != 0 {
        return 0;
    }
    to_ns(&ts)
}

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    // Both clock ids are supported by every Linux kernel this runs on, so the
    // call cannot fail; a zeroed `ts` would read as time 0 if it did.
    unsafe { libc::clock_gettime(clock, &raw mut ts) };
    to_ns(&ts)
}

fn to_ns(ts: &libc::timespec) -> u64 {
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_are_monotonic_and_agree() {
        let res = coarse_resolution_ns();
        assert!(res > 0 && res <= 100_000_000, "coarse resolution {res} ns");
        let mut last = monotonic_ns();
        for _ in 0..1000 {
            let now = monotonic_ns();
            assert!(now >= last);
            last = now;
        }
        // The coarse clock is the precise one rounded down to a tick.
        let before = monotonic_ns();
        let coarse = coarse_ns();
        let after = monotonic_ns();
        assert!(coarse <= after, "coarse {coarse} after precise {after}");
        assert!(
            coarse + 2 * res >= before,
            "coarse {coarse} lags precise {before} by more than two ticks of {res}"
        );
    }

    /// A clock a test moves by hand: a fixed base and an offset.
    static OFFSET_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

    fn by_hand() -> Instant {
        let offset = OFFSET_NS.load(std::sync::atomic::Ordering::Relaxed);
        *BASE.get_or_init(Instant::now) + Duration::from_nanos(offset)
    }

    #[test]
    fn a_following_clock_moves_with_the_clock_it_follows_only() {
        let clock = Clock::following(by_hand);
        let (start_ns, start) = (clock.now_ns(), clock.now());
        assert_eq!(start, by_hand());
        // Real time passes, the followed clock stands still.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!((clock.now_ns(), clock.now()), (start_ns, start));
        OFFSET_NS.fetch_add(5_000_000_000, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(clock.now_ns() - start_ns, 5_000_000_000);
        assert_eq!(clock.now() - start, Duration::from_secs(5));
        assert_eq!(clock.now(), by_hand());
        // On the origin of CLOCK_MONOTONIC, as the counter clock.
        assert!(start_ns <= monotonic_ns());
    }

    #[test]
    fn the_counter_clock_keeps_time_with_the_monotonic_clock() {
        let clock = Clock::new();
        let mut last = clock.now_ns();
        for _ in 0..1000 {
            let now = clock.now_ns();
            assert!(now >= last, "counter clock went back from {last} to {now}");
            last = now;
        }
        // The counter's span lies inside CLOCK_MONOTONIC's (read before and
        // after it) and covers the 50 ms sleep, each to within 1 % (the
        // calibration's error is parts per million).
        let (mono0, std0) = (monotonic_ns(), Instant::now());
        let (start_ns, start) = (clock.now_ns(), clock.now());
        std::thread::sleep(Duration::from_millis(50));
        let (end_ns, end) = (clock.now_ns(), clock.now());
        let (mono, std) = (monotonic_ns() - mono0, std0.elapsed());
        let by_ns = end_ns - start_ns;
        let by_instant = end.duration_since(start);
        assert!(
            (49_500_000..=mono + mono / 100).contains(&by_ns),
            "slept 50 ms: counter {by_ns} ns, CLOCK_MONOTONIC {mono} ns"
        );
        assert!(
            by_instant >= Duration::from_micros(49_500) && by_instant <= std + std / 100,
            "slept 50 ms: counter {by_instant:?}, Instant {std:?}"
        );
        // Anchored on CLOCK_MONOTONIC's origin (to within the anchoring
        // reads, well under 1 us).
        assert!(
            start_ns + 1_000 >= mono0 && start_ns <= mono0 + mono,
            "counter {start_ns}, monotonic {mono0}"
        );
    }
}
