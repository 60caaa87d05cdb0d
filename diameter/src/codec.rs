//! The Diameter codec (RFC 6733 §3 header, §4 AVPs and data types, §7.1
//! Result-Codes for decode defects), zero-copy over [`bytes::Bytes`].
//!
//! | module | what |
//! | --- | --- |
//! | [`header`] | the 20-byte header, command flags, stream framing ([`frame_len_max`]), in-place header edits |
//! | [`avp`] | AVP header and padding; [`RawAvp`] (borrowed) and [`Avp`] (owned) |
//! | [`value`] | typed values of every RFC 6733 §4.2-4.3 type, with validation |
//! | [`message`] | strict whole-message decode ([`Message::decode`], [`validate`]) and encode |
//! | [`relay`] | relay fast path: [`Routing`] view of the routing AVPs, in-place edits ([`MessageBuf`]) |
//! | [`forward`] | the relayed copy of a request: Route-Record appended, new Hop-by-Hop id, T flag (§6.1.9) |
//! | [`grammar`] | command and grouped-AVP grammars, 5005/5009/5001/3009 checks |
//! | [`doic`] | typed OC-Supported-Features and OC-OLR (RFC 7683, 8581, 8582) |
//! | [`json`] | the JSON form of a message (decode/encode CLI), byte-exact round trip |
//! | [`builder`] | CER/CEA ([`Capabilities`]), DWR/DWA, DPR/DPA, answers and protocol-error answers |
//! | [`answer`] | the messages a node writes itself into an output buffer: error answers, CER/CEA, DWR/DWA, DPR/DPA |
//! | [`error`] | [`DecodeError`] (offset, Result-Code, Failed-AVP) and [`EncodeError`] |
//!
//! Decoding never panics and never loops on any input: every length is
//! checked against its container before use.

pub mod answer;
pub mod avp;
pub mod builder;
pub mod doic;
pub mod error;
pub mod forward;
pub mod grammar;
pub mod header;
#[cfg(feature = "json")]
pub mod json;
pub mod message;
#[cfg(test)]
mod proptests;
pub mod relay;
pub mod value;

pub use avp::{Avp, AvpData, AvpFlags, AvpIter, RawAvp, put_avp};
pub use builder::Capabilities;
pub use doic::{OcOlr, OcSupportedFeatures, ReportType};
pub use error::{DecodeError, EncodeError};
pub use grammar::{CheckOptions, check};
pub use header::{CommandFlags, HEADER_LEN, Header, frame_len, frame_len_max};
pub use message::{MAX_DEPTH, Message, validate, walk};
pub use relay::{MessageBuf, Routing};
pub use value::{Address, Time, Value};
