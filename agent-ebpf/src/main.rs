//! Kernel side of the agent's telemetry: per-peer counters of Diameter traffic
//! (RFC 6733 §2.1, Diameter over TCP) and recognition of the Diameter header
//! (RFC 6733 §3: version 1, 24-bit length, R flag) where a message starts at
//! the start of a TCP segment's payload.
//!
//! One parse path serves three hooks: XDP (ingress, native or generic), TC
//! ingress and TC egress. It reads Ethernet (with at most one VLAN tag), IPv4
//! (options skipped) or IPv6 (without extension headers: those are counted as
//! unparsed), then the TCP ports. Packets to or from a port set in
//! `DOIC_PORT_BITS` are counted per peer in the per-CPU map `DOIC_PEERS`. The
//! program never changes a packet and passes every packet on, except, when the
//! optional SYN guard is on, connection attempts to a Diameter port from a
//! source not in `DOIC_SYN_ALLOW`.
//!
//! Cost: a packet that is not TCP to or from a Diameter port costs the header
//! reads and two loads from the port bitmap; a matching packet
//! adds one per-CPU hash lookup and a few increments.

#![no_std]
#![no_main]

use agent_ebpf_common::{
    DIR_FROM_PEER, DIR_TO_PEER, FLAG_SYN_GUARD, GLOBAL_COUNT, GLOBAL_TABLE_FULL, GLOBAL_UNPARSED,
    MAX_PEERS, MAX_SYN_ALLOW, PORT_WORDS, PeerKey, PeerStats,
};
use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_NOEXIST, TC_ACT_SHOT, TC_ACT_UNSPEC, xdp_action},
    macros::{classifier, map, xdp},
    maps::{Array, LpmTrie, PerCpuArray, PerCpuHashMap, lpm_trie::Key},
    programs::{TcContext, XdpContext},
};

#[map]
static DOIC_PEERS: PerCpuHashMap<PeerKey, PeerStats> =
    PerCpuHashMap::with_max_entries(MAX_PEERS, 0);

/// Port bitmap (`GLOBAL_PORT_BITS`), set by the agent at load time.
#[unsafe(no_mangle)]
static DOIC_PORT_BITS: [u64; PORT_WORDS as usize] = [0; PORT_WORDS as usize];

#[map]
static DOIC_CONFIG: Array<u32> = Array::with_max_entries(1, 0);

#[map]
static DOIC_SYN_ALLOW: LpmTrie<[u8; 16], u8> =
    LpmTrie::with_max_entries(MAX_SYN_ALLOW, BPF_F_NO_PREALLOC);

#[map]
static DOIC_GLOBAL: PerCpuArray<u64> = PerCpuArray::with_max_entries(GLOBAL_COUNT, 0);

const ETH_HLEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;
const IPPROTO_TCP: u8 = 6;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;
/// RFC 6733 §3: the header is 20 bytes.
const DIAMETER_HLEN: u32 = 20;
/// RFC 6733 §3: "R(equest) – If set, the message is a request."
const DIAMETER_FLAG_R: u8 = 0x80;
/// RFC 6733 §3: "r(eserved) – These flag bits are reserved for future use and
/// MUST be set to zero."
const DIAMETER_FLAGS_RESERVED: u8 = 0x0F;

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

/// Reads the first bytes of a TCP payload. XDP reads the linear buffer
/// directly; TC goes through `bpf_skb_load_bytes`, because the payload of a
/// locally generated segment may sit in page fragments.
trait Payload {
    /// The first 8 bytes at `off`, as loaded (network byte order).
    fn head(&self, start: usize, end: usize, off: usize) -> Option<u64>;
}

struct Direct;

impl Payload for Direct {
    #[inline(always)]
    fn head(&self, start: usize, end: usize, off: usize) -> Option<u64> {
        // The full 20-byte header must be in the frame, not only what we read.
        let p = ptr_at::<[u8; DIAMETER_HLEN as usize]>(start, end, off)?;
        Some(load::<u64>(p as usize))
    }
}

struct Skb<'a>(&'a TcContext);

impl Payload for Skb<'_> {
    #[inline(always)]
    fn head(&self, _start: usize, _end: usize, off: usize) -> Option<u64> {
        self.0.load::<u64>(off).ok()
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

#[inline(always)]
fn port_is_diameter(port: u16) -> bool {
    // Volatile: the zeros in the object are placeholders the loader replaces.
    // SAFETY: a valid, aligned reference; `port >> 6` < `PORT_WORDS`.
    let word = unsafe { core::ptr::read_volatile(&DOIC_PORT_BITS[usize::from(port >> 6)]) };
    (word >> (port & 63)) & 1 != 0
}

#[inline(always)]
fn global_add(index: u32) {
    if let Some(v) = DOIC_GLOBAL.get_ptr_mut(index) {
        // SAFETY: per-CPU slot; programs do not migrate while running.
        unsafe { *v += 1 };
    }
}

/// What one packet adds to its peer's counters.
struct Sample {
    bytes: u64,
    request: bool,
    answer: bool,
    syn: bool,
    syn_dropped: bool,
}

#[inline(always)]
fn add(stats: &mut PeerStats, s: &Sample) {
    stats.packets += 1;
    stats.bytes += s.bytes;
    stats.requests += u64::from(s.request);
    stats.answers += u64::from(s.answer);
    stats.syn += u64::from(s.syn);
    stats.syn_dropped += u64::from(s.syn_dropped);
}

#[inline(always)]
fn count(key: &PeerKey, s: &Sample) {
    if let Some(stats) = DOIC_PEERS.get_ptr_mut(key) {
        // SAFETY: per-CPU value of an existing entry.
        add(unsafe { &mut *stats }, s);
        return;
    }
    let mut stats = PeerStats::default();
    add(&mut stats, s);
    if DOIC_PEERS
        .insert(key, stats, u64::from(BPF_NOEXIST))
        .is_ok()
    {
        return;
    }
    // Another CPU may have inserted the key first; otherwise the map is full.
    match DOIC_PEERS.get_ptr_mut(key) {
        // SAFETY: as above.
        Some(existing) => add(unsafe { &mut *existing }, s),
        None => global_add(GLOBAL_TABLE_FULL),
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

/// RFC 6733 §3 sanity check of a header at a segment start: version 1, a
/// length of at least 20 that is a multiple of 4, reserved flags clear.
/// Returns `Some(true)` for a request, `Some(false)` for an answer.
#[inline(always)]
fn diameter_kind(h: u64) -> Option<bool> {
    // Network order: version, length (3 bytes), flags, command code (3 bytes).
    let w = u64::from_be(h);
    let version = (w >> 56) as u8;
    let len = ((w >> 32) & 0x00FF_FFFF) as u32;
    let flags = (w >> 24) as u8;
    if version != 1 || len < DIAMETER_HLEN || len & 3 != 0 || flags & DIAMETER_FLAGS_RESERVED != 0 {
        return None;
    }
    Some(flags & DIAMETER_FLAG_R != 0)
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
/// `bytes` the packet length to count.
///
/// Ordered for the common case of traffic that is not Diameter: nothing is
/// built or looked up per peer until the TCP ports have matched.
#[inline(always)]
fn observe<P: Payload>(start: usize, end: usize, bytes: u64, dir: Dir, payload: &P) -> Verdict {
    if ptr_at::<[u8; ETH_HLEN]>(start, end, 0).is_none() {
        return Verdict::Pass;
    }
    let mut proto = u16::from_be(load::<u16>(start + 12));
    let mut l3 = ETH_HLEN;
    if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
        if ptr_at::<[u8; 4]>(start, end, ETH_HLEN).is_none() {
            return Verdict::Pass;
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
            return Verdict::Pass;
        }
        if load::<u8>(ip_at + 9) != IPPROTO_TCP {
            return Verdict::Pass;
        }
        let ihl = usize::from(load::<u8>(ip_at) & 0x0F) * 4;
        if ihl < 20 || u16::from_be(load::<u16>(ip_at + 6)) & 0x1FFF != 0 {
            global_add(GLOBAL_UNPARSED);
            return Verdict::Pass;
        }
        l4 = l3 + ihl;
        l4_len = u32::from(u16::from_be(load::<u16>(ip_at + 2))).saturating_sub(ihl as u32);
        v4 = true;
    } else if proto == ETH_P_IPV6 {
        if ptr_at::<[u8; 40]>(start, end, l3).is_none() {
            return Verdict::Pass;
        }
        let next = load::<u8>(ip_at + 6);
        if next != IPPROTO_TCP {
            // Hop-by-hop, routing, fragment, ESP, AH, destination options,
            // mobility, HIP, shim6: the TCP header (if any) is further on.
            if matches!(next, 0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140) {
                global_add(GLOBAL_UNPARSED);
            }
            return Verdict::Pass;
        }
        l4 = l3 + 40;
        l4_len = u32::from(u16::from_be(load::<u16>(ip_at + 4)));
        v4 = false;
    } else {
        return Verdict::Pass;
    }

    // Layer 4: ports first.
    let Some(tcp) = ptr_at::<[u8; 14]>(start, end, l4) else {
        global_add(GLOBAL_UNPARSED);
        return Verdict::Pass;
    };
    let tcp = tcp as usize;
    let sport = u16::from_be(load::<u16>(tcp));
    let dport = u16::from_be(load::<u16>(tcp + 2));
    let to_diameter = port_is_diameter(dport);
    if !to_diameter && !port_is_diameter(sport) {
        return Verdict::Pass;
    }

    // A Diameter port: build the key.
    let addr: [u8; 16] = if v4 {
        let at = ip_at + if dir == Dir::Ingress { 12 } else { 16 };
        // ::ffff:a.b.c.d, written as four native words.
        let words: [u32; 4] = [
            0,
            0,
            u32::from_ne_bytes([0, 0, 0xFF, 0xFF]),
            load::<u32>(at),
        ];
        // SAFETY: same size, any bit pattern is valid.
        unsafe { core::mem::transmute::<[u32; 4], [u8; 16]>(words) }
    } else {
        let at = ip_at + if dir == Dir::Ingress { 8 } else { 24 };
        let words: [u64; 2] = [load::<u64>(at), load::<u64>(at + 8)];
        // SAFETY: as above.
        unsafe { core::mem::transmute::<[u64; 2], [u8; 16]>(words) }
    };
    let key = PeerKey {
        addr,
        port: if dir == Dir::Ingress { sport } else { dport },
        family: if v4 { 4 } else { 6 },
        direction: if dir == Dir::Ingress {
            DIR_FROM_PEER
        } else {
            DIR_TO_PEER
        },
    };

    let flags = load::<u8>(tcp + 13);
    let syn = flags & (TCP_SYN | TCP_ACK) == TCP_SYN;
    let doff = u32::from(load::<u8>(tcp + 12) >> 4) * 4;
    let mut sample = Sample {
        bytes,
        request: false,
        answer: false,
        syn,
        syn_dropped: false,
    };
    if syn {
        if dir == Dir::Ingress && to_diameter && syn_refused(&key.addr) {
            sample.syn_dropped = true;
            count(&key, &sample);
            return Verdict::Drop;
        }
    } else if l4_len >= doff + DIAMETER_HLEN
        && let Some(head) = payload.head(start, end, l4 + doff as usize)
    {
        match diameter_kind(head) {
            Some(true) => sample.request = true,
            Some(false) => sample.answer = true,
            None => {}
        }
    }
    count(&key, &sample);
    Verdict::Pass
}

/// XDP hook (native or generic): counts what arrives from peers.
#[xdp]
pub fn doic_xdp(ctx: XdpContext) -> u32 {
    let (start, end) = (ctx.data(), ctx.data_end());
    match observe(start, end, (end - start) as u64, Dir::Ingress, &Direct) {
        Verdict::Pass => xdp_action::XDP_PASS,
        Verdict::Drop => xdp_action::XDP_DROP,
    }
}

/// TC ingress hook, for interfaces where XDP cannot serve (such as `lo`).
/// Returns "next" so that other TC programs still run.
#[classifier]
pub fn doic_tc_ingress(ctx: TcContext) -> i32 {
    tc(&ctx, Dir::Ingress)
}

/// TC egress hook: counts what the host sends to peers.
#[classifier]
pub fn doic_tc_egress(ctx: TcContext) -> i32 {
    tc(&ctx, Dir::Egress)
}

#[inline(always)]
fn tc(ctx: &TcContext, dir: Dir) -> i32 {
    match observe(
        ctx.data(),
        ctx.data_end(),
        u64::from(ctx.len()),
        dir,
        &Skb(ctx),
    ) {
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
