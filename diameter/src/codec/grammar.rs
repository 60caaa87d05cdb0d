//! Command and grouped-AVP grammars (RFC 6733 §3.2 CCF) and the checks that
//! map their violations to Result-Codes: 5005 DIAMETER_MISSING_AVP, 5009
//! DIAMETER_AVP_OCCURS_TOO_MANY_TIMES, 5001 DIAMETER_AVP_UNSUPPORTED (an
//! unknown AVP with the M bit, §4.1) and 3009 DIAMETER_INVALID_AVP_BITS (an
//! M bit the AVP's flag rules forbid, §4.5).
//!
//! Grammars: CER/CEA §5.3.1-5.3.2, DPR/DPA §5.4.1-5.4.2, DWR/DWA
//! §5.5.1-5.5.2, the error answer §7.2; grouped AVPs Vendor-Specific-
//! Application-Id §6.11, Proxy-Info §6.7.2, Experimental-Result §7.6,
//! OC-Supported-Features RFC 7683 §7.1 with RFC 8581 §7.1, OC-OLR RFC 7683
//! §7.3 with RFC 8581 §7.2 and RFC 8582 §7.2, Load RFC 8583 §7.1.

use bytes::Bytes;

use super::avp::{AvpFlags, RawAvp, min_failed_avp};
use super::error::DecodeError;
use super::header::{HEADER_LEN, Header};
use super::message::walk;
use crate::dictionary::{self, FlagRule, cmd, code};

/// "Any number of times" for [`Rule::max`].
pub const MANY: u8 = u8::MAX;

/// How often one AVP may occur in a command or grouped AVP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// AVP code.
    pub code: u32,
    /// Vendor id ([`dictionary::vendor::NONE`] for none).
    pub vendor_id: u32,
    /// Minimum occurrences.
    pub min: u8,
    /// Maximum occurrences ([`MANY`] for unbounded).
    pub max: u8,
}

const fn one(code: u32) -> Rule {
    Rule {
        code,
        vendor_id: 0,
        min: 1,
        max: 1,
    }
}
const fn opt(code: u32) -> Rule {
    Rule {
        code,
        vendor_id: 0,
        min: 0,
        max: 1,
    }
}
const fn some(code: u32) -> Rule {
    Rule {
        code,
        vendor_id: 0,
        min: 1,
        max: MANY,
    }
}
const fn any(code: u32) -> Rule {
    Rule {
        code,
        vendor_id: 0,
        min: 0,
        max: MANY,
    }
}

/// A named grammar.
#[derive(Debug)]
pub struct Grammar {
    /// The command or AVP name.
    pub name: &'static str,
    /// The occurrence rules; AVPs not listed are allowed (`* [ AVP ]`).
    pub rules: &'static [Rule],
}

/// Capabilities-Exchange-Request (§5.3.1).
pub static CER: Grammar = Grammar {
    name: "Capabilities-Exchange-Request",
    rules: &[
        one(code::ORIGIN_HOST),
        one(code::ORIGIN_REALM),
        some(code::HOST_IP_ADDRESS),
        one(code::VENDOR_ID),
        one(code::PRODUCT_NAME),
        opt(code::ORIGIN_STATE_ID),
        any(code::SUPPORTED_VENDOR_ID),
        any(code::AUTH_APPLICATION_ID),
        any(code::INBAND_SECURITY_ID),
        any(code::ACCT_APPLICATION_ID),
        any(code::VENDOR_SPECIFIC_APPLICATION_ID),
        opt(code::FIRMWARE_REVISION),
    ],
};

/// Capabilities-Exchange-Answer (§5.3.2).
pub static CEA: Grammar = Grammar {
    name: "Capabilities-Exchange-Answer",
    rules: &[
        one(code::RESULT_CODE),
        one(code::ORIGIN_HOST),
        one(code::ORIGIN_REALM),
        some(code::HOST_IP_ADDRESS),
        one(code::VENDOR_ID),
        one(code::PRODUCT_NAME),
        opt(code::ORIGIN_STATE_ID),
        opt(code::ERROR_MESSAGE),
        opt(code::FAILED_AVP),
        any(code::SUPPORTED_VENDOR_ID),
        any(code::AUTH_APPLICATION_ID),
        any(code::INBAND_SECURITY_ID),
        any(code::ACCT_APPLICATION_ID),
        any(code::VENDOR_SPECIFIC_APPLICATION_ID),
        opt(code::FIRMWARE_REVISION),
    ],
};

/// Disconnect-Peer-Request (§5.4.1).
pub static DPR: Grammar = Grammar {
    name: "Disconnect-Peer-Request",
    rules: &[
        one(code::ORIGIN_HOST),
        one(code::ORIGIN_REALM),
        one(code::DISCONNECT_CAUSE),
    ],
};

/// Disconnect-Peer-Answer (§5.4.2).
pub static DPA: Grammar = Grammar {
    name: "Disconnect-Peer-Answer",
    rules: &[
        one(code::RESULT_CODE),
        one(code::ORIGIN_HOST),
        one(code::ORIGIN_REALM),
        opt(code::ERROR_MESSAGE),
        opt(code::FAILED_AVP),
    ],
};

/// Device-Watchdog-Request (§5.5.1).
pub static DWR: Grammar = Grammar {
    name: "Device-Watchdog-Request",
    rules: &[
        one(code::ORIGIN_HOST),
        one(code::ORIGIN_REALM),
        opt(code::ORIGIN_STATE_ID),
    ],
};

/// Device-Watchdog-Answer (§5.5.2).
pub static DWA: Grammar = Grammar {
    name: "Device-Watchdog-Answer",
    rules: &[
        one(code::RESULT_CODE),
        one(code::ORIGIN_HOST),
        one(code::ORIGIN_REALM),
        opt(code::ERROR_MESSAGE),
        opt(code::FAILED_AVP),
        opt(code::ORIGIN_STATE_ID),
    ],
};

/// Any answer with the E bit (§7.2).
pub static ERROR_ANSWER: Grammar = Grammar {
    name: "error answer",
    rules: &[
        opt(code::SESSION_ID),
        one(code::ORIGIN_HOST),
        one(code::ORIGIN_REALM),
        one(code::RESULT_CODE),
        opt(code::ORIGIN_STATE_ID),
        opt(code::ERROR_MESSAGE),
        opt(code::ERROR_REPORTING_HOST),
        opt(code::FAILED_AVP),
        opt(code::EXPERIMENTAL_RESULT),
        any(code::PROXY_INFO),
    ],
};

/// Vendor-Specific-Application-Id (§6.11).
pub static VENDOR_SPECIFIC_APPLICATION_ID: Grammar = Grammar {
    name: "Vendor-Specific-Application-Id",
    rules: &[
        one(code::VENDOR_ID),
        opt(code::AUTH_APPLICATION_ID),
        opt(code::ACCT_APPLICATION_ID),
    ],
};

/// Proxy-Info (§6.7.2).
pub static PROXY_INFO: Grammar = Grammar {
    name: "Proxy-Info",
    rules: &[one(code::PROXY_HOST), one(code::PROXY_STATE)],
};

/// Experimental-Result (§7.6).
pub static EXPERIMENTAL_RESULT: Grammar = Grammar {
    name: "Experimental-Result",
    rules: &[one(code::VENDOR_ID), one(code::EXPERIMENTAL_RESULT_CODE)],
};

/// OC-Supported-Features (RFC 7683 §7.1, RFC 8581 §7.1).
pub static OC_SUPPORTED_FEATURES: Grammar = Grammar {
    name: "OC-Supported-Features",
    rules: &[
        opt(code::OC_FEATURE_VECTOR),
        opt(code::SOURCE_ID),
        opt(code::OC_PEER_ALGO),
    ],
};

/// OC-OLR (RFC 7683 §7.3, RFC 8581 §7.2, RFC 8582 §7.2).
pub static OC_OLR: Grammar = Grammar {
    name: "OC-OLR",
    rules: &[
        one(code::OC_SEQUENCE_NUMBER),
        one(code::OC_REPORT_TYPE),
        opt(code::OC_REDUCTION_PERCENTAGE),
        opt(code::OC_VALIDITY_DURATION),
        opt(code::SOURCE_ID),
        opt(code::OC_MAXIMUM_RATE),
    ],
};

/// Load (RFC 8583 §7.1).
pub static LOAD: Grammar = Grammar {
    name: "Load",
    rules: &[
        opt(code::LOAD_TYPE),
        opt(code::LOAD_VALUE),
        opt(code::SOURCE_ID),
    ],
};

/// The grammar of a command, given the header flags; `None` when the
/// command has none here (then only AVP-level checks apply).
pub fn command_grammar(h: &Header) -> Option<&'static Grammar> {
    let request = h.flags.is_request();
    if !request && h.flags.is_error() {
        return Some(&ERROR_ANSWER);
    }
    Some(match (h.command_code, request) {
        (cmd::CAPABILITIES_EXCHANGE, true) => &CER,
        (cmd::CAPABILITIES_EXCHANGE, false) => &CEA,
        (cmd::DISCONNECT_PEER, true) => &DPR,
        (cmd::DISCONNECT_PEER, false) => &DPA,
        (cmd::DEVICE_WATCHDOG, true) => &DWR,
        (cmd::DEVICE_WATCHDOG, false) => &DWA,
        _ => return None,
    })
}

/// The grammar of a grouped AVP (no vendor), if this module has one.
pub fn group_grammar(code: u32, vendor_id: Option<u32>) -> Option<&'static Grammar> {
    if vendor_id.is_some() {
        return None;
    }
    Some(match code {
        code::VENDOR_SPECIFIC_APPLICATION_ID => &VENDOR_SPECIFIC_APPLICATION_ID,
        code::PROXY_INFO => &PROXY_INFO,
        code::EXPERIMENTAL_RESULT => &EXPERIMENTAL_RESULT,
        code::OC_SUPPORTED_FEATURES => &OC_SUPPORTED_FEATURES,
        code::OC_OLR => &OC_OLR,
        code::LOAD => &LOAD,
        _ => return None,
    })
}

/// Which checks [`check`] runs beyond the strict decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckOptions {
    /// 5005/5009: occurrence rules of the command and of grouped AVPs.
    pub grammar: bool,
    /// 5001: an AVP the dictionary does not know, with the M bit set.
    /// Failed-AVP checks never apply inside Failed-AVP itself.
    pub unknown_mandatory: bool,
    /// 3009: the M bit set on an AVP whose flag rules say MUST NOT.
    pub flag_rules: bool,
}

impl Default for CheckOptions {
    fn default() -> CheckOptions {
        CheckOptions {
            grammar: true,
            unknown_mandatory: true,
            flag_rules: true,
        }
    }
}

/// Decodes strictly (as [`super::validate`]) and then checks the message
/// against its grammar and the dictionary's flag rules.
///
/// # Errors
/// The first defect found: the command's occurrence rules first, then AVP
/// by AVP in wire order (flag rules, then the AVP's own grammar).
pub fn check(buf: &[u8], opts: CheckOptions) -> Result<Header, DecodeError> {
    let header = super::validate(buf)?;
    let body = &buf[HEADER_LEN..];
    if let Some(g) = command_grammar(&header).filter(|_| opts.grammar) {
        occurrences(g, body, HEADER_LEN, 0)?;
    }
    // skip everything inside Failed-AVP: it reports someone else's defect
    let mut inside_failed: Option<usize> = None;
    walk(body, HEADER_LEN, 1, &mut |a, _| {
        if let Some(end) = inside_failed {
            if a.offset < end {
                return Ok(());
            }
            inside_failed = None;
        }
        if a.code == code::FAILED_AVP && a.vendor_id.is_none() {
            inside_failed = Some(a.offset + a.raw.len());
            return Ok(());
        }
        avp_bits(a, opts)?;
        if let Some(g) = group_grammar(a.code, a.vendor_id).filter(|_| opts.grammar) {
            occurrences(g, a.data, a.offset + a.header_len(), a.offset)?;
        }
        Ok(())
    })?;
    Ok(header)
}

fn avp_bits(a: &RawAvp<'_>, opts: CheckOptions) -> Result<(), DecodeError> {
    match a.def() {
        None if opts.unknown_mandatory && a.flags.is_mandatory() => {
            Err(DecodeError::AvpUnsupported {
                code: a.code,
                vendor_id: a.vendor_id,
                offset: a.offset,
                failed_avp: Bytes::copy_from_slice(a.unpadded()),
            })
        }
        Some(d) if opts.flag_rules && d.m == FlagRule::MustNot && a.flags.is_mandatory() => {
            Err(DecodeError::InvalidAvpBits {
                code: a.code,
                vendor_id: a.vendor_id,
                flags: a.flags.0,
                offset: a.offset,
                reason: "m bit set where the avp's flag rules forbid it",
                failed_avp: Bytes::copy_from_slice(a.unpadded()),
            })
        }
        _ => Ok(()),
    }
}

/// Checks the occurrence rules of `g` over the AVPs of `body` (at `base`
/// in the message; `container` is the offset of the enclosing AVP, 0 for
/// the message).
///
/// # Errors
/// 5014 for an AVP length defect, 5009 for an AVP beyond its maximum, 5005
/// for one below its minimum.
pub(crate) fn occurrences(
    g: &'static Grammar,
    body: &[u8],
    base: usize,
    container: usize,
) -> Result<(), DecodeError> {
    let mut counts = [0u8; 16];
    for a in super::AvpIter::with_offset(body, base) {
        let a = a?;
        let vendor = a.vendor_id.unwrap_or(0);
        let Some(i) = g
            .rules
            .iter()
            .position(|r| r.code == a.code && r.vendor_id == vendor)
        else {
            continue;
        };
        let r = g.rules[i];
        counts[i] = counts[i].saturating_add(1);
        if r.max != MANY && counts[i] > r.max {
            return Err(DecodeError::AvpOccursTooManyTimes {
                code: a.code,
                vendor_id: a.vendor_id,
                name: name_of(r),
                context: g.name,
                offset: a.offset,
                failed_avp: Bytes::copy_from_slice(a.unpadded()),
            });
        }
    }
    for (i, r) in g.rules.iter().enumerate() {
        if counts[i] < r.min {
            let vendor_id = (r.vendor_id != 0).then_some(r.vendor_id);
            let m = dictionary::avp(r.code, r.vendor_id).is_some_and(|d| d.m == FlagRule::Must);
            let flags = AvpFlags(if m { AvpFlags::MANDATORY } else { 0 });
            return Err(DecodeError::MissingAvp {
                code: r.code,
                vendor_id,
                name: name_of(*r),
                context: g.name,
                offset: container,
                failed_avp: min_failed_avp(r.code, flags, vendor_id),
            });
        }
    }
    Ok(())
}

fn name_of(r: Rule) -> &'static str {
    dictionary::avp(r.code, r.vendor_id).map_or("AVP", |d| d.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::builder::{Capabilities, cer, dwa, dwr};
    use crate::codec::{Avp, AvpData, Message};

    fn caps() -> Capabilities {
        Capabilities {
            origin_host: "a.example".into(),
            origin_realm: "example".into(),
            host_ip_addresses: vec!["127.0.0.1".parse().unwrap()],
            product_name: "p".into(),
            ..Capabilities::default()
        }
    }

    fn enc(m: &Message) -> Vec<u8> {
        m.to_bytes().unwrap().to_vec()
    }

    #[test]
    fn grammars_stay_within_the_counter_array() {
        for g in [
            &CER,
            &CEA,
            &DPR,
            &DPA,
            &DWR,
            &DWA,
            &ERROR_ANSWER,
            &OC_OLR,
            &OC_SUPPORTED_FEATURES,
        ] {
            assert!(g.rules.len() <= 16, "{}", g.name);
        }
    }

    #[test]
    fn built_base_messages_pass() {
        let c = cer(&caps(), 1, 2);
        check(&enc(&c), CheckOptions::default()).unwrap();
        let w = dwr("a.example", "example", None, 1, 2);
        check(&enc(&w), CheckOptions::default()).unwrap();
        check(
            &enc(&dwa(&w.header, 2001, "b", "c", Some(3))),
            CheckOptions::default(),
        )
        .unwrap();
    }

    #[test]
    fn missing_avp_is_5005_with_an_example_failed_avp() {
        let mut c = cer(&caps(), 1, 2);
        c.avps.retain(|a| a.code != code::PRODUCT_NAME);
        let e = check(&enc(&c), CheckOptions::default()).unwrap_err();
        assert_eq!(e.result_code(), 5005);
        assert!(e.to_string().contains("Product-Name"), "{e}");
        // header of Product-Name (269), M clear, length 8
        assert_eq!(e.failed_avp().unwrap().as_ref(), &[0, 0, 1, 13, 0, 0, 0, 8]);
        // Host-IP-Address is 1*
        let mut c = cer(&caps(), 1, 2);
        c.avps.retain(|a| a.code != code::HOST_IP_ADDRESS);
        assert_eq!(
            check(&enc(&c), CheckOptions::default())
                .unwrap_err()
                .result_code(),
            5005
        );
    }

    #[test]
    fn repeated_avp_is_5009_at_the_extra_one() {
        let w = dwr("a.example", "example", None, 1, 2).with(Avp::str(code::ORIGIN_REALM, "again"));
        let b = enc(&w);
        let e = check(&b, CheckOptions::default()).unwrap_err();
        assert_eq!(e.result_code(), 5009);
        assert_eq!(
            e.offset(),
            w.encoded_len() - w.avps.last().unwrap().encoded_len()
        );
        // several Host-IP-Address are fine in a CER
        let c =
            cer(&caps(), 1, 2).with(Avp::address(code::HOST_IP_ADDRESS, "::1".parse().unwrap()));
        check(&enc(&c), CheckOptions::default()).unwrap();
    }

    #[test]
    fn grouped_grammars_apply() {
        let olr = Avp::grouped(code::OC_OLR, vec![Avp::u64(code::OC_SEQUENCE_NUMBER, 1)]);
        let w = dwr("a.example", "example", None, 1, 2).with(olr);
        let e = check(&enc(&w), CheckOptions::default()).unwrap_err();
        assert_eq!(e.result_code(), 5005);
        assert!(e.to_string().contains("OC-Report-Type"), "{e}");
    }

    #[test]
    fn unknown_mandatory_is_5001_and_forbidden_m_is_3009() {
        let w = dwr("a.example", "example", None, 1, 2).with(Avp::new(
            4242,
            None,
            true,
            AvpData::Bytes(Bytes::from_static(b"x")),
        ));
        let b = enc(&w);
        let e = check(&b, CheckOptions::default()).unwrap_err();
        assert_eq!(e.result_code(), 5001);
        let off = e.offset();
        assert_eq!(&b[off..off + 4], &4242u32.to_be_bytes());
        let lax = CheckOptions {
            unknown_mandatory: false,
            ..CheckOptions::default()
        };
        check(&b, lax).unwrap();
        let w = dwr("a.example", "example", None, 1, 2)
            .with(Avp::str(code::ERROR_MESSAGE, "x").mandatory(true));
        assert_eq!(
            check(&enc(&w), CheckOptions::default())
                .unwrap_err()
                .result_code(),
            3009
        );
        // an unknown M AVP inside Failed-AVP is not ours to reject
        let inner = Avp::new(4242, None, true, AvpData::Bytes(Bytes::from_static(b"x")));
        let w =
            dwa(&w.header, 5001, "b", "c", None).with(Avp::grouped(code::FAILED_AVP, vec![inner]));
        check(&enc(&w), CheckOptions::default()).unwrap();
    }
}
