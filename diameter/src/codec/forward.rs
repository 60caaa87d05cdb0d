//! The relayed copy of a request (RFC 6733 §6.1.9): the received bytes,
//! without at most one top-level AVP the relay drops, with the relay's
//! Route-Record appended (§6.7.1), a new Hop-by-Hop Identifier and the T
//! flag when the request goes out again after a failover (§5.5.4). Written
//! in one pass into the connection's output buffer; every other byte of the
//! message is copied untouched.

use bytes::BytesMut;

use super::avp::{AvpFlags, put_avp};
use super::error::EncodeError;
use super::header::{finish, set_hop_by_hop, set_retransmit};
use crate::dictionary::code;

/// Appends `msg` to `out` with a Route-Record AVP of `host` added at its
/// end (RFC 6733 §6.1.9) and the Hop-by-Hop Identifier replaced; sets the
/// T flag when `retransmit`.
pub fn put_relayed_request(out: &mut BytesMut, msg: &[u8], host: &str, hbh: u32, retransmit: bool) {
    let start = out.len();
    out.extend_from_slice(msg);
    end_relayed(out, start, host, hbh, retransmit);
}

/// [`put_relayed_request`] for `msg` without its bytes `cut.0..cut.1` (a
/// whole top-level AVP), in one pass.
#[inline(never)]
pub fn put_relayed_request_cut(
    out: &mut BytesMut,
    msg: &[u8],
    cut: (usize, usize),
    host: &str,
    hbh: u32,
    retransmit: bool,
) {
    let start = out.len();
    out.extend_from_slice(msg.get(..cut.0).unwrap_or(msg));
    out.extend_from_slice(msg.get(cut.1..).unwrap_or_default());
    end_relayed(out, start, host, hbh, retransmit);
}

/// The Route-Record, the Message Length and the header edits of a relayed
/// copy begun at `start`.
#[inline]
fn end_relayed(out: &mut BytesMut, start: usize, host: &str, hbh: u32, retransmit: bool) {
    let m = AvpFlags(AvpFlags::MANDATORY);
    if let Err(e) = put_avp(out, code::ROUTE_RECORD, m, None, host.as_bytes()) {
        route_record_not_written(&e);
    }
    finish(out, start);
    set_hop_by_hop(&mut out[start..], hbh);
    if retransmit {
        set_retransmit(&mut out[start..], true);
    }
}

/// Logs a Route-Record [`put_avp`] could not write (a host name longer
/// than 2^24 bytes): off the per-request path.
#[cold]
#[inline(never)]
fn route_record_not_written(e: &EncodeError) {
    tracing::error!(cause = %e, "cannot encode the route-record");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::header::{CommandFlags, HEADER_LEN, Header, begin, frame_len};
    use crate::codec::relay::Routing;

    fn request() -> BytesMut {
        let mut out = BytesMut::new();
        let f = CommandFlags::REQUEST | CommandFlags::PROXIABLE;
        let s = begin(&mut out, f, 16_777_214, 16_777_215, 7, 9);
        let m = AvpFlags(AvpFlags::MANDATORY);
        put_avp(&mut out, code::SESSION_ID, m, None, b"s;1").unwrap();
        put_avp(&mut out, code::DESTINATION_REALM, m, None, b"x.net").unwrap();
        finish(&mut out, s);
        out
    }

    #[test]
    fn relayed_request_gets_route_record_new_hbh_and_t_flag() {
        let m = request();
        let mut out = BytesMut::new();
        put_relayed_request(&mut out, &m, "agent.example.com", 0xabcd, true);
        assert_eq!(frame_len(&out).unwrap(), Some(out.len()));
        let h = Header::read(&out);
        assert_eq!((h.hop_by_hop, h.end_to_end), (0xabcd, 9));
        assert!(h.flags.is_retransmit());
        let r = Routing::scan(&out).unwrap();
        assert_eq!(
            r.route_records().collect::<Vec<_>>(),
            vec![&b"agent.example.com"[..]]
        );
        // Everything before the appended AVP is byte-identical.
        assert_eq!(&out[HEADER_LEN..m.len()], &m[HEADER_LEN..]);
    }

    #[test]
    fn a_cut_request_loses_exactly_the_cut_avp() {
        let m = request();
        let mut out = BytesMut::from(&b"before"[..]);
        // the Session-Id AVP: 20..32
        put_relayed_request_cut(&mut out, &m, (20, 32), "a.example", 5, false);
        let relayed = &out[6..];
        assert_eq!(frame_len(relayed).unwrap(), Some(relayed.len()));
        let r = Routing::scan(relayed).unwrap();
        assert_eq!(r.session_id(), None);
        assert_eq!(r.destination_realm(), Some(&b"x.net"[..]));
        assert_eq!(r.route_record_count, 1);
        assert!(!r.header.flags.is_retransmit());
        assert_eq!(r.header.hop_by_hop, 5);
    }
}
