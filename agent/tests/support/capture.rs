//! A packet capture on one interface (AF_PACKET), counting TCP segments to or
//! from a port per peer and direction exactly as the kernel program keys them:
//! the peer is the source of received frames and the destination of sent
//! ones; bytes are frame lengths.

use std::collections::HashMap;
use std::ffi::CString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use agent::ebpf::Direction;

/// Packets and bytes per (peer, direction).
pub(crate) type Counts = HashMap<(SocketAddr, Direction), (u64, u64)>;

/// A running capture; stops on drop.
pub(crate) struct Capture {
    counts: Arc<Mutex<Counts>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Capture {
    /// Opens the capture on `dev`; call it from a thread inside the
    /// interface's namespace (the socket stays bound there).
    pub(crate) fn start(dev: &str, port: u16) -> Self {
        Self::open(dev, port, false)
    }

    /// [`Capture::start`] counting each frame only as it is received, for
    /// its source: on a loopback interface, where every frame shows twice
    /// (sent, then received), this is what one program on its ingress sees
    /// when every segment on `port` arrives at a listener or from one (a
    /// port that both ends listen on).
    pub(crate) fn arrivals(dev: &str, port: u16) -> Self {
        Self::open(dev, port, true)
    }

    fn open(dev: &str, port: u16, arrivals: bool) -> Self {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2) call; the fd is owned below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: fd is a fresh, valid descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let name = CString::new(dev).unwrap();
        // SAFETY: valid C string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        assert!(ifindex != 0, "no interface {dev}");
        // SAFETY: zeroed sockaddr_ll is a valid starting value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: sll is a valid sockaddr_ll of the given size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const sll).cast(),
                size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(rc, 0, "bind AF_PACKET: {}", std::io::Error::last_os_error());
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 20_000,
        };
        // SAFETY: valid option value of the given size.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const tv).cast(),
                size_of::<libc::timeval>() as u32,
            )
        };
        let counts = Arc::new(Mutex::new(Counts::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (counts, stop) = (counts.clone(), stop.clone());
            thread::spawn(move || run(fd, port, arrivals, &counts, &stop))
        };
        Capture {
            counts,
            stop,
            thread: Some(thread),
        }
    }

    /// What has been captured so far.
    pub(crate) fn counts(&self) -> Counts {
        self.counts.lock().unwrap().clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(fd: OwnedFd, port: u16, arrivals: bool, counts: &Mutex<Counts>, stop: &AtomicBool) {
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: zeroed sockaddr_ll is valid for recvfrom to fill.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut from_len = size_of::<libc::sockaddr_ll>() as u32;
        // SAFETY: buffer and address are valid for the given lengths.
        let n = unsafe {
            libc::recvfrom(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
                (&raw mut from).cast(),
                &mut from_len,
            )
        };
        if n < 0 {
            continue; // timeout: check `stop`
        }
        let frame_len = n as usize;
        let data = &buf[..frame_len.min(buf.len())];
        let outgoing = from.sll_pkttype == libc::PACKET_OUTGOING;
        if arrivals && outgoing {
            continue;
        }
        if let Some((src, dst)) = tcp_endpoints(data) {
            if src.port() != port && dst.port() != port {
                continue;
            }
            let key = if outgoing {
                (dst, Direction::ToPeer)
            } else {
                (src, Direction::FromPeer)
            };
            let mut c = counts.lock().unwrap();
            let e = c.entry(key).or_default();
            e.0 += 1;
            e.1 += frame_len as u64;
        }
    }
}

/// Source and destination of an Ethernet/IPv4-or-IPv6/TCP frame.
fn tcp_endpoints(f: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
    let ethertype = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
    let (src, dst, l4) = match ethertype {
        0x0800 => {
            let ip = f.get(14..34)?;
            if ip[9] != 6 {
                return None;
            }
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let s: [u8; 4] = ip[12..16].try_into().ok()?;
            let d: [u8; 4] = ip[16..20].try_into().ok()?;
            (
                IpAddr::V4(Ipv4Addr::from(s)),
                IpAddr::V4(Ipv4Addr::from(d)),
                14 + ihl,
            )
        }
        0x86dd => {
            let ip = f.get(14..54)?;
            if ip[6] != 6 {
                return None;
            }
            let s: [u8; 16] = ip[8..24].try_into().ok()?;
            let d: [u8; 16] = ip[24..40].try_into().ok()?;
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                54,
            )
        }
        _ => return None,
    };
    let tcp = f.get(l4..l4 + 4)?;
    let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
    let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
    Some((SocketAddr::new(src, sport), SocketAddr::new(dst, dport)))
}
