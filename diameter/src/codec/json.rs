//! A JSON form of Diameter messages (RFC 6733 §3 header, §4 AVPs), for
//! inspection and hand-made test messages. [`to_json`] and [`from_json`]
//! are inverse: `from_json(&to_json(x)?)? == x` byte for byte for every
//! message [`super::validate`] accepts.
//!
//! What the JSON keeps so that the bytes come back exactly:
//! - the header fields and flags; reserved command flag bits as
//!   `"reserved"` (only when non-zero);
//! - every AVP in order, known or not, with its code, vendor id and flags;
//!   reserved AVP flag bits as `"reserved"` (only when non-zero);
//! - padding bytes that are not zero as `"padding"` (hex; RFC 6733 §4.1 says
//!   they are zero, so normally absent);
//! - values typed by the dictionary, so each type's canonical encoding is
//!   the received one (fixed sizes are checked by the decoder).
//!
//! What is derived, and ignored on input: the Message Length, the AVP
//! Lengths, the V bit (from `vendor_id`), `"name"`, `"enum"` and `"command"`.
//! On input `"type"` is optional (the dictionary's type, else OctetString)
//! and so is `"flags"` (then the M bit follows the dictionary).
//!
//! Values: integers are JSON numbers (Unsigned64 exactly); Float32/64 are
//! numbers, or the IEEE bit pattern as a `"0x..."` string when not finite;
//! Address is `"127.0.0.1"` or `"::1"`, or `{"family": n, "address": hex}`
//! for other families; Time is RFC 3339 UTC text (a number of NTP seconds is
//! also accepted); text types are strings; OctetString is lowercase hex; a
//! grouped AVP has `"avps": [...]` instead of `"value"`.

use std::net::IpAddr;

use serde_json::{Map, Value as Json, json};

use super::avp::{AvpFlags, AvpIter, RawAvp, padding};
use super::error::DecodeError;
use super::header::{CommandFlags, HEADER_LEN, Header, MAX_LENGTH_FIELD};
use super::value::{Address, FAMILY_IPV4, FAMILY_IPV6, Time, Value};
use crate::dictionary::{self, AvpType};

/// A JSON document that does not describe a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid message json at {path}: {reason}")]
pub struct JsonError {
    /// Where, e.g. `avps[2].value`.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

fn jerr(path: &str, reason: impl Into<String>) -> JsonError {
    JsonError {
        path: path.to_string(),
        reason: reason.into(),
    }
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(D[usize::from(x >> 4)] as char);
        s.push(D[usize::from(x & 15)] as char);
    }
    s
}

/// Parses hex (either case, even length, no separators).
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    let nib = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    b.chunks(2)
        .map(|p| Some(nib(p[0])? << 4 | nib(p[1])?))
        .collect()
}

/// The JSON form of one whole message, after a strict decode.
///
/// # Errors
/// Whatever [`super::validate`] finds.
pub fn to_json(buf: &[u8]) -> Result<Json, DecodeError> {
    let h = super::validate(buf)?;
    let mut flags = json!({
        "request": h.flags.is_request(),
        "proxiable": h.flags.is_proxiable(),
        "error": h.flags.is_error(),
        "retransmit": h.flags.is_retransmit(),
    });
    if h.flags.reserved() != 0 {
        flags["reserved"] = json!(h.flags.reserved());
    }
    let mut header = json!({
        "version": h.version,
        "length": h.length,
        "flags": flags,
        "command_code": h.command_code,
        "application_id": h.application_id,
        "hop_by_hop": h.hop_by_hop,
        "end_to_end": h.end_to_end,
    });
    if let Some(c) = dictionary::command(h.command_code) {
        header["command"] = json!(if h.flags.is_request() {
            c.request
        } else {
            c.answer
        });
    }
    Ok(json!({
        "header": header,
        "avps": avps_json(&buf[HEADER_LEN..], HEADER_LEN, false)?,
    }))
}

/// `lenient`: inside Failed-AVP (RFC 6733 §7.5), whose content is the
/// offending AVP as received, so its values are not checked by the strict
/// decoder either; a value that is not valid for its type is written as
/// an OctetString, which encodes back to the same bytes.
fn avps_json(body: &[u8], base: usize, lenient: bool) -> Result<Json, DecodeError> {
    let mut out = Vec::new();
    for r in AvpIter::with_offset(body, base) {
        out.push(avp_json(&r?, lenient)?);
    }
    Ok(Json::Array(out))
}

fn avp_json(r: &RawAvp<'_>, lenient: bool) -> Result<Json, DecodeError> {
    let def = r.def();
    let mut ty = def.map_or(AvpType::OctetString, |d| d.ty);
    if lenient && ty != AvpType::Grouped && r.value_as(ty).is_err() {
        ty = AvpType::OctetString;
    }
    let mut o = Map::new();
    o.insert("code".into(), json!(r.code));
    o.insert("vendor_id".into(), json!(r.vendor_id));
    let mut flags = json!({
        "vendor": r.flags.is_vendor(),
        "mandatory": r.flags.is_mandatory(),
        "protected": r.flags.is_protected(),
    });
    if r.flags.reserved() != 0 {
        flags["reserved"] = json!(r.flags.reserved());
    }
    o.insert("flags".into(), flags);
    o.insert("name".into(), json!(def.map(|d| d.name)));
    o.insert("type".into(), json!(ty.name()));
    if ty == AvpType::Grouped {
        let lenient = lenient || (r.code == dictionary::code::FAILED_AVP && r.vendor_id.is_none());
        o.insert(
            "avps".into(),
            avps_json(r.data, r.offset + r.header_len(), lenient)?,
        );
    } else {
        let v = r.value_as(ty)?;
        o.insert("value".into(), value_json(&v));
        let name = def
            .zip(v.as_u64())
            .and_then(|(d, n)| d.value_name(i64::try_from(n).ok()?));
        if let Some(name) = name {
            o.insert("enum".into(), json!(name));
        }
    }
    if r.padding.iter().any(|&b| b != 0) {
        o.insert("padding".into(), json!(hex(r.padding)));
    }
    Ok(Json::Object(o))
}

fn value_json(v: &Value) -> Json {
    match v {
        Value::OctetString(b) => json!(hex(b)),
        Value::Integer32(x) | Value::Enumerated(x) => json!(x),
        Value::Integer64(x) => json!(x),
        Value::Unsigned32(x) => json!(x),
        Value::Unsigned64(x) => json!(x),
        Value::Float32(x) if x.is_finite() => json!(f64::from(*x)),
        Value::Float32(x) => json!(format!("0x{:08x}", x.to_bits())),
        Value::Float64(x) if x.is_finite() => json!(x),
        Value::Float64(x) => json!(format!("0x{:016x}", x.to_bits())),
        Value::Address(Address::Ip(ip)) => json!(ip.to_string()),
        Value::Address(Address::Other { family, data }) => {
            json!({"family": family, "address": hex(data)})
        }
        Value::Time(t) => json!(t.to_rfc3339()),
        Value::Utf8String(b)
        | Value::DiameterIdentity(b)
        | Value::DiameterUri(b)
        | Value::IpFilterRule(b) => {
            json!(String::from_utf8_lossy(b))
        }
        // grouped values are written as "avps" by the caller
        Value::Grouped(_) => Json::Null,
    }
}

/// The order in which [`to_pretty`] writes object keys (others follow,
/// sorted).
const KEY_ORDER: &[&str] = &[
    "header",
    "version",
    "length",
    "code",
    "vendor_id",
    "flags",
    "command",
    "command_code",
    "application_id",
    "hop_by_hop",
    "end_to_end",
    "request",
    "proxiable",
    "error",
    "retransmit",
    "vendor",
    "mandatory",
    "protected",
    "reserved",
    "name",
    "type",
    "value",
    "enum",
    "avps",
    "padding",
    "family",
    "address",
];

struct Ordered<'a>(&'a Json);

impl serde::Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Json::Object(o) => {
                let rank = |k: &str| {
                    KEY_ORDER
                        .iter()
                        .position(|x| *x == k)
                        .unwrap_or(KEY_ORDER.len())
                };
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
                let mut m = s.serialize_map(Some(keys.len()))?;
                for k in keys {
                    m.serialize_entry(k, &Ordered(&o[k]))?;
                }
                m.end()
            }
            Json::Array(a) => {
                let mut q = s.serialize_seq(Some(a.len()))?;
                for x in a {
                    q.serialize_element(&Ordered(x))?;
                }
                q.end()
            }
            other => other.serialize(s),
        }
    }
}

/// Pretty JSON text with keys in reading order (header before AVPs, code
/// before value).
pub fn to_pretty(doc: &Json) -> String {
    serde_json::to_string_pretty(&Ordered(doc)).unwrap_or_default()
}

/// Encodes the JSON form of a message.
///
/// # Errors
/// A missing or ill-typed field, named by its path.
pub fn from_json(doc: &Json) -> Result<Vec<u8>, JsonError> {
    let h = doc.get("header").ok_or_else(|| jerr("header", "missing"))?;
    let f = h.get("flags");
    let bit = |name: &str| -> Result<bool, JsonError> {
        match f.and_then(|f| f.get(name)) {
            None => Ok(false),
            Some(Json::Bool(b)) => Ok(*b),
            Some(_) => Err(jerr(
                &format!("header.flags.{name}"),
                "expected true or false",
            )),
        }
    };
    let mut flags = CommandFlags(0)
        .with(CommandFlags::REQUEST, bit("request")?)
        .with(CommandFlags::PROXIABLE, bit("proxiable")?)
        .with(CommandFlags::ERROR, bit("error")?)
        .with(CommandFlags::RETRANSMIT, bit("retransmit")?);
    if let Some(r) = f.and_then(|f| f.get("reserved")) {
        flags.0 |= uint(r, "header.flags.reserved", 0x0f)? as u8;
    }
    let header = Header {
        version: opt_uint(h, "version", "header.version", 0xff)?.unwrap_or(1) as u8,
        length: 0,
        flags,
        command_code: uint(
            field(h, "command_code", "header")?,
            "header.command_code",
            0x00ff_ffff,
        )? as u32,
        application_id: opt_uint(
            h,
            "application_id",
            "header.application_id",
            u64::from(u32::MAX),
        )?
        .unwrap_or(0) as u32,
        hop_by_hop: opt_uint(h, "hop_by_hop", "header.hop_by_hop", u64::from(u32::MAX))?
            .unwrap_or(0) as u32,
        end_to_end: opt_uint(h, "end_to_end", "header.end_to_end", u64::from(u32::MAX))?
            .unwrap_or(0) as u32,
    };
    let mut out = vec![0u8; HEADER_LEN];
    if let Some(avps) = doc.get("avps") {
        write_avps(avps, "avps", 1, &mut out)?;
    }
    if out.len() > MAX_LENGTH_FIELD {
        return Err(jerr(
            "avps",
            "message longer than the 24-bit message length",
        ));
    }
    let mut hb = Vec::with_capacity(HEADER_LEN);
    header.encode_with_length(out.len() as u32, &mut hb);
    out[..HEADER_LEN].copy_from_slice(&hb);
    Ok(out)
}

fn field<'a>(o: &'a Json, name: &str, path: &str) -> Result<&'a Json, JsonError> {
    o.get(name)
        .ok_or_else(|| jerr(&format!("{path}.{name}"), "missing"))
}

fn uint(v: &Json, path: &str, max: u64) -> Result<u64, JsonError> {
    match v.as_u64() {
        Some(n) if n <= max => Ok(n),
        _ => Err(jerr(path, format!("expected an integer from 0 to {max}"))),
    }
}

fn opt_uint(o: &Json, name: &str, path: &str, max: u64) -> Result<Option<u64>, JsonError> {
    match o.get(name) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => uint(v, path, max).map(Some),
    }
}

fn write_avps(avps: &Json, path: &str, depth: usize, out: &mut Vec<u8>) -> Result<(), JsonError> {
    let list = avps
        .as_array()
        .ok_or_else(|| jerr(path, "expected an array"))?;
    if depth > super::MAX_DEPTH {
        return Err(jerr(path, "grouped avps nested too deep"));
    }
    for (i, a) in list.iter().enumerate() {
        write_avp(a, &format!("{path}[{i}]"), depth, out)?;
    }
    Ok(())
}

fn write_avp(a: &Json, path: &str, depth: usize, out: &mut Vec<u8>) -> Result<(), JsonError> {
    if !a.is_object() {
        return Err(jerr(path, "expected an object"));
    }
    let code = uint(
        field(a, "code", path)?,
        &format!("{path}.code"),
        u64::from(u32::MAX),
    )? as u32;
    let vendor_id = opt_uint(
        a,
        "vendor_id",
        &format!("{path}.vendor_id"),
        u64::from(u32::MAX),
    )?
    .map(|v| v as u32);
    let def = dictionary::avp(code, vendor_id.unwrap_or(0));
    let ty = match a.get("type") {
        None | Some(Json::Null) => def.map_or(AvpType::OctetString, |d| d.ty),
        Some(Json::String(s)) => AvpType::from_name(s)
            .ok_or_else(|| jerr(&format!("{path}.type"), format!("unknown type {s:?}")))?,
        Some(_) => return Err(jerr(&format!("{path}.type"), "expected a type name")),
    };
    let mut flags = match a.get("flags") {
        None => {
            if def.is_some_and(|d| d.m == dictionary::FlagRule::Must) {
                AvpFlags::MANDATORY
            } else {
                0
            }
        }
        Some(f) => {
            let bit = |name: &str| -> Result<bool, JsonError> {
                match f.get(name) {
                    None => Ok(false),
                    Some(Json::Bool(b)) => Ok(*b),
                    Some(_) => Err(jerr(
                        &format!("{path}.flags.{name}"),
                        "expected true or false",
                    )),
                }
            };
            let mut x = 0;
            if bit("mandatory")? {
                x |= AvpFlags::MANDATORY;
            }
            if bit("protected")? {
                x |= AvpFlags::PROTECTED;
            }
            if let Some(r) = f.get("reserved") {
                x |= uint(r, &format!("{path}.flags.reserved"), 0x1f)? as u8;
            }
            x
        }
    };
    if vendor_id.is_some() {
        flags |= AvpFlags::VENDOR;
    }
    let start = out.len();
    super::avp::write_avp_header(out, code, AvpFlags(flags), vendor_id, 0);
    if ty == AvpType::Grouped {
        let children = a
            .get("avps")
            .ok_or_else(|| jerr(&format!("{path}.avps"), "missing"))?;
        write_avps(children, &format!("{path}.avps"), depth + 1, out)?;
    } else {
        let vpath = format!("{path}.value");
        let v = a.get("value").ok_or_else(|| jerr(&vpath, "missing"))?;
        value_from_json(ty, v, &vpath)?.encode(out);
    }
    let len = out.len() - start;
    if len > super::avp::MAX_AVP_LEN {
        return Err(jerr(path, "avp longer than the 24-bit avp length"));
    }
    let l = (len as u32).to_be_bytes();
    out[start + 5..start + 8].copy_from_slice(&l[1..4]);
    let pad = padding(len);
    match a.get("padding") {
        None => out.resize(out.len() + pad, 0),
        Some(p) => {
            let bytes = p
                .as_str()
                .and_then(unhex)
                .filter(|b| b.len() == pad)
                .ok_or_else(|| {
                    jerr(
                        &format!("{path}.padding"),
                        format!("expected {pad} bytes of hex"),
                    )
                })?;
            out.extend_from_slice(&bytes);
        }
    }
    Ok(())
}

fn value_from_json(ty: AvpType, v: &Json, path: &str) -> Result<Value, JsonError> {
    let s = || {
        v.as_str()
            .ok_or_else(|| jerr(path, format!("expected a string for {}", ty.name())))
    };
    let text = || -> Result<bytes::Bytes, JsonError> {
        let t = s()?;
        if super::value::check(ty, t.as_bytes()).is_err() {
            return Err(jerr(path, format!("not a valid {}", ty.name())));
        }
        Ok(bytes::Bytes::copy_from_slice(t.as_bytes()))
    };
    let int = |min: i128, max: i128| -> Result<i128, JsonError> {
        let n = v
            .as_i64()
            .map(i128::from)
            .or_else(|| v.as_u64().map(i128::from));
        match n {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(jerr(
                path,
                format!("expected an integer from {min} to {max}"),
            )),
        }
    };
    let float_bits = |hex_len: usize| -> Result<Option<u64>, JsonError> {
        match v.as_str() {
            Some(t) => {
                let digits = t.strip_prefix("0x").filter(|d| d.len() == hex_len);
                digits
                    .and_then(|d| u64::from_str_radix(d, 16).ok())
                    .map(Some)
                    .ok_or_else(|| {
                        jerr(
                            path,
                            format!("expected a number or 0x and {hex_len} hex digits"),
                        )
                    })
            }
            None => Ok(None),
        }
    };
    Ok(match ty {
        AvpType::OctetString => Value::OctetString(
            unhex(s()?)
                .ok_or_else(|| jerr(path, "expected hex"))?
                .into(),
        ),
        AvpType::Integer32 => Value::Integer32(int(i32::MIN.into(), i32::MAX.into())? as i32),
        AvpType::Enumerated => Value::Enumerated(int(i32::MIN.into(), i32::MAX.into())? as i32),
        AvpType::Integer64 => Value::Integer64(int(i64::MIN.into(), i64::MAX.into())? as i64),
        AvpType::Unsigned32 => Value::Unsigned32(int(0, u32::MAX.into())? as u32),
        AvpType::Unsigned64 => Value::Unsigned64(int(0, u64::MAX.into())? as u64),
        AvpType::Float32 => match float_bits(8)? {
            Some(bits) => Value::Float32(f32::from_bits(bits as u32)),
            None => {
                Value::Float32(v.as_f64().ok_or_else(|| jerr(path, "expected a number"))? as f32)
            }
        },
        AvpType::Float64 => match float_bits(16)? {
            Some(bits) => Value::Float64(f64::from_bits(bits)),
            None => Value::Float64(v.as_f64().ok_or_else(|| jerr(path, "expected a number"))?),
        },
        AvpType::Grouped => return Err(jerr(path, "a grouped avp has \"avps\", not \"value\"")),
        AvpType::Address => match v {
            Json::String(t) => Value::Address(Address::Ip(
                t.parse::<IpAddr>()
                    .map_err(|_| jerr(path, "expected an ip address"))?,
            )),
            Json::Object(_) => {
                let family =
                    uint(field(v, "family", path)?, &format!("{path}.family"), 0xffff)? as u16;
                let data = field(v, "address", path)?
                    .as_str()
                    .and_then(unhex)
                    .ok_or_else(|| jerr(&format!("{path}.address"), "expected hex"))?;
                let expect = match family {
                    FAMILY_IPV4 => Some(4),
                    FAMILY_IPV6 => Some(16),
                    _ => None,
                };
                if expect.is_some_and(|n| n != data.len()) {
                    return Err(jerr(path, "address length does not match its family"));
                }
                Value::Address(Address::Other {
                    family,
                    data: data.into(),
                })
            }
            _ => {
                return Err(jerr(
                    path,
                    "expected an ip address string or {family, address}",
                ));
            }
        },
        AvpType::Time => match v {
            Json::String(t) => Value::Time(Time::parse_rfc3339(t).ok_or_else(|| {
                jerr(path, "expected YYYY-MM-DDTHH:MM:SSZ between 1968 and 2104")
            })?),
            _ => Value::Time(Time(int(0, u32::MAX.into())? as u32)),
        },
        AvpType::Utf8String => Value::Utf8String(text()?),
        AvpType::DiameterIdentity => Value::DiameterIdentity(text()?),
        AvpType::DiameterUri => Value::DiameterUri(text()?),
        AvpType::IpFilterRule => Value::IpFilterRule(text()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::builder::{Capabilities, cer};
    use crate::codec::{Avp, AvpData, Message};

    fn sample() -> Vec<u8> {
        let caps = Capabilities {
            origin_host: "client.example.org".into(),
            origin_realm: "example.org".into(),
            host_ip_addresses: vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
            vendor_id: 10415,
            product_name: "doic-agent".into(),
            origin_state_id: Some(1),
            vendor_specific_auth_apps: vec![(999_999, 16_777_215)],
            ..Capabilities::default()
        };
        cer(&caps, 7, 8)
            .with(Avp::base(
                crate::dictionary::code::EVENT_TIMESTAMP,
                Value::Time(Time(3_973_615_832)),
            ))
            .with(Avp::new(
                4242,
                Some(1),
                false,
                AvpData::Bytes(bytes::Bytes::from_static(b"\x01\x02\x03")),
            ))
            .to_bytes()
            .unwrap()
            .to_vec()
    }

    #[test]
    fn json_has_the_documented_shape() {
        let j = to_json(&sample()).unwrap();
        assert_eq!(j["header"]["command_code"], 257);
        assert_eq!(j["header"]["flags"]["request"], true);
        assert_eq!(j["header"]["command"], "Capabilities-Exchange-Request");
        let a = &j["avps"][0];
        assert_eq!(a["name"], "Origin-Host");
        assert_eq!(a["type"], "DiameterIdentity");
        assert_eq!(a["value"], "client.example.org");
        assert_eq!(a["vendor_id"], Json::Null);
        assert_eq!(a["flags"]["mandatory"], true);
        assert_eq!(j["avps"][2]["value"], "127.0.0.1");
        assert_eq!(j["avps"][3]["value"], "::1");
        let vsai = j["avps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["code"] == 260)
            .unwrap();
        assert_eq!(vsai["avps"][0]["value"], 999_999);
        assert!(vsai.get("value").is_none());
        let unknown = j["avps"].as_array().unwrap().last().unwrap();
        assert_eq!(unknown["name"], Json::Null);
        assert_eq!(unknown["value"], "010203");
        assert_eq!(unknown["vendor_id"], 1);
    }

    #[test]
    fn failed_avp_content_round_trips_even_when_not_valid_for_its_type() {
        // RFC 6733 §7.5: Failed-AVP carries the offending AVP as received; a
        // Proxy-Host that is not printable ASCII must not stop the JSON form
        // (found by fuzzing).
        let bad = Avp::new(
            crate::dictionary::code::PROXY_HOST,
            None,
            true,
            AvpData::Bytes(bytes::Bytes::from_static(b"edge1.e\x8aample.org")),
        );
        let failed = Avp::new(
            crate::dictionary::code::FAILED_AVP,
            None,
            true,
            AvpData::Grouped(vec![bad]),
        );
        let b = sample_with(failed);
        Message::decode(bytes::Bytes::from(b.clone())).expect("strict decode is lenient there");
        let j = to_json(&b).unwrap();
        let f = j["avps"].as_array().unwrap().last().unwrap();
        assert_eq!(f["avps"][0]["type"], "OctetString");
        assert_eq!(from_json(&j).unwrap(), b);
        // outside Failed-AVP the same value is still an error
        let plain = Avp::new(
            crate::dictionary::code::PROXY_HOST,
            None,
            true,
            AvpData::Bytes(bytes::Bytes::from_static(b"edge1.e\x8aample.org")),
        );
        assert!(to_json(&sample_with(plain)).is_err());
    }

    fn sample_with(extra: Avp) -> Vec<u8> {
        let mut m = Message::decode(bytes::Bytes::from(sample())).unwrap();
        m.avps.push(extra);
        m.to_bytes().unwrap().to_vec()
    }

    #[test]
    fn round_trip_is_byte_exact_including_odd_bits() {
        let mut b = sample();
        assert_eq!(from_json(&to_json(&b).unwrap()).unwrap(), b);
        // reserved header bits, reserved AVP bits, non-zero padding
        b[4] |= 0x03;
        b[20 + 4] |= 0x01;
        let last_pad = b.len() - 1;
        b[last_pad] = 0xee;
        let j = to_json(&b).unwrap();
        assert_eq!(j["header"]["flags"]["reserved"], 3);
        assert_eq!(
            j["avps"].as_array().unwrap().last().unwrap()["padding"],
            "ee"
        );
        assert_eq!(from_json(&j).unwrap(), b);
    }

    #[test]
    fn unsigned64_and_floats_are_exact() {
        let m = Message::request(1, 2, false)
            .with(Avp::u64(
                crate::dictionary::code::OC_SEQUENCE_NUMBER,
                u64::MAX,
            ))
            .with(Avp::new(
                9,
                None,
                false,
                AvpData::Bytes(Value::Float32(f32::NAN).to_bytes()),
            ));
        let b = m.to_bytes().unwrap().to_vec();
        let j = to_json(&b).unwrap();
        assert_eq!(j["avps"][0]["value"].as_u64(), Some(u64::MAX));
        assert_eq!(from_json(&j).unwrap(), b);
        let mut j2 = j.clone();
        j2["avps"][1]["type"] = json!("Float32");
        j2["avps"][1]["value"] = json!("0x7fc00001");
        let out = from_json(&j2).unwrap();
        assert_eq!(&out[out.len() - 4..], &0x7fc0_0001u32.to_be_bytes());
        j2["avps"][1]["value"] = json!(0.1);
        let out = from_json(&j2).unwrap();
        assert_eq!(&out[out.len() - 4..], &0.1f32.to_be_bytes());
    }

    #[test]
    fn bad_json_names_the_path() {
        let mut j = to_json(&sample()).unwrap();
        j["avps"][1]["value"] = json!(5);
        let e = from_json(&j).unwrap_err();
        assert_eq!(e.path, "avps[1].value");
        j["avps"][1]["value"] = json!("bad host");
        assert!(
            from_json(&j)
                .unwrap_err()
                .reason
                .contains("DiameterIdentity")
        );
        assert_eq!(from_json(&json!({})).unwrap_err().path, "header");
        let e = from_json(
            &json!({"header": {"command_code": 257}, "avps": [{"code": 268, "value": -1}]}),
        )
        .unwrap_err();
        assert_eq!(e.path, "avps[0].value");
        // minimal input: flags and type come from the dictionary
        let ok = from_json(
            &json!({"header": {"command_code": 280, "flags": {"request": true}},
            "avps": [{"code": 264, "value": "a.example"}, {"code": 296, "value": "example"}]}),
        )
        .unwrap();
        let d = Message::decode(ok.into()).unwrap();
        assert!(d.avps[0].flags.is_mandatory());
        assert_eq!(d.origin_realm(), Some("example"));
    }
}
