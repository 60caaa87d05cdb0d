//! Diameter messages in a TCP byte stream (RFC 6733 §2.1: Diameter over
//! TCP; §3: every message starts with a 20-byte header whose 24-bit
//! Message Length covers the whole message, header included).
//!
//! A hook sees segments, not messages. Per flow arriving at the agent the
//! program keeps, in the flow's entry of `DOIC_PEERS`, the sequence number
//! where the next header starts (from the connection's SYN on: ISN + 1).
//! The entry is per CPU; the CPU that saw the flow's last segment holds the
//! position (`PeerEntry::owner`), and a segment on another CPU takes it over
//! from there, so that the counters stay per CPU and a single lookup per
//! packet serves both. A segment is
//! walked from that header on, header by header, through the length fields,
//! at most `MAX_HEADERS` per packet; the end of the walk is where the next
//! header starts, in this segment's successor or beyond. A header split over
//! two segments keeps its first bytes (fewer than 5: version, length and
//! flags are all that is read) in the flow state.
//!
//! Where the walk cannot be exact the segment is counted as inexact, with
//! one cause (`INEXACT_*`): no flow state, a segment out of sequence, a
//! header that cannot be read, too many headers, no valid header where one
//! should start, a flow that lost track and has not found a header at a
//! segment start since, a flow state that could not be stored. A flow that
//! lost track takes up again at the next segment that starts with a valid
//! header (the heuristic the first version used for every segment).
//! Retransmitted bytes, already walked, are not counted again.

use agent_ebpf_common::{
    FlowState, GLOBAL_INEXACT, INEXACT_BAD_HEADER, INEXACT_GAP, INEXACT_NO_FLOW, INEXACT_TOO_MANY,
    INEXACT_UNREADABLE, INEXACT_UNSYNCED, MAX_CPUS, MAX_HEADERS, PeerEntry, PeerKey,
};
use aya_ebpf::{
    helpers::generated::{bpf_get_smp_processor_id, bpf_map_lookup_percpu_elem},
    maps::PerCpuHashMap,
};

use crate::global_add;

/// RFC 6733 §3: the header is 20 bytes.
const DIAMETER_HLEN: u32 = 20;
/// RFC 6733 §3: "R(equest) – If set, the message is a request." The flags
/// byte is bits 31-24 of the header's first 8 bytes read big-endian.
const DIAMETER_FLAG_R_BIT: u32 = 31;
/// RFC 6733 §3: "r(eserved) – These flag bits are reserved for future use and
/// MUST be set to zero."
const DIAMETER_FLAGS_RESERVED: u8 = 0x0F;
/// Bytes of a header that say where the next one is and what this one is:
/// version (1), Message Length (3), Command Flags (1).
const HEADER_NEEDED: u32 = 5;
/// Longest payload walked (a packet is at most 64 KiB, or 512 KiB with BIG
/// TCP); a longer one counts as unreadable.
const MAX_PAYLOAD: u32 = 1 << 20;
/// Above any packet offset of a payload byte plus a Diameter length (24
/// bits).
const POS_MASK: u64 = (1 << 25) - 1;

/// Reads the packet for the walk.
pub(crate) trait Payload {
    /// The 8 bytes at `off` from the start of the packet, read big-endian,
    /// or `None` where they cannot be read.
    fn word(&self, off: usize) -> Option<u64>;
}

/// What one segment adds to its peer's counters.
#[derive(Clone, Copy, Default)]
pub(crate) struct Counted {
    pub(crate) requests: u32,
    pub(crate) answers: u32,
    pub(crate) inexact: bool,
    /// The `INEXACT_*` cause when `inexact`.
    pub(crate) cause: u32,
}

/// How the walk of a segment ended.
#[derive(Clone, Copy)]
enum End {
    /// The next header starts at this payload offset (at or past the end).
    Next(u32),
    /// A header starts at this offset and only its first bytes are here.
    Partial(u32, u32, u32),
    /// Lost track, for this cause.
    Lost(u32),
}

/// The bits of a header's first 8 bytes (read big-endian) that
/// `header_len` checks with one mask: the version byte, the Message Length's
/// two low bits and the reserved flags.
const HEADER_MASK: u64 = 0xFF00_0003_0000_0000 | ((DIAMETER_FLAGS_RESERVED as u64) << 24);
/// What they must be: version 1, a length that is a multiple of 4, reserved
/// flags clear.
const HEADER_WANT: u64 = 1 << 56;

/// RFC 6733 §3 sanity check: version 1, a length of at least 20 that is a
/// multiple of 4, reserved flags clear. `w` holds the header's first bytes,
/// most significant first. Returns the message length.
#[inline(always)]
fn header_len(w: u64) -> Option<u32> {
    let len = ((w >> 32) & 0x00FF_FFFF) as u32;
    if w & HEADER_MASK != HEADER_WANT || len < DIAMETER_HLEN {
        return None;
    }
    Some(len)
}

/// One header in the walk's tally: headers in the low 32 bits, requests
/// among them in the high 32 (one register across the reads of the walk),
/// without a branch (the verifier then follows one path per header).
#[inline(always)]
fn tally(w: u64) -> u64 {
    1 | (((w >> DIAMETER_FLAG_R_BIT) & 1) << 32)
}

impl Counted {
    /// Adds a walk's tally (`tally`).
    #[inline(always)]
    fn add(&mut self, t: u64) {
        let (headers, requests) = (t as u32, (t >> 32) as u32);
        self.requests += requests;
        self.answers += headers - requests;
    }
}

/// Walks the headers of a payload of `plen` bytes at packet offset `at`,
/// from the header at payload offset `o`.
#[inline(always)]
fn walk<P: Payload>(p: &P, at: usize, plen: u32, o: u32, c: &mut Counted) -> End {
    // The paths into the walk (IPv4 or IPv6, VLAN or not, where in the
    // stream) know different bounds of these; without them the verifier
    // walks the loop once for all of them.
    let (at, plen, o) = (opaque(at as u32), opaque(plen), opaque(o));
    if plen > MAX_PAYLOAD {
        return End::Lost(INEXACT_UNREADABLE);
    }
    // Packet offsets, 64-bit: the loop keeps four values alive across the
    // reads (the helper call clobbers the other registers), the position,
    // the end, the tally and the packet, with no 32-bit truncation.
    let end = u64::from(at) + u64::from(plen);
    let mut pos = u64::from(at) + u64::from(o);
    let mut t = 0u64;
    let why = loop {
        if pos >= end {
            break None;
        }
        if end - pos < 8 {
            break Some(TAIL);
        }
        if t as u32 == MAX_HEADERS {
            break Some(INEXACT_TOO_MANY);
        }
        let Some(w) = p.word(pos as usize) else {
            break Some(INEXACT_UNREADABLE);
        };
        let Some(len) = header_len(w) else {
            break Some(INEXACT_BAD_HEADER);
        };
        t += tally(w);
        // `pos` < `at + plen` <= 2^16 + `MAX_PAYLOAD` and `len` < 2^24: the
        // mask changes nothing but gives `pos` the same range in every
        // round, so that the verifier prunes the states after the loop
        // instead of walking them once per round.
        pos = (pos + u64::from(len)) & POS_MASK;
    };
    let o = (pos - u64::from(at)) as u32;
    let end = match why {
        None => End::Next(o),
        Some(TAIL) => tail(p, at as usize, plen, o, &mut t),
        Some(cause) => End::Lost(cause),
    };
    c.add(t);
    end
}

/// Not a cause: the walk stopped with fewer than 8 bytes of a header left.
const TAIL: u32 = u32::MAX;

/// The walk's last header, with fewer than 8 bytes of it left at payload
/// offset `o`: reads the packet's last 8 (the TCP header is before the
/// payload, so there are 8) and keeps the header's. (One header past
/// `MAX_HEADERS` is fine: the loop's bound is for the verifier.)
#[inline(always)]
fn tail<P: Payload>(p: &P, at: usize, plen: u32, o: u32, t: &mut u64) -> End {
    let r = plen - o;
    let Some(w) = last_bytes(p, at, plen, r) else {
        return End::Lost(INEXACT_UNREADABLE);
    };
    if r < HEADER_NEEDED {
        return End::Partial(o, (w >> 32) as u32, r);
    }
    let Some(len) = header_len(w) else {
        return End::Lost(INEXACT_BAD_HEADER);
    };
    *t += tally(w);
    End::Next(o + len)
}

/// `x`, without the bounds the verifier knows of it: written to the stack as
/// the high half of a `u64` and read back as a `u32`, which it cannot follow.
#[inline(always)]
fn opaque(x: u32) -> u32 {
    let mut slot = 0u64;
    let p = &raw mut slot;
    // SAFETY: `p` is a local; volatile so that LLVM keeps both accesses. The
    // target is little-endian: the high half is at `p + 4`.
    unsafe {
        core::ptr::write_volatile(p, u64::from(x) << 32);
        core::ptr::read_volatile(p.cast::<u32>().add(1))
    }
}

/// The last `r` (1-7) bytes of the payload, most significant first.
#[inline(always)]
fn last_bytes<P: Payload>(p: &P, at: usize, plen: u32, r: u32) -> Option<u64> {
    let w = p.word((at + plen as usize).wrapping_sub(8))?;
    Some(w << (8 * (8 - (r & 7))))
}

/// Where the walk of a segment starts, or how the segment ends without one.
enum Plan {
    /// Walk from this payload offset.
    Walk(u32),
    /// No walk.
    Done(End),
}

/// The flow's position held by another CPU's entry, taken over: copied into
/// `mine`, and the other CPU's given up. `None` when no CPU holds it.
#[inline(always)]
fn take_over(
    map: &PerCpuHashMap<PeerKey, PeerEntry>,
    key: &PeerKey,
    mine: &mut PeerEntry,
) -> Option<FlowState> {
    // SAFETY: a helper without arguments.
    let here = unsafe { bpf_get_smp_processor_id() };
    let map = core::ptr::from_ref(map).cast_mut().cast();
    let key = core::ptr::from_ref(key).cast();
    let mut cpu = 0;
    while cpu < MAX_CPUS {
        if cpu != here {
            // SAFETY: the map and a key on the stack, as the helper takes
            // them; null past the last possible CPU.
            let other = unsafe { bpf_map_lookup_percpu_elem(map, key, cpu) }.cast::<PeerEntry>();
            if other.is_null() {
                break;
            }
            // SAFETY: another CPU's value of the entry: a program there may
            // be walking the same flow at this moment (two segments of one
            // flow at once, which the stack avoids): the position read is
            // then behind, and the next segment counts as a gap, flagged.
            unsafe {
                if (*other).owner != 0 {
                    (*other).owner = 0;
                    mine.flow = (*other).flow;
                    mine.owner = 1;
                    return Some(mine.flow);
                }
            }
        }
        cpu += 1;
    }
    None
}

/// A connection's SYN or SYN-ACK: its stream starts at `next` (ISN + 1), on
/// this CPU. A position another CPU held (an earlier connection of the same
/// addresses and ports) is given up.
#[inline(always)]
pub(crate) fn start(
    map: &PerCpuHashMap<PeerKey, PeerEntry>,
    e: &mut PeerEntry,
    key: &PeerKey,
    next: u32,
) {
    if e.owner == 0 {
        let _ = take_over(map, key, e);
    }
    e.flow = FlowState {
        next: u64::from(next),
        synced: 1,
        ..FlowState::default()
    };
    e.owner = 1;
}

/// Counts the Diameter headers of one data segment (`plen` > 0 payload
/// bytes at packet offset `at`, first byte at sequence number `seq`) of the
/// flow of entry `e` (this CPU's value of `key`), and keeps where the next
/// one starts. With `rewind` (the benchmark program only), a known flow
/// takes the segment as the next in sequence.
#[inline(always)]
#[expect(clippy::too_many_arguments, reason = "one call site, inlined")]
pub(crate) fn segment<P: Payload>(
    p: &P,
    map: &PerCpuHashMap<PeerKey, PeerEntry>,
    e: &mut PeerEntry,
    key: &PeerKey,
    seq: u32,
    at: usize,
    plen: u32,
    rewind: bool,
) -> Counted {
    let mut c = Counted::default();
    let held = if e.owner != 0 {
        Some(e.flow)
    } else {
        take_over(map, key, e)
    };
    let mut st = held.unwrap_or_default();
    if rewind && held.is_some() {
        st.next = u64::from(seq);
        st.have = 0;
        st.synced = 1;
    }
    // Why this segment cannot be exact before any walk, if it cannot.
    let mut cause = None;
    // Where the walk starts in this payload, or why it does not.
    let from = if held.is_none() || st.synced == 0 {
        cause = Some(if held.is_none() {
            INEXACT_NO_FLOW
        } else {
            INEXACT_UNSYNCED
        });
        resync(plen)
    } else {
        let d = seq.wrapping_sub(st.next as u32) as i32;
        let have = (st.have & 7) as i32;
        if have != 0 && d == have {
            // The rest of a split header starts this segment.
            joined(p, at, plen, &st, &mut c)
        } else if d < have {
            // `behind` bytes of this segment were seen before.
            let behind = (have - d) as u32;
            if behind >= plen {
                // A retransmission of bytes already walked: nothing new.
                return c;
            }
            if have != 0 {
                cause = Some(INEXACT_GAP);
                resync(plen)
            } else {
                Plan::Walk(behind)
            }
        } else if d == 0 {
            Plan::Walk(0)
        } else {
            cause = Some(INEXACT_GAP);
            resync(plen)
        }
    };
    let end = match from {
        Plan::Walk(o) => walk(p, at, plen, o, &mut c),
        Plan::Done(end) => end,
    };
    match end {
        End::Next(o) => {
            st.next = u64::from(seq.wrapping_add(o));
            st.part = 0;
            st.have = 0;
            st.synced = 1;
        }
        End::Partial(o, part, have) => {
            st.next = u64::from(seq.wrapping_add(o));
            st.part = u64::from(part);
            st.have = u64::from(have);
            st.synced = 1;
        }
        End::Lost(why) => {
            st.synced = 0;
            if cause.is_none() {
                cause = Some(why);
            }
        }
    }
    if let Some(why) = cause {
        c.inexact = true;
        c.cause = why;
        global_add(GLOBAL_INEXACT + why);
    }
    // This CPU saw the flow's last segment: it holds the position now.
    e.flow = st;
    e.owner = 1;
    c
}

/// A flow without a known position takes up again where the segment starts
/// with a valid header (at least 20 bytes of it in the segment).
#[inline(always)]
fn resync(plen: u32) -> Plan {
    if plen < DIAMETER_HLEN {
        return Plan::Done(End::Lost(INEXACT_UNSYNCED));
    }
    Plan::Walk(0)
}

/// The header whose first `st.have` bytes came before: the rest starts this
/// segment. Says where the next header starts in it.
#[inline(always)]
fn joined<P: Payload>(p: &P, at: usize, plen: u32, st: &FlowState, c: &mut Counted) -> Plan {
    let have = (st.have & 7) as u32;
    let rest = if plen >= 8 {
        p.word(at)
    } else {
        last_bytes(p, at, plen, plen)
    };
    let Some(rest) = rest else {
        return Plan::Done(End::Lost(INEXACT_UNREADABLE));
    };
    let w = ((st.part & 0xFFFF_FFFF) << 32) | (rest >> (8 * have));
    let known = have + plen;
    if known < HEADER_NEEDED {
        // Still not enough of it: the header starts `have` bytes back.
        return Plan::Done(End::Partial(
            0u32.wrapping_sub(have),
            (w >> 32) as u32,
            known,
        ));
    }
    let Some(len) = header_len(w) else {
        return Plan::Done(End::Lost(INEXACT_BAD_HEADER));
    };
    c.add(tally(w));
    Plan::Walk(len - have)
}
