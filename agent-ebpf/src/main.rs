//! Kernel side of the agent's telemetry: per-peer counters of Diameter traffic
//! (RFC 6733 §2.1, Diameter over TCP) and of the Diameter requests and
//! answers in it (RFC 6733 §3 header: version 1, 24-bit length, R flag),
//! every message of every segment, followed through the byte stream per flow
//! (`stream`).
//!
//! One parse path serves three hooks: XDP (ingress, native or generic), TC
//! ingress and TC egress; on a loopback interface, where every segment sent
//! also arrives, one TC ingress program counts both directions
//! (`doic_tc_loopback`). It reads Ethernet (with at most one VLAN tag), IPv4
//! (options skipped) or IPv6 (without extension headers: those are counted as
//! unparsed), then the TCP ports. Packets to or from a port with a role in
//! `DOIC_PORT_BITS` are counted per peer in the per-CPU map `DOIC_PEERS`;
//! the Diameter messages of the segments that arrive at the agent (ingress,
//! to a port it listens on or from a port a peer listens on) are counted
//! too. What the agent sends (egress, and its own segments looped back on
//! `lo`) it counts itself, message by message, as it writes them. The
//! program never changes a packet and passes every packet on, except, when
//! the optional SYN guard is on, connection attempts to a port the agent
//! listens on from a source not in `DOIC_SYN_ALLOW`.
//!
//! Cost: a packet that is not TCP to or from a Diameter port costs the header
//! reads and two loads from the port bitmap; a matching packet adds one
//! per-CPU hash lookup and a few increments, and one arriving with payload a
//! read per Diameter header (on TC, from a copy of up to 2 KiB of the segment
//! made by one helper call, [`Window`]).

#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

mod stream;

use agent_ebpf_common::{
    FLAG_SYN_GUARD, GLOBAL_COUNT, GLOBAL_INEXACT, GLOBAL_TABLE_FULL, GLOBAL_UNPARSED,
    INEXACT_BAD_HEADER, INEXACT_GAP, INEXACT_NO_FLOW, INEXACT_TOO_MANY, INEXACT_UNREADABLE,
    LOG_INTERVAL_NS, MAX_PEERS, MAX_SYN_ALLOW, PORT_LISTEN, PORT_PEER, PORT_WORDS, PeerEntry,
    PeerKey, PeerStats,
};
use aya_ebpf::EbpfContext;
use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_NOEXIST, TC_ACT_SHOT, TC_ACT_UNSPEC, xdp_action},
    macros::{classifier, map, xdp},
    maps::{Array, LpmTrie, PerCpuArray, PerCpuHashMap, lpm_trie::Key},
    programs::{TcContext, XdpContext},
};
use stream::{Counted, Payload};

/// What comes from peers (`MAP_PEERS`). Allocated as entries come
/// (`BPF_F_NO_PREALLOC`): a per-CPU value is 96 bytes on every possible
/// CPU, and most of the 65 536 entries are never used.
#[map]
static DOIC_PEERS: PerCpuHashMap<PeerKey, PeerEntry> =
    PerCpuHashMap::with_max_entries(MAX_PEERS, BPF_F_NO_PREALLOC);

/// What goes to peers (`MAP_PEERS_OUT`), likewise.
#[map]
static DOIC_PEERS_OUT: PerCpuHashMap<PeerKey, PeerEntry> =
    PerCpuHashMap::with_max_entries(MAX_PEERS, BPF_F_NO_PREALLOC);

/// Port roles (`GLOBAL_PORT_BITS`), set by the agent at load time.
#[unsafe(no_mangle)]
static DOIC_PORT_BITS: [u64; PORT_WORDS as usize] = [0; PORT_WORDS as usize];

#[map]
static DOIC_CONFIG: Array<u32> = Array::with_max_entries(1, 0);

#[map]
static DOIC_SYN_ALLOW: LpmTrie<[u8; 16], u8> =
    LpmTrie::with_max_entries(MAX_SYN_ALLOW, BPF_F_NO_PREALLOC);

#[map]
static DOIC_GLOBAL: PerCpuArray<u64> = PerCpuArray::with_max_entries(GLOBAL_COUNT, 0);

/// When this CPU last logged each `GLOBAL_*` event (`report`), kernel
/// nanoseconds.
#[map]
static DOIC_LOGGED_AT: PerCpuArray<u64> = PerCpuArray::with_max_entries(GLOBAL_COUNT, 0);

const ETH_HLEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;
const IPPROTO_TCP: u8 = 6;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;
/// Packet offsets the direct reads accept: the verifier needs a bound.
const MAX_DIRECT_OFF: usize = 0xFFF0;
/// Packet offsets the walk's window reads from (a packet of 512 KiB with
/// BIG TCP, see `stream::MAX_PAYLOAD`).
const MAX_PACKET_OFF: usize = 1 << 21;

/// What the hook does with the packet.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Pass,
    Drop,
}

/// Where the hook sits, which decides who the peer is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// XDP or TC ingress: the peer is the source.
    Ingress,
    /// TC egress: the peer is the destination.
    Egress,
}

/// XDP reads the linear buffer directly (on a multi-buffer frame, bytes
/// past it count as unreadable). The packet pointers are read from the
/// context at each read, so that the verifier sees the same (fresh) pointers
/// on every path into the walk and prunes them together.
struct Direct<'a>(&'a XdpContext);

impl Payload for Direct<'_> {
    #[inline(always)]
    fn word(&self, mut off: usize) -> Option<u64> {
        // Opaque to LLVM, so that `off + 8` below is not folded with how the
        // caller computed `off` (`x - 8 + 8`): the verifier must see the
        // pointer it reads through compared with the packet's end.
        // SAFETY: an empty instruction sequence; `off` goes through unchanged.
        unsafe { core::arch::asm!("/* {0} */", inout(reg) off, options(pure, nomem, nostack)) };
        if off > MAX_DIRECT_OFF {
            return None;
        }
        // SAFETY: the context the kernel passed; volatile so that LLVM does
        // not reuse the pointers loaded before the walk.
        let (start, end) = unsafe {
            let md = self.0.ctx;
            (
                core::ptr::read_volatile(&raw const (*md).data) as usize,
                core::ptr::read_volatile(&raw const (*md).data_end) as usize,
            )
        };
        let mut p = ptr_at::<u64>(start, end, off)? as usize;
        // And from reading through `p + 8 - 8`, an offset outside the range
        // the verifier proved for the register it compared.
        // SAFETY: as above.
        unsafe { core::arch::asm!("/* {0} */", inout(reg) p, options(pure, nomem, nostack)) };
        Some(u64::from_be(load::<u64>(p)))
    }
}

/// TC goes through `bpf_skb_load_bytes`, which reaches the page fragments
/// where the payload of a locally generated segment (or the rest of a GSO
/// super-segment) may sit. Each call walks the fragments from the first and
/// costs more than the rest of a header's round in the walk, so an arriving
/// segment is read a [`Window`] at a time: one call copies up to `WINDOW`
/// bytes, and the headers that lie in them (a dozen of messages of 150
/// bytes) are read from the copy. A segment's payload is then copied about
/// once whatever its messages' sizes. Without a window (egress, which does
/// not walk) each word is one call.
struct Skb<'a> {
    ctx: &'a TcContext,
    window: Option<*mut Window>,
}

/// Bytes one `bpf_skb_load_bytes` call copies for the walk.
const WINDOW: usize = 2048;

/// This CPU's copy of a stretch of the packet being walked: `len` bytes
/// from packet offset `start`. Its fields are read volatile: to the verifier
/// they are then unknown on every path, so the paths through the walk that
/// read from the copy and those that refill it meet in the same state.
#[repr(C)]
struct Window {
    start: u64,
    len: u64,
    bytes: [u8; WINDOW],
}

/// The walk's window (one entry, per CPU). A program runs to its end on its
/// CPU and TC ingress runs do not nest, so one per CPU serves every packet;
/// each TC ingress run empties it before it reads.
#[map]
static DOIC_WINDOW: PerCpuArray<Window> = PerCpuArray::with_max_entries(1, 0);

impl Payload for Skb<'_> {
    #[inline(always)]
    fn word(&self, off: usize) -> Option<u64> {
        let Some(w) = self.window else {
            return self.ctx.load::<u64>(off).ok().map(u64::from_be);
        };
        // SAFETY: this CPU's entry of `DOIC_WINDOW`, found in `tc`.
        let (start, len) = unsafe {
            (
                core::ptr::read_volatile(&raw const (*w).start),
                core::ptr::read_volatile(&raw const (*w).len),
            )
        };
        let mut i = (off as u64).wrapping_sub(start);
        // Opaque to LLVM: the verifier must see the bound below checked on
        // the register the read goes through.
        // SAFETY: an empty instruction sequence; `i` goes through unchanged.
        unsafe { core::arch::asm!("/* {0} */", inout(reg) i, options(pure, nomem, nostack)) };
        if i <= (WINDOW - 8) as u64 && i + 8 <= len {
            // SAFETY: `i + 8` <= `WINDOW`, inside the entry's bytes.
            let v = unsafe {
                (&raw const (*w).bytes)
                    .cast::<u8>()
                    .add(i as usize)
                    .cast::<u64>()
                    .read_unaligned()
            };
            return Some(u64::from_be(v));
        }
        // Refill from `off`: as much as the packet has, up to `WINDOW`.
        let mut n = u64::from(self.ctx.len()).wrapping_sub(off as u64);
        // SAFETY: as above, for `n`.
        unsafe { core::arch::asm!("/* {0} */", inout(reg) n, options(pure, nomem, nostack)) };
        if n > WINDOW as u64 {
            n = WINDOW as u64;
        }
        if n < 8 || off > MAX_PACKET_OFF {
            return None;
        }
        // SAFETY: the context's skb; `n` bytes (8 to `WINDOW`) into the entry's
        // bytes.
        let r = unsafe {
            aya_ebpf::helpers::generated::bpf_skb_load_bytes(
                self.ctx.skb.skb.cast(),
                off as u32,
                (&raw mut (*w).bytes).cast(),
                n as u32,
            )
        };
        if r != 0 {
            return None;
        }
        // SAFETY: this CPU's entry, as above.
        let v = unsafe {
            core::ptr::write_volatile(&raw mut (*w).start, off as u64);
            core::ptr::write_volatile(&raw mut (*w).len, n);
            (&raw const (*w).bytes).cast::<u64>().read_unaligned()
        };
        Some(u64::from_be(v))
    }
}

/// Returns a pointer to a `T` at `start + off` if it lies before `end`. The
/// verifier needs the check and the access through the same pointer.
#[inline(always)]
fn ptr_at<T>(start: usize, end: usize, off: usize) -> Option<*const T> {
    let p = start + off;
    if p + size_of::<T>() > end {
        return None;
    }
    Some(p as *const T)
}

/// The `PORT_*` roles of a TCP port (0: not a Diameter port).
#[inline(always)]
fn port_roles(port: u16) -> u64 {
    // Volatile: the zeros in the object are placeholders the loader replaces.
    // SAFETY: a valid, aligned reference; `port >> 5` < `PORT_WORDS`.
    let word = unsafe { core::ptr::read_volatile(&DOIC_PORT_BITS[usize::from(port >> 5)]) };
    (word >> ((port & 31) * 2)) & (PORT_LISTEN | PORT_PEER)
}

#[inline(always)]
pub(crate) fn global_add(index: u32) {
    if let Some(v) = DOIC_GLOBAL.get_ptr_mut(index) {
        // SAFETY: per-CPU slot; programs do not migrate while running.
        unsafe { *v += 1 };
    }
}

/// What the program could not count for a peer: an index into
/// `DOIC_GLOBAL` (`GLOBAL_TABLE_FULL`, or `GLOBAL_INEXACT` + a cause), and
/// the peer (the key's address and port).
///
/// Aligned, the address first: `report` takes it by reference across a
/// subprogram call, and the verifier refuses misaligned stack stores.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Lost {
    addr: [u8; 16],
    index: u32,
    port: u16,
}

/// What the hook does with the packet, and what it could not count.
struct Observed {
    verdict: Verdict,
    lost: Option<Lost>,
}

impl From<Verdict> for Observed {
    #[inline(always)]
    fn from(verdict: Verdict) -> Self {
        Self {
            verdict,
            lost: None,
        }
    }
}

/// Says through aya-log what `lost` is, at most once a second per CPU and
/// event (`LOG_INTERVAL_NS`): the counters (`DOIC_GLOBAL`, each peer's
/// `inexact`) have every occurrence, the log line tells the operator the
/// kind and one peer it happened to.
///
/// A subprogram of its own (not inlined): the verifier checks the program's
/// paths into it without the log's code in each, and every hook's program
/// compiles the same whatever other programs share it.
#[inline(never)]
fn report<C: EbpfContext>(ctx: &C, lost: &Lost) {
    let Some(at) = DOIC_LOGGED_AT.get_ptr_mut(lost.index) else {
        return;
    };
    // SAFETY: a helper without arguments.
    let now = unsafe { aya_ebpf::helpers::generated::bpf_ktime_get_ns() };
    // SAFETY: this CPU's slot; programs do not migrate while running.
    unsafe {
        if *at != 0 && now.wrapping_sub(*at) < LOG_INTERVAL_NS {
            return;
        }
        *at = now;
    }
    let (addr, port) = (lost.addr, lost.port);
    if lost.index == GLOBAL_TABLE_FULL {
        aya_log_ebpf::warn!(
            ctx,
            "peer table full: {:i} port {} and further new peers are not counted",
            addr,
            port
        );
        return;
    }
    let why = match lost.index.wrapping_sub(GLOBAL_INEXACT) {
        INEXACT_NO_FLOW => {
            "no flow state (the connection predates the program or its entry was lost)"
        }
        INEXACT_GAP => "a sequence gap (segments lost or reordered before the hook)",
        INEXACT_UNREADABLE => "a header beyond the packet",
        INEXACT_TOO_MANY => "more headers in one packet than the walk reads",
        INEXACT_BAD_HEADER => "bytes where a header should start are no Diameter header",
        _ => "the flow has not found a header at a segment start since it lost track",
    };
    aya_log_ebpf::warn!(
        ctx,
        "segment from {:i} port {} not counted exactly: {}",
        addr,
        port,
        why
    );
}

/// What one packet adds to its peer's counters.
struct Sample {
    bytes: u64,
    messages: Counted,
    syn: bool,
    syn_dropped: bool,
}

#[inline(always)]
fn add(stats: &mut PeerStats, s: &Sample) {
    stats.packets += 1;
    stats.bytes += s.bytes;
    stats.requests += u64::from(s.messages.requests);
    stats.answers += u64::from(s.messages.answers);
    stats.syn += u64::from(s.syn);
    stats.syn_dropped += u64::from(s.syn_dropped);
    stats.inexact += u64::from(s.messages.inexact);
}

/// This CPU's value of `key` in `map`, made (zero on every CPU) if there
/// is none; `None` when the map is full (counted in `GLOBAL_TABLE_FULL`).
#[inline(always)]
fn entry(map: &PerCpuHashMap<PeerKey, PeerEntry>, key: &PeerKey) -> Option<&'static mut PeerEntry> {
    let found = match map.get_ptr_mut(key) {
        Some(e) => Some(e),
        None => {
            // Another CPU may insert the key first: the lookup finds it then.
            let _ = map.insert(key, PeerEntry::default(), u64::from(BPF_NOEXIST));
            map.get_ptr_mut(key)
        }
    };
    match found {
        // SAFETY: this CPU's value of an entry (`BPF_F_NO_PREALLOC`: not
        // reused while the program runs); programs do not migrate while
        // running, and only the handover of `stream` writes another CPU's.
        Some(e) => Some(unsafe { &mut *e }),
        None => {
            global_add(GLOBAL_TABLE_FULL);
            None
        }
    }
}

/// True when the SYN guard is on and `addr` is not in the allow trie.
#[inline(always)]
fn syn_refused(addr: &[u8; 16]) -> bool {
    let guard = match DOIC_CONFIG.get(0) {
        Some(flags) => *flags & FLAG_SYN_GUARD != 0,
        None => false,
    };
    guard && DOIC_SYN_ALLOW.get(Key::new(128, *addr)).is_none()
}

/// Reads a `T` at `p`, which callers have bounds-checked. The build enables
/// misaligned loads (`+allows-misaligned-mem-access`, see `.cargo/config.toml`),
/// so this is one load instruction; the verifier accepts misaligned packet
/// access on architectures with efficient unaligned access (x86-64, arm64).
#[inline(always)]
fn load<T: Copy>(p: usize) -> T {
    // SAFETY: callers pass addresses inside a bounds-checked header.
    unsafe { (p as *const T).read_unaligned() }
}

/// The shared parse path. `start..end` is the directly readable frame,
/// `bytes` the packet length to count. `REWIND`: see `stream::segment`.
/// `LOOPBACK` (with `dir` ingress): the hook of a loopback interface,
/// standing in for ingress and egress, since every segment sent on it
/// arrives on it: what does not arrive at the agent is what the agent sent,
/// counted for its destination as egress counts it.
///
/// Ordered for the common case of traffic that is not Diameter: nothing is
/// built or looked up per peer until the TCP ports have matched.
#[inline(always)]
fn observe<P: Payload, const REWIND: bool, const LOOPBACK: bool>(
    start: usize,
    end: usize,
    bytes: u64,
    dir: Dir,
    payload: &P,
) -> Observed {
    if ptr_at::<[u8; ETH_HLEN]>(start, end, 0).is_none() {
        return Verdict::Pass.into();
    }
    let mut proto = u16::from_be(load::<u16>(start + 12));
    let mut l3 = ETH_HLEN;
    if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
        if ptr_at::<[u8; 4]>(start, end, ETH_HLEN).is_none() {
            return Verdict::Pass.into();
        }
        proto = u16::from_be(load::<u16>(start + ETH_HLEN + 2));
        l3 = ETH_HLEN + 4;
    }

    // Layer 3: where TCP starts, how long the segment is, where the peer's
    // address is (source on ingress, destination on egress).
    let l4;
    let l4_len: u32;
    let v4;
    let ip_at = start + l3;
    if proto == ETH_P_IP {
        if ptr_at::<[u8; 20]>(start, end, l3).is_none() {
            return Verdict::Pass.into();
        }
        if load::<u8>(ip_at + 9) != IPPROTO_TCP {
            return Verdict::Pass.into();
        }
        let ihl = usize::from(load::<u8>(ip_at) & 0x0F) * 4;
        if ihl < 20 || u16::from_be(load::<u16>(ip_at + 6)) & 0x1FFF != 0 {
            global_add(GLOBAL_UNPARSED);
            return Verdict::Pass.into();
        }
        l4 = l3 + ihl;
        let total = u32::from(u16::from_be(load::<u16>(ip_at + 2)));
        // 0 on a GSO super-segment above 64 KiB (BIG TCP): the skb's length.
        let total = if total == 0 {
            (bytes as u32).saturating_sub(l3 as u32)
        } else {
            total
        };
        l4_len = total.saturating_sub(ihl as u32);
        v4 = true;
    } else if proto == ETH_P_IPV6 {
        if ptr_at::<[u8; 40]>(start, end, l3).is_none() {
            return Verdict::Pass.into();
        }
        let next = load::<u8>(ip_at + 6);
        if next != IPPROTO_TCP {
            // Hop-by-hop, routing, fragment, ESP, AH, destination options,
            // mobility, HIP, shim6: the TCP header (if any) is further on.
            if matches!(next, 0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140) {
                global_add(GLOBAL_UNPARSED);
            }
            return Verdict::Pass.into();
        }
        l4 = l3 + 40;
        let payload_len = u32::from(u16::from_be(load::<u16>(ip_at + 4)));
        // 0 on a GSO super-segment above 64 KiB (BIG TCP): the skb's length.
        l4_len = if payload_len == 0 {
            (bytes as u32).saturating_sub(l4 as u32)
        } else {
            payload_len
        };
        v4 = false;
    } else {
        return Verdict::Pass.into();
    }

    // Layer 4: ports first.
    let Some(tcp) = ptr_at::<[u8; 14]>(start, end, l4) else {
        global_add(GLOBAL_UNPARSED);
        return Verdict::Pass.into();
    };
    let tcp = tcp as usize;
    let sport = u16::from_be(load::<u16>(tcp));
    let dport = u16::from_be(load::<u16>(tcp + 2));
    let (to_roles, from_roles) = (port_roles(dport), port_roles(sport));
    if to_roles | from_roles == 0 {
        return Verdict::Pass.into();
    }
    // Arriving at the agent: its messages are counted. A segment the agent
    // sends is seen on egress and, on `lo`, again on ingress; the agent
    // counts those itself as it writes them.
    let arrival =
        dir == Dir::Ingress && (to_roles & PORT_LISTEN != 0 || from_roles & PORT_PEER != 0);
    // Whose counters: the source's for what comes in, the destination's for
    // what goes out (on loopback, whatever does not arrive at the agent).
    let inbound = if LOOPBACK {
        arrival
    } else {
        dir == Dir::Ingress
    };

    // A Diameter port: build the key.
    let (src, dst) = if v4 {
        (address_v4(ip_at + 12), address_v4(ip_at + 16))
    } else {
        (address_v6(ip_at + 8), address_v6(ip_at + 24))
    };
    let addr = if inbound { src } else { dst };
    // SAFETY: same size, any bit pattern is valid.
    let addr = unsafe { core::mem::transmute::<[u64; 2], [u8; 16]>(addr) };
    // A segment arriving at the agent is counted per flow (userspace sums
    // the peer's flows): the entry holds the flow's position too.
    let key = PeerKey {
        addr,
        port: if inbound { sport } else { dport },
        local_port: if arrival { dport } else { 0 },
        local: if arrival { fold(dst) } else { 0 },
    };
    let map = if inbound {
        &DOIC_PEERS
    } else {
        &DOIC_PEERS_OUT
    };
    let Some(e) = entry(map, &key) else {
        return Observed {
            verdict: Verdict::Pass,
            lost: Some(Lost {
                index: GLOBAL_TABLE_FULL,
                addr: key.addr,
                port: key.port,
            }),
        };
    };

    let flags = load::<u8>(tcp + 13);
    let syn = flags & (TCP_SYN | TCP_ACK) == TCP_SYN;
    let doff = u32::from(load::<u8>(tcp + 12) >> 4) * 4;
    let seq = u32::from_be(load::<u32>(tcp + 4));
    let mut sample = Sample {
        bytes,
        messages: Counted::default(),
        syn,
        syn_dropped: false,
    };
    if flags & TCP_SYN != 0 {
        if syn && inbound && to_roles & PORT_LISTEN != 0 && syn_refused(&key.addr) {
            sample.syn_dropped = true;
            add(&mut e.stats, &sample);
            return Verdict::Drop.into();
        }
        if arrival {
            // SYN or SYN-ACK: the stream's first byte is ISN + 1.
            stream::start(map, e, &key, seq.wrapping_add(1));
        }
    } else if arrival && l4_len > doff {
        sample.messages = stream::segment(
            payload,
            map,
            e,
            &key,
            seq,
            l4 + doff as usize,
            l4_len - doff,
            REWIND,
        );
    }
    add(&mut e.stats, &sample);
    let m = sample.messages;
    Observed {
        verdict: Verdict::Pass,
        lost: m.inexact.then_some(Lost {
            index: GLOBAL_INEXACT + m.cause,
            addr: key.addr,
            port: key.port,
        }),
    }
}

/// An address as two native words, folded to 32 bits (`PeerKey::local`).
#[inline(always)]
fn fold(a: [u64; 2]) -> u32 {
    let x = a[0] ^ a[1];
    (x ^ (x >> 32)) as u32
}

/// An IPv4 address at `at` (bounds-checked by the caller) as IPv4-mapped
/// IPv6, in two native words as it lies in memory.
#[inline(always)]
fn address_v4(at: usize) -> [u64; 2] {
    // ::ffff:a.b.c.d: bytes 8-15 are 00 00 ff ff a b c d.
    let low = u64::from(u32::from_ne_bytes([0, 0, 0xFF, 0xFF]));
    let high = u64::from(load::<u32>(at));
    [0, low | (high << 32)]
}

/// An IPv6 address at `at` (bounds-checked by the caller), likewise.
#[inline(always)]
fn address_v6(at: usize) -> [u64; 2] {
    [load::<u64>(at), load::<u64>(at + 8)]
}

/// XDP hook (native or generic): counts what arrives from peers.
#[xdp]
pub fn doic_xdp(ctx: XdpContext) -> u32 {
    xdp::<false>(&ctx)
}

/// `doic_xdp` for the benchmarks: a segment of a known flow is taken as the
/// next in sequence, so that one packet replayed measures the steady state.
#[xdp]
pub fn doic_xdp_bench(ctx: XdpContext) -> u32 {
    xdp::<true>(&ctx)
}

#[inline(always)]
fn xdp<const REWIND: bool>(ctx: &XdpContext) -> u32 {
    let (start, end) = (ctx.data(), ctx.data_end());
    let direct = Direct(ctx);
    let o = observe::<_, REWIND, false>(start, end, (end - start) as u64, Dir::Ingress, &direct);
    if let Some(lost) = &o.lost {
        report(ctx, lost);
    }
    match o.verdict {
        Verdict::Pass => xdp_action::XDP_PASS,
        Verdict::Drop => xdp_action::XDP_DROP,
    }
}

/// TC ingress hook, for interfaces where XDP cannot serve (such as `lo`).
/// Returns "next" so that other TC programs still run.
#[classifier]
pub fn doic_tc_ingress(ctx: TcContext) -> i32 {
    tc::<false>(&ctx, Dir::Ingress)
}

/// TC egress hook: counts what the host sends to peers.
#[classifier]
pub fn doic_tc_egress(ctx: TcContext) -> i32 {
    tc::<false>(&ctx, Dir::Egress)
}

/// TC ingress hook of a loopback interface in place of ingress and egress:
/// what arrives at the agent is counted as `doic_tc_ingress` counts it,
/// what the agent sent as `doic_tc_egress` does (`observe`'s `LOOPBACK`).
#[classifier]
pub fn doic_tc_loopback(ctx: TcContext) -> i32 {
    tc::<true>(&ctx, Dir::Ingress)
}

#[inline(always)]
fn tc<const LOOPBACK: bool>(ctx: &TcContext, dir: Dir) -> i32 {
    // Only arrivals are walked, and only on ingress.
    let window = match dir {
        Dir::Ingress => DOIC_WINDOW.get_ptr_mut(0),
        Dir::Egress => None,
    };
    if let Some(w) = window {
        // SAFETY: this CPU's entry; what an earlier packet left is not this
        // packet's.
        unsafe { core::ptr::write_volatile(&raw mut (*w).len, 0) };
    }
    let o = observe::<_, false, LOOPBACK>(
        ctx.data(),
        ctx.data_end(),
        u64::from(ctx.len()),
        dir,
        &Skb { ctx, window },
    );
    if let Some(lost) = &o.lost {
        report(ctx, lost);
    }
    match o.verdict {
        Verdict::Pass => TC_ACT_UNSPEC,
        Verdict::Drop => TC_ACT_SHOT,
    }
}

/// Passes every packet and does nothing else: the anchor the benchmarks
/// subtract to get the net cost of `doic_xdp`.
#[xdp]
pub fn doic_xdp_pass(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: the verifier rejects any program with a reachable panic path.
    unsafe { core::hint::unreachable_unchecked() }
}

/// GPL-compatible licence string, required by the kernel for some helpers.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
