//! Result-Code values (RFC 6733 §7.1) and the vendor Experimental-Result-Code
//! 5198 DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY.

/// 1001: the request needs another round (§7.1.1).
pub const MULTI_ROUND_AUTH: u32 = 1001;
/// 2001: success (§7.1.2).
pub const SUCCESS: u32 = 2001;
/// 2002: limited success (§7.1.2).
pub const LIMITED_SUCCESS: u32 = 2002;
/// 3001: command unsupported (§7.1.3).
pub const COMMAND_UNSUPPORTED: u32 = 3001;
/// 3002: unable to deliver (§7.1.3).
pub const UNABLE_TO_DELIVER: u32 = 3002;
/// 3003: realm not served (§7.1.3).
pub const REALM_NOT_SERVED: u32 = 3003;
/// 3004: too busy (§7.1.3; RFC 7683 §8 for throttled requests).
pub const TOO_BUSY: u32 = 3004;
/// 3005: loop detected (§7.1.3).
pub const LOOP_DETECTED: u32 = 3005;
/// 3006: redirect indication (§7.1.3).
pub const REDIRECT_INDICATION: u32 = 3006;
/// 3007: application unsupported (§7.1.3).
pub const APPLICATION_UNSUPPORTED: u32 = 3007;
/// 3008: invalid header bits (§7.1.3).
pub const INVALID_HDR_BITS: u32 = 3008;
/// 3009: invalid AVP bits (§7.1.3).
pub const INVALID_AVP_BITS: u32 = 3009;
/// 3010: unknown peer (§7.1.3).
pub const UNKNOWN_PEER: u32 = 3010;
/// 4001: authentication rejected (§7.1.4).
pub const AUTHENTICATION_REJECTED: u32 = 4001;
/// 4002: out of space (§7.1.4).
pub const OUT_OF_SPACE: u32 = 4002;
/// 4003: election lost (§7.1.4).
pub const ELECTION_LOST: u32 = 4003;
/// 5001: AVP unsupported (§7.1.5).
pub const AVP_UNSUPPORTED: u32 = 5001;
/// 5002: unknown session id (§7.1.5).
pub const UNKNOWN_SESSION_ID: u32 = 5002;
/// 5003: authorization rejected (§7.1.5).
pub const AUTHORIZATION_REJECTED: u32 = 5003;
/// 5004: invalid AVP value (§7.1.5).
pub const INVALID_AVP_VALUE: u32 = 5004;
/// 5005: missing AVP (§7.1.5).
pub const MISSING_AVP: u32 = 5005;
/// 5006: resources exceeded (§7.1.5).
pub const RESOURCES_EXCEEDED: u32 = 5006;
/// 5007: contradicting AVPs (§7.1.5).
pub const CONTRADICTING_AVPS: u32 = 5007;
/// 5008: AVP not allowed (§7.1.5).
pub const AVP_NOT_ALLOWED: u32 = 5008;
/// 5009: AVP occurs too many times (§7.1.5).
pub const AVP_OCCURS_TOO_MANY_TIMES: u32 = 5009;
/// 5010: no common application (§7.1.5).
pub const NO_COMMON_APPLICATION: u32 = 5010;
/// 5011: unsupported version (§7.1.5).
pub const UNSUPPORTED_VERSION: u32 = 5011;
/// 5012: unable to comply (§7.1.5; RFC 7683 §8 for throttled requests).
pub const UNABLE_TO_COMPLY: u32 = 5012;
/// 5013: invalid bit in header (§7.1.5).
pub const INVALID_BIT_IN_HEADER: u32 = 5013;
/// 5014: invalid AVP length (§7.1.5).
pub const INVALID_AVP_LENGTH: u32 = 5014;
/// 5015: invalid message length (§7.1.5).
pub const INVALID_MESSAGE_LENGTH: u32 = 5015;
/// 5016: invalid AVP bit combination (§7.1.5).
pub const INVALID_AVP_BIT_COMBO: u32 = 5016;
/// 5017: no common security (§7.1.5).
pub const NO_COMMON_SECURITY: u32 = 5017;
/// 5198: DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY, a vendor
/// Experimental-Result-Code (StarOS practice; the vendor id is the
/// deployment's choice). It tells the client not to retry the request on
/// any alternate path.
pub const OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY: u32 = 5198;

/// True for the protocol errors (3xxx) that RFC 6733 §7.1.3 answers with
/// the E bit set.
pub const fn is_protocol_error(code: u32) -> bool {
    code >= 3000 && code < 4000
}

/// Names of the Result-Code values of RFC 6733 §7.1 and of the vendor
/// Experimental-Result-Code 5198.
pub static RESULT_CODE_NAMES: &[(i64, &str)] = &[
    (MULTI_ROUND_AUTH as i64, "DIAMETER_MULTI_ROUND_AUTH"),
    (SUCCESS as i64, "DIAMETER_SUCCESS"),
    (LIMITED_SUCCESS as i64, "DIAMETER_LIMITED_SUCCESS"),
    (COMMAND_UNSUPPORTED as i64, "DIAMETER_COMMAND_UNSUPPORTED"),
    (UNABLE_TO_DELIVER as i64, "DIAMETER_UNABLE_TO_DELIVER"),
    (REALM_NOT_SERVED as i64, "DIAMETER_REALM_NOT_SERVED"),
    (TOO_BUSY as i64, "DIAMETER_TOO_BUSY"),
    (LOOP_DETECTED as i64, "DIAMETER_LOOP_DETECTED"),
    (REDIRECT_INDICATION as i64, "DIAMETER_REDIRECT_INDICATION"),
    (
        APPLICATION_UNSUPPORTED as i64,
        "DIAMETER_APPLICATION_UNSUPPORTED",
    ),
    (INVALID_HDR_BITS as i64, "DIAMETER_INVALID_HDR_BITS"),
    (INVALID_AVP_BITS as i64, "DIAMETER_INVALID_AVP_BITS"),
    (UNKNOWN_PEER as i64, "DIAMETER_UNKNOWN_PEER"),
    (
        AUTHENTICATION_REJECTED as i64,
        "DIAMETER_AUTHENTICATION_REJECTED",
    ),
    (OUT_OF_SPACE as i64, "DIAMETER_OUT_OF_SPACE"),
    (ELECTION_LOST as i64, "ELECTION_LOST"),
    (AVP_UNSUPPORTED as i64, "DIAMETER_AVP_UNSUPPORTED"),
    (UNKNOWN_SESSION_ID as i64, "DIAMETER_UNKNOWN_SESSION_ID"),
    (
        AUTHORIZATION_REJECTED as i64,
        "DIAMETER_AUTHORIZATION_REJECTED",
    ),
    (INVALID_AVP_VALUE as i64, "DIAMETER_INVALID_AVP_VALUE"),
    (MISSING_AVP as i64, "DIAMETER_MISSING_AVP"),
    (RESOURCES_EXCEEDED as i64, "DIAMETER_RESOURCES_EXCEEDED"),
    (CONTRADICTING_AVPS as i64, "DIAMETER_CONTRADICTING_AVPS"),
    (AVP_NOT_ALLOWED as i64, "DIAMETER_AVP_NOT_ALLOWED"),
    (
        AVP_OCCURS_TOO_MANY_TIMES as i64,
        "DIAMETER_AVP_OCCURS_TOO_MANY_TIMES",
    ),
    (
        NO_COMMON_APPLICATION as i64,
        "DIAMETER_NO_COMMON_APPLICATION",
    ),
    (UNSUPPORTED_VERSION as i64, "DIAMETER_UNSUPPORTED_VERSION"),
    (UNABLE_TO_COMPLY as i64, "DIAMETER_UNABLE_TO_COMPLY"),
    (
        INVALID_BIT_IN_HEADER as i64,
        "DIAMETER_INVALID_BIT_IN_HEADER",
    ),
    (INVALID_AVP_LENGTH as i64, "DIAMETER_INVALID_AVP_LENGTH"),
    (
        INVALID_MESSAGE_LENGTH as i64,
        "DIAMETER_INVALID_MESSAGE_LENGTH",
    ),
    (
        INVALID_AVP_BIT_COMBO as i64,
        "DIAMETER_INVALID_AVP_BIT_COMBO",
    ),
    (NO_COMMON_SECURITY as i64, "DIAMETER_NO_COMMON_SECURITY"),
    (
        OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY as i64,
        "DIAMETER_OVERLOAD_RETRY_NOT_ALLOWED_TO_ANY",
    ),
];

/// The name of a Result-Code value.
pub fn result_code_name(code: u32) -> Option<&'static str> {
    RESULT_CODE_NAMES
        .iter()
        .find(|(c, _)| *c == i64::from(code))
        .map(|(_, n)| *n)
}
