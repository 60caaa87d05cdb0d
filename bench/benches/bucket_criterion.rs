//! `cargo bench -p bench --bench bucket_criterion`
//!
//! Criterion's view of the single-thread case of `bench::bucket`: the RFC
//! 8582 §8.3 bucket (two priority levels, randomised phase) against
//! governor, each deciding one batch of [`BATCH`] requests per iteration
//! at an offered load of twice the rate, the fake clock advanced once per
//! batch. The gated comparison, with the multi-threaded cases, is the
//! `bucket` bench.

use std::hint::black_box;

use bench::bucket::{AgentSide, BATCH, Contender, GovernorSide, step_ns};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn batch<C: Contender>(c: &C, i: &mut u64) -> u64 {
    let now = c.batch_time();
    let mut admitted = 0;
    for _ in 0..BATCH {
        admitted += u64::from(c.decide(now, *i));
        *i += 1;
    }
    c.advance(BATCH * step_ns());
    admitted
}

fn single_thread(c: &mut Criterion) {
    let mut group = c.benchmark_group("bucket_single");
    group.throughput(Throughput::Elements(BATCH));
    let agent = AgentSide::new();
    let mut i = 0;
    group.bench_function("agent", |b| b.iter(|| black_box(batch(&agent, &mut i))));
    let governor = GovernorSide::new();
    let mut i = 0;
    group.bench_function("governor", |b| {
        b.iter(|| black_box(batch(&governor, &mut i)))
    });
    group.finish();
}

criterion_group!(benches, single_thread);
criterion_main!(benches);
