//! Benchmark of the RFC 8582 §8.3 leaky bucket ([`doic::bucket`])
//! against `governor` (GCRA on one `AtomicU64`), measured in the same run.
//!
//! In the main cases both contenders take time from the same kind of clock
//! (governor's `FakeRelativeClock`, advanced by the harness once per batch
//! of [`BATCH`] decisions; governor reads it in every check, the bucket once
//! per batch as its call contract says) and see the same arrivals (an
//! offered load of twice the rate, so about half the decisions admit and
//! write). In the `*-clock-per-decision` cases each reads its real clock in
//! every decision, as users get them: the bucket the request path's
//! [`Clock`], governor its default `QuantaClock`, at a rate that offers
//! them about twice it on the machine at hand ([`clock_case_rate`]; a
//! fixed [`CONTENDED_REAL_CLOCK_RATE`] with two threads on one bucket), so
//! that the bucket is overloaded there too.
//! The sides run in alternating chunks so that machine noise hits both; a
//! case's figure is the median over chunk pairs (see [`compare`]). The
//! agent's bucket is configured to do strictly more than governor: two
//! priority levels (TAU1 = 5T, TAU2 = 10T, every fourth request priority)
//! and the randomised phase of §8.3.3.
//!
//! Cases: one thread on one bucket; two threads on one shared bucket
//! (contended); two threads on a bucket each (uncontended). What one read
//! of each clock costs is measured alongside ([`clocks`]).

pub mod clocks;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use agent::clock::Clock as AgentClock;
use doic::bucket::{Bucket, BucketConfig, interval_ns};
use governor::clock::{Clock, DefaultClock, FakeRelativeClock, QuantaInstant};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

/// Decisions between two advances of the fake clock (the "batch" a worker
/// would read its coarse clock once for).
pub const BATCH: u64 = 8;

/// OC-Maximum-Rate of the benchmark (T = 1 us).
pub const RATE: u32 = 1_000_000;

/// OC-Maximum-Rate of the real-clock cases with one thread per bucket
/// unless [`clock_case_rate`] is used (T = 40 ns): decisions about 12-15 ns
/// apart offer about twice this rate. On a machine whose counter reads in
/// 25 ns, decisions 50 ns apart offer less than it, and every decision
/// admits on an emptied bucket (with §8.3.3's draw): not a bucket under
/// overload. [`clock_case_rate`] sets the rate from the decision time
/// measured on the machine instead.
pub const REAL_CLOCK_RATE: u32 = 25_000_000;

/// OC-Maximum-Rate of the real-clock case with two threads on one bucket
/// (T = 200 ns). When the two threads run at the same time every admission
/// moves the state's cache line between the cores and a decision costs
/// 50-130 ns, so at [`REAL_CLOCK_RATE`] the two together offered less than
/// the rate: nearly every decision admitted, and the case measured one
/// compare-and-swap on a line the other core holds, not a bucket under
/// overload (the only time a rate bucket exists on the request path is
/// while a rate report asks the agent to cut what it sends). At this rate
/// two threads deciding every 50-130 ns offer 3-8 times the rate, and a
/// loaded machine's 12-15 ns decisions far more: the bucket is overloaded
/// in both regimes, as in the other cases.
pub const CONTENDED_REAL_CLOCK_RATE: u32 = 5_000_000;

/// Offered load as a multiple of the rate.
pub const LOAD: u64 = 2;

/// The governor rate limiter with a manual clock, as the benchmark uses it.
type Governor = RateLimiter<NotKeyed, InMemoryState, FakeRelativeClock, NoOpMiddleware<Nanos>>;

/// The governor rate limiter with its default (real, `quanta`) clock.
type GovernorReal =
    RateLimiter<NotKeyed, InMemoryState, DefaultClock, NoOpMiddleware<QuantaInstant>>;

/// One side of the comparison: decides requests against a clock it owns.
pub trait Contender: Sync {
    /// The time a batch of decisions is stamped with, read once per batch
    /// (0 for contenders that read their clock inside each decision).
    fn batch_time(&self) -> u64;
    /// Decides request number `i` of a batch stamped `now`.
    fn decide(&self, now: u64, i: u64) -> bool;
    /// Moves the clock forward by `ns` nanoseconds.
    fn advance(&self, ns: u64);
}

/// The agent's bucket, two priority levels, randomised.
#[repr(align(128))]
pub struct AgentSide {
    bucket: Bucket,
    clock: FakeRelativeClock,
}

impl AgentSide {
    /// A bucket at [`RATE`] with the RFC 8582 §8.3.2 default thresholds.
    ///
    /// # Panics
    ///
    /// Never: the configuration is the RFC default, which is valid.
    #[must_use]
    pub fn new() -> AgentSide {
        let clock = FakeRelativeClock::default();
        let bucket = Bucket::new(clock.now().as_u64(), RATE, &BucketConfig::two_priorities())
            .expect("the RFC default configuration is valid");
        AgentSide { bucket, clock }
    }
}

impl Default for AgentSide {
    fn default() -> AgentSide {
        AgentSide::new()
    }
}

impl Contender for AgentSide {
    /// The bucket's call contract: the caller reads the clock once per batch.
    #[inline]
    fn batch_time(&self) -> u64 {
        self.clock.now().as_u64()
    }

    #[inline]
    fn decide(&self, now: u64, i: u64) -> bool {
        let level = u8::from(i.is_multiple_of(4));
        self.bucket.try_admit(now, level)
    }

    fn advance(&self, ns: u64) {
        self.clock.advance(Duration::from_nanos(ns));
    }
}

/// The agent's bucket read as users get it: the request path's real clock
/// ([`agent::clock::Clock`]) read inside every decision, at a rate given
/// when made ([`clock_case_rate`], or [`CONTENDED_REAL_CLOCK_RATE`]).
/// Compared with [`GovernorClockPerDecision`] at the same rate.
#[repr(align(128))]
pub struct AgentClockPerDecision {
    bucket: Bucket,
    clock: AgentClock,
}

impl AgentClockPerDecision {
    /// A bucket at `rate` per second, the RFC 8582 §8.3.2 default
    /// thresholds, randomised.
    ///
    /// # Panics
    /// Never: the RFC default configuration is valid.
    #[must_use]
    pub fn new(rate: u32) -> AgentClockPerDecision {
        let clock = AgentClock::new();
        let bucket = Bucket::new(clock.now_ns(), rate, &BucketConfig::two_priorities())
            .expect("the RFC default configuration is valid");
        AgentClockPerDecision { bucket, clock }
    }
}

impl Contender for AgentClockPerDecision {
    #[inline]
    fn batch_time(&self) -> u64 {
        0
    }

    #[inline]
    fn decide(&self, _now: u64, i: u64) -> bool {
        let level = u8::from(i.is_multiple_of(4));
        self.bucket.try_admit(self.clock.now_ns(), level)
    }

    /// Real time needs no advancing.
    fn advance(&self, _ns: u64) {}
}

/// governor as users get it: `RateLimiter::direct` with its default
/// `QuantaClock`, read in every check, at a rate given when made, burst 5.
#[repr(align(128))]
pub struct GovernorClockPerDecision(GovernorReal);

impl GovernorClockPerDecision {
    /// A limiter at `rate` per second, burst 5.
    #[must_use]
    pub fn new(rate: u32) -> GovernorClockPerDecision {
        GovernorClockPerDecision(RateLimiter::direct(quota(rate)))
    }
}

impl Contender for GovernorClockPerDecision {
    #[inline]
    fn batch_time(&self) -> u64 {
        0
    }

    #[inline]
    fn decide(&self, _now: u64, _i: u64) -> bool {
        self.0.check().is_ok()
    }

    /// Real time needs no advancing.
    fn advance(&self, _ns: u64) {}
}

/// The rate for the one-thread-per-bucket clock-per-decision cases that
/// offers them at least [`LOAD`] times the rate on this machine: governor's
/// CPU time per decision with its real clock, measured where every
/// decision admits and writes (10^9 per second, T = 1 ns; its costliest
/// decision; median of 5 runs of `decisions`), gives the lowest rate one
/// thread offers, and the bucket's rate is that over [`LOAD`]. Abatements
/// cost less, so the offered load is higher still. Both sides then run at
/// that rate; a faster side offers more against it, as in every case.
#[must_use]
pub fn clock_case_rate(decisions: u64) -> u32 {
    let limiter = GovernorClockPerDecision::new(1_000_000_000);
    let mut ns: Vec<f64> = (0..5)
        .map(|_| {
            let start = thread_cpu_ns();
            for i in 0..decisions {
                black_box(limiter.decide(0, i));
            }
            thread_cpu_ns().saturating_sub(start) as f64 / decisions.max(1) as f64
        })
        .collect();
    ns.sort_by(f64::total_cmp);
    let per_decision = ns[ns.len() / 2].max(1.0);
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a positive rate below 10^9 per second"
    )]
    let rate = (1e9 / (per_decision * LOAD as f64)) as u32;
    rate.max(1)
}

/// `rate` per second with a burst of 5 (tolerance 4T, the RFC 8582 §8.3.1
/// default TAU).
fn quota(rate: u32) -> Quota {
    Quota::per_second(NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN))
        .allow_burst(NonZeroU32::new(5).unwrap_or(NonZeroU32::MIN))
}

/// governor's direct rate limiter with a burst of 5 (tolerance 4T, the RFC
/// 8582 §8.3.1 default TAU).
#[repr(align(128))]
pub struct GovernorSide {
    limiter: Governor,
    clock: FakeRelativeClock,
}

impl GovernorSide {
    /// A limiter at [`RATE`] per second, burst 5.
    #[must_use]
    pub fn new() -> GovernorSide {
        let clock = FakeRelativeClock::default();
        let limiter = RateLimiter::direct_with_clock(quota(RATE), clock.clone());
        GovernorSide { limiter, clock }
    }
}

impl Default for GovernorSide {
    fn default() -> GovernorSide {
        GovernorSide::new()
    }
}

impl Contender for GovernorSide {
    /// governor's API has no way to pass a time: it reads its clock in
    /// every `check`.
    #[inline]
    fn batch_time(&self) -> u64 {
        0
    }

    #[inline]
    fn decide(&self, _now: u64, _i: u64) -> bool {
        self.limiter.check().is_ok()
    }

    fn advance(&self, ns: u64) {
        self.clock.advance(Duration::from_nanos(ns));
    }
}

/// The clock step per decision for the offered load [`LOAD`].
#[must_use]
pub fn step_ns() -> u64 {
    interval_ns(RATE) / LOAD
}

/// CPU time consumed by the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// One thread's run of one chunk.
#[derive(Clone, Copy, Debug)]
pub struct RunTimes {
    /// Wall-clock start.
    pub start: Instant,
    /// Wall-clock end.
    pub end: Instant,
    /// CPU time the thread spent in the run (time preempted by other
    /// processes does not count).
    pub cpu_ns: u64,
    /// Decisions admitted.
    pub admitted: u64,
}

/// Runs `iters` decisions on `c`, advancing its clock every [`BATCH`].
#[inline(never)]
pub fn run<C: Contender>(c: &C, iters: u64) -> RunTimes {
    let c = black_box(c);
    let advance = BATCH * step_ns();
    let start = Instant::now();
    let cpu = thread_cpu_ns();
    let mut admitted = 0u64;
    let mut i = 0u64;
    while i < iters {
        let now = c.batch_time();
        for _ in 0..BATCH {
            admitted += u64::from(c.decide(now, i));
            i += 1;
        }
        c.advance(advance);
    }
    let cpu_ns = thread_cpu_ns().saturating_sub(cpu);
    RunTimes {
        start,
        end: Instant::now(),
        cpu_ns,
        admitted: black_box(admitted),
    }
}

/// A reusable start line for threads: they spin until all have arrived,
/// so that their timed loops overlap. Waiters yield only after about a
/// million spins: a thread that yields on a busy machine loses its core for
/// a whole time slice and misses the start of the chunk.
struct StartLine {
    waiting: AtomicUsize,
    generation: AtomicUsize,
    threads: usize,
}

impl StartLine {
    fn new(threads: usize) -> StartLine {
        StartLine {
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
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1 << 20) {
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// The three cases of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// One thread on one bucket.
    Single,
    /// Two threads on one shared bucket.
    Contended,
    /// Two threads, each on its own bucket.
    Uncontended,
}

impl Case {
    /// Every case, in report order.
    pub const ALL: [Case; 3] = [Case::Single, Case::Contended, Case::Uncontended];

    /// The name printed in the report.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Case::Single => "single",
            Case::Contended => "contended",
            Case::Uncontended => "uncontended",
        }
    }

    fn threads(self) -> usize {
        match self {
            Case::Single => 1,
            Case::Contended | Case::Uncontended => 2,
        }
    }
}

/// What one round measured: per chunk pair, each side's CPU ns per decision
/// and whether the threads of both runs really ran together.
#[derive(Clone, Debug, Default)]
pub struct Round {
    /// Agent ns per decision, per chunk pair.
    pub agent: Vec<f64>,
    /// Governor ns per decision, per chunk pair.
    pub governor: Vec<f64>,
    /// Per chunk pair: both runs' threads overlapped for at least
    /// [`MIN_OVERLAP`] of their span (always true for one thread).
    pub together: Vec<bool>,
    /// Fraction of the agent's decisions admitted.
    pub agent_admitted: f64,
    /// Fraction of governor's decisions admitted.
    pub governor_admitted: f64,
}

/// Threads that ran together for less than this share of a chunk's span
/// did not measure contention (another process had one of the cores).
pub const MIN_OVERLAP: f64 = 0.5;

/// Runs `chunks` alternating pairs of chunk runs, agent then governor and
/// governor then agent in turn, each of `chunk` decisions per thread.
/// Returns every run's side (true for the agent) and times as this thread
/// saw them.
fn alternate<A: Contender, G: Contender>(
    a: &A,
    g: &G,
    chunk: u64,
    chunks: usize,
    line: &StartLine,
) -> Vec<ChunkRun> {
    let mut out = Vec::with_capacity(2 * chunks);
    for k in 0..chunks {
        for agent_turn in [k % 2 == 0, k % 2 == 1] {
            line.wait();
            let times = if agent_turn {
                run(a, chunk)
            } else {
                run(g, chunk)
            };
            out.push((agent_turn, times));
        }
    }
    out
}

/// Pins the calling thread to the `k`-th core, so that the two threads of
/// a case never share one (where the machine has two).
fn pin(k: usize) {
    if let Some(ids) = core_affinity::get_core_ids()
        && ids.len() > 1
    {
        core_affinity::set_for_current(ids[k % ids.len()]);
    }
}

/// One thread's run of one chunk: agent side?, times.
type ChunkRun = (bool, RunTimes);

/// One round of `case`: `iters` decisions per thread and side, split in
/// chunks that alternate between the agent (contender `A`) and governor so
/// that noise from the shared machine hits both alike. A chunk costs the
/// CPU time its threads spent per decision: preemption by other processes
/// does not count, spinning on a contended cache line does.
pub fn measure<A: Contender + Default, G: Contender + Default>(
    case: Case,
    iters: u64,
    chunks: usize,
) -> Round {
    measure_with(case, iters, chunks, &|| (A::default(), G::default()))
}

/// [`measure`] with the two contenders made by `make` (once per thread in
/// the uncontended case).
pub fn measure_with<A: Contender, G: Contender>(
    case: Case,
    iters: u64,
    chunks: usize,
    make: &(dyn Fn() -> (A, G) + Sync),
) -> Round {
    let chunk = (iters / chunks as u64).max(BATCH);
    let threads = case.threads();
    let line = StartLine::new(threads);
    let per_thread: Vec<Vec<ChunkRun>> = match case {
        Case::Single => {
            let (a, g) = make();
            vec![alternate(&a, &g, chunk, chunks, &line)]
        }
        Case::Contended => {
            let (a, g) = make();
            thread::scope(|s| {
                let handles: Vec<_> = (0..threads)
                    .map(|k| {
                        let (a, g, line) = (&a, &g, &line);
                        s.spawn(move || {
                            pin(k);
                            alternate(a, g, chunk, chunks, line)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_default())
                    .collect()
            })
        }
        Case::Uncontended => thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|k| {
                    let line = &line;
                    s.spawn(move || {
                        pin(k);
                        // Built on its own thread (its own allocation arena),
                        // so the two threads' buckets share no cache line.
                        let (a, g) = make();
                        alternate(&a, &g, chunk, chunks, line)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        }),
    };
    let mut round = Round::default();
    let (mut agent_admitted, mut governor_admitted) = (0u64, 0u64);
    for k in 0..chunks {
        let mut pair = [(0.0, 0.0); 2];
        for run in [2 * k, 2 * k + 1] {
            let runs: Vec<&RunTimes> = per_thread
                .iter()
                .filter_map(|t| t.get(run))
                .map(|r| &r.1)
                .collect();
            let Some(agent_turn) = per_thread[0].get(run).map(|r| r.0) else {
                continue;
            };
            let cpu: u64 = runs.iter().map(|r| r.cpu_ns).sum();
            let ns = cpu as f64 / (chunk as f64 * runs.len() as f64);
            let admitted: u64 = runs.iter().map(|r| r.admitted).sum();
            if agent_turn {
                pair[0] = (ns, overlap(&runs));
                agent_admitted += admitted;
            } else {
                pair[1] = (ns, overlap(&runs));
                governor_admitted += admitted;
            }
        }
        round.agent.push(pair[0].0);
        round.governor.push(pair[1].0);
        round
            .together
            .push(pair[0].1 >= MIN_OVERLAP && pair[1].1 >= MIN_OVERLAP);
    }
    let decisions = (chunk * chunks as u64 * threads as u64) as f64;
    round.agent_admitted = agent_admitted as f64 / decisions;
    round.governor_admitted = governor_admitted as f64 / decisions;
    round
}

/// The share of the runs' span during which all of them were running
/// (1 for a single thread).
fn overlap(runs: &[&RunTimes]) -> f64 {
    let (Some(first_start), Some(last_start), Some(first_end), Some(last_end)) = (
        runs.iter().map(|r| r.start).min(),
        runs.iter().map(|r| r.start).max(),
        runs.iter().map(|r| r.end).min(),
        runs.iter().map(|r| r.end).max(),
    ) else {
        return 0.0;
    };
    let span = last_end.duration_since(first_start).as_secs_f64();
    let common = first_end
        .saturating_duration_since(last_start)
        .as_secs_f64();
    if span > 0.0 { common / span } else { 1.0 }
}

/// The outcome of one case over all rounds.
#[derive(Clone, Debug)]
pub struct CaseReport {
    /// The case's name in the report.
    pub name: String,
    /// Median ns per decision of the agent's bucket.
    pub agent_ns: f64,
    /// Median ns per decision of governor.
    pub governor_ns: f64,
    /// Every round's agent median (all chunks).
    pub agent_runs: Vec<f64>,
    /// Every round's governor median (all chunks).
    pub governor_runs: Vec<f64>,
    /// Fraction admitted by the agent (last round).
    pub agent_admitted: f64,
    /// Fraction admitted by governor (last round).
    pub governor_admitted: f64,
    /// Chunk pairs whose threads ran together, and all chunk pairs.
    pub together: (usize, usize),
    /// Whether the medians are over the chunk pairs whose threads ran
    /// together (true) or, there being too few, over all of them.
    pub contention_measured: bool,
    /// Median over the same chunk pairs of agent / governor within a pair
    /// (a cross-check of `ratio`, insensitive to conditions that change
    /// from pair to pair).
    pub paired_ratio: f64,
}

/// Chunk pairs with threads together needed to report them alone: at least
/// this many, and at least a quarter of all pairs. Fewer are too few (and
/// too odd: they come from moments when a loaded machine happened to give
/// both threads a core) to stand for the case.
pub const MIN_TOGETHER: usize = 50;

impl CaseReport {
    /// agent_ns / governor_ns.
    #[must_use]
    pub fn ratio(&self) -> f64 {
        self.agent_ns / self.governor_ns
    }

    /// Whether the agent is slower than `limit` times governor: both the
    /// ratio of the medians and the median of the per-pair ratios are
    /// above it. Both sides run in the same chunk pairs on the same
    /// machine, so its speed cancels out of both (an absolute target would
    /// need `crate::speed`'s reference anchor; a ratio does not). Noise that
    /// shifts one side's median for part of the run moves one figure and
    /// not the other; a regression of the bucket or its clock raises both.
    #[must_use]
    pub fn over(&self, limit: f64) -> bool {
        self.ratio() > limit && self.paired_ratio > limit
    }

    /// The report line: `bucket <case> agent_ns=<x> governor_ns=<y> ratio=<x/y>`.
    #[must_use]
    pub fn line(&self) -> String {
        format!(
            "bucket {} agent_ns={:.3} governor_ns={:.3} ratio={:.3}",
            self.name,
            self.agent_ns,
            self.governor_ns,
            self.ratio()
        )
    }

    /// The case as a JSON object.
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "case": self.name,
            "agent_ns": self.agent_ns,
            "governor_ns": self.governor_ns,
            "ratio": self.ratio(),
            "agent_runs": self.agent_runs,
            "governor_runs": self.governor_runs,
            "agent_admitted_fraction": self.agent_admitted,
            "governor_admitted_fraction": self.governor_admitted,
            "chunk_pairs_threads_together": self.together.0,
            "chunk_pairs": self.together.1,
            "medians_over_pairs_together": self.contention_measured,
            "paired_ratio": self.paired_ratio,
        })
    }
}

/// The median of `v` (the mean of the middle two for an even count).
#[must_use]
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Runs `case` for `rounds` rounds of `iters` decisions per thread and side
/// (agent contender `A` against governor contender `G`, interleaved in `chunks` chunk
/// pairs), after a warm-up round. `name` labels the report line.
///
/// The figures are medians over all chunk pairs of all rounds. In the
/// two-thread cases only the pairs in which both sides' threads really ran
/// together count, if there are enough of them ([`MIN_TOGETHER`]): on a
/// busy machine one thread often waits for a core, and such a chunk
/// measures no contention. Pairs are kept or dropped whole, so both sides are always
/// compared under the same conditions.
#[must_use]
pub fn compare<A: Contender + Default, G: Contender + Default>(
    name: &str,
    case: Case,
    iters: u64,
    rounds: usize,
    chunks: usize,
) -> CaseReport {
    compare_with(name, case, (iters, rounds, chunks), &|| {
        (A::default(), G::default())
    })
}

/// [`compare`] with the two contenders made by `make`.
pub fn compare_with<A: Contender, G: Contender>(
    name: &str,
    case: Case,
    (iters, rounds, chunks): (u64, usize, usize),
    make: &(dyn Fn() -> (A, G) + Sync),
) -> CaseReport {
    let _ = measure_with(case, iters / 4, chunks, make);
    let mut agent_runs = Vec::with_capacity(rounds);
    let mut governor_runs = Vec::with_capacity(rounds);
    let (mut agent_all, mut governor_all) = (Vec::new(), Vec::new());
    let (mut agent_together, mut governor_together) = (Vec::new(), Vec::new());
    let (mut agent_admitted, mut governor_admitted) = (0.0, 0.0);
    for _ in 0..rounds {
        let r = measure_with(case, iters, chunks, make);
        agent_runs.push(median(&r.agent));
        governor_runs.push(median(&r.governor));
        for ((&a, &g), &together) in r.agent.iter().zip(&r.governor).zip(&r.together) {
            agent_all.push(a);
            governor_all.push(g);
            if together {
                agent_together.push(a);
                governor_together.push(g);
            }
        }
        (agent_admitted, governor_admitted) = (r.agent_admitted, r.governor_admitted);
    }
    let contention_measured = agent_together.len() >= MIN_TOGETHER.max(agent_all.len() / 4);
    let (agent, governor) = if contention_measured {
        (&agent_together, &governor_together)
    } else {
        (&agent_all, &governor_all)
    };
    let paired: Vec<f64> = agent.iter().zip(governor).map(|(a, g)| a / g).collect();
    CaseReport {
        name: name.to_owned(),
        agent_ns: median(agent),
        governor_ns: median(governor),
        agent_runs,
        governor_runs,
        agent_admitted,
        governor_admitted,
        together: (agent_together.len(), agent_all.len()),
        contention_measured,
        paired_ratio: median(&paired),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(ratio: f64, paired_ratio: f64) -> CaseReport {
        CaseReport {
            name: "case".to_owned(),
            agent_ns: ratio * 10.0,
            governor_ns: 10.0,
            agent_runs: Vec::new(),
            governor_runs: Vec::new(),
            agent_admitted: 0.5,
            governor_admitted: 0.5,
            together: (0, 0),
            contention_measured: true,
            paired_ratio,
        }
    }

    #[test]
    fn a_case_fails_only_when_both_ratios_are_over_the_limit() {
        assert!(report(1.5, 1.5).over(1.0), "a regression shows in both");
        assert!(!report(1.2, 0.9).over(1.0), "medians shifted by noise");
        assert!(
            !report(0.9, 1.2).over(1.0),
            "paired ratios shifted by noise"
        );
        assert!(!report(0.9, 0.9).over(1.0));
    }

    #[test]
    fn each_side_reads_a_clock_that_moves() {
        // The real-clock contenders must not be frozen: with time standing
        // still both would only admit their burst.
        let (a, g) = (
            AgentClockPerDecision::new(REAL_CLOCK_RATE),
            GovernorClockPerDecision::new(REAL_CLOCK_RATE),
        );
        let (ra, rg) = (run(&a, 200_000), run(&g, 200_000));
        assert!(ra.admitted > 100 && rg.admitted > 100, "{ra:?} {rg:?}");
        let (a, g) = (
            AgentClockPerDecision::new(CONTENDED_REAL_CLOCK_RATE),
            GovernorClockPerDecision::new(CONTENDED_REAL_CLOCK_RATE),
        );
        let (ra, rg) = (run(&a, 200_000), run(&g, 200_000));
        assert!(ra.admitted > 10 && rg.admitted > 10, "{ra:?} {rg:?}");
    }
}
