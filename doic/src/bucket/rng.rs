//! The per-thread random source of RFC 8582 §8.3.3 (avoidance of resonance):
//! "let u be set to a random value uniformly distributed between -1/2 and
//! +1/2".
//!
//! A wyrand generator in a thread-local cell: no lock, no syscall and no
//! shared cache line on the decision path. Each thread seeds itself once,
//! lazily, from the standard library's per-process random hash keys, so
//! reacting nodes on different hosts (and threads of one process) draw
//! independent phases: identical seeds everywhere would recreate the very
//! synchronisation §8.3.3 is there to break.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};

thread_local! {
    /// Generator state; 0 means "not seeded yet".
    static STATE: Cell<u64> = const { Cell::new(0) };
    /// The thread's next draw, made ahead of its use so that the bucket's
    /// decision reads it with one load instead of waiting for the
    /// generator; 0 means "not drawn yet".
    static READY: Cell<u64> = const { Cell::new(0) };
}

const INCREMENT: u64 = 0xa076_1d64_78bd_642f;
const MIX: u64 = 0xe703_7ed1_a0b4_28db;

/// Seeds this thread's generator, for simulations and tests that need a
/// reproducible bucket phase. Threads that never call it seed themselves from
/// process randomness on first use.
pub fn seed_thread_rng(seed: u64) {
    STATE.with(|s| s.set(seed | 1));
    READY.with(|r| r.set(0));
}

/// The next 64 random bits of this thread's generator.
#[inline]
fn next_u64() -> u64 {
    STATE.with(|s| {
        let mut x = s.get();
        if x == 0 {
            x = fresh_seed();
        }
        x = x.wrapping_add(INCREMENT);
        s.set(x);
        let m = u128::from(x).wrapping_mul(u128::from(x ^ MIX));
        #[expect(
            clippy::cast_possible_truncation,
            reason = "folding the 128-bit product to 64 bits is the generator"
        )]
        let folded = (m >> 64) as u64 ^ m as u64;
        folded
    })
}

/// The thread's next draw, left in place: [`take`] moves on to the one
/// after it. Every draw of the thread ([`jittered`], [`uniform_below`],
/// [`peek_jittered`] then [`take`]) comes from this one sequence.
#[inline]
fn ready() -> u64 {
    let r = READY.with(Cell::get);
    if r == 0 { first_draw() } else { r }
}

#[cold]
fn first_draw() -> u64 {
    let r = next_u64() | 1;
    READY.with(|c| c.set(r));
    r
}

/// Moves on from the draw [`peek_jittered`] read: the bucket calls it once
/// its admission with that draw was written, so a lost compare-and-swap
/// does not use up a draw.
#[inline]
pub(crate) fn take() {
    // 0 marks "not drawn": an output of 0 (one in 2^64) is taken as 1.
    READY.with(|c| c.set(next_u64() | 1));
}

/// The thread's next draw, taken.
#[inline]
fn draw() -> u64 {
    let r = ready();
    take();
    r
}

/// The §8.3.3 increment T + uT with u uniform in [-1/2, +1/2): a value in
/// [T/2, 3T/2), computed with one multiply and no floating point. Never 0,
/// so even a 1 ns interval keeps the bucket filling. The bucket reads it
/// as [`peek_jittered`] then [`take`]; the RFC transcription of the tests
/// takes it in one call from the same sequence.
#[cfg(test)]
#[inline]
pub(crate) fn jittered(t_ns: u64) -> u64 {
    increment(t_ns, draw())
}

/// [`jittered`] of the thread's next draw without taking it ([`take`]).
#[inline]
pub(crate) fn peek_jittered(t_ns: u64) -> u64 {
    increment(t_ns, ready())
}

#[inline]
fn increment(t_ns: u64, r: u64) -> u64 {
    (t_ns / 2 + below(t_ns, r)).max(1)
}

/// A value uniform in [0, n) (to within n / 2^32), for n < 2^32.
#[inline]
pub(crate) fn uniform_below(n: u64) -> u64 {
    below(n, draw())
}

#[inline]
fn below(n: u64, r: u64) -> u64 {
    ((r >> 32) * n) >> 32
}

#[cold]
fn fresh_seed() -> u64 {
    // RandomState draws its keys from the operating system once per thread
    // and perturbs them for every new instance.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(INCREMENT);
    h.finish() | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_streams_repeat_and_differ() {
        seed_thread_rng(7);
        let a: Vec<u64> = (0..8).map(|_| next_u64()).collect();
        seed_thread_rng(7);
        let b: Vec<u64> = (0..8).map(|_| next_u64()).collect();
        seed_thread_rng(8);
        let c: Vec<u64> = (0..8).map(|_| next_u64()).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn unseeded_threads_draw_different_streams() {
        let draw = || std::thread::spawn(next_u64).join().unwrap();
        assert_ne!(draw(), draw());
    }

    #[test]
    fn jitter_stays_in_half_open_range_and_is_centred() {
        seed_thread_rng(1);
        let t = 1_000_000;
        let n = 100_000u64;
        let mut sum = 0u64;
        let (mut lo, mut hi) = (u64::MAX, 0);
        for _ in 0..n {
            let j = jittered(t);
            assert!((t / 2..t / 2 + t).contains(&j), "{j} outside [T/2, 3T/2)");
            sum += j;
            lo = lo.min(j);
            hi = hi.max(j);
        }
        // Mean T (§8.3.3: "the mean time between admissions is the same"):
        // the standard error of the mean is T / sqrt(12 n) ~ 0.0009 T.
        let mean = sum / n;
        assert!(mean.abs_diff(t) < t / 200, "mean {mean}");
        // The whole range is used.
        assert!(lo < t / 2 + t / 100 && hi > t / 2 + t - t / 100);
    }
}
