//! The kernel program's own log lines: what it could not count (a segment
//! without flow state, a header beyond the packet, the peer table full,
//! docs/ebpf.md), written with aya-log into the `AYA_LOGS` ring buffer,
//! at most once a second per CPU and kind of event. The control thread reads
//! them every tick ([`KernelLog::drain`]) into the agent's tracing, target
//! `doic::kernel`. Every occurrence is also counted
//! (`doic_kernel_inexact_total{cause}`, `doic_kernel_table_full_total`).

use std::sync::{Arc, Mutex, PoisonError};

use aya::Ebpf;
use aya_log::EbpfLogger;
use tracing::warn;

/// Hands each record to tracing and, when asked, keeps its text.
#[derive(Clone, Default)]
struct Sink {
    kept: Option<Arc<Mutex<Vec<String>>>>,
}

impl log::Log for Sink {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let message = record.args().to_string();
        let program = record.target();
        match record.level() {
            log::Level::Error => {
                tracing::error!(target: "doic::kernel", program, "{message}");
            }
            log::Level::Warn => tracing::warn!(target: "doic::kernel", program, "{message}"),
            log::Level::Info => tracing::info!(target: "doic::kernel", program, "{message}"),
            log::Level::Debug => {
                tracing::debug!(target: "doic::kernel", program, "{message}");
            }
            log::Level::Trace => {
                tracing::trace!(target: "doic::kernel", program, "{message}");
            }
        }
        if let Some(k) = &self.kept {
            k.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(message);
        }
    }

    fn flush(&self) {}
}

/// The reader of the program's log ring buffer.
pub(crate) struct KernelLog {
    reader: Option<EbpfLogger<Sink>>,
    kept: Option<Arc<Mutex<Vec<String>>>>,
}

impl KernelLog {
    /// Takes the program's log buffer out of `ebpf` (before any program
    /// runs). Without it (an object built without aya-log), one warning:
    /// the counters still say what the program could not count.
    pub(crate) fn take(ebpf: &mut Ebpf, keep: bool) -> Self {
        let kept = keep.then(Arc::default);
        let sink = Sink { kept: kept.clone() };
        let reader = match EbpfLogger::init_with_logger(ebpf, sink) {
            Ok(r) => Some(r),
            Err(e) => {
                warn!(cause = %e, "the kernel program's log is unavailable; its counters still count what it cannot");
                None
            }
        };
        Self { reader, kept }
    }

    /// Forwards every record written since the last call; with `keep`,
    /// returns their texts.
    pub(crate) fn drain(&mut self) -> Vec<String> {
        if let Some(r) = self.reader.as_mut() {
            // aya-log unwraps its parse of a record: a record this build
            // cannot read (never with the pinned pair of releases) must not
            // take the control thread down; the reader is then dropped.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.flush())).is_err() {
                warn!(
                    "a kernel log record could not be read; the kernel program's log is no longer read"
                );
                self.reader = None;
            }
        }
        self.kept.as_ref().map_or_else(Vec::new, |k| {
            std::mem::take(&mut *k.lock().unwrap_or_else(PoisonError::into_inner))
        })
    }
}

impl std::fmt::Debug for KernelLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelLog")
            .field("reading", &self.reader.is_some())
            .finish_non_exhaustive()
    }
}
