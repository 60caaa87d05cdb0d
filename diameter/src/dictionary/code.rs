//! AVP codes (RFC 6733 §4.5, RFC 7683 §7, RFC 8581 §7, RFC 8582 §7, RFC 7944,
//! RFC 8583 §7), and the 3GPP and freeDiameter `test_app` vendor codes.

/// User-Name (UTF8String).
pub const USER_NAME: u32 = 1;
/// Class (OctetString).
pub const CLASS: u32 = 25;
/// Session-Timeout (Unsigned32).
pub const SESSION_TIMEOUT: u32 = 27;
/// Proxy-State (OctetString).
pub const PROXY_STATE: u32 = 33;
/// Acct-Session-Id (OctetString).
pub const ACCT_SESSION_ID: u32 = 44;
/// Acct-Multi-Session-Id (UTF8String).
pub const ACCT_MULTI_SESSION_ID: u32 = 50;
/// Event-Timestamp (Time).
pub const EVENT_TIMESTAMP: u32 = 55;
/// Acct-Interim-Interval (Unsigned32).
pub const ACCT_INTERIM_INTERVAL: u32 = 85;
/// Host-IP-Address (Address).
pub const HOST_IP_ADDRESS: u32 = 257;
/// Auth-Application-Id (Unsigned32).
pub const AUTH_APPLICATION_ID: u32 = 258;
/// Acct-Application-Id (Unsigned32).
pub const ACCT_APPLICATION_ID: u32 = 259;
/// Vendor-Specific-Application-Id (Grouped).
pub const VENDOR_SPECIFIC_APPLICATION_ID: u32 = 260;
/// Redirect-Host-Usage (Enumerated).
pub const REDIRECT_HOST_USAGE: u32 = 261;
/// Redirect-Max-Cache-Time (Unsigned32).
pub const REDIRECT_MAX_CACHE_TIME: u32 = 262;
/// Session-Id (UTF8String).
pub const SESSION_ID: u32 = 263;
/// Origin-Host (DiameterIdentity).
pub const ORIGIN_HOST: u32 = 264;
/// Supported-Vendor-Id (Unsigned32).
pub const SUPPORTED_VENDOR_ID: u32 = 265;
/// Vendor-Id (Unsigned32).
pub const VENDOR_ID: u32 = 266;
/// Firmware-Revision (Unsigned32).
pub const FIRMWARE_REVISION: u32 = 267;
/// Result-Code (Unsigned32).
pub const RESULT_CODE: u32 = 268;
/// Product-Name (UTF8String).
pub const PRODUCT_NAME: u32 = 269;
/// Session-Binding (Unsigned32).
pub const SESSION_BINDING: u32 = 270;
/// Session-Server-Failover (Enumerated).
pub const SESSION_SERVER_FAILOVER: u32 = 271;
/// Multi-Round-Time-Out (Unsigned32).
pub const MULTI_ROUND_TIME_OUT: u32 = 272;
/// Disconnect-Cause (Enumerated).
pub const DISCONNECT_CAUSE: u32 = 273;
/// Auth-Request-Type (Enumerated).
pub const AUTH_REQUEST_TYPE: u32 = 274;
/// Auth-Grace-Period (Unsigned32).
pub const AUTH_GRACE_PERIOD: u32 = 276;
/// Auth-Session-State (Enumerated).
pub const AUTH_SESSION_STATE: u32 = 277;
/// Origin-State-Id (Unsigned32).
pub const ORIGIN_STATE_ID: u32 = 278;
/// Failed-AVP (Grouped).
pub const FAILED_AVP: u32 = 279;
/// Proxy-Host (DiameterIdentity).
pub const PROXY_HOST: u32 = 280;
/// Error-Message (UTF8String).
pub const ERROR_MESSAGE: u32 = 281;
/// Route-Record (DiameterIdentity).
pub const ROUTE_RECORD: u32 = 282;
/// Destination-Realm (DiameterIdentity).
pub const DESTINATION_REALM: u32 = 283;
/// Proxy-Info (Grouped).
pub const PROXY_INFO: u32 = 284;
/// Re-Auth-Request-Type (Enumerated).
pub const RE_AUTH_REQUEST_TYPE: u32 = 285;
/// Accounting-Sub-Session-Id (Unsigned64).
pub const ACCOUNTING_SUB_SESSION_ID: u32 = 287;
/// Authorization-Lifetime (Unsigned32).
pub const AUTHORIZATION_LIFETIME: u32 = 291;
/// Redirect-Host (DiameterURI).
pub const REDIRECT_HOST: u32 = 292;
/// Destination-Host (DiameterIdentity).
pub const DESTINATION_HOST: u32 = 293;
/// Error-Reporting-Host (DiameterIdentity).
pub const ERROR_REPORTING_HOST: u32 = 294;
/// Termination-Cause (Enumerated).
pub const TERMINATION_CAUSE: u32 = 295;
/// Origin-Realm (DiameterIdentity).
pub const ORIGIN_REALM: u32 = 296;
/// Experimental-Result (Grouped).
pub const EXPERIMENTAL_RESULT: u32 = 297;
/// Experimental-Result-Code (Unsigned32).
pub const EXPERIMENTAL_RESULT_CODE: u32 = 298;
/// Inband-Security-Id (Unsigned32).
pub const INBAND_SECURITY_ID: u32 = 299;
/// E2E-Sequence (Grouped, RFC 6733 §6.15).
pub const E2E_SEQUENCE: u32 = 300;
/// DRMP (Enumerated, RFC 7944 §9.1).
pub const DRMP: u32 = 301;
/// Accounting-Record-Type (Enumerated).
pub const ACCOUNTING_RECORD_TYPE: u32 = 480;
/// Accounting-Realtime-Required (Enumerated).
pub const ACCOUNTING_REALTIME_REQUIRED: u32 = 483;
/// Accounting-Record-Number (Unsigned32).
pub const ACCOUNTING_RECORD_NUMBER: u32 = 485;
/// OC-Supported-Features (Grouped, RFC 7683 §7.1).
pub const OC_SUPPORTED_FEATURES: u32 = 621;
/// OC-Feature-Vector (Unsigned64, RFC 7683 §7.2).
pub const OC_FEATURE_VECTOR: u32 = 622;
/// OC-OLR (Grouped, RFC 7683 §7.3).
pub const OC_OLR: u32 = 623;
/// OC-Sequence-Number (Unsigned64, RFC 7683 §7.4).
pub const OC_SEQUENCE_NUMBER: u32 = 624;
/// OC-Validity-Duration (Unsigned32, RFC 7683 §7.5).
pub const OC_VALIDITY_DURATION: u32 = 625;
/// OC-Report-Type (Enumerated, RFC 7683 §7.6).
pub const OC_REPORT_TYPE: u32 = 626;
/// OC-Reduction-Percentage (Unsigned32, RFC 7683 §7.7).
pub const OC_REDUCTION_PERCENTAGE: u32 = 627;
/// OC-Peer-Algo (Unsigned64, RFC 8581 §7.1.2).
pub const OC_PEER_ALGO: u32 = 648;
/// SourceID (DiameterIdentity, RFC 8581 §7.3).
pub const SOURCE_ID: u32 = 649;
/// Load (Grouped, RFC 8583 §7.1).
pub const LOAD: u32 = 650;
/// Load-Type (Enumerated, RFC 8583 §7.2).
pub const LOAD_TYPE: u32 = 651;
/// Load-Value (Unsigned64, RFC 8583 §7.3).
pub const LOAD_VALUE: u32 = 652;
/// OC-Maximum-Rate (Unsigned32, RFC 8582 §7.2.1).
pub const OC_MAXIMUM_RATE: u32 = 670;

/// 3GPP (vendor 10415) AVP codes that collide with IETF codes.
pub mod tgpp {
    /// Primary-Charging-Collection-Function-Name (DiameterURI, TS 29.229).
    pub const PRIMARY_CHARGING_COLLECTION_FUNCTION_NAME: u32 = 621;
    /// User-Authorization-Type (Enumerated, TS 29.229).
    pub const USER_AUTHORIZATION_TYPE: u32 = 623;
    /// Multiple-Registration-Indication (Enumerated, TS 29.229).
    pub const MULTIPLE_REGISTRATION_INDICATION: u32 = 648;
    /// Restoration-Info (Grouped, TS 29.229).
    pub const RESTORATION_INFO: u32 = 649;
}

/// freeDiameter `test_app` AVP codes (vendor 999999).
pub mod fd_test {
    /// Test-AVP (Integer32).
    pub const TEST_AVP: u32 = 16_777_215;
}
