//! Helpers for the kernel telemetry tests: network namespaces joined by a
//! veth pair, a packet capture, and hand-written Diameter messages.

pub(crate) mod capture;
pub(crate) mod diameter;
pub(crate) mod netns;
