//! The relay fast path (RFC 6733 §6.1.9 relaying and proxying): read the
//! header and only the routing AVPs (Session-Id, Origin-Host/Realm,
//! Destination-Host/Realm, Route-Record, Result-Code, Experimental-Result,
//! DRMP and the DOIC AVPs of RFC 7683 §7, RFC 8581 §7 and RFC 8582 §7) and
//! leave every other byte untouched for forwarding; then edit the received
//! buffer in place: Hop-by-Hop identifier (§6.1.9), T flag (§3), appended
//! AVPs (Route-Record §6.7.1, OC-Supported-Features RFC 7683 §5.1.3) and
//! removed top-level AVPs (e.g. OC-OLR with a PEER_REPORT, RFC 8581 §6).

use bytes::{Bytes, BytesMut};

use super::avp::{Avp, AvpFlags, AvpIter, RawAvp, min_failed_avp, parse_one};
use super::error::{DecodeError, EncodeError};
use super::header::{self, CommandFlags, HEADER_LEN, Header, MAX_LENGTH_FIELD};
use super::message::Message;
use crate::dictionary::{AvpType, code};

/// Slots of [`Routing`]: which routing AVP each offset records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
enum Slot {
    SessionId,
    OriginHost,
    OriginRealm,
    DestinationHost,
    DestinationRealm,
    RouteRecord,
    ResultCode,
    ExperimentalResult,
    Drmp,
    OcSupportedFeatures,
    OcOlr,
    Load,
}
const SLOTS: usize = 12;

/// The routing view of one received message: its header and where its
/// routing AVPs are. Built by one pass over the top-level AVP headers
/// ([`Routing::scan`]); values are not decoded until asked for, and nothing
/// is copied.
#[derive(Clone, Debug)]
pub struct Routing<'a> {
    buf: &'a [u8],
    /// The message header.
    pub header: Header,
    /// Offset of the first AVP of each slot (0 = absent).
    first: [u32; SLOTS],
    /// Number of Route-Record AVPs.
    pub route_record_count: u32,
    /// Number of OC-OLR AVPs.
    pub oc_olr_count: u32,
    /// Number of Load AVPs.
    pub load_count: u32,
    /// Bit `1 << slot` for each slot seen more than once.
    repeated: u16,
}

const SLOT_CODES: [(u32, Slot); SLOTS] = [
    (code::SESSION_ID, Slot::SessionId),
    (code::ORIGIN_HOST, Slot::OriginHost),
    (code::ORIGIN_REALM, Slot::OriginRealm),
    (code::DESTINATION_HOST, Slot::DestinationHost),
    (code::DESTINATION_REALM, Slot::DestinationRealm),
    (code::ROUTE_RECORD, Slot::RouteRecord),
    (code::RESULT_CODE, Slot::ResultCode),
    (code::EXPERIMENTAL_RESULT, Slot::ExperimentalResult),
    (code::DRMP, Slot::Drmp),
    (code::OC_SUPPORTED_FEATURES, Slot::OcSupportedFeatures),
    (code::OC_OLR, Slot::OcOlr),
    (code::LOAD, Slot::Load),
];

/// The routing codes all lie in `SLOT_BASE..SLOT_BASE + SLOT_SPAN`.
const SLOT_BASE: u32 = code::SESSION_ID;
const SLOT_SPAN: usize = (code::LOAD - code::SESSION_ID + 1) as usize;
const NO_SLOT: u8 = u8::MAX;

/// Slot of each code in the span (`NO_SLOT` for none), built at compile time.
static SLOT_OF: [u8; SLOT_SPAN] = {
    let mut t = [NO_SLOT; SLOT_SPAN];
    let mut i = 0;
    while i < SLOTS {
        t[(SLOT_CODES[i].0 - SLOT_BASE) as usize] = SLOT_CODES[i].1 as u8;
        i += 1;
    }
    t
};

impl<'a> Routing<'a> {
    /// Scans one whole message (`buf.len()` must equal its Message Length):
    /// the header and every top-level AVP header, nothing deeper. Vendor
    /// AVPs (V bit) never match a routing slot, so 3GPP AVPs 621/623/648/649
    /// are not mistaken for DOIC ones.
    ///
    /// # Errors
    /// Header defects (5011, 5015, 3008) and top-level AVP length defects
    /// (5014).
    #[inline]
    pub fn scan(buf: &'a [u8]) -> Result<Routing<'a>, DecodeError> {
        let header = Header::decode(buf)?;
        let mut r = Routing {
            buf,
            header,
            first: [0; SLOTS],
            route_record_count: 0,
            oc_olr_count: 0,
            load_count: 0,
            repeated: 0,
        };
        let end = buf.len();
        let mut pos = HEADER_LEN;
        while let Some(h) = buf.get(pos..pos + 8) {
            let w0 = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
            let w1 = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
            let length = (w1 & 0x00ff_ffff) as usize;
            let vendor = w1 & (u32::from(AvpFlags::VENDOR) << 24) != 0;
            // rounded up to 4 in one step less than (length + 3) & !3: a carry
            // into the flags byte is masked off, which wraps only lengths near
            // 2^24; `padded < length` catches those
            let padded = (w1.wrapping_add(3) & 0x00ff_fffc) as usize;
            if length < 8 + 4 * usize::from(vendor) || padded < length || padded > end - pos {
                // the slow path names the defect
                parse_one(&buf[pos..], pos)?;
            }
            let k = w0.wrapping_sub(SLOT_BASE) as usize;
            if !vendor && k < SLOT_SPAN {
                let s = SLOT_OF[k];
                if s != NO_SLOT {
                    let s = usize::from(s);
                    if r.first[s] == 0 {
                        r.first[s] = pos as u32;
                    } else {
                        r.repeated |= 1 << s;
                    }
                    if s == Slot::RouteRecord as usize {
                        r.route_record_count += 1;
                    } else if s == Slot::OcOlr as usize {
                        r.oc_olr_count += 1;
                    } else if s == Slot::Load as usize {
                        r.load_count += 1;
                    }
                }
            }
            pos += padded;
        }
        if pos < end {
            // fewer than 8 bytes left: a truncated AVP header
            parse_one(&buf[pos..], pos)?;
        }
        Ok(r)
    }

    /// The AVP of a slot, rebuilt from the header `scan` already checked
    /// (no vendor, length within the message).
    #[inline]
    fn get(&self, slot: Slot) -> Option<RawAvp<'a>> {
        let off = self.first[slot as usize] as usize;
        if off == 0 {
            return None;
        }
        let h = self.buf.get(off..off + 8)?;
        let length = super::header::u24(&h[5..8]) as usize;
        let padded = (length + 3) & !3;
        let raw = self.buf.get(off..off + padded)?;
        Some(RawAvp {
            code: u32::from_be_bytes([h[0], h[1], h[2], h[3]]),
            flags: AvpFlags(h[4]),
            vendor_id: None,
            data: raw.get(8..length)?,
            padding: &raw[length..],
            offset: off,
            raw,
        })
    }

    /// The value of a slot's AVP; `scan` checked its header (no vendor, so
    /// 8 bytes) and its length.
    #[inline]
    fn data(&self, slot: Slot) -> Option<&'a [u8]> {
        let off = self.first[slot as usize] as usize;
        if off == 0 {
            return None;
        }
        let h = self.buf.get(off..off + 8)?;
        let length = super::header::u24(&h[5..8]) as usize;
        self.buf.get(off + 8..off + length)
    }

    fn all(&self, slot: Slot) -> impl Iterator<Item = RawAvp<'a>> + use<'a> {
        let off = self.first[slot as usize] as usize;
        let want = match slot {
            Slot::RouteRecord => code::ROUTE_RECORD,
            Slot::OcOlr => code::OC_OLR,
            _ => code::LOAD,
        };
        let body = if off == 0 { &[][..] } else { &self.buf[off..] };
        AvpIter::with_offset(body, off)
            .map_while(Result::ok)
            .filter(move |a| a.code == want && a.vendor_id.is_none())
    }

    /// The whole message.
    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }
    /// Session-Id value bytes.
    pub fn session_id(&self) -> Option<&'a [u8]> {
        self.data(Slot::SessionId)
    }
    /// Origin-Host value bytes.
    pub fn origin_host(&self) -> Option<&'a [u8]> {
        self.data(Slot::OriginHost)
    }
    /// Origin-Realm value bytes.
    pub fn origin_realm(&self) -> Option<&'a [u8]> {
        self.data(Slot::OriginRealm)
    }
    /// Destination-Host value bytes.
    pub fn destination_host(&self) -> Option<&'a [u8]> {
        self.data(Slot::DestinationHost)
    }
    /// Destination-Realm value bytes.
    pub fn destination_realm(&self) -> Option<&'a [u8]> {
        self.data(Slot::DestinationRealm)
    }
    /// Every Route-Record value, in order (the loop check of §6.1.3).
    pub fn route_records(&self) -> impl Iterator<Item = &'a [u8]> + use<'a> {
        self.all(Slot::RouteRecord).map(|a| a.data)
    }
    /// Result-Code, if present and 4 bytes long.
    pub fn result_code(&self) -> Option<u32> {
        self.data(Slot::ResultCode)
            .and_then(|d| d.try_into().ok())
            .map(u32::from_be_bytes)
    }
    /// The Experimental-Result AVP (grouped).
    pub fn experimental_result(&self) -> Option<RawAvp<'a>> {
        self.get(Slot::ExperimentalResult)
    }
    /// (Vendor-Id, Experimental-Result-Code) of the Experimental-Result.
    pub fn experimental_result_code(&self) -> Option<(u32, u32)> {
        let er = self.experimental_result()?;
        let (mut vendor, mut result) = (None, None);
        for c in er.children().map_while(Result::ok) {
            let v = c.data.try_into().ok().map(u32::from_be_bytes);
            match (c.code, c.vendor_id) {
                (code::VENDOR_ID, None) => vendor = v,
                (code::EXPERIMENTAL_RESULT_CODE, None) => result = v,
                _ => {}
            }
        }
        Some((vendor?, result?))
    }
    /// DRMP priority (RFC 7944), if present and 4 bytes long.
    pub fn drmp(&self) -> Option<u32> {
        self.data(Slot::Drmp)
            .and_then(|d| d.try_into().ok())
            .map(u32::from_be_bytes)
    }
    /// The OC-Supported-Features AVP (RFC 7683 §7.1).
    pub fn oc_supported_features(&self) -> Option<RawAvp<'a>> {
        self.get(Slot::OcSupportedFeatures)
    }
    /// Where the first OC-Supported-Features is, as [`Routing::scan`]
    /// recorded it: its offset and its bytes (header, data and padding),
    /// the fields of [`Routing::oc_supported_features`] not split out. What
    /// the relay's fast path compares with the AVP it read before and cuts
    /// out of the request it forwards (RFC 7683 §5.1.3).
    #[inline]
    pub fn oc_supported_features_span(&self) -> Option<(usize, &'a [u8])> {
        let off = self.first[Slot::OcSupportedFeatures as usize] as usize;
        if off == 0 {
            return None;
        }
        let h = self.buf.get(off..off + 8)?;
        let padded = (super::header::u24(&h[5..8]) as usize + 3) & !3;
        Some((off, self.buf.get(off..off + padded)?))
    }
    /// True when the message carries more than one top-level
    /// OC-Supported-Features (RFC 7683 §7.1 defines one per message), as
    /// counted by [`Routing::scan`]: no second pass over the message.
    pub fn oc_supported_features_repeated(&self) -> bool {
        self.repeated & (1 << Slot::OcSupportedFeatures as u16) != 0
    }
    /// Whether the message carries an OC-Supported-Features or an OC-OLR
    /// (RFC 7683 §7.1, §7.3) at top level, as [`Routing::scan`] recorded
    /// them: no AVP is read.
    #[inline]
    pub fn has_doic_avps(&self) -> bool {
        self.has_oc_supported_features() || self.first[Slot::OcOlr as usize] != 0
    }
    /// Whether the message carries an OC-Supported-Features at top level
    /// (RFC 7683 §7.1), as [`Routing::scan`] recorded it: no AVP is read.
    #[inline]
    pub fn has_oc_supported_features(&self) -> bool {
        self.first[Slot::OcSupportedFeatures as usize] != 0
    }
    /// Every OC-OLR AVP (RFC 7683 §7.3; a host or realm report and an RFC
    /// 8581 peer report may travel together).
    pub fn oc_olrs(&self) -> impl Iterator<Item = RawAvp<'a>> + use<'a> {
        self.all(Slot::OcOlr)
    }
    /// Every Load AVP (RFC 8583 §7.1).
    pub fn loads(&self) -> impl Iterator<Item = RawAvp<'a>> + use<'a> {
        self.all(Slot::Load)
    }

    /// Scans an answer ([`Routing::scan`]) and checks what the relay's
    /// answer path reads from it ([`Routing::check_answer`]), in the same
    /// pass.
    ///
    /// # Errors
    /// The defects of [`Routing::scan`] and [`Routing::check_answer`].
    #[inline]
    pub fn scan_answer(buf: &'a [u8]) -> Result<Routing<'a>, DecodeError> {
        let r = Routing::scan(buf)?;
        r.check_answer()?;
        Ok(r)
    }

    /// Checks an answer at least as strictly as a relayed request is
    /// checked, from what [`Routing::scan`] recorded (no second pass over
    /// the message): exactly one Origin-Host and one Origin-Realm
    /// ([`Routing::check_origin`]); at most one Result-Code (RFC 6733
    /// §7.1), an Unsigned32 of 4 bytes (§4.2); at most one
    /// Experimental-Result (§7.6) with exactly one Vendor-Id and one
    /// Experimental-Result-Code, each of 4 bytes; and one of the two
    /// (every answer reports its outcome, §6.2).
    ///
    /// # Errors
    /// 5005 (missing, Failed-AVP an example of the AVP), 5009 (repeated,
    /// Failed-AVP the extra one), 5014 (a value of the wrong length).
    pub fn check_answer(&self) -> Result<(), DecodeError> {
        const ANSWER: &str = "answer";
        self.check_origin(ANSWER)?;
        self.at_most_one(Slot::ResultCode, ANSWER)?;
        self.at_most_one(Slot::ExperimentalResult, ANSWER)?;
        let rc = self.get(Slot::ResultCode);
        if let Some(a) = &rc {
            unsigned32(a)?;
        }
        let er = self.experimental_result();
        if let Some(er) = &er {
            let g = &super::grammar::EXPERIMENTAL_RESULT;
            super::grammar::occurrences(g, er.data, er.offset + er.header_len(), er.offset)?;
            for c in er.children() {
                unsigned32(&c?)?;
            }
        }
        if rc.is_none() && er.is_none() {
            return Err(missing(Slot::ResultCode, ANSWER));
        }
        Ok(())
    }

    /// Checks what every request and answer grammar of RFC 6733 asks of
    /// the origin (§6.1.1, the CCFs of §3.3 and §7.2: `{ Origin-Host }
    /// { Origin-Realm }`): exactly one of each, from what
    /// [`Routing::scan`] recorded.
    ///
    /// # Errors
    /// 5005 (missing, Failed-AVP an example of the AVP) or 5009 (repeated,
    /// Failed-AVP the extra one).
    #[inline]
    pub fn check_origin(&self, context: &'static str) -> Result<(), DecodeError> {
        for slot in [Slot::OriginHost, Slot::OriginRealm] {
            if self.first[slot as usize] == 0 {
                return Err(missing(slot, context));
            }
            self.at_most_one(slot, context)?;
        }
        Ok(())
    }

    #[inline]
    fn at_most_one(&self, slot: Slot, context: &'static str) -> Result<(), DecodeError> {
        if self.repeated & (1 << slot as u16) == 0 {
            Ok(())
        } else {
            Err(self.too_many(slot, context))
        }
    }

    /// 5009 for the second top-level AVP of `slot` (cold: looks it up).
    #[cold]
    fn too_many(&self, slot: Slot, context: &'static str) -> DecodeError {
        let code = SLOT_CODES[slot as usize].0;
        let off = self.first[slot as usize] as usize;
        let extra = AvpIter::with_offset(&self.buf[off..], off)
            .map_while(Result::ok)
            .filter(|a| a.code == code && a.vendor_id.is_none())
            .nth(1);
        DecodeError::AvpOccursTooManyTimes {
            code,
            vendor_id: None,
            name: avp_name(code),
            context,
            offset: extra.as_ref().map_or(off, |a| a.offset),
            failed_avp: extra.map_or_else(Bytes::new, |a| Bytes::copy_from_slice(a.unpadded())),
        }
    }
}

/// Checks that `a` holds 4 bytes (RFC 6733 §4.2 Unsigned32); the codec's
/// value decoder names the defect (5014).
#[inline]
fn unsigned32(a: &RawAvp<'_>) -> Result<(), DecodeError> {
    if a.data.len() == 4 {
        Ok(())
    } else {
        a.value_as(AvpType::Unsigned32).map(drop)
    }
}

/// 5005 for the AVP of `slot` (RFC 6733 §7.5: Failed-AVP holds an example
/// of the missing AVP).
#[cold]
fn missing(slot: Slot, context: &'static str) -> DecodeError {
    let code = SLOT_CODES[slot as usize].0;
    DecodeError::MissingAvp {
        code,
        vendor_id: None,
        name: avp_name(code),
        context,
        offset: 0,
        failed_avp: min_failed_avp(code, AvpFlags(AvpFlags::MANDATORY), None),
    }
}

fn avp_name(code: u32) -> &'static str {
    crate::dictionary::avp(code, 0).map_or("AVP", |d| d.name)
}

/// A received message held for forwarding, edited in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageBuf {
    buf: BytesMut,
}

impl MessageBuf {
    /// Wraps one whole message (as cut by [`super::frame_len`]); checks its
    /// header.
    ///
    /// # Errors
    /// Header defects (5011, 5015, 3008).
    pub fn new(buf: BytesMut) -> Result<MessageBuf, DecodeError> {
        Header::decode(&buf)?;
        Ok(MessageBuf { buf })
    }

    /// Encodes `msg` into a new buffer.
    ///
    /// # Errors
    /// When a length exceeds its 24-bit field.
    pub fn from_message(msg: &Message) -> Result<MessageBuf, EncodeError> {
        Ok(MessageBuf {
            buf: msg.to_bytes()?,
        })
    }

    /// The header.
    pub fn header(&self) -> Header {
        // checked in `new` and kept valid by every edit
        Header::peek(&self.buf).unwrap_or(Header::new(0, 0, CommandFlags(0)))
    }

    /// The routing view (one pass over the top-level AVP headers).
    ///
    /// # Errors
    /// Top-level AVP length defects (5014).
    pub fn routing(&self) -> Result<Routing<'_>, DecodeError> {
        Routing::scan(&self.buf)
    }

    /// Rewrites the Hop-by-Hop identifier.
    pub fn set_hop_by_hop(&mut self, id: u32) {
        header::set_hop_by_hop(&mut self.buf, id);
    }

    /// Rewrites the End-to-End identifier.
    pub fn set_end_to_end(&mut self, id: u32) {
        header::set_end_to_end(&mut self.buf, id);
    }

    /// Sets or clears the T (potentially retransmitted) flag.
    pub fn set_retransmit(&mut self, on: bool) {
        header::set_retransmit(&mut self.buf, on);
    }

    /// Replaces the command flags byte.
    pub fn set_flags(&mut self, flags: CommandFlags) {
        self.buf[4] = flags.0;
    }

    fn set_length(&mut self, len: usize) -> Result<(), EncodeError> {
        if len > MAX_LENGTH_FIELD {
            return Err(EncodeError::MessageTooLong { length: len });
        }
        header::set_length(&mut self.buf, len);
        Ok(())
    }

    /// Appends an AVP at the end and fixes the Message Length.
    ///
    /// # Errors
    /// When the message or the AVP would exceed its 24-bit length.
    pub fn append_avp(&mut self, avp: &Avp) -> Result<(), EncodeError> {
        let new_len = self.buf.len() + avp.encoded_len();
        if new_len > MAX_LENGTH_FIELD {
            return Err(EncodeError::MessageTooLong { length: new_len });
        }
        avp.encode(&mut self.buf)?;
        self.set_length(new_len)
    }

    /// Appends already encoded, padded AVPs and fixes the Message Length.
    ///
    /// # Errors
    /// When the message would exceed the 24-bit length.
    pub fn append_encoded(&mut self, avps: &[u8]) -> Result<(), EncodeError> {
        let new_len = self.buf.len() + avps.len();
        self.set_length(new_len)?;
        self.buf.extend_from_slice(avps);
        Ok(())
    }

    /// Removes, in place, every top-level AVP for which `remove` is true and
    /// fixes the Message Length. Returns how many were removed.
    ///
    /// # Errors
    /// A top-level AVP length defect (5014); the buffer is then unchanged.
    pub fn remove_avps(
        &mut self,
        mut remove: impl FnMut(&RawAvp<'_>) -> bool,
    ) -> Result<usize, DecodeError> {
        // check first so that a defect leaves the buffer untouched
        for r in AvpIter::with_offset(&self.buf[HEADER_LEN..], HEADER_LEN) {
            r?;
        }
        let (mut read, mut write, mut removed) = (HEADER_LEN, HEADER_LEN, 0);
        while read < self.buf.len() {
            let (len, drop) = match parse_one(&self.buf[read..], read) {
                Ok(a) => (a.raw.len(), remove(&a)),
                Err(_) => break,
            };
            if drop {
                removed += 1;
            } else {
                if write != read {
                    self.buf.copy_within(read..read + len, write);
                }
                write += len;
            }
            read += len;
        }
        self.buf.truncate(write);
        let _ = self.set_length(write);
        Ok(removed)
    }

    /// The message bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Message length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Always false: a message has at least its header.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes, frozen for sending.
    pub fn freeze(self) -> Bytes {
        self.buf.freeze()
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> BytesMut {
        self.buf
    }
}

#[cfg(test)]
mod tests;
