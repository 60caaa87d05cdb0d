//! RFC 6733 §3 Diameter message: header and AVPs, decoded strictly (every
//! AVP walked to any depth up to [`MAX_DEPTH`], every value of a dictionary
//! AVP checked against its type, §4.2-4.4) and encoded with derived lengths.

use bytes::{BufMut, Bytes, BytesMut};

use super::avp::{Avp, AvpIter, RawAvp};
use super::error::{DecodeError, EncodeError};
use super::header::{CommandFlags, HEADER_LEN, Header, MAX_LENGTH_FIELD};
use super::value;
use crate::dictionary::{self, AvpType};

/// The deepest nesting of grouped AVPs the decoder accepts (a message's
/// top-level AVPs are depth 1).
pub const MAX_DEPTH: usize = 16;

/// Walks a whole message without allocating: checks the header, every AVP
/// length at every depth, and the value of every AVP the dictionary knows.
/// This is the strict check behind [`Message::decode`].
///
/// # Errors
/// The first defect found, with its offset and Result-Code.
pub fn validate(buf: &[u8]) -> Result<Header, DecodeError> {
    let header = Header::decode(buf)?;
    check_avps(&buf[HEADER_LEN..], HEADER_LEN, 1, false)?;
    Ok(header)
}

/// The loop of [`validate`]: like [`walk`] without a visitor, reading each
/// AVP header once and building a [`RawAvp`] only to report a defect.
fn check_avps(buf: &[u8], base: usize, depth: usize, lenient: bool) -> Result<(), DecodeError> {
    let end = buf.len();
    let mut pos = 0;
    while let Some(h) = buf.get(pos..pos + 8) {
        let code = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let w1 = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let length = (w1 & 0x00ff_ffff) as usize;
        let vendor = w1 & (u32::from(super::avp::AvpFlags::VENDOR) << 24) != 0;
        let hlen = if vendor { 12 } else { 8 };
        // rounded up to 4 in one step less than (length + 3) & !3: a carry
        // into the flags byte is masked off, which wraps only lengths near
        // 2^24; `padded < length` catches those
        let padded = (w1.wrapping_add(3) & 0x00ff_fffc) as usize;
        let slow = |pos: usize| super::avp::parse_one(&buf[pos..], base + pos);
        if length < hlen || padded < length || padded > end - pos {
            slow(pos)?;
        }
        let vendor_id = match buf.get(pos + 8..pos + 12) {
            Some(v) if vendor => u32::from_be_bytes([v[0], v[1], v[2], v[3]]),
            _ => dictionary::vendor::NONE,
        };
        if let Some(def) = dictionary::avp(code, vendor_id) {
            let data = &buf[pos + hlen..pos + length];
            if def.ty == AvpType::Grouped {
                if depth >= MAX_DEPTH {
                    let r = slow(pos)?;
                    return Err(DecodeError::TooDeep {
                        code,
                        limit: MAX_DEPTH,
                        offset: r.offset,
                        failed_avp: Bytes::copy_from_slice(r.unpadded()),
                    });
                }
                let lenient = lenient || (code == dictionary::code::FAILED_AVP && !vendor);
                check_avps(data, base + pos + hlen, depth + 1, lenient)?;
            } else if !lenient && let Err(e) = value::check(def.ty, data) {
                return Err(e.at(&slow(pos)?));
            }
        }
        pos += padded;
    }
    if pos < end {
        super::avp::parse_one(&buf[pos..], base + pos)?;
    }
    Ok(())
}

/// Walks the AVPs of `buf` (starting `base` bytes into the message) depth
/// first, validating as [`validate`] does, and calls `visit(avp, depth)` on
/// each in wire order.
///
/// # Errors
/// The first defect found, or the first error `visit` returns.
pub fn walk<'a, F>(
    buf: &'a [u8],
    base: usize,
    depth: usize,
    visit: &mut F,
) -> Result<(), DecodeError>
where
    F: FnMut(&RawAvp<'a>, usize) -> Result<(), DecodeError>,
{
    walk_inner(buf, base, depth, false, visit)
}

/// Inside Failed-AVP (RFC 6733 §7.5) values are someone else's defect being
/// reported, so only the framing is checked there, not the values.
fn walk_inner<'a, F>(
    buf: &'a [u8],
    base: usize,
    depth: usize,
    lenient: bool,
    visit: &mut F,
) -> Result<(), DecodeError>
where
    F: FnMut(&RawAvp<'a>, usize) -> Result<(), DecodeError>,
{
    for r in AvpIter::with_offset(buf, base) {
        let r = r?;
        visit(&r, depth)?;
        let Some(def) = r.def() else { continue };
        if def.ty == AvpType::Grouped {
            if depth >= MAX_DEPTH {
                return Err(DecodeError::TooDeep {
                    code: r.code,
                    limit: MAX_DEPTH,
                    offset: r.offset,
                    failed_avp: Bytes::copy_from_slice(r.unpadded()),
                });
            }
            let lenient =
                lenient || (r.code == dictionary::code::FAILED_AVP && r.vendor_id.is_none());
            walk_inner(r.data, r.offset + r.header_len(), depth + 1, lenient, visit)?;
        } else if !lenient {
            value::check(def.ty, r.data).map_err(|e| e.at(&r))?;
        }
    }
    Ok(())
}

/// A decoded Diameter message. Top-level AVP values are slices of the
/// received buffer; grouped values are decoded on demand
/// ([`Avp::children`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The header; `length` is recomputed on encoding.
    pub header: Header,
    /// Top-level AVPs in wire order.
    pub avps: Vec<Avp>,
}

impl Message {
    /// A new message with no AVPs.
    pub fn new(command_code: u32, application_id: u32, flags: CommandFlags) -> Message {
        Message {
            header: Header::new(command_code, application_id, flags),
            avps: Vec::new(),
        }
    }

    /// A new request (R bit set, P bit as given).
    pub fn request(command_code: u32, application_id: u32, proxiable: bool) -> Message {
        let flags = CommandFlags(CommandFlags::REQUEST).with(CommandFlags::PROXIABLE, proxiable);
        Message::new(command_code, application_id, flags)
    }

    /// Decodes one whole message (`buf.len()` must equal its Message
    /// Length), strictly as [`validate`] does.
    ///
    /// # Errors
    /// The first defect found, with its offset and Result-Code.
    pub fn decode(buf: Bytes) -> Result<Message, DecodeError> {
        let header = validate(&buf)?;
        let mut avps = Vec::with_capacity(16);
        for r in AvpIter::with_offset(&buf[HEADER_LEN..], HEADER_LEN) {
            let r = r?;
            let start = r.offset + r.header_len();
            avps.push(Avp::from_raw_in(&r, &buf, start));
        }
        Ok(Message { header, avps })
    }

    /// Appends an AVP.
    pub fn push(&mut self, avp: Avp) -> &mut Message {
        self.avps.push(avp);
        self
    }

    /// Appends an AVP (builder style).
    #[must_use]
    pub fn with(mut self, avp: Avp) -> Message {
        self.avps.push(avp);
        self
    }

    /// Sets the Hop-by-Hop and End-to-End identifiers (builder style).
    #[must_use]
    pub fn with_ids(mut self, hop_by_hop: u32, end_to_end: u32) -> Message {
        self.header.hop_by_hop = hop_by_hop;
        self.header.end_to_end = end_to_end;
        self
    }

    /// The Message Length this message encodes to.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.avps.iter().map(Avp::encoded_len).sum::<usize>()
    }

    /// Encodes the message; the Message Length and AVP Lengths are derived.
    ///
    /// # Errors
    /// When a length exceeds its 24-bit field.
    pub fn encode(&self, out: &mut impl BufMut) -> Result<(), EncodeError> {
        let length = self.encoded_len();
        if length > MAX_LENGTH_FIELD {
            return Err(EncodeError::MessageTooLong { length });
        }
        self.header.encode_with_length(length as u32, out);
        // every AVP of a message within the 24-bit limit is within it too
        for a in &self.avps {
            a.encode_unchecked(out);
        }
        Ok(())
    }

    /// Encodes the message into a new buffer.
    ///
    /// # Errors
    /// When a length exceeds its 24-bit field.
    pub fn to_bytes(&self) -> Result<BytesMut, EncodeError> {
        // one pass, no zeroing: lengths are known or patched as AVPs are
        // written; the capacity guess covers typical messages
        let mut out = Vec::with_capacity(HEADER_LEN + 40 * self.avps.len());
        out.extend_from_slice(&[0u8; HEADER_LEN]);
        for a in &self.avps {
            a.push_to(&mut out);
        }
        let length = out.len();
        if length > MAX_LENGTH_FIELD {
            return Err(EncodeError::MessageTooLong { length });
        }
        let mut h = &mut out[..HEADER_LEN];
        self.header.encode_with_length(length as u32, &mut h);
        Ok(BytesMut::from(Bytes::from(out)))
    }

    /// The first top-level AVP with this code and no vendor.
    pub fn find(&self, code: u32) -> Option<&Avp> {
        self.find_vendor(code, None)
    }

    /// The first top-level AVP with this (code, vendor).
    pub fn find_vendor(&self, code: u32, vendor_id: Option<u32>) -> Option<&Avp> {
        self.avps
            .iter()
            .find(|a| a.code == code && a.vendor_id == vendor_id)
    }

    /// Every top-level AVP with this code and no vendor.
    pub fn find_all(&self, code: u32) -> impl Iterator<Item = &Avp> {
        self.avps
            .iter()
            .filter(move |a| a.code == code && a.vendor_id.is_none())
    }

    /// Session-Id text, if present and UTF-8.
    pub fn session_id(&self) -> Option<&str> {
        self.find(dictionary::code::SESSION_ID)
            .and_then(Avp::as_str)
    }

    /// Origin-Host text.
    pub fn origin_host(&self) -> Option<&str> {
        self.find(dictionary::code::ORIGIN_HOST)
            .and_then(Avp::as_str)
    }

    /// Origin-Realm text.
    pub fn origin_realm(&self) -> Option<&str> {
        self.find(dictionary::code::ORIGIN_REALM)
            .and_then(Avp::as_str)
    }

    /// Result-Code value.
    pub fn result_code(&self) -> Option<u32> {
        self.find(dictionary::code::RESULT_CODE)
            .and_then(Avp::as_u32)
    }

    /// True for a request (R bit).
    pub fn is_request(&self) -> bool {
        self.header.flags.is_request()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dictionary::code;

    fn sample() -> Message {
        Message::request(257, 0, false)
            .with_ids(1, 2)
            .with(Avp::str(code::ORIGIN_HOST, "client.example.org"))
            .with(Avp::str(code::ORIGIN_REALM, "example.org"))
            .with(Avp::address(
                code::HOST_IP_ADDRESS,
                "127.0.0.1".parse().unwrap(),
            ))
            .with(Avp::u32(code::VENDOR_ID, 0))
            .with(Avp::str(code::PRODUCT_NAME, "doic-agent"))
            .with(Avp::grouped(
                code::VENDOR_SPECIFIC_APPLICATION_ID,
                vec![
                    Avp::u32(code::VENDOR_ID, 10415),
                    Avp::u32(code::AUTH_APPLICATION_ID, 16_777_251),
                ],
            ))
    }

    #[test]
    fn encode_decode_encode_is_stable() {
        let m = sample();
        let b = m.to_bytes().unwrap().freeze();
        assert_eq!(b.len(), m.encoded_len());
        assert_eq!(b.len() % 4, 0);
        let d = Message::decode(b.clone()).unwrap();
        assert_eq!(d.header.length as usize, b.len());
        assert_eq!(d.origin_host(), Some("client.example.org"));
        assert_eq!(d.avps.len(), 6);
        assert_eq!(d.to_bytes().unwrap().freeze(), b);
        let vsai = d.find(code::VENDOR_SPECIFIC_APPLICATION_ID).unwrap();
        assert_eq!(vsai.children().unwrap()[1].as_u32(), Some(16_777_251));
    }

    #[test]
    fn nested_value_defects_are_found_at_their_offset() {
        // Vendor-Id inside the grouped AVP with 5 bytes instead of 4
        let mut m = sample();
        m.avps[5] = Avp::grouped(
            code::VENDOR_SPECIFIC_APPLICATION_ID,
            vec![Avp::octets(code::VENDOR_ID, &b"12345"[..])],
        );
        let b = m.to_bytes().unwrap().freeze();
        let e = Message::decode(b.clone()).unwrap_err();
        assert_eq!(e.result_code(), 5014);
        let group_at = m.encoded_len() - m.avps[5].encoded_len();
        assert_eq!(e.offset(), group_at + 8);
        assert_eq!(
            &b[e.offset()..e.offset() + 4],
            &code::VENDOR_ID.to_be_bytes()
        );
    }

    #[test]
    fn bad_values_are_5004_with_the_avp_as_failed_avp() {
        // Session-Id (UTF8String) with invalid UTF-8, after Origin-Host
        let host = Avp::str(code::ORIGIN_HOST, "a.example");
        let bad = Avp::octets(code::SESSION_ID, &b"s;\xff"[..]);
        let m = Message::request(257, 0, false)
            .with(host.clone())
            .with(bad.clone());
        let b = m.to_bytes().unwrap().freeze();
        let e = Message::decode(b).unwrap_err();
        assert_eq!(e.result_code(), 5004);
        assert_eq!(e.offset(), HEADER_LEN + host.encoded_len());
        let mut expect = bad.to_bytes().unwrap().to_vec();
        expect.truncate(bad.avp_len());
        assert_eq!(e.failed_avp().unwrap().as_ref(), &expect[..]);
        // an empty DiameterIdentity
        let m = Message::request(257, 0, false).with(Avp::str(code::DESTINATION_REALM, ""));
        let e = Message::decode(m.to_bytes().unwrap().freeze()).unwrap_err();
        assert_eq!((e.result_code(), e.offset()), (5004, HEADER_LEN));
    }

    #[test]
    fn depth_limit_stops_deep_nesting() {
        let mut a = Avp::u32(code::VENDOR_ID, 1);
        for _ in 0..MAX_DEPTH {
            a = Avp::grouped(code::PROXY_INFO, vec![a]);
        }
        let m = Message::request(257, 0, false).with(a);
        let e = Message::decode(m.to_bytes().unwrap().freeze()).unwrap_err();
        assert!(matches!(e, DecodeError::TooDeep { .. }), "{e}");
        let mut ok = Avp::u32(code::VENDOR_ID, 1);
        for _ in 0..MAX_DEPTH - 1 {
            ok = Avp::grouped(code::PROXY_INFO, vec![ok]);
        }
        let m = Message::request(257, 0, false).with(ok);
        assert!(Message::decode(m.to_bytes().unwrap().freeze()).is_ok());
    }

    #[test]
    fn unknown_avps_decode_raw() {
        let m = Message::request(257, 0, false).with(Avp::new(
            9999,
            Some(42),
            true,
            super::super::avp::AvpData::Bytes(Bytes::from_static(b"\xff\xfe")),
        ));
        let d = Message::decode(m.to_bytes().unwrap().freeze()).unwrap();
        assert_eq!(
            d.avps[0].value().unwrap(),
            super::super::Value::OctetString(Bytes::from_static(b"\xff\xfe"))
        );
    }
}
