//! Attaching the program to an interface: ingress per `[ebpf] mode` (native
//! XDP, generic XDP or TC ingress; TCX links on kernels >= 6.6, a `clsact`
//! qdisc before), TC egress, and on a loopback interface one TC ingress
//! program for both directions (docs/ebpf.md, "One program on a loopback
//! interface").

use agent_ebpf_common::{PROG_TC_INGRESS, PROG_TC_LOOPBACK, PROG_XDP};
use aya::Ebpf;
use aya::programs::{SchedClassifier, TcAttachType, Xdp, XdpMode};
use tracing::{debug, warn};

use super::{Hook, LoadError, Mode, program};

/// Attaches the ingress program per `mode`; with `both` (a loopback
/// interface with egress counted), TC ingress takes the program that counts
/// both directions ([`Hook::TcLoopback`]).
pub(super) fn attach_ingress(
    ebpf: &mut Ebpf,
    interface: &str,
    mode: Mode,
    both: bool,
) -> Result<Hook, LoadError> {
    let tc = if both {
        Hook::TcLoopback
    } else {
        Hook::TcIngress
    };
    let tries: &[Hook] = match mode {
        // Generic XDP is never chosen for the user: where the driver has no
        // XDP (e.g. `lo`) it costs more than TC, which serves that case.
        Mode::Auto => &[Hook::XdpNative, tc],
        Mode::XdpNative => &[Hook::XdpNative],
        Mode::XdpGeneric => &[Hook::XdpGeneric],
        Mode::Tc => &[tc],
        Mode::Off => return Err(LoadError::Disabled),
    };
    let mut last = None;
    for &hook in tries {
        let result = match hook {
            Hook::XdpNative => attach_xdp(ebpf, interface, XdpMode::Driver),
            Hook::XdpGeneric => attach_xdp(ebpf, interface, XdpMode::Skb),
            Hook::TcLoopback => attach_tc(ebpf, PROG_TC_LOOPBACK, interface, TcAttachType::Ingress),
            _ => attach_tc(ebpf, PROG_TC_INGRESS, interface, TcAttachType::Ingress),
        };
        match result {
            Ok(()) => return Ok(hook),
            Err(LoadError::Attach { source, .. }) => {
                debug!(interface, %hook, cause = %source, "attach failed, trying the next hook");
                last = Some((hook, source));
            }
            Err(other) => return Err(other),
        }
    }
    let (hook, source) = last.expect("at least one hook tried");
    if mode == Mode::Auto {
        warn!(interface, "no hook accepted the program");
    }
    Err(LoadError::Attach {
        interface: interface.to_owned(),
        hook,
        source,
    })
}

fn attach_xdp(ebpf: &mut Ebpf, interface: &str, mode: XdpMode) -> Result<(), LoadError> {
    let prog: &mut Xdp = program(ebpf, PROG_XDP)?;
    if prog.fd().is_err() {
        prog.load().map_err(|source| LoadError::Program {
            name: PROG_XDP,
            source,
        })?;
    }
    let hook = if mode == XdpMode::Driver {
        Hook::XdpNative
    } else {
        Hook::XdpGeneric
    };
    prog.attach(interface, mode)
        .map(|_| ())
        .map_err(|source| LoadError::Attach {
            interface: interface.to_owned(),
            hook,
            source,
        })
}

pub(super) fn attach_tc(
    ebpf: &mut Ebpf,
    name: &'static str,
    interface: &str,
    attach: TcAttachType,
) -> Result<(), LoadError> {
    let prog: &mut SchedClassifier = program(ebpf, name)?;
    if prog.fd().is_err() {
        prog.load()
            .map_err(|source| LoadError::Program { name, source })?;
    }
    // Kernels before 6.6 attach through a clsact qdisc (it may exist already);
    // later ones use TCX links, which leave nothing behind on detach.
    use aya::util::KernelVersion;
    if KernelVersion::current().is_ok_and(|v| v < KernelVersion::new(6, 6, 0)) {
        let _ = aya::programs::tc::qdisc_add_clsact(interface);
    }
    let hook = match (attach, name) {
        (TcAttachType::Egress, _) => Hook::TcEgress,
        (_, PROG_TC_LOOPBACK) => Hook::TcLoopback,
        _ => Hook::TcIngress,
    };
    prog.attach(interface, attach)
        .map(|_| ())
        .map_err(|source| LoadError::Attach {
            interface: interface.to_owned(),
            hook,
            source,
        })
}

/// Whether `interface` is a loopback interface (`IFF_LOOPBACK`) in the
/// calling thread's network namespace. False when it cannot be told (no such
/// interface: the attach then names it).
pub(super) fn is_loopback(interface: &str) -> bool {
    let name = interface.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return false;
    }
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: a descriptor just returned by `socket`, owned here alone.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: an all-zero `ifreq` is valid (an empty name, zero flags).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, &b) in req.ifr_name.iter_mut().zip(name) {
        *d = b as libc::c_char;
    }
    // SAFETY: `req` is a valid `ifreq` with a NUL-terminated name (checked
    // shorter than `IFNAMSIZ`); SIOCGIFFLAGS writes only `ifru_flags`.
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let r = unsafe { libc::ioctl(raw, libc::SIOCGIFFLAGS, &raw mut req) };
    // SAFETY: the kernel filled the flags member on success.
    r == 0 && i32::from(unsafe { req.ifr_ifru.ifru_flags }) & libc::IFF_LOOPBACK != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_told_by_its_flags() {
        // Every network namespace has `lo`; a veth or an absent name is not one.
        assert!(is_loopback("lo"));
        assert!(!is_loopback("doic-absent0"));
        assert!(!is_loopback(""));
        assert!(!is_loopback("a-name-longer-than-ifnamsiz"));
        assert!(!is_loopback("l\0o"));
    }
}
