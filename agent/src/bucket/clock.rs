//! The time base of the RFC 8582 §8.3 leaky bucket: monotonic nanoseconds,
//! read by the caller once per batch of requests and passed to every
//! decision as `now_ns` (the bucket itself never reads a clock).
//!
//! Both clocks below count from the same origin (Linux `CLOCK_MONOTONIC`, the
//! time since boot), so values from either may be mixed in one bucket; the
//! coarse one lags the precise one by less than its resolution.

/// Nanoseconds of `CLOCK_MONOTONIC`: precise (vDSO, about 20 ns per read).
#[must_use]
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// Nanoseconds of `CLOCK_MONOTONIC_COARSE`: the time of the last scheduler
/// tick, cheaper to read than [`monotonic_ns`] but only as fine as
/// [`coarse_resolution_ns`] (1 to 4 ms on usual kernels).
///
/// Suitable as the per-batch `now` only when the tick is at most the
/// bucket's lowest tolerance ([`Bucket::max_time_step_ns`](super::Bucket::max_time_step_ns)):
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
}
