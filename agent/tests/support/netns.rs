//! Two network namespaces joined by a veth pair, created with `ip` and removed
//! on drop (also when the test panics). Names are unique per process and test.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Address plan inside every pair (the namespaces isolate it).
pub(crate) const A4: &str = "10.77.0.1";
/// The listener side's IPv4 address.
pub(crate) const B4: &str = "10.77.0.2";
/// The client side's IPv6 address.
pub(crate) const A6: &str = "fd77::1";
/// The listener side's IPv6 address.
pub(crate) const B6: &str = "fd77::2";

/// Namespace `a` (client side, interface `veth_a`) and namespace `b`
/// (listener side, interface `veth_b`).
pub(crate) struct VethPair {
    pub(crate) a: String,
    pub(crate) b: String,
    pub(crate) veth_a: String,
    pub(crate) veth_b: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("cannot run ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sysctl(ns: &str, key: &str, value: &str) {
    ip(&[
        "netns",
        "exec",
        ns,
        "sysctl",
        "-q",
        "-w",
        &format!("{key}={value}"),
    ]);
}

impl VethPair {
    /// Creates the namespaces, the veth pair, addresses (IPv6 without DAD) and
    /// brings everything up.
    pub(crate) fn new(tag: &str) -> Self {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{}", std::process::id() % 100_000, n);
        let pair = VethPair {
            a: format!("doic-{tag}-{id}-a"),
            b: format!("doic-{tag}-{id}-b"),
            veth_a: format!("dva{id}"),
            veth_b: format!("dvb{id}"),
        };
        // Created first, so that a failure below still removes what exists.
        ip(&["netns", "add", &pair.a]);
        ip(&["netns", "add", &pair.b]);
        ip(&[
            "link",
            "add",
            &pair.veth_a,
            "netns",
            &pair.a,
            "type",
            "veth",
            "peer",
            "name",
            &pair.veth_b,
            "netns",
            &pair.b,
        ]);
        for (ns, dev, v4, v6) in [
            (&pair.a, &pair.veth_a, A4, A6),
            (&pair.b, &pair.veth_b, B4, B6),
        ] {
            ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", dev]);
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            // One write, one segment: no autocorking of small writes.
            sysctl(ns, "net.ipv4.tcp_autocorking", "0");
        }
        pair
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting a namespace destroys its end of the veth pair, and the peer.
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Runs `f` on a new thread that has entered network namespace `ns`, and
/// returns its result. Sockets and attachments made by `f` belong to `ns`.
pub(crate) fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    thread::spawn(move || {
        enter(&path);
        f()
    })
    .join()
    .expect("thread in namespace panicked")
}

/// Switches the calling thread into the network namespace at `path`.
pub(crate) fn enter(path: &str) {
    let file = File::open(path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    // SAFETY: setns on a valid namespace fd affects only this thread.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
}

/// Output of `ip -n ns -d link show dev`.
pub(crate) fn link_details(ns: &str, dev: &str) -> String {
    let out = Command::new("ip")
        .args(["-n", ns, "-d", "link", "show", "dev", dev])
        .output()
        .expect("ip link show");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
