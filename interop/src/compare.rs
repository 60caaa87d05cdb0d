//! Field-by-field comparison of a message as the agent's codec sees it
//! (`diameter::codec::Message`) with the same message as tshark decoded
//! it ([`WireMessage`]): the RFC 6733 §3 header fields and, for every AVP
//! at every depth (§4, §4.4), code, flags, vendor, length, data bytes, the
//! dictionary name and the typed value.
//!
//! This is the codec's "wire truth": two independent decoders must agree on
//! every field of every message, in both directions (messages our encoder
//! built, and messages captured from third-party peers).

use std::fmt;

use diameter::codec::{Address, Avp, Message, Value};
use diameter::dictionary::AvpType;

use crate::tshark::{WireAvp, WireMessage};

/// One field on which the two decoders disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Where: `header`, or an AVP path such as `OC-OLR(623)/OC-Sequence-Number(624)`.
    pub path: String,
    /// Which field.
    pub field: &'static str,
    /// Our codec's view.
    pub ours: String,
    /// tshark's view.
    pub theirs: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: ours {:?}, tshark {:?}",
            self.path, self.field, self.ours, self.theirs
        )
    }
}

/// Dictionary names that differ between the agent's dictionary and
/// Wireshark's for the same (code, vendor); both are correct spellings of
/// the RFC name. Listed here so that every other name must agree exactly.
const NAME_ALIASES: &[(&str, &str)] = &[];

struct Cmp {
    out: Vec<Mismatch>,
}

impl Cmp {
    fn check<T: PartialEq + fmt::Debug>(
        &mut self,
        path: &str,
        field: &'static str,
        ours: T,
        theirs: T,
    ) {
        if ours != theirs {
            self.out.push(Mismatch {
                path: path.to_owned(),
                field,
                ours: format!("{ours:?}"),
                theirs: format!("{theirs:?}"),
            });
        }
    }
}

/// Compares `ours` (decoded or built by the codec) with `theirs` (tshark's
/// decode of the same bytes). Returns every disagreement; empty means the
/// two decoders agree on every field.
#[must_use]
pub fn compare(ours: &Message, theirs: &WireMessage) -> Vec<Mismatch> {
    let mut c = Cmp { out: Vec::new() };
    let h = &ours.header;
    c.check("header", "version", 1u8, theirs.version);
    c.check(
        "header",
        "length",
        ours.encoded_len(),
        theirs.length as usize,
    );
    c.check("header", "flags", h.flags.0, theirs.flags);
    c.check("header", "command", h.command_code, theirs.command);
    c.check(
        "header",
        "application",
        h.application_id,
        theirs.application,
    );
    c.check("header", "hop_by_hop", h.hop_by_hop, theirs.hop_by_hop);
    c.check("header", "end_to_end", h.end_to_end, theirs.end_to_end);
    if !theirs.raw.is_empty() {
        match ours.to_bytes() {
            Ok(b) => c.check("message", "bytes", b.to_vec(), theirs.raw.clone()),
            Err(e) => c.check("message", "encode", e.to_string(), String::new()),
        }
    }
    avps(&mut c, "", &ours.avps, &theirs.avps);
    c.out
}

fn label(a: &Avp) -> String {
    match a.def() {
        Some(d) => format!("{}({})", d.name, a.code),
        None => format!("{}", a.code),
    }
}

fn avps(c: &mut Cmp, parent: &str, ours: &[Avp], theirs: &[WireAvp]) {
    c.check(parent_or_top(parent), "avp count", ours.len(), theirs.len());
    for (i, (o, t)) in ours.iter().zip(theirs).enumerate() {
        let path = if parent.is_empty() {
            format!("#{i} {}", label(o))
        } else {
            format!("{parent}/{}", label(o))
        };
        avp(c, &path, o, t);
    }
}

fn parent_or_top(parent: &str) -> &str {
    if parent.is_empty() { "message" } else { parent }
}

fn avp(c: &mut Cmp, path: &str, o: &Avp, t: &WireAvp) {
    c.check(path, "code", o.code, t.code);
    c.check(path, "flags", o.flags.0, t.flags);
    c.check(path, "vendor", o.vendor_id, t.vendor);
    c.check(path, "length", o.avp_len(), t.length as usize);
    let data = o.data_bytes();
    c.check(path, "data", data.to_vec(), t.data.clone());
    let def = o.def();
    if let (Some(d), Some(name)) = (def, &t.name) {
        let same = d.name == name
            || NAME_ALIASES
                .iter()
                .any(|(a, b)| (*a == d.name && b == name) || (*b == d.name && a == name));
        if !same {
            c.check(path, "name", d.name, name.as_str());
        }
    }
    let Some(d) = def else { return };
    let Some(text) = t.value.as_deref() else {
        c.check(path, "value", d.name, "<none>");
        return;
    };
    match o.value() {
        Err(e) => c.check(path, "value", format!("undecodable: {e}"), text.to_owned()),
        Ok(v) => value(c, path, &v, text, t),
    }
}

fn value(c: &mut Cmp, path: &str, v: &Value, text: &str, t: &WireAvp) {
    let int = |x: i128| (x, text.parse::<i128>().ok());
    match v {
        Value::Integer32(x) | Value::Enumerated(x) => {
            let (o, w) = int(i128::from(*x));
            c.check(path, "value", Some(o), w);
        }
        Value::Integer64(x) => {
            let (o, w) = int(i128::from(*x));
            c.check(path, "value", Some(o), w);
        }
        Value::Unsigned32(x) => {
            let (o, w) = int(i128::from(*x));
            c.check(path, "value", Some(o), w);
        }
        Value::Unsigned64(x) => {
            let (o, w) = int(i128::from(*x));
            c.check(path, "value", Some(o), w);
        }
        Value::Utf8String(b) | Value::DiameterIdentity(b) | Value::DiameterUri(b) => {
            c.check(
                path,
                "value",
                String::from_utf8_lossy(b).into_owned(),
                text.to_owned(),
            );
        }
        Value::Address(Address::Ip(ip)) => {
            // tshark shows the family and address as children of the field.
            c.check(path, "value", Some(ip.to_string()), t.address.clone());
        }
        Value::Grouped(children) => avps(c, path, children, &t.children),
        // OctetString, Float, Time, IPFilterRule and other address
        // families: the data bytes comparison above is the check.
        _ => {}
    }
}

/// The AVP type our dictionary gives (code, vendor), for callers that want
/// to skip or select AVPs by type.
#[must_use]
pub fn avp_type(code: u32, vendor: Option<u32>) -> Option<AvpType> {
    diameter::dictionary::avp(code, vendor.unwrap_or(0)).map(|d| d.ty)
}
