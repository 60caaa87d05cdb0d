//! A thread's CPU time as the scheduler accounts it, read by another
//! thread: `/proc/self/task/TID/schedstat` (its first field, nanoseconds
//! on the CPU, exact), else user plus system time of
//! `/proc/self/task/TID/stat` (in clock ticks, 10 ms on most kernels); and
//! the whole process's (`CLOCK_PROCESS_CPUTIME_ID`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{HostError, parse_error, read};

/// The calling thread's kernel thread id.
#[must_use]
pub fn current_tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// The CPU time thread `tid` of this process has used so far.
///
/// # Errors
/// When neither file can be read or parsed (no such thread, no procfs, a
/// kernel without scheduler statistics and without `stat`).
pub fn cpu_time(tid: i32) -> Result<Duration, HostError> {
    let dir = PathBuf::from(format!("/proc/self/task/{tid}"));
    let schedstat = dir.join("schedstat");
    match read(&schedstat).and_then(|s| parse_schedstat(&schedstat, &s)) {
        Ok(t) => Ok(t),
        Err(first) => {
            let stat = dir.join("stat");
            read(&stat)
                .and_then(|s| parse_stat(&stat, &s, clock_ticks()))
                .map_err(|_| first)
        }
    }
}

/// The CPU time every thread of this process has used so far.
///
/// # Errors
/// When the kernel refuses the clock.
pub fn process_cpu_time() -> Result<Duration, HostError> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to the pointer given, which
    // points to a live local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &raw mut ts) };
    if rc != 0 {
        return Err(HostError::Sys {
            call: "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)",
            source: std::io::Error::last_os_error(),
        });
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(ts.tv_nsec).unwrap_or(0);
    Ok(Duration::new(secs, nanos))
}

/// The first field of `schedstat`: nanoseconds on the CPU.
pub(crate) fn parse_schedstat(path: &Path, s: &str) -> Result<Duration, HostError> {
    s.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .map(Duration::from_nanos)
        .ok_or_else(|| parse_error(path, "no run time in schedstat"))
}

/// utime + stime of a `stat` line (fields 14 and 15, after the command in
/// parentheses, which may hold spaces), `hz` ticks per second.
pub(crate) fn parse_stat(path: &Path, s: &str, hz: u64) -> Result<Duration, HostError> {
    let rest = s
        .rfind(')')
        .map(|i| &s[i + 1..])
        .ok_or_else(|| parse_error(path, "no command in stat"))?;
    // After the command: state is field 3, utime 14, stime 15.
    let mut fields = rest.split_whitespace().skip(11);
    let mut tick = || -> Option<u64> { fields.next()?.parse().ok() };
    let (user, system) = tick()
        .zip(tick())
        .ok_or_else(|| parse_error(path, "no utime and stime in stat"))?;
    let ticks = user.saturating_add(system);
    let hz = hz.max(1);
    Ok(Duration::from_secs(ticks / hz) + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz))
}

/// Clock ticks per second (`_SC_CLK_TCK`), 100 when the kernel does not
/// say.
fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_and_stat_are_parsed() {
        let p = Path::new("x");
        assert_eq!(
            parse_schedstat(p, "123456789 2000 31\n").unwrap(),
            Duration::from_nanos(123_456_789)
        );
        assert!(parse_schedstat(p, "").is_err());
        // A command with spaces and parentheses; utime 250, stime 50 ticks.
        let line = "42 (tokio (w) 1) R 1 1 1 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(parse_stat(p, line, 100).unwrap(), Duration::from_secs(3));
        assert!(parse_stat(p, "42 (x) R 1", 100).is_err());
    }

    #[test]
    fn this_threads_time_grows_with_work() {
        let tid = current_tid();
        let before = cpu_time(tid).unwrap();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        std::hint::black_box(x);
        let after = cpu_time(tid).unwrap();
        assert!(after > before, "{before:?} -> {after:?}");
        assert!(cpu_time(-1).is_err());
        assert!(process_cpu_time().unwrap() >= after);
    }
}
