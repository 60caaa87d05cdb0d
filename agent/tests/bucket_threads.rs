//! Real threads hammering one RFC 8582 §8.3 leaky bucket: the lock-free
//! updates neither lose nor duplicate admissions.
//!
//! Exactness needs arrivals whose sequential outcome does not depend on
//! their order. Requests that share one arrival time have that property (the
//! counter rises by T per admission whoever sends it), and they are what a
//! coarse clock read once per batch produces. So the threads run in phases:
//! in each phase every thread offers a batch of requests stamped with the
//! phase's time, and the admitted count of the phase must equal what one
//! thread admits from the same arrivals. Free-running threads with their own
//! arrival times are checked against the §8.3.1 bound instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread;

use doic::bucket::{Bucket, BucketConfig, Tolerance, interval_ns};

const THREADS: usize = 4;

/// A barrier that releases its threads together (they spin rather than
/// sleep, so the batches that follow really overlap).
struct SpinBarrier {
    waiting: AtomicUsize,
    generation: AtomicUsize,
    threads: usize,
}

impl SpinBarrier {
    fn new(threads: usize) -> SpinBarrier {
        SpinBarrier {
            waiting: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            threads,
        }
    }

    fn wait(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.waiting.fetch_add(1, Ordering::AcqRel) + 1 == self.threads {
            self.waiting.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            spins += 1;
            if spins.is_multiple_of(64) {
                // More threads than cores: let the others reach the barrier.
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// Phase times: irregular steps between 0 and 10000 intervals. With a
/// tolerance of 8000 intervals some phases admit every request and others
/// few or none.
fn phase_times(phases: usize, t: u64) -> Vec<u64> {
    let mut now = 1_000_000;
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..phases)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            now += (x % 10_001) * t;
            now
        })
        .collect()
}

#[test]
fn concurrent_admissions_equal_the_sequential_run() {
    let rate = 1_000_000; // T = 1 us
    let t = interval_ns(rate);
    let config = BucketConfig::single(Tolerance::intervals(8000)).with_randomise(false);
    let phases = 1500;
    let per_thread = 2000;
    let times = Arc::new(phase_times(phases, t));

    // Sequential reference: the same arrivals offered one by one.
    let reference = Bucket::new(0, rate, &config).unwrap();
    let expected: Vec<u64> = times
        .iter()
        .map(|&now| {
            (0..THREADS * per_thread)
                .filter(|_| reference.try_admit(now, 0))
                .count() as u64
        })
        .collect();

    let bucket = Arc::new(Bucket::new(0, rate, &config).unwrap());
    let barrier = Arc::new(SpinBarrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (bucket, barrier, times) = (bucket.clone(), barrier.clone(), times.clone());
            thread::spawn(move || {
                times
                    .iter()
                    .map(|&now| {
                        barrier.wait();
                        (0..per_thread).filter(|_| bucket.try_admit(now, 0)).count() as u64
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut actual = vec![0u64; phases];
    for h in handles {
        for (sum, n) in actual.iter_mut().zip(h.join().unwrap()) {
            *sum += n;
        }
    }
    let total: u64 = expected.iter().sum();
    assert!(
        total > (phases * 1000) as u64,
        "the run must admit many requests to mean anything ({total})"
    );
    assert!(
        expected.iter().any(|&n| n as usize == THREADS * per_thread),
        "some phase must admit every request, so that all threads race on the CAS"
    );
    for (phase, (a, e)) in actual.iter().zip(&expected).enumerate() {
        assert_eq!(a, e, "phase {phase} at {} ns", times[phase]);
    }
}

#[test]
fn free_running_threads_stay_within_the_burst_bound() {
    // Each thread stamps its arrivals from a shared sequence: 50 arrivals per
    // interval T in total, i.e. an offered load of 50 times the rate.
    let rate = 100_000; // T = 10 us
    let t = interval_ns(rate);
    let dt = t / 50;
    let per_thread = 200_000u64;
    let config = BucketConfig::two_priorities().with_randomise(false);
    let tau = config.max_threshold().nanos(t);
    let start = 1_000_000;
    let clock = Arc::new(AtomicU64::new(start));
    let bucket = Arc::new(Bucket::new(start, rate, &config).unwrap());
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (bucket, clock) = (bucket.clone(), clock.clone());
            thread::spawn(move || {
                let mut admitted = 0u64;
                for k in 0..per_thread {
                    let now = clock.fetch_add(dt, Ordering::Relaxed);
                    let level = u8::from((k + i as u64).is_multiple_of(4));
                    admitted += u64::from(bucket.try_admit(now, level));
                }
                admitted
            })
        })
        .collect();
    let admitted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let window = clock.load(Ordering::Relaxed) - dt - start;
    // §8.3.1: at most W/T + TAU/T + 1 in any window, whatever the order in
    // which the threads' decisions land.
    let bound = (window + tau) / t + 1;
    assert!(admitted <= bound, "admitted {admitted} > bound {bound}");
    // And no admissions are lost: the bucket stays full, so the total is
    // the bound up to the few decisions in flight when the run ended.
    assert!(
        admitted + 2 * THREADS as u64 + 2 >= bound,
        "admitted {admitted} of a possible {bound}"
    );
}

#[test]
fn rate_changes_under_load_keep_the_bound_of_the_highest_rate() {
    // Workers hammer the bucket while a control thread applies newer
    // reports (between 10^4 and 10^5 per second, and 0), one every 100
    // intervals of the highest rate on the workers' clock. Whatever the
    // interleaving, no more is admitted than the highest rate allows plus
    // what each change may let through at once, and nothing at all while
    // the rate is 0.
    let config = BucketConfig::default().with_randomise(false);
    let t_min = interval_ns(100_000);
    let tau = config.max_threshold().nanos(interval_ns(10_000));
    let dt = t_min / 20;
    let start = 1_000_000;
    let clock = Arc::new(AtomicU64::new(start));
    let bucket = Arc::new(Bucket::new(start, 100_000, &config).unwrap());
    let stop = Arc::new(AtomicUsize::new(0));
    let control = {
        let (bucket, clock, stop) = (bucket.clone(), clock.clone(), stop.clone());
        thread::spawn(move || {
            let rates = [10_000, 100_000, 30_000, 70_000, 50_000];
            let (mut k, mut stale) = (0, 0);
            let mut last = 0;
            while stop.load(Ordering::Relaxed) == 0 {
                let now = clock.load(Ordering::Relaxed);
                if now < last + 100 * t_min {
                    thread::yield_now();
                    continue;
                }
                last = now;
                bucket.set_rate(now, rates[k % rates.len()]);
                // The workers' clock may have moved on while this thread was
                // descheduled between reading `now` and the clip: the clip is
                // then measured from a past time, which `set_rate` documents
                // as worth at most (staleness / T + 1) admissions at the
                // highest rate.
                stale += (clock.load(Ordering::Relaxed) - now) / interval_ns(100_000) + 1;
                k += 1;
                thread::yield_now();
            }
            (k, stale)
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (bucket, clock) = (bucket.clone(), clock.clone());
            thread::spawn(move || {
                let mut admitted = 0u64;
                for _ in 0..100_000 {
                    let now = clock.fetch_add(dt, Ordering::Relaxed);
                    admitted += u64::from(bucket.try_admit(now, 0));
                }
                admitted
            })
        })
        .collect();
    let admitted: u64 = workers.into_iter().map(|h| h.join().unwrap()).sum();
    stop.store(1, Ordering::Relaxed);
    let (changes, stale) = control.join().unwrap();
    assert!(changes > 0, "the control thread must have changed the rate");
    let window = clock.load(Ordering::Relaxed) - start;
    // At most the bound of the highest rate, with the largest TAU seen, plus
    // what clips from a past `now` may give back, plus what each change's
    // clip gives back by design (`Bucket::set_rate`: content accumulated
    // under a lower rate is cut to the new rate's capacity, so that the
    // higher rate is not held back): at most the lowest rate's capacity,
    // TAU + T there, counted in intervals of the highest rate.
    let give_back = (tau + interval_ns(10_000)) / t_min + 1;
    let bound = (window + tau) / t_min + 1 + stale + changes as u64 * give_back;
    assert!(admitted <= bound, "admitted {admitted} > bound {bound}");
    // And at least what the lowest rate guarantees over the window.
    let floor = window / interval_ns(10_000);
    assert!(admitted >= floor, "admitted {admitted} < floor {floor}");

    // Rate 0 shuts the bucket for every thread at once.
    bucket.set_rate(clock.load(Ordering::Relaxed), 0);
    let zero: Vec<_> = (0..THREADS)
        .map(|_| {
            let (bucket, clock) = (bucket.clone(), clock.clone());
            thread::spawn(move || {
                (0..10_000)
                    .filter(|_| bucket.try_admit(clock.fetch_add(dt, Ordering::Relaxed), 9))
                    .count()
            })
        })
        .collect();
    assert_eq!(
        zero.into_iter().map(|h| h.join().unwrap()).sum::<usize>(),
        0
    );
}
