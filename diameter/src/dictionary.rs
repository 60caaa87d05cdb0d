//! The Diameter dictionary: command codes, AVP codes, data types, flag rules
//! and enumerated values. Data only; the codec reads it.
//!
//! Sources: RFC 6733 §3.1 (base commands), §4.5 (base AVP table), §7.1
//! (Result-Code values), §5.3-5.5 and §7.2 (command grammars used by
//! [`crate::codec::grammar`]); RFC 7683 §7 (DOIC AVPs); RFC 8581 §7 (peer
//! report: OC-Peer-Algo, SourceID, PEER_REPORT); RFC 8582 §7 (OC-Maximum-Rate,
//! OLR_RATE_ALGORITHM); RFC 7944 (DRMP); RFC 8583 §7 (Load); 3GPP TS 29.229
//! (vendor 10415 AVPs that reuse the codes 621, 623, 648 and 649); the
//! freeDiameter `test_app` extension (application 16777215).
//!
//! AVPs are keyed on (code, vendor id): vendor id 0 stands for "no Vendor-Id
//! field" (the V bit clear), which is also the IETF vendor space.

/// Vendor identifiers (SMI Network Management Private Enterprise Codes).
pub mod vendor {
    /// No vendor: the AVP has no Vendor-Id field (IETF space).
    pub const NONE: u32 = 0;
    /// 3GPP.
    pub const TGPP: u32 = 10415;
    /// The vendor id used by the freeDiameter `test_app` extension.
    pub const FD_TEST: u32 = 999_999;
}

/// Application identifiers (RFC 6733 §2.4, §11.3).
pub mod app {
    /// Diameter common messages (CER, DWR, DPR, ...).
    pub const COMMON: u32 = 0;
    /// Diameter base accounting.
    pub const BASE_ACCOUNTING: u32 = 3;
    /// The relay application id (RFC 6733 §2.4): a relay advertises it.
    pub const RELAY: u32 = 0xffff_ffff;
    /// The freeDiameter `test_app` application.
    pub const FD_TEST: u32 = 16_777_215;
}

/// Command codes (RFC 6733 §3.1 and the freeDiameter `test_app`).
pub mod cmd {
    /// Capabilities-Exchange-Request/Answer (RFC 6733 §5.3).
    pub const CAPABILITIES_EXCHANGE: u32 = 257;
    /// Re-Auth-Request/Answer (RFC 6733 §8.3).
    pub const RE_AUTH: u32 = 258;
    /// Accounting-Request/Answer (RFC 6733 §9.7).
    pub const ACCOUNTING: u32 = 271;
    /// Abort-Session-Request/Answer (RFC 6733 §8.5).
    pub const ABORT_SESSION: u32 = 274;
    /// Session-Termination-Request/Answer (RFC 6733 §8.4).
    pub const SESSION_TERMINATION: u32 = 275;
    /// Device-Watchdog-Request/Answer (RFC 6733 §5.5).
    pub const DEVICE_WATCHDOG: u32 = 280;
    /// Disconnect-Peer-Request/Answer (RFC 6733 §5.4).
    pub const DISCONNECT_PEER: u32 = 282;
    /// freeDiameter `test_app` Test-Request/Answer.
    pub const FD_TEST: u32 = 16_777_214;
}

/// AVP codes. Base protocol codes are from RFC 6733 §4.5; the others name
/// their RFC. Vendor-specific codes are in [`code::tgpp`] and [`code::fd_test`].
pub mod code;

/// Result-Code and Experimental-Result-Code values (RFC 6733 §7.1, RFC 7683
/// and vendor practice).
pub mod result;

/// DOIC values (RFC 7683 §7.2 and §7.6, RFC 8581 §7.1.1 and §7.2.1, RFC 8582
/// §7.1.1).
pub mod doic {
    /// OC-Feature-Vector bit: the loss algorithm (RFC 7683 §7.2).
    pub const OLR_DEFAULT_ALGO: u64 = 0x0000_0000_0000_0001;
    /// OC-Feature-Vector bit: the rate algorithm (RFC 8582 §7.1.1).
    pub const OLR_RATE_ALGORITHM: u64 = 0x0000_0000_0000_0004;
    /// OC-Feature-Vector bit: peer reports (RFC 8581 §7.1.1).
    pub const OC_PEER_REPORT: u64 = 0x0000_0000_0000_0010;
    /// OC-Report-Type HOST_REPORT (RFC 7683 §7.6).
    pub const HOST_REPORT: i32 = 0;
    /// OC-Report-Type REALM_REPORT (RFC 7683 §7.6).
    pub const REALM_REPORT: i32 = 1;
    /// OC-Report-Type PEER_REPORT (RFC 8581 §7.2.1).
    pub const PEER_REPORT: i32 = 2;
    /// Default OC-Validity-Duration in seconds (RFC 7683 §7.5).
    pub const DEFAULT_VALIDITY_SECS: u32 = 30;
    /// Maximum OC-Validity-Duration in seconds (RFC 7683 §7.5).
    pub const MAX_VALIDITY_SECS: u32 = 86_400;
}

/// The data types of RFC 6733 §4.2 (basic) and §4.3 (derived).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AvpType {
    /// Arbitrary bytes (§4.2).
    OctetString,
    /// 32-bit signed integer, network byte order (§4.2).
    Integer32,
    /// 64-bit signed integer (§4.2).
    Integer64,
    /// 32-bit unsigned integer (§4.2).
    Unsigned32,
    /// 64-bit unsigned integer (§4.2).
    Unsigned64,
    /// IEEE 754 single precision (§4.2).
    Float32,
    /// IEEE 754 double precision (§4.2).
    Float64,
    /// A sequence of AVPs (§4.4).
    Grouped,
    /// 2-byte address family then the address (§4.3.1).
    Address,
    /// NTP seconds since 1900 (§4.3.1).
    Time,
    /// UTF-8 text (§4.3.1).
    Utf8String,
    /// A fully qualified domain name (§4.3.1).
    DiameterIdentity,
    /// An `aaa://` or `aaas://` URI (§4.3.1).
    DiameterUri,
    /// Integer32 with named values (§4.3.1).
    Enumerated,
    /// An IP filter rule in ASCII (§4.3.1).
    IpFilterRule,
}

impl AvpType {
    /// The type name as RFC 6733 spells it.
    pub const fn name(self) -> &'static str {
        match self {
            AvpType::OctetString => "OctetString",
            AvpType::Integer32 => "Integer32",
            AvpType::Integer64 => "Integer64",
            AvpType::Unsigned32 => "Unsigned32",
            AvpType::Unsigned64 => "Unsigned64",
            AvpType::Float32 => "Float32",
            AvpType::Float64 => "Float64",
            AvpType::Grouped => "Grouped",
            AvpType::Address => "Address",
            AvpType::Time => "Time",
            AvpType::Utf8String => "UTF8String",
            AvpType::DiameterIdentity => "DiameterIdentity",
            AvpType::DiameterUri => "DiameterURI",
            AvpType::Enumerated => "Enumerated",
            AvpType::IpFilterRule => "IPFilterRule",
        }
    }

    /// Parses a type name as RFC 6733 spells it.
    pub fn from_name(name: &str) -> Option<AvpType> {
        ALL_TYPES.iter().copied().find(|t| t.name() == name)
    }
}

/// Every data type, in RFC 6733 order.
pub const ALL_TYPES: [AvpType; 15] = [
    AvpType::OctetString,
    AvpType::Integer32,
    AvpType::Integer64,
    AvpType::Unsigned32,
    AvpType::Unsigned64,
    AvpType::Float32,
    AvpType::Float64,
    AvpType::Grouped,
    AvpType::Address,
    AvpType::Time,
    AvpType::Utf8String,
    AvpType::DiameterIdentity,
    AvpType::DiameterUri,
    AvpType::Enumerated,
    AvpType::IpFilterRule,
];

/// An AVP flag rule column of the RFC 6733 §4.5 table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagRule {
    /// The bit MUST be set.
    Must,
    /// The bit may be set or not.
    May,
    /// The bit MUST NOT be set.
    MustNot,
}

/// One AVP of the dictionary.
#[derive(Debug, PartialEq, Eq)]
pub struct AvpDef {
    /// AVP code.
    pub code: u32,
    /// Vendor id; [`vendor::NONE`] when the AVP has no Vendor-Id field.
    pub vendor_id: u32,
    /// AVP name.
    pub name: &'static str,
    /// Data type.
    pub ty: AvpType,
    /// M-bit rule.
    pub m: FlagRule,
    /// Named values of an Enumerated (or value-carrying Unsigned32) AVP.
    pub values: &'static [(i64, &'static str)],
}

impl AvpDef {
    /// The name of an enumerated value, if the dictionary has one.
    pub fn value_name(&self, value: i64) -> Option<&'static str> {
        self.values
            .iter()
            .find(|(v, _)| *v == value)
            .map(|(_, n)| *n)
    }

    /// The V-bit rule: set exactly when the AVP belongs to a vendor.
    pub const fn v(&self) -> FlagRule {
        if self.vendor_id == vendor::NONE {
            FlagRule::MustNot
        } else {
            FlagRule::Must
        }
    }
}

use AvpType as T;
use FlagRule::{May, Must, MustNot};

const fn d(code: u32, name: &'static str, ty: AvpType, m: FlagRule) -> AvpDef {
    AvpDef {
        code,
        vendor_id: vendor::NONE,
        name,
        ty,
        m,
        values: &[],
    }
}

const fn e(
    code: u32,
    name: &'static str,
    m: FlagRule,
    values: &'static [(i64, &'static str)],
) -> AvpDef {
    AvpDef {
        code,
        vendor_id: vendor::NONE,
        name,
        ty: T::Enumerated,
        m,
        values,
    }
}

const fn v(
    code: u32,
    vendor_id: u32,
    name: &'static str,
    ty: AvpType,
    m: FlagRule,
    values: &'static [(i64, &'static str)],
) -> AvpDef {
    AvpDef {
        code,
        vendor_id,
        name,
        ty,
        m,
        values,
    }
}

const DRMP_VALUES: &[(i64, &str)] = &[
    (0, "PRIORITY_0"),
    (1, "PRIORITY_1"),
    (2, "PRIORITY_2"),
    (3, "PRIORITY_3"),
    (4, "PRIORITY_4"),
    (5, "PRIORITY_5"),
    (6, "PRIORITY_6"),
    (7, "PRIORITY_7"),
    (8, "PRIORITY_8"),
    (9, "PRIORITY_9"),
    (10, "PRIORITY_10"),
    (11, "PRIORITY_11"),
    (12, "PRIORITY_12"),
    (13, "PRIORITY_13"),
    (14, "PRIORITY_14"),
    (15, "PRIORITY_15"),
];

/// The AVPs, sorted by (code, vendor id).
pub static AVPS: &[AvpDef] = AVP_TABLE;

/// Codes below this bound without a vendor are found by direct index.
const DIRECT: usize = 704;

/// Index into [`AVPS`] of each vendor-less code below [`DIRECT`]
/// (`u16::MAX` for none), built at compile time.
static DIRECT_INDEX: [u16; DIRECT] = {
    let mut t = [u16::MAX; DIRECT];
    let mut i = 0;
    while i < AVP_TABLE.len() {
        let d = &AVP_TABLE[i];
        if d.vendor_id == vendor::NONE && (d.code as usize) < DIRECT {
            t[d.code as usize] = i as u16;
        }
        i += 1;
    }
    t
};

const AVP_TABLE: &[AvpDef] = &[
    d(1, "User-Name", T::Utf8String, Must),
    d(25, "Class", T::OctetString, Must),
    d(27, "Session-Timeout", T::Unsigned32, Must),
    d(33, "Proxy-State", T::OctetString, Must),
    d(44, "Acct-Session-Id", T::OctetString, Must),
    d(50, "Acct-Multi-Session-Id", T::Utf8String, Must),
    d(55, "Event-Timestamp", T::Time, Must),
    d(85, "Acct-Interim-Interval", T::Unsigned32, Must),
    d(257, "Host-IP-Address", T::Address, Must),
    d(258, "Auth-Application-Id", T::Unsigned32, Must),
    d(259, "Acct-Application-Id", T::Unsigned32, Must),
    d(260, "Vendor-Specific-Application-Id", T::Grouped, Must),
    e(
        261,
        "Redirect-Host-Usage",
        Must,
        &[
            (0, "DONT_CACHE"),
            (1, "ALL_SESSION"),
            (2, "ALL_REALM"),
            (3, "REALM_AND_APPLICATION"),
            (4, "ALL_APPLICATION"),
            (5, "ALL_HOST"),
            (6, "ALL_USER"),
        ],
    ),
    d(262, "Redirect-Max-Cache-Time", T::Unsigned32, Must),
    d(263, "Session-Id", T::Utf8String, Must),
    d(264, "Origin-Host", T::DiameterIdentity, Must),
    d(265, "Supported-Vendor-Id", T::Unsigned32, Must),
    d(266, "Vendor-Id", T::Unsigned32, Must),
    d(267, "Firmware-Revision", T::Unsigned32, MustNot),
    v(
        268,
        0,
        "Result-Code",
        T::Unsigned32,
        Must,
        result::RESULT_CODE_NAMES,
    ),
    d(269, "Product-Name", T::Utf8String, MustNot),
    d(270, "Session-Binding", T::Unsigned32, Must),
    e(
        271,
        "Session-Server-Failover",
        Must,
        &[
            (0, "REFUSE_SERVICE"),
            (1, "TRY_AGAIN"),
            (2, "ALLOW_SERVICE"),
            (3, "TRY_AGAIN_ALLOW_SERVICE"),
        ],
    ),
    d(272, "Multi-Round-Time-Out", T::Unsigned32, Must),
    e(
        273,
        "Disconnect-Cause",
        Must,
        &[
            (0, "REBOOTING"),
            (1, "BUSY"),
            (2, "DO_NOT_WANT_TO_TALK_TO_YOU"),
        ],
    ),
    e(
        274,
        "Auth-Request-Type",
        Must,
        &[
            (1, "AUTHENTICATE_ONLY"),
            (2, "AUTHORIZE_ONLY"),
            (3, "AUTHORIZE_AUTHENTICATE"),
        ],
    ),
    d(276, "Auth-Grace-Period", T::Unsigned32, Must),
    e(
        277,
        "Auth-Session-State",
        Must,
        &[(0, "STATE_MAINTAINED"), (1, "NO_STATE_MAINTAINED")],
    ),
    d(278, "Origin-State-Id", T::Unsigned32, Must),
    d(279, "Failed-AVP", T::Grouped, Must),
    d(280, "Proxy-Host", T::DiameterIdentity, Must),
    d(281, "Error-Message", T::Utf8String, MustNot),
    d(282, "Route-Record", T::DiameterIdentity, Must),
    d(283, "Destination-Realm", T::DiameterIdentity, Must),
    d(284, "Proxy-Info", T::Grouped, Must),
    e(
        285,
        "Re-Auth-Request-Type",
        Must,
        &[(0, "AUTHORIZE_ONLY"), (1, "AUTHORIZE_AUTHENTICATE")],
    ),
    d(287, "Accounting-Sub-Session-Id", T::Unsigned64, Must),
    d(291, "Authorization-Lifetime", T::Unsigned32, Must),
    d(292, "Redirect-Host", T::DiameterUri, Must),
    d(293, "Destination-Host", T::DiameterIdentity, Must),
    d(294, "Error-Reporting-Host", T::DiameterIdentity, MustNot),
    e(
        295,
        "Termination-Cause",
        Must,
        &[
            (1, "DIAMETER_LOGOUT"),
            (2, "DIAMETER_SERVICE_NOT_PROVIDED"),
            (3, "DIAMETER_BAD_ANSWER"),
            (4, "DIAMETER_ADMINISTRATIVE"),
            (5, "DIAMETER_LINK_BROKEN"),
            (6, "DIAMETER_AUTH_EXPIRED"),
            (7, "DIAMETER_USER_MOVED"),
            (8, "DIAMETER_SESSION_TIMEOUT"),
        ],
    ),
    d(296, "Origin-Realm", T::DiameterIdentity, Must),
    d(297, "Experimental-Result", T::Grouped, Must),
    v(
        298,
        0,
        "Experimental-Result-Code",
        T::Unsigned32,
        Must,
        result::RESULT_CODE_NAMES,
    ),
    v(
        299,
        0,
        "Inband-Security-Id",
        T::Unsigned32,
        Must,
        &[(0, "NO_INBAND_SECURITY"), (1, "TLS")],
    ),
    d(300, "E2E-Sequence", T::Grouped, Must),
    e(301, "DRMP", May, DRMP_VALUES),
    e(
        480,
        "Accounting-Record-Type",
        Must,
        &[
            (1, "EVENT_RECORD"),
            (2, "START_RECORD"),
            (3, "INTERIM_RECORD"),
            (4, "STOP_RECORD"),
        ],
    ),
    e(
        483,
        "Accounting-Realtime-Required",
        Must,
        &[
            (1, "DELIVER_AND_GRANT"),
            (2, "GRANT_AND_STORE"),
            (3, "GRANT_AND_LOSE"),
        ],
    ),
    d(485, "Accounting-Record-Number", T::Unsigned32, Must),
    d(621, "OC-Supported-Features", T::Grouped, May),
    v(
        621,
        vendor::TGPP,
        "Primary-Charging-Collection-Function-Name",
        T::DiameterUri,
        Must,
        &[],
    ),
    v(
        622,
        0,
        "OC-Feature-Vector",
        T::Unsigned64,
        May,
        &[
            (doic::OLR_DEFAULT_ALGO as i64, "OLR_DEFAULT_ALGO"),
            (doic::OLR_RATE_ALGORITHM as i64, "OLR_RATE_ALGORITHM"),
            (doic::OC_PEER_REPORT as i64, "OC_PEER_REPORT"),
        ],
    ),
    d(623, "OC-OLR", T::Grouped, May),
    v(
        623,
        vendor::TGPP,
        "User-Authorization-Type",
        T::Enumerated,
        Must,
        &[
            (0, "REGISTRATION"),
            (1, "DE_REGISTRATION"),
            (2, "REGISTRATION_AND_CAPABILITIES"),
        ],
    ),
    d(624, "OC-Sequence-Number", T::Unsigned64, May),
    d(625, "OC-Validity-Duration", T::Unsigned32, May),
    e(
        626,
        "OC-Report-Type",
        May,
        &[(0, "HOST_REPORT"), (1, "REALM_REPORT"), (2, "PEER_REPORT")],
    ),
    d(627, "OC-Reduction-Percentage", T::Unsigned32, May),
    v(
        648,
        0,
        "OC-Peer-Algo",
        T::Unsigned64,
        May,
        &[
            (doic::OLR_DEFAULT_ALGO as i64, "OLR_DEFAULT_ALGO"),
            (doic::OLR_RATE_ALGORITHM as i64, "OLR_RATE_ALGORITHM"),
        ],
    ),
    v(
        648,
        vendor::TGPP,
        "Multiple-Registration-Indication",
        T::Enumerated,
        Must,
        &[
            (0, "NOT_MULTIPLE_REGISTRATION"),
            (1, "MULTIPLE_REGISTRATION"),
        ],
    ),
    d(649, "SourceID", T::DiameterIdentity, May),
    v(649, vendor::TGPP, "Restoration-Info", T::Grouped, Must, &[]),
    d(650, "Load", T::Grouped, May),
    e(651, "Load-Type", May, &[(0, "HOST"), (1, "PEER")]),
    d(652, "Load-Value", T::Unsigned64, May),
    d(670, "OC-Maximum-Rate", T::Unsigned32, May),
    v(
        code::fd_test::TEST_AVP,
        vendor::FD_TEST,
        "Test-AVP",
        T::Integer32,
        May,
        &[],
    ),
];

/// Looks an AVP up by (code, vendor id); `vendor_id` is [`vendor::NONE`] for
/// an AVP without a Vendor-Id field.
#[inline]
pub fn avp(code: u32, vendor_id: u32) -> Option<&'static AvpDef> {
    if vendor_id == vendor::NONE && (code as usize) < DIRECT {
        return AVPS.get(usize::from(DIRECT_INDEX[code as usize]));
    }
    if vendor_id != vendor::NONE {
        // few vendor AVPs: a short scan beats a binary search over all
        return OTHER_INDEX
            .iter()
            .map(|&i| &AVPS[usize::from(i)])
            .find(|a| a.code == code && a.vendor_id == vendor_id);
    }
    AVPS.binary_search_by(|a| (a.code, a.vendor_id).cmp(&(code, vendor_id)))
        .ok()
        .map(|i| &AVPS[i])
}

const fn count_others() -> usize {
    let (mut n, mut i) = (0, 0);
    while i < AVP_TABLE.len() {
        if AVP_TABLE[i].vendor_id != vendor::NONE {
            n += 1;
        }
        i += 1;
    }
    n
}

/// Indices into [`AVPS`] of the vendor AVPs, built at compile time.
static OTHER_INDEX: [u16; count_others()] = {
    let mut t = [0u16; count_others()];
    let (mut n, mut i) = (0, 0);
    while i < AVP_TABLE.len() {
        if AVP_TABLE[i].vendor_id != vendor::NONE {
            t[n] = i as u16;
            n += 1;
        }
        i += 1;
    }
    t
};

/// Looks an AVP up by name (exact spelling).
pub fn avp_by_name(name: &str) -> Option<&'static AvpDef> {
    AVPS.iter().find(|a| a.name == name)
}

/// One command of the dictionary.
#[derive(Debug)]
pub struct CommandDef {
    /// Command code.
    pub code: u32,
    /// Application id the command belongs to.
    pub application_id: u32,
    /// Request name.
    pub request: &'static str,
    /// Answer name.
    pub answer: &'static str,
}

/// The commands the dictionary names.
pub static COMMANDS: &[CommandDef] = &[
    c(
        cmd::CAPABILITIES_EXCHANGE,
        app::COMMON,
        "Capabilities-Exchange-Request",
        "Capabilities-Exchange-Answer",
    ),
    c(
        cmd::RE_AUTH,
        app::COMMON,
        "Re-Auth-Request",
        "Re-Auth-Answer",
    ),
    c(
        cmd::ACCOUNTING,
        app::BASE_ACCOUNTING,
        "Accounting-Request",
        "Accounting-Answer",
    ),
    c(
        cmd::ABORT_SESSION,
        app::COMMON,
        "Abort-Session-Request",
        "Abort-Session-Answer",
    ),
    c(
        cmd::SESSION_TERMINATION,
        app::COMMON,
        "Session-Termination-Request",
        "Session-Termination-Answer",
    ),
    c(
        cmd::DEVICE_WATCHDOG,
        app::COMMON,
        "Device-Watchdog-Request",
        "Device-Watchdog-Answer",
    ),
    c(
        cmd::DISCONNECT_PEER,
        app::COMMON,
        "Disconnect-Peer-Request",
        "Disconnect-Peer-Answer",
    ),
    c(cmd::FD_TEST, app::FD_TEST, "Test-Request", "Test-Answer"),
];

const fn c(
    code: u32,
    application_id: u32,
    request: &'static str,
    answer: &'static str,
) -> CommandDef {
    CommandDef {
        code,
        application_id,
        request,
        answer,
    }
}

/// Looks a command up by code.
pub fn command(code: u32) -> Option<&'static CommandDef> {
    COMMANDS.iter().find(|c| c.code == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avps_are_sorted_and_unique_for_binary_search() {
        for w in AVPS.windows(2) {
            assert!(
                (w[0].code, w[0].vendor_id) < (w[1].code, w[1].vendor_id),
                "{} before {}",
                w[0].name,
                w[1].name
            );
        }
    }

    #[test]
    fn direct_index_agrees_with_a_scan() {
        for code in 0..800u32 {
            for vendor_id in [vendor::NONE, vendor::TGPP, vendor::FD_TEST, 1] {
                let scan = AVPS
                    .iter()
                    .find(|a| a.code == code && a.vendor_id == vendor_id);
                assert_eq!(
                    avp(code, vendor_id).map(|a| a.name),
                    scan.map(|a| a.name),
                    "{code}/{vendor_id}"
                );
            }
        }
        assert_eq!(
            avp(code::fd_test::TEST_AVP, vendor::FD_TEST).unwrap().name,
            "Test-AVP"
        );
    }

    #[test]
    fn lookup_is_keyed_on_code_and_vendor() {
        for code in [621, 623, 648, 649] {
            let ietf = avp(code, vendor::NONE).unwrap();
            let tgpp = avp(code, vendor::TGPP).unwrap();
            assert_ne!(ietf.name, tgpp.name);
            assert_ne!(ietf.ty, tgpp.ty);
        }
        assert_eq!(
            avp(621, vendor::NONE).unwrap().name,
            "OC-Supported-Features"
        );
        assert_eq!(
            avp(621, vendor::TGPP).unwrap().name,
            "Primary-Charging-Collection-Function-Name"
        );
        assert!(avp(621, 9).is_none());
        assert_eq!(avp(649, 0).unwrap().ty, AvpType::DiameterIdentity);
        assert_eq!(avp(670, 0).unwrap().name, "OC-Maximum-Rate");
    }

    #[test]
    fn doic_values_match_the_rfcs() {
        // RFC 7683 §7.2, RFC 8582 §7.1.1, RFC 8581 §7.1.1 and §7.2.1.
        assert_eq!(doic::OLR_DEFAULT_ALGO, 0x1);
        assert_eq!(doic::OLR_RATE_ALGORITHM, 0x4);
        assert_eq!(doic::OC_PEER_REPORT, 0x10);
        let rt = avp(code::OC_REPORT_TYPE, 0).unwrap();
        assert_eq!(rt.value_name(2), Some("PEER_REPORT"));
        assert_eq!(
            avp(code::DRMP, 0).unwrap().value_name(15),
            Some("PRIORITY_15")
        );
        assert_eq!(
            result::result_code_name(5198),
            Some("DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY")
        );
    }

    #[test]
    fn flag_rules_follow_the_base_table() {
        assert_eq!(avp(code::ERROR_MESSAGE, 0).unwrap().m, FlagRule::MustNot);
        assert_eq!(avp(code::ORIGIN_HOST, 0).unwrap().m, FlagRule::Must);
        assert_eq!(avp(code::ORIGIN_HOST, 0).unwrap().v(), FlagRule::MustNot);
        assert_eq!(avp(code::OC_OLR, 0).unwrap().m, FlagRule::May);
        assert_eq!(avp(623, vendor::TGPP).unwrap().v(), FlagRule::Must);
    }

    #[test]
    fn type_names_round_trip() {
        for t in ALL_TYPES {
            assert_eq!(AvpType::from_name(t.name()), Some(t));
        }
        assert_eq!(avp_by_name("Test-AVP").unwrap().vendor_id, vendor::FD_TEST);
        assert_eq!(command(cmd::FD_TEST).unwrap().request, "Test-Request");
    }
}
