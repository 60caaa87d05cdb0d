//! The kernel program's metrics (`doic_ebpf_attached`, the per-peer
//! `doic_kernel_*_total` counters of the last tick) and the drops of the
//! bounded feeds from the workers to the control thread.

use std::fmt::Write as _;

use super::Sources;
use crate::telemetry::Kernel;

/// Appends the kernel metrics of the last tick.
pub(super) fn render(kernel: &Kernel, o: &mut String) {
    let view = kernel.view();
    crate::ebpf::render_prometheus(o, kernel.is_attached(), &view.peers, view.global.as_ref());
}

/// Appends what each feed to the control thread dropped because it was
/// full (`crate::feed`).
pub(super) fn render_feeds(sources: &Sources, o: &mut String) {
    let name = "doic_feed_dropped_total";
    let _ = writeln!(
        o,
        "# HELP {name} Messages from the workers to the control thread dropped because the feed was full, by feed.\n# TYPE {name} counter"
    );
    let events = sources.kernel.events();
    let _ = writeln!(
        o,
        "{name}{{feed=\"{}\"}} {}",
        events.name(),
        events.dropped()
    );
    if let Some(ov) = &sources.overload {
        let snaps = ov.snapshot_feed();
        let _ = writeln!(o, "{name}{{feed=\"{}\"}} {}", snaps.name(), snaps.dropped());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_program_the_gauge_is_zero_and_no_peer_is_listed() {
        let k = Kernel::default();
        k.set_counting(false);
        let mut out = String::new();
        render(&k, &mut out);
        assert!(out.contains("\ndoic_ebpf_attached 0\n"), "{out}");
        assert!(!out.contains("doic_kernel_packets_total{"), "{out}");
    }
}
