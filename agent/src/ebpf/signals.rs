//! The process's stop and reload signals held off the thread that loads
//! the kernel program, for the load (docs/ebpf.md, "In the running agent").

/// Keeps the stop and reload signals (SIGTERM, SIGINT, SIGHUP) off the
/// calling thread while it lives, and lets them through again when dropped.
/// The verifier gives up on a signal pending for the loading thread (`bpf(2)`
/// fails with `EAGAIN`), and aya then verifies the program again with its
/// log on, growing the log tenfold each time it is too short: a SIGTERM
/// taken during the load made it last 16 s instead of 1.2 s, and the stop
/// waited for it. Held off here, the signal goes to another thread of the
/// process (its handler's record is process-wide), or waits until the
/// load is done, and the stop follows at once.
pub(super) struct SignalsHeldOff(Option<libc::sigset_t>);

impl SignalsHeldOff {
    pub(super) fn new() -> Self {
        // SAFETY: both sets are plain values initialised by `sigemptyset`
        // before use, and `pthread_sigmask` only changes this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&raw mut set);
            libc::sigemptyset(&raw mut old);
            for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                libc::sigaddset(&raw mut set, s);
            }
            let held = libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, &raw mut old) == 0;
            Self(held.then_some(old))
        }
    }
}

impl Drop for SignalsHeldOff {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            // SAFETY: `old` is the mask `pthread_sigmask` returned in `new`.
            unsafe {
                libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut());
            }
        }
    }
}
