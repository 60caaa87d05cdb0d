//! Criterion benchmarks of the codec on a realistic request (about 600
//! bytes, 30 AVPs): relay fast path, full walk, owned decode, encode, and
//! the copy anchor measured in the same run.

use std::hint::black_box;

use bench::codec::{copy_anchor, encode, full_walk, realistic_request, relay_fast_path};
use criterion::{Criterion, criterion_group, criterion_main};
use diameter::codec::Message;

fn codec(c: &mut Criterion) {
    let m = realistic_request();
    let bytes = m.to_bytes().unwrap().freeze();
    let mut g = c.benchmark_group("codec");
    g.bench_function("copy_anchor", |b| b.iter(|| copy_anchor(black_box(&bytes))));
    g.bench_function("relay_fast_path", |b| {
        b.iter(|| relay_fast_path(black_box(&bytes)))
    });
    g.bench_function("full_walk", |b| b.iter(|| full_walk(black_box(&bytes))));
    g.bench_function("decode_message", |b| {
        b.iter(|| Message::decode(black_box(bytes.clone())).map(|m| m.avps.len()))
    });
    g.bench_function("encode", |b| b.iter(|| encode(black_box(&m))));
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
