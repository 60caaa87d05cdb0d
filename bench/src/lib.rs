//! Benchmarks of the agent library. Each benchmark measures the agent and an
//! anchor (another implementation of the same job) in the same run and
//! reports their ratio, because the machines are shared and noisy.

pub mod bucket;
pub mod codec;
pub mod figures;
pub mod handoff;
pub mod overload;
pub mod own;
pub mod pipe;
pub mod relay;
pub mod relay_ab;
pub mod relay_tls;
pub mod speed;
