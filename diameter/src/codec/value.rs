//! Typed AVP values: every basic type of RFC 6733 §4.2 (OctetString,
//! Integer32/64, Unsigned32/64, Float32/64, Grouped) and every derived type
//! of §4.3.1 (Address, Time, UTF8String, DiameterIdentity, DiameterURI,
//! Enumerated, IPFilterRule), with the validation each type requires.
//!
//! Text and octet values stay [`Bytes`] slices of the received buffer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bytes::{BufMut, Bytes};

use super::avp::{Avp, AvpIter, RawAvp, min_failed_avp};
use super::error::DecodeError;
use crate::dictionary::AvpType;

/// An Address value (RFC 6733 §4.3.1): a 2-byte IANA address family and the
/// address. IPv4 (family 1) and IPv6 (family 2) are typed; other families
/// are kept as raw bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Address {
    /// Family 1 or 2.
    Ip(IpAddr),
    /// Any other family (e.g. 8 for E.164), raw address bytes.
    Other {
        /// IANA address family number.
        family: u16,
        /// The address bytes.
        data: Bytes,
    },
}

impl From<IpAddr> for Address {
    fn from(ip: IpAddr) -> Address {
        Address::Ip(ip)
    }
}

/// IANA address family number for IPv4.
pub const FAMILY_IPV4: u16 = 1;
/// IANA address family number for IPv6.
pub const FAMILY_IPV6: u16 = 2;

/// A Time value (RFC 6733 §4.3.1): seconds since 1900-01-01 00:00 UTC as in
/// SNTP, which wraps in February 2036. Following RFC 4330 §3, a value with
/// the most significant bit clear is taken to be after the wrap, so the 32
/// bits cover 1968-01-20 to 2104-02-26.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Time(pub u32);

/// Seconds from 1900-01-01 to 1970-01-01.
const NTP_UNIX_OFFSET: i64 = 2_208_988_800;

impl Time {
    /// Seconds since the Unix epoch.
    pub fn to_unix(self) -> i64 {
        let ntp = i64::from(self.0);
        if self.0 & 0x8000_0000 != 0 {
            ntp - NTP_UNIX_OFFSET
        } else {
            ntp + (1i64 << 32) - NTP_UNIX_OFFSET
        }
    }

    /// The Time for Unix seconds, if representable (1968-2104).
    pub fn from_unix(secs: i64) -> Option<Time> {
        let ntp = secs + NTP_UNIX_OFFSET;
        let lo = 0x8000_0000i64;
        let hi = lo + (1i64 << 32);
        if !(lo..hi).contains(&ntp) {
            return None;
        }
        Some(Time((ntp & 0xffff_ffff) as u32))
    }

    /// RFC 3339 UTC text, e.g. `2026-11-29T20:50:32Z`.
    pub fn to_rfc3339(self) -> String {
        let secs = self.to_unix();
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )
    }

    /// Parses `YYYY-MM-DDTHH:MM:SSZ` (the form [`Self::to_rfc3339`] writes).
    pub fn parse_rfc3339(s: &str) -> Option<Time> {
        let b = s.as_bytes();
        if b.len() != 20
            || b[4] != b'-'
            || b[7] != b'-'
            || b[10] != b'T'
            || b[13] != b':'
            || b[16] != b':'
            || b[19] != b'Z'
        {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let t = s.get(r)?;
            if !t.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            t.parse().ok()
        };
        let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&mo)
            || d < 1
            || d > days_in_month(y, mo)
            || h > 23
            || mi > 59
            || se > 59
        {
            return None;
        }
        Time::from_unix(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se)
    }
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's civil calendar algorithms (public domain).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A typed AVP value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// OctetString (§4.2).
    OctetString(Bytes),
    /// Integer32 (§4.2).
    Integer32(i32),
    /// Integer64 (§4.2).
    Integer64(i64),
    /// Unsigned32 (§4.2).
    Unsigned32(u32),
    /// Unsigned64 (§4.2).
    Unsigned64(u64),
    /// Float32 (§4.2).
    Float32(f32),
    /// Float64 (§4.2).
    Float64(f64),
    /// Grouped (§4.4): the child AVPs.
    Grouped(Vec<Avp>),
    /// Address (§4.3.1).
    Address(Address),
    /// Time (§4.3.1).
    Time(Time),
    /// UTF8String (§4.3.1), valid UTF-8.
    Utf8String(Bytes),
    /// DiameterIdentity (§4.3.1), a non-empty FQDN in printable ASCII.
    DiameterIdentity(Bytes),
    /// DiameterURI (§4.3.1), `aaa://` or `aaas://`.
    DiameterUri(Bytes),
    /// Enumerated (§4.3.1).
    Enumerated(i32),
    /// IPFilterRule (§4.3.1), printable ASCII starting with permit or deny.
    IpFilterRule(Bytes),
}

/// Why bytes do not fit a type; [`ValueError::at`] places it in a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueError {
    /// True for a size defect (5014), false for a content defect (5004).
    pub length: bool,
    /// What is wrong.
    pub reason: &'static str,
}

impl ValueError {
    const fn len(reason: &'static str) -> ValueError {
        ValueError {
            length: true,
            reason,
        }
    }
    const fn val(reason: &'static str) -> ValueError {
        ValueError {
            length: false,
            reason,
        }
    }

    /// The [`DecodeError`] for this defect in the AVP `raw`.
    pub fn at(self, raw: &RawAvp<'_>) -> DecodeError {
        if self.length {
            DecodeError::InvalidAvpLength {
                code: raw.code,
                vendor_id: raw.vendor_id,
                length: raw.header_len() + raw.data.len(),
                offset: raw.offset,
                reason: self.reason,
                failed_avp: min_failed_avp(raw.code, raw.flags, raw.vendor_id),
            }
        } else {
            DecodeError::InvalidAvpValue {
                code: raw.code,
                vendor_id: raw.vendor_id,
                offset: raw.offset,
                reason: self.reason,
                failed_avp: Bytes::copy_from_slice(raw.unpadded()),
            }
        }
    }

    pub(crate) fn at_owned(
        self,
        code: u32,
        vendor_id: Option<u32>,
        offset: usize,
        encoded: Bytes,
    ) -> DecodeError {
        if self.length {
            DecodeError::InvalidAvpLength {
                code,
                vendor_id,
                length: encoded.len(),
                offset,
                reason: self.reason,
                failed_avp: encoded,
            }
        } else {
            DecodeError::InvalidAvpValue {
                code,
                vendor_id,
                offset,
                reason: self.reason,
                failed_avp: encoded,
            }
        }
    }
}

/// The minimum value size of a type (used for Failed-AVP payloads).
pub const fn min_len(ty: AvpType) -> usize {
    match ty {
        AvpType::Integer32
        | AvpType::Unsigned32
        | AvpType::Float32
        | AvpType::Enumerated
        | AvpType::Time => 4,
        AvpType::Integer64 | AvpType::Unsigned64 | AvpType::Float64 => 8,
        AvpType::Address => 6,
        _ => 0,
    }
}

fn fixed<const N: usize>(b: &[u8]) -> Result<[u8; N], ValueError> {
    b.try_into().map_err(|_| {
        ValueError::len(match N {
            4 => "a 32-bit type needs exactly 4 bytes",
            _ => "a 64-bit type needs exactly 8 bytes",
        })
    })
}

/// Checks that `b` is a valid value of `ty` without building a [`Value`]
/// (the allocation-free check of the full walk).
///
/// # Errors
/// The first defect found.
pub fn check(ty: AvpType, b: &[u8]) -> Result<(), ValueError> {
    match ty {
        AvpType::OctetString | AvpType::Grouped => Ok(()),
        AvpType::Integer32
        | AvpType::Unsigned32
        | AvpType::Float32
        | AvpType::Enumerated
        | AvpType::Time => fixed::<4>(b).map(|_| ()),
        AvpType::Integer64 | AvpType::Unsigned64 | AvpType::Float64 => fixed::<8>(b).map(|_| ()),
        AvpType::Address => check_address(b),
        AvpType::Utf8String => std::str::from_utf8(b)
            .map(|_| ())
            .map_err(|_| ValueError::val("invalid utf-8")),
        AvpType::DiameterIdentity => check_identity(b),
        AvpType::DiameterUri => check_uri(b),
        AvpType::IpFilterRule => check_filter(b),
    }
}

fn check_address(b: &[u8]) -> Result<(), ValueError> {
    let Some(f) = b.first_chunk::<2>() else {
        return Err(ValueError::len("address shorter than its 2-byte family"));
    };
    match (u16::from_be_bytes(*f), b.len() - 2) {
        (FAMILY_IPV4, 4) | (FAMILY_IPV6, 16) => Ok(()),
        (FAMILY_IPV4, _) => Err(ValueError::len("ipv4 address needs 4 bytes")),
        (FAMILY_IPV6, _) => Err(ValueError::len("ipv6 address needs 16 bytes")),
        _ => Ok(()),
    }
}

/// True when every byte is in 0x21..=0x7e (printable ASCII, no space);
/// eight bytes at a time.
#[inline]
fn all_graphic(b: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let (chunks, rest) = b.as_chunks::<8>();
    for c in chunks {
        let x = u64::from_ne_bytes(*c);
        // a byte below 0x21, or a byte above 0x7e (or with the high bit)
        let below = x.wrapping_sub(ONES * 0x21) & !x & HIGH;
        // adding 1 sets the high bit of a 0x7f byte
        let above = (x.wrapping_add(ONES) | x) & HIGH;
        if below | above != 0 {
            return false;
        }
    }
    rest.iter().all(|&c| (0x21..=0x7e).contains(&c))
}

fn check_identity(b: &[u8]) -> Result<(), ValueError> {
    if b.is_empty() {
        return Err(ValueError::val("empty diameter identity"));
    }
    if !all_graphic(b) {
        return Err(ValueError::val("diameter identity is not printable ascii"));
    }
    Ok(())
}

fn check_uri(b: &[u8]) -> Result<(), ValueError> {
    if !b.iter().all(|&c| (0x21..=0x7e).contains(&c)) {
        return Err(ValueError::val("diameter uri is not printable ascii"));
    }
    let lower = |n: usize| b.get(..n).map(|p| p.to_ascii_lowercase());
    if lower(6).as_deref() == Some(b"aaa://") || lower(7).as_deref() == Some(b"aaas://") {
        Ok(())
    } else {
        Err(ValueError::val(
            "diameter uri does not start with aaa:// or aaas://",
        ))
    }
}

fn check_filter(b: &[u8]) -> Result<(), ValueError> {
    if !b.iter().all(|&c| (0x20..=0x7e).contains(&c)) {
        return Err(ValueError::val("ip filter rule is not printable ascii"));
    }
    if b.starts_with(b"permit ") || b.starts_with(b"deny ") {
        Ok(())
    } else {
        Err(ValueError::val(
            "ip filter rule does not start with permit or deny",
        ))
    }
}

impl Value {
    /// Decodes `b` as `ty`; slices of `b` are kept, not copied. Grouped
    /// values are split into child AVPs (one level; their own values stay
    /// raw).
    ///
    /// # Errors
    /// The type's size or content defect.
    pub fn decode(ty: AvpType, b: &Bytes) -> Result<Value, ValueError> {
        check(ty, b)?;
        let v4 = || fixed::<4>(b).unwrap_or_default();
        let v8 = || fixed::<8>(b).unwrap_or_default();
        Ok(match ty {
            AvpType::OctetString => Value::OctetString(b.clone()),
            AvpType::Integer32 => Value::Integer32(i32::from_be_bytes(v4())),
            AvpType::Enumerated => Value::Enumerated(i32::from_be_bytes(v4())),
            AvpType::Unsigned32 => Value::Unsigned32(u32::from_be_bytes(v4())),
            AvpType::Float32 => Value::Float32(f32::from_be_bytes(v4())),
            AvpType::Time => Value::Time(Time(u32::from_be_bytes(v4()))),
            AvpType::Integer64 => Value::Integer64(i64::from_be_bytes(v8())),
            AvpType::Unsigned64 => Value::Unsigned64(u64::from_be_bytes(v8())),
            AvpType::Float64 => Value::Float64(f64::from_be_bytes(v8())),
            AvpType::Grouped => {
                let mut children = Vec::new();
                for r in AvpIter::new(b) {
                    let r = r.map_err(|_| ValueError::len("grouped avp holds a malformed avp"))?;
                    children.push(Avp::from_raw_in(&r, b, r.offset + r.header_len()));
                }
                Value::Grouped(children)
            }
            AvpType::Address => {
                let family = u16::from_be_bytes([b[0], b[1]]);
                let a = &b[2..];
                Value::Address(match family {
                    FAMILY_IPV4 => Address::Ip(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))),
                    FAMILY_IPV6 => {
                        let mut o = [0u8; 16];
                        o.copy_from_slice(a);
                        Address::Ip(IpAddr::V6(Ipv6Addr::from(o)))
                    }
                    _ => Address::Other {
                        family,
                        data: b.slice(2..),
                    },
                })
            }
            AvpType::Utf8String => Value::Utf8String(b.clone()),
            AvpType::DiameterIdentity => Value::DiameterIdentity(b.clone()),
            AvpType::DiameterUri => Value::DiameterUri(b.clone()),
            AvpType::IpFilterRule => Value::IpFilterRule(b.clone()),
        })
    }

    /// The data type of this value.
    pub fn ty(&self) -> AvpType {
        match self {
            Value::OctetString(_) => AvpType::OctetString,
            Value::Integer32(_) => AvpType::Integer32,
            Value::Integer64(_) => AvpType::Integer64,
            Value::Unsigned32(_) => AvpType::Unsigned32,
            Value::Unsigned64(_) => AvpType::Unsigned64,
            Value::Float32(_) => AvpType::Float32,
            Value::Float64(_) => AvpType::Float64,
            Value::Grouped(_) => AvpType::Grouped,
            Value::Address(_) => AvpType::Address,
            Value::Time(_) => AvpType::Time,
            Value::Utf8String(_) => AvpType::Utf8String,
            Value::DiameterIdentity(_) => AvpType::DiameterIdentity,
            Value::DiameterUri(_) => AvpType::DiameterUri,
            Value::Enumerated(_) => AvpType::Enumerated,
            Value::IpFilterRule(_) => AvpType::IpFilterRule,
        }
    }

    /// Text of a string-like value (UTF8String, DiameterIdentity,
    /// DiameterURI, IPFilterRule, or an OctetString holding UTF-8).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::OctetString(b)
            | Value::Utf8String(b)
            | Value::DiameterIdentity(b)
            | Value::DiameterUri(b)
            | Value::IpFilterRule(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The value as an unsigned integer, for the integer types.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Unsigned32(v) => Some(u64::from(v)),
            Value::Unsigned64(v) => Some(v),
            Value::Integer32(v) | Value::Enumerated(v) => u64::try_from(v).ok(),
            Value::Integer64(v) => u64::try_from(v).ok(),
            Value::Time(t) => Some(u64::from(t.0)),
            _ => None,
        }
    }

    /// Size of the encoded value (padding excluded).
    pub fn encoded_len(&self) -> usize {
        match self {
            Value::OctetString(b)
            | Value::Utf8String(b)
            | Value::DiameterIdentity(b)
            | Value::DiameterUri(b)
            | Value::IpFilterRule(b) => b.len(),
            Value::Integer32(_)
            | Value::Unsigned32(_)
            | Value::Float32(_)
            | Value::Enumerated(_)
            | Value::Time(_) => 4,
            Value::Integer64(_) | Value::Unsigned64(_) | Value::Float64(_) => 8,
            Value::Grouped(c) => c.iter().map(Avp::encoded_len).sum(),
            Value::Address(Address::Ip(IpAddr::V4(_))) => 6,
            Value::Address(Address::Ip(IpAddr::V6(_))) => 18,
            Value::Address(Address::Other { data, .. }) => 2 + data.len(),
        }
    }

    /// Writes the encoded value (no AVP header, no padding).
    pub fn encode(&self, out: &mut impl BufMut) {
        match self {
            Value::OctetString(b)
            | Value::Utf8String(b)
            | Value::DiameterIdentity(b)
            | Value::DiameterUri(b)
            | Value::IpFilterRule(b) => out.put_slice(b),
            Value::Integer32(v) | Value::Enumerated(v) => out.put_i32(*v),
            Value::Unsigned32(v) => out.put_u32(*v),
            Value::Time(t) => out.put_u32(t.0),
            Value::Float32(v) => out.put_f32(*v),
            Value::Integer64(v) => out.put_i64(*v),
            Value::Unsigned64(v) => out.put_u64(*v),
            Value::Float64(v) => out.put_f64(*v),
            Value::Grouped(children) => {
                for c in children {
                    c.encode_unchecked(out);
                }
            }
            Value::Address(Address::Ip(IpAddr::V4(a))) => {
                out.put_u16(FAMILY_IPV4);
                out.put_slice(&a.octets());
            }
            Value::Address(Address::Ip(IpAddr::V6(a))) => {
                out.put_u16(FAMILY_IPV6);
                out.put_slice(&a.octets());
            }
            Value::Address(Address::Other { family, data }) => {
                out.put_u16(*family);
                out.put_slice(data);
            }
        }
    }

    /// The encoded value in a new buffer.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode(&mut out);
        Bytes::from(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(ty: AvpType, b: &[u8]) -> Result<Value, ValueError> {
        Value::decode(ty, &Bytes::copy_from_slice(b))
    }

    #[test]
    fn fixed_sizes_are_enforced() {
        for ty in [
            AvpType::Integer32,
            AvpType::Unsigned32,
            AvpType::Float32,
            AvpType::Enumerated,
            AvpType::Time,
        ] {
            assert!(dec(ty, &[0; 4]).is_ok());
            for n in [0, 3, 5, 8] {
                assert!(dec(ty, &vec![0; n]).unwrap_err().length, "{ty:?} {n}");
            }
        }
        for ty in [AvpType::Integer64, AvpType::Unsigned64, AvpType::Float64] {
            assert!(dec(ty, &[0; 8]).is_ok());
            for n in [0, 4, 7, 9] {
                assert!(dec(ty, &vec![0; n]).unwrap_err().length);
            }
        }
        assert_eq!(
            dec(AvpType::Unsigned32, &[0xff; 4]).unwrap(),
            Value::Unsigned32(u32::MAX)
        );
        assert_eq!(
            dec(AvpType::Integer32, &[0x80, 0, 0, 0]).unwrap(),
            Value::Integer32(i32::MIN)
        );
        assert_eq!(
            dec(AvpType::Unsigned64, &[0xff; 8]).unwrap(),
            Value::Unsigned64(u64::MAX)
        );
    }

    #[test]
    fn address_family_and_length_are_checked() {
        assert_eq!(
            dec(AvpType::Address, &[0, 1, 127, 0, 0, 1]).unwrap(),
            Value::Address(Address::Ip("127.0.0.1".parse().unwrap()))
        );
        let mut v6 = vec![0, 2];
        v6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        assert_eq!(
            dec(AvpType::Address, &v6).unwrap(),
            Value::Address(Address::Ip("::1".parse().unwrap()))
        );
        assert!(
            dec(AvpType::Address, &[0, 1, 127, 0, 0])
                .unwrap_err()
                .length
        );
        assert!(
            dec(AvpType::Address, &[0, 2, 127, 0, 0, 1])
                .unwrap_err()
                .length
        );
        assert!(dec(AvpType::Address, &[0]).unwrap_err().length);
        // E.164 (family 8) is kept raw
        assert!(matches!(
            dec(AvpType::Address, &[0, 8, b'1', b'2']).unwrap(),
            Value::Address(Address::Other { family: 8, .. })
        ));
    }

    #[test]
    fn text_types_are_validated() {
        assert!(dec(AvpType::Utf8String, "grüße".as_bytes()).is_ok());
        assert!(!dec(AvpType::Utf8String, &[0xc3, 0x28]).unwrap_err().length);
        assert!(dec(AvpType::DiameterIdentity, b"host.example.net").is_ok());
        assert!(dec(AvpType::DiameterIdentity, b"").is_err());
        assert!(dec(AvpType::DiameterIdentity, b"a b").is_err());
        assert!(
            dec(
                AvpType::DiameterUri,
                b"aaa://host.example.net:3868;transport=tcp"
            )
            .is_ok()
        );
        assert!(dec(AvpType::DiameterUri, b"AAAS://host.example.net").is_ok());
        assert!(dec(AvpType::DiameterUri, b"http://host").is_err());
        assert!(dec(AvpType::IpFilterRule, b"permit in ip from any to 10.0.0.1").is_ok());
        assert!(dec(AvpType::IpFilterRule, b"allow in ip").is_err());
    }

    #[test]
    fn graphic_check_agrees_with_the_bytewise_one() {
        for n in 0..=255u8 {
            for pos in 0..17 {
                let mut b = vec![b'a'; 17];
                b[pos] = n;
                assert_eq!(
                    all_graphic(&b),
                    (0x21..=0x7e).contains(&n),
                    "byte {n:#x} at {pos}"
                );
            }
        }
    }

    #[test]
    fn time_follows_the_ntp_era_rule() {
        // 1900 + 0x80000000 s = 1968-01-20T03:14:08Z; 0 = 2036-02-07T06:28:16Z
        assert_eq!(Time(0x8000_0000).to_rfc3339(), "1968-01-20T03:14:08Z");
        assert_eq!(Time(0).to_rfc3339(), "2036-02-07T06:28:16Z");
        assert_eq!(Time::from_unix(0).unwrap().0, 2_208_988_800);
        assert_eq!(Time(2_208_988_800).to_rfc3339(), "1970-01-01T00:00:00Z");
        for t in [0, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 3_973_615_832] {
            assert_eq!(Time::parse_rfc3339(&Time(t).to_rfc3339()), Some(Time(t)));
        }
        assert_eq!(Time::parse_rfc3339("2026-02-30T00:00:00Z"), None);
        assert_eq!(Time::parse_rfc3339("1900-01-01T00:00:00Z"), None);
    }

    #[test]
    fn encode_then_decode_every_type() {
        let vals = [
            Value::OctetString(Bytes::from_static(b"\x00\xff")),
            Value::Integer32(-5),
            Value::Integer64(i64::MIN),
            Value::Unsigned32(7),
            Value::Unsigned64(u64::MAX),
            Value::Float32(1.5),
            Value::Float64(-2.25),
            Value::Address(Address::Ip("10.1.2.3".parse().unwrap())),
            Value::Time(Time(3_973_615_832)),
            Value::Utf8String(Bytes::from_static("é".as_bytes())),
            Value::DiameterIdentity(Bytes::from_static(b"a.example")),
            Value::DiameterUri(Bytes::from_static(b"aaa://a.example")),
            Value::Enumerated(2),
            Value::IpFilterRule(Bytes::from_static(b"deny out ip from any to any")),
        ];
        for v in vals {
            let b = v.to_bytes();
            assert_eq!(b.len(), v.encoded_len());
            assert_eq!(Value::decode(v.ty(), &b).unwrap(), v);
        }
    }
}
