//! RFC 6733 §4.1 AVP header (code, V/M/P flags, 24-bit length, optional
//! Vendor-ID) and padding to 4 bytes; §4.4 grouped AVPs.
//!
//! Two views: [`RawAvp`] borrows a received buffer and is what the walkers
//! iterate ([`AvpIter`]); [`Avp`] owns its value as [`bytes::Bytes`] (a slice
//! of the received buffer, no copy) or as child AVPs when built locally.

use bytes::{BufMut, Bytes};

use super::error::{DecodeError, EncodeError};
use super::value::Value;
use crate::dictionary::{self, AvpType, FlagRule};

/// Length of an AVP header without Vendor-ID.
pub const AVP_HEADER_LEN: usize = 8;
/// Length of an AVP header with Vendor-ID.
pub const AVP_HEADER_LEN_VENDOR: usize = 12;
/// The largest AVP Length the 24-bit field can carry.
pub const MAX_AVP_LEN: usize = 0x00ff_ffff;

/// The AVP flags byte (RFC 6733 §4.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AvpFlags(pub u8);

impl AvpFlags {
    /// V: the Vendor-ID field is present.
    pub const VENDOR: u8 = 0x80;
    /// M: the receiver must understand the AVP.
    pub const MANDATORY: u8 = 0x40;
    /// P: reserved for end-to-end security.
    pub const PROTECTED: u8 = 0x20;
    /// The reserved bits (MUST be zero on send, ignored on receipt).
    pub const RESERVED: u8 = 0x1f;

    /// V bit.
    pub const fn is_vendor(self) -> bool {
        self.0 & Self::VENDOR != 0
    }
    /// M bit.
    pub const fn is_mandatory(self) -> bool {
        self.0 & Self::MANDATORY != 0
    }
    /// P bit.
    pub const fn is_protected(self) -> bool {
        self.0 & Self::PROTECTED != 0
    }
    /// The reserved bits as received.
    pub const fn reserved(self) -> u8 {
        self.0 & Self::RESERVED
    }
}

/// Bytes of padding after `len` data bytes to reach a 4-byte boundary.
pub const fn padding(len: usize) -> usize {
    (4 - (len & 3)) & 3
}

/// One AVP borrowed from a received buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawAvp<'a> {
    /// AVP code.
    pub code: u32,
    /// AVP flags.
    pub flags: AvpFlags,
    /// Vendor-ID, present when the V bit is set.
    pub vendor_id: Option<u32>,
    /// The value bytes (AVP Length minus the header; padding excluded).
    pub data: &'a [u8],
    /// The padding bytes after the value (normally zero).
    pub padding: &'a [u8],
    /// Byte offset of the AVP header from the start of the message.
    pub offset: usize,
    /// The whole AVP: header, data and padding.
    pub raw: &'a [u8],
}

impl<'a> RawAvp<'a> {
    /// The dictionary entry for this AVP's (code, vendor) key.
    pub fn def(&self) -> Option<&'static dictionary::AvpDef> {
        dictionary::avp(
            self.code,
            self.vendor_id.unwrap_or(dictionary::vendor::NONE),
        )
    }

    /// Header length (8 or 12).
    pub fn header_len(&self) -> usize {
        if self.vendor_id.is_some() {
            AVP_HEADER_LEN_VENDOR
        } else {
            AVP_HEADER_LEN
        }
    }

    /// Iterates the children of a grouped AVP.
    pub fn children(&self) -> AvpIter<'a> {
        AvpIter::with_offset(self.data, self.offset + self.header_len())
    }

    /// The header and data without padding (the Failed-AVP content).
    pub fn unpadded(&self) -> &'a [u8] {
        &self.raw[..self.header_len() + self.data.len()]
    }

    /// Decodes the value as `ty`.
    ///
    /// # Errors
    /// 5014 for a size that `ty` does not allow, 5004 for a bad value.
    pub fn value_as(&self, ty: AvpType) -> Result<Value, DecodeError> {
        Value::decode(ty, &Bytes::copy_from_slice(self.data)).map_err(|e| e.at(self))
    }
}

/// Iterates the AVPs of a buffer (a message body or a grouped AVP's data).
/// Yields at most one error, then stops: it never loops or panics on any
/// input.
#[derive(Clone, Debug)]
pub struct AvpIter<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> AvpIter<'a> {
    /// Iterates `buf`; reported offsets start at 0.
    pub fn new(buf: &'a [u8]) -> AvpIter<'a> {
        AvpIter::with_offset(buf, 0)
    }

    /// Iterates `buf`, which starts `base` bytes into the message.
    pub fn with_offset(buf: &'a [u8], base: usize) -> AvpIter<'a> {
        AvpIter { buf, pos: 0, base }
    }
}

impl<'a> Iterator for AvpIter<'a> {
    type Item = Result<RawAvp<'a>, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.buf.get(self.pos..)?;
        if rest.is_empty() {
            return None;
        }
        let start = self.pos;
        match parse_one(rest, self.base + start) {
            Ok(avp) => {
                self.pos = start + avp.raw.len();
                Some(Ok(avp))
            }
            Err(e) => {
                self.pos = self.buf.len();
                Some(Err(e))
            }
        }
    }
}

/// Parses the AVP at the start of `rest` (which ends where its container
/// ends); `offset` is its position in the message.
#[inline]
pub(crate) fn parse_one(rest: &[u8], offset: usize) -> Result<RawAvp<'_>, DecodeError> {
    let Some(h) = rest.first_chunk::<8>() else {
        return Err(short_header(rest, offset));
    };
    let code = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let flags = AvpFlags(h[4]);
    let length = super::header::u24(&h[5..8]) as usize;
    let (vendor_id, hlen) = if flags.is_vendor() {
        let Some(v) = rest.get(8..12) else {
            return Err(short_header(rest, offset));
        };
        (
            Some(u32::from_be_bytes([v[0], v[1], v[2], v[3]])),
            AVP_HEADER_LEN_VENDOR,
        )
    } else {
        (None, AVP_HEADER_LEN)
    };
    let bad_len = |reason| DecodeError::InvalidAvpLength {
        code,
        vendor_id,
        length,
        offset,
        reason,
        failed_avp: min_failed_avp(code, flags, vendor_id),
    };
    if length < hlen {
        return Err(bad_len("below the avp header length"));
    }
    let padded = length + padding(length);
    if padded > rest.len() {
        return Err(bad_len("overruns its container"));
    }
    Ok(RawAvp {
        code,
        flags,
        vendor_id,
        data: &rest[hlen..length],
        padding: &rest[length..padded],
        offset,
        raw: &rest[..padded],
    })
}

fn short_header(rest: &[u8], offset: usize) -> DecodeError {
    let code = rest
        .first_chunk::<4>()
        .map(|b| u32::from_be_bytes(*b))
        .unwrap_or(0);
    let flags = AvpFlags(rest.get(4).copied().unwrap_or(0));
    DecodeError::InvalidAvpLength {
        code,
        vendor_id: None,
        length: rest.len(),
        offset,
        reason: "truncated avp header",
        failed_avp: min_failed_avp(code, AvpFlags(flags.0 & !AvpFlags::VENDOR), None),
    }
}

/// The Failed-AVP content for a length defect (RFC 6733 §7.1.5
/// DIAMETER_INVALID_AVP_LENGTH): the AVP header with a zero-filled payload of
/// the minimum size for the AVP's type.
pub(crate) fn min_failed_avp(code: u32, flags: AvpFlags, vendor_id: Option<u32>) -> Bytes {
    let ty = dictionary::avp(code, vendor_id.unwrap_or(0))
        .map(|d| d.ty)
        .unwrap_or(AvpType::OctetString);
    let min = super::value::min_len(ty);
    let hlen = if vendor_id.is_some() {
        AVP_HEADER_LEN_VENDOR
    } else {
        AVP_HEADER_LEN
    };
    let mut out = Vec::with_capacity(hlen + min + 3);
    write_avp_header(&mut out, code, flags, vendor_id, hlen + min);
    out.resize(hlen + min + padding(min), 0);
    Bytes::from(out)
}

/// An example of a missing AVP for a Failed-AVP (RFC 6733 §7.5): its
/// header with the M bit and an empty value.
#[must_use]
pub fn empty_avp(code: u32) -> Bytes {
    let mut out = Vec::with_capacity(AVP_HEADER_LEN);
    write_avp_header(
        &mut out,
        code,
        AvpFlags(AvpFlags::MANDATORY),
        None,
        AVP_HEADER_LEN,
    );
    Bytes::from(out)
}

pub(crate) fn write_avp_header(
    out: &mut impl BufMut,
    code: u32,
    flags: AvpFlags,
    vendor_id: Option<u32>,
    length: usize,
) {
    out.put_u32(code);
    let f = if vendor_id.is_some() {
        flags.0 | AvpFlags::VENDOR
    } else {
        flags.0 & !AvpFlags::VENDOR
    };
    out.put_u32((u32::from(f) << 24) | (length as u32 & 0x00ff_ffff));
    if let Some(v) = vendor_id {
        out.put_u32(v);
    }
}

/// Appends one AVP (header, `data`, zero padding) to `out` without building
/// an [`Avp`]: for answers and Failed-AVP contents written straight into a
/// buffer. The V bit follows `vendor_id`.
///
/// # Errors
/// When the AVP would exceed the 24-bit AVP Length.
pub fn put_avp(
    out: &mut impl BufMut,
    code: u32,
    flags: AvpFlags,
    vendor_id: Option<u32>,
    data: &[u8],
) -> Result<(), EncodeError> {
    let hlen = if vendor_id.is_some() {
        AVP_HEADER_LEN_VENDOR
    } else {
        AVP_HEADER_LEN
    };
    let length = hlen + data.len();
    if length > MAX_AVP_LEN {
        return Err(EncodeError::AvpTooLong { code, length });
    }
    write_avp_header(out, code, flags, vendor_id, length);
    out.put_slice(data);
    out.put_slice(&[0u8; 3][..padding(length)]);
    Ok(())
}

/// The value of an owned AVP.
#[derive(Clone, Debug, PartialEq)]
pub enum AvpData {
    /// Encoded value bytes (a slice of the received buffer, or built).
    Bytes(Bytes),
    /// Child AVPs of a grouped AVP built locally.
    Grouped(Vec<Avp>),
}

/// One AVP that owns its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Avp {
    /// AVP code.
    pub code: u32,
    /// AVP flags; the V bit is derived from `vendor_id` on encoding.
    pub flags: AvpFlags,
    /// Vendor-ID.
    pub vendor_id: Option<u32>,
    /// The value.
    pub data: AvpData,
}

impl Avp {
    /// An AVP from its parts; the M bit follows `mandatory`.
    pub fn new(code: u32, vendor_id: Option<u32>, mandatory: bool, data: AvpData) -> Avp {
        let mut flags = if mandatory { AvpFlags::MANDATORY } else { 0 };
        if vendor_id.is_some() {
            flags |= AvpFlags::VENDOR;
        }
        Avp {
            code,
            flags: AvpFlags(flags),
            vendor_id,
            data,
        }
    }

    /// A base-protocol (no vendor) AVP holding `value`; the M bit is set when
    /// the dictionary says MUST for this AVP.
    pub fn base(code: u32, value: Value) -> Avp {
        Avp::vendor(code, None, value)
    }

    /// An AVP holding `value` with the M bit per the dictionary (set for
    /// MUST, clear otherwise, clear for unknown AVPs).
    pub fn vendor(code: u32, vendor_id: Option<u32>, value: Value) -> Avp {
        let m =
            dictionary::avp(code, vendor_id.unwrap_or(0)).is_some_and(|d| d.m == FlagRule::Must);
        let data = match value {
            Value::Grouped(children) => AvpData::Grouped(children),
            other => AvpData::Bytes(other.to_bytes()),
        };
        Avp::new(code, vendor_id, m, data)
    }

    /// Unsigned32 AVP (base, M per dictionary).
    pub fn u32(code: u32, v: u32) -> Avp {
        Avp::base(code, Value::Unsigned32(v))
    }
    /// Unsigned64 AVP (base, M per dictionary).
    pub fn u64(code: u32, v: u64) -> Avp {
        Avp::base(code, Value::Unsigned64(v))
    }
    /// Integer32 or Enumerated AVP (base, M per dictionary).
    pub fn i32(code: u32, v: i32) -> Avp {
        Avp::base(code, Value::Integer32(v))
    }
    /// UTF8String, DiameterIdentity or other text AVP (base, M per
    /// dictionary).
    pub fn str(code: u32, s: &str) -> Avp {
        Avp::base(
            code,
            Value::OctetString(Bytes::copy_from_slice(s.as_bytes())),
        )
    }
    /// OctetString AVP (base, M per dictionary).
    pub fn octets(code: u32, b: impl Into<Bytes>) -> Avp {
        Avp::base(code, Value::OctetString(b.into()))
    }
    /// Address AVP (base, M per dictionary).
    pub fn address(code: u32, ip: std::net::IpAddr) -> Avp {
        Avp::base(code, Value::Address(ip.into()))
    }
    /// Grouped AVP (base, M per dictionary).
    pub fn grouped(code: u32, children: Vec<Avp>) -> Avp {
        Avp::base(code, Value::Grouped(children))
    }

    /// Returns the AVP with the M bit set or cleared.
    #[must_use]
    pub fn mandatory(mut self, on: bool) -> Avp {
        self.flags = AvpFlags(if on {
            self.flags.0 | AvpFlags::MANDATORY
        } else {
            self.flags.0 & !AvpFlags::MANDATORY
        });
        self
    }

    /// Copies a borrowed AVP into an owned one without decoding its value.
    pub fn from_raw(raw: &RawAvp<'_>) -> Avp {
        Avp {
            code: raw.code,
            flags: raw.flags,
            vendor_id: raw.vendor_id,
            data: AvpData::Bytes(Bytes::copy_from_slice(raw.data)),
        }
    }

    /// Makes an owned AVP that shares `buf`, of which `raw` is a part.
    pub(crate) fn from_raw_in(raw: &RawAvp<'_>, buf: &Bytes, data_start: usize) -> Avp {
        Avp {
            code: raw.code,
            flags: raw.flags,
            vendor_id: raw.vendor_id,
            data: AvpData::Bytes(buf.slice(data_start..data_start + raw.data.len())),
        }
    }

    /// The dictionary entry for this AVP.
    pub fn def(&self) -> Option<&'static dictionary::AvpDef> {
        dictionary::avp(self.code, self.vendor_id.unwrap_or(0))
    }

    /// Header length (8 or 12).
    pub fn header_len(&self) -> usize {
        if self.vendor_id.is_some() {
            AVP_HEADER_LEN_VENDOR
        } else {
            AVP_HEADER_LEN
        }
    }

    /// The AVP Length field: header plus value, padding excluded.
    pub fn avp_len(&self) -> usize {
        self.header_len()
            + match &self.data {
                AvpData::Bytes(b) => b.len(),
                AvpData::Grouped(children) => children.iter().map(Avp::encoded_len).sum(),
            }
    }

    /// Bytes this AVP takes on the wire, padding included.
    pub fn encoded_len(&self) -> usize {
        let l = self.avp_len();
        l + padding(l)
    }

    /// The value bytes; a grouped AVP built from children is encoded first.
    pub fn data_bytes(&self) -> Bytes {
        match &self.data {
            AvpData::Bytes(b) => b.clone(),
            AvpData::Grouped(children) => {
                let mut out = Vec::with_capacity(self.avp_len());
                for c in children {
                    c.encode_unchecked(&mut out);
                }
                Bytes::from(out)
            }
        }
    }

    /// Decodes the value with the dictionary type (OctetString for unknown
    /// AVPs). Grouped values come back as child AVPs.
    ///
    /// # Errors
    /// 5014 or 5004 when the bytes do not fit the type.
    pub fn value(&self) -> Result<Value, DecodeError> {
        let ty = self.def().map_or(AvpType::OctetString, |d| d.ty);
        self.value_as(ty)
    }

    /// Decodes the value as `ty`.
    ///
    /// # Errors
    /// 5014 or 5004 when the bytes do not fit the type.
    pub fn value_as(&self, ty: AvpType) -> Result<Value, DecodeError> {
        match &self.data {
            AvpData::Grouped(children) if ty == AvpType::Grouped => {
                Ok(Value::Grouped(children.clone()))
            }
            _ => {
                let bytes = self.data_bytes();
                Value::decode(ty, &bytes).map_err(|e| {
                    let mut raw = Vec::new();
                    self.encode_unchecked(&mut raw);
                    e.at_owned(self.code, self.vendor_id, 0, Bytes::from(raw))
                })
            }
        }
    }

    /// The child AVPs of a grouped AVP (decoded from its bytes if needed).
    ///
    /// # Errors
    /// The first framing defect among the children.
    pub fn children(&self) -> Result<Vec<Avp>, DecodeError> {
        match &self.data {
            AvpData::Grouped(c) => Ok(c.clone()),
            AvpData::Bytes(b) => {
                let mut out = Vec::new();
                for r in AvpIter::new(b) {
                    let r = r?;
                    let start = r.offset + r.header_len();
                    out.push(Avp::from_raw_in(&r, b, start));
                }
                Ok(out)
            }
        }
    }

    /// Shortcut: the value as Unsigned32, if it is 4 bytes.
    pub fn as_u32(&self) -> Option<u32> {
        match &self.data {
            AvpData::Bytes(b) => b.as_ref().try_into().ok().map(u32::from_be_bytes),
            AvpData::Grouped(_) => None,
        }
    }

    /// Shortcut: the value as Unsigned64, if it is 8 bytes.
    pub fn as_u64(&self) -> Option<u64> {
        match &self.data {
            AvpData::Bytes(b) => b.as_ref().try_into().ok().map(u64::from_be_bytes),
            AvpData::Grouped(_) => None,
        }
    }

    /// Shortcut: the value as UTF-8 text, if it is valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match &self.data {
            AvpData::Bytes(b) => std::str::from_utf8(b).ok(),
            AvpData::Grouped(_) => None,
        }
    }

    /// Encodes the AVP with its padding.
    ///
    /// # Errors
    /// When the AVP (or a child) exceeds the 24-bit AVP Length.
    pub fn encode(&self, out: &mut impl BufMut) -> Result<(), EncodeError> {
        self.check_len()?;
        self.encode_unchecked(out);
        Ok(())
    }

    fn check_len(&self) -> Result<(), EncodeError> {
        let length = self.avp_len();
        if length > MAX_AVP_LEN {
            return Err(EncodeError::AvpTooLong {
                code: self.code,
                length,
            });
        }
        if let AvpData::Grouped(children) = &self.data {
            children.iter().try_for_each(Avp::check_len)?;
        }
        Ok(())
    }

    pub(crate) fn encode_unchecked(&self, out: &mut impl BufMut) {
        let length = self.avp_len();
        write_avp_header(out, self.code, self.flags, self.vendor_id, length);
        match &self.data {
            AvpData::Bytes(b) => out.put_slice(b),
            AvpData::Grouped(children) => {
                for c in children {
                    c.encode_unchecked(out);
                }
            }
        }
        out.put_slice(&[0u8; 3][..padding(length)]);
    }

    fn header_word(&self, length: usize) -> u32 {
        let flags = if self.vendor_id.is_some() {
            self.flags.0 | AvpFlags::VENDOR
        } else {
            self.flags.0 & !AvpFlags::VENDOR
        };
        (u32::from(flags) << 24) | (length as u32 & 0x00ff_ffff)
    }

    /// Appends the AVP with zero padding to `out` in one pass: a value's
    /// length is known before its header is written; a grouped AVP's length
    /// is patched in after its children.
    pub(crate) fn push_to(&self, out: &mut Vec<u8>) {
        let hlen = self.header_len();
        let code = self.code.to_be_bytes();
        match &self.data {
            AvpData::Bytes(b) => {
                let length = hlen + b.len();
                let w = self.header_word(length).to_be_bytes();
                match self.vendor_id {
                    None => out.extend_from_slice(&[
                        code[0], code[1], code[2], code[3], w[0], w[1], w[2], w[3],
                    ]),
                    Some(v) => {
                        let v = v.to_be_bytes();
                        out.extend_from_slice(&[
                            code[0], code[1], code[2], code[3], w[0], w[1], w[2], w[3], v[0], v[1],
                            v[2], v[3],
                        ]);
                    }
                }
                match b.len() {
                    4 => out.extend_from_slice(&<[u8; 4]>::try_from(&b[..]).unwrap_or_default()),
                    8 => out.extend_from_slice(&<[u8; 8]>::try_from(&b[..]).unwrap_or_default()),
                    _ => out.extend_from_slice(b),
                }
                for _ in 0..padding(length) {
                    out.push(0);
                }
            }
            AvpData::Grouped(children) => {
                let start = out.len();
                out.extend_from_slice(&[0u8; AVP_HEADER_LEN_VENDOR][..hlen]);
                for c in children {
                    c.push_to(out);
                }
                let length = out.len() - start;
                let h = &mut out[start..start + hlen];
                h[0..4].copy_from_slice(&code);
                h[4..8].copy_from_slice(&self.header_word(length).to_be_bytes());
                if let Some(v) = self.vendor_id {
                    h[8..12].copy_from_slice(&v.to_be_bytes());
                }
                // children are padded, so a grouped AVP needs none
            }
        }
    }

    /// Encodes the AVP into a new buffer.
    ///
    /// # Errors
    /// When the AVP exceeds the 24-bit AVP Length.
    pub fn to_bytes(&self) -> Result<Bytes, EncodeError> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode(&mut out)?;
        Ok(Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_reaches_four_bytes() {
        assert_eq!([0, 1, 2, 3, 4, 5].map(padding), [0, 3, 2, 1, 0, 3]);
    }

    #[test]
    fn parses_vendor_avp_and_padding() {
        // Test-AVP, V bit, vendor 999999, Integer32 7
        let mut b = vec![0x00, 0xff, 0xff, 0xff, 0x80, 0, 0, 16];
        b.extend_from_slice(&999_999u32.to_be_bytes());
        b.extend_from_slice(&7i32.to_be_bytes());
        let a = AvpIter::new(&b).next().unwrap().unwrap();
        assert_eq!(a.code, 16_777_215);
        assert_eq!(a.vendor_id, Some(999_999));
        assert_eq!(a.data, &7i32.to_be_bytes());
        assert_eq!(a.def().unwrap().name, "Test-AVP");
        // a 5-byte OctetString is padded with 3 bytes
        let o = Avp::octets(33, &b"abcde"[..]);
        let enc = o.to_bytes().unwrap();
        assert_eq!(enc.len(), 16);
        assert_eq!(&enc[5..8], &[0, 0, 13]);
        let r = AvpIter::new(&enc).next().unwrap().unwrap();
        assert_eq!(r.data, b"abcde");
        assert_eq!(r.padding, &[0, 0, 0]);
    }

    #[test]
    fn length_defects_are_5014_with_offset() {
        // length 7 < 8
        let b = [0, 0, 1, 8, 0x40, 0, 0, 7];
        let e = AvpIter::with_offset(&b, 20).next().unwrap().unwrap_err();
        assert_eq!(e.result_code(), 5014);
        assert_eq!(e.offset(), 20);
        // Failed-AVP: header of Origin-Host (264) with an empty payload
        assert_eq!(
            e.failed_avp().unwrap().as_ref(),
            &[0, 0, 1, 8, 0x40, 0, 0, 8]
        );
        // length overruns the buffer
        let b = [0, 0, 1, 12, 0x40, 0, 0, 12, 0, 0, 0];
        assert_eq!(
            AvpIter::new(&b).next().unwrap().unwrap_err().result_code(),
            5014
        );
        // V bit but no room for the vendor id
        let b = [0, 0, 1, 12, 0xc0, 0, 0, 8];
        assert_eq!(
            AvpIter::new(&b).next().unwrap().unwrap_err().result_code(),
            5014
        );
        // an iterator stops after its error
        let mut it = AvpIter::new(&b);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }

    #[test]
    fn put_avp_matches_the_owned_encoder() {
        let mut out = Vec::new();
        put_avp(&mut out, 281, AvpFlags(0), None, b"oops").unwrap();
        assert_eq!(out, Avp::str(281, "oops").to_bytes().unwrap().as_ref());
        let mut out = Vec::new();
        put_avp(
            &mut out,
            1,
            AvpFlags(AvpFlags::MANDATORY),
            Some(10415),
            b"abcde",
        )
        .unwrap();
        assert_eq!(out.len(), 20);
        let a = AvpIter::new(&out).next().unwrap().unwrap();
        assert_eq!(
            (a.code, a.vendor_id, a.data),
            (1, Some(10415), &b"abcde"[..])
        );
        assert!(a.flags.is_vendor() && a.flags.is_mandatory());
    }

    #[test]
    fn m_bit_follows_the_dictionary() {
        assert!(Avp::str(264, "a.example").flags.is_mandatory());
        assert!(!Avp::str(281, "oops").flags.is_mandatory());
        assert!(!Avp::u64(622, 1).flags.is_mandatory());
        assert!(Avp::u32(268, 2001).mandatory(false).flags == AvpFlags(0));
    }
}
