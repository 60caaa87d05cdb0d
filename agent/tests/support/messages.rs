//! Test requests as the client `client1.example.org` sends them, reading
//! answers, Result-Codes.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use diameter::codec::answer::put_base;
use diameter::codec::header::{begin, finish};
use diameter::codec::{AvpIter, CommandFlags, HEADER_LEN, Header, RawAvp, Routing};
use diameter::dictionary::{cmd, code};
use tools::loadgen::{Client, TEST_APP, TEST_CMD, put_mandatory_avp};

use super::node::CLIENT;

/// A test request for `realm` with extra AVPs appended; End-to-End is
/// Hop-by-Hop + 1000.
pub fn request(hbh: u32, realm: &str, extra: &[(u32, &[u8])]) -> BytesMut {
    request_e2e(hbh, hbh + 1000, realm, extra)
}

/// [`request`] with End-to-End `e2e`.
pub fn request_e2e(hbh: u32, e2e: u32, realm: &str, extra: &[(u32, &[u8])]) -> BytesMut {
    let mut out = BytesMut::new();
    let s = begin(
        &mut out,
        CommandFlags::REQUEST | CommandFlags::PROXIABLE,
        TEST_CMD,
        TEST_APP,
        hbh,
        e2e,
    );
    put_mandatory_avp(
        &mut out,
        code::SESSION_ID,
        format!("{CLIENT};1;{hbh}").as_bytes(),
    );
    put_mandatory_avp(&mut out, code::ORIGIN_HOST, CLIENT.as_bytes());
    put_mandatory_avp(&mut out, code::ORIGIN_REALM, b"example.org");
    put_mandatory_avp(&mut out, code::DESTINATION_REALM, realm.as_bytes());
    for (c, d) in extra {
        put_mandatory_avp(&mut out, *c, d);
    }
    finish(&mut out, s);
    out
}

/// Reads until an answer (DWR from the agent are answered away).
pub async fn answer(c: &mut Client) -> Bytes {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), c.read_message())
            .await
            .expect("an answer in time")
            .unwrap();
        let h = Header::read(&m);
        if !h.is_request() {
            return m;
        }
    }
}

/// The Result-Code of a message.
pub fn result_code(m: &[u8]) -> Option<u32> {
    Routing::scan(m).unwrap().result_code()
}

/// The top-level AVPs of a message (which must be well formed).
pub fn avps(m: &[u8]) -> impl Iterator<Item = RawAvp<'_>> {
    AvpIter::with_offset(&m[HEADER_LEN..], HEADER_LEN).map(Result::unwrap)
}

/// Reads from the agent for `wait`, answering its DWRs (RFC 6733 §5.5) so
/// that the client's connection stays up however long a test waits;
/// returns the answers read meanwhile.
pub async fn keep_open(c: &mut Client, wait: Duration) -> Vec<Bytes> {
    let until = tokio::time::Instant::now() + wait;
    let mut answers = Vec::new();
    while let Ok(m) = tokio::time::timeout_at(until, c.read_message()).await {
        let m = m.expect("the agent keeps the connection");
        let h = Header::read(&m);
        if !h.is_request() {
            answers.push(m);
            continue;
        }
        assert_eq!(
            h.command_code,
            cmd::DEVICE_WATCHDOG,
            "only watchdog requests from the agent"
        );
        let mut out = BytesMut::new();
        put_base(
            &mut out,
            cmd::DEVICE_WATCHDOG,
            (CLIENT, "example.org"),
            Some(h),
            0,
            None,
        );
        c.write_raw(&out).await.unwrap();
    }
    answers
}

/// [`keep_open`] in slices of 10 ms until `f` holds; fails after `limit`.
/// Returns the answers read meanwhile.
pub async fn keep_open_until(
    c: &mut Client,
    limit: Duration,
    mut f: impl FnMut() -> bool,
) -> Vec<Bytes> {
    let t0 = tokio::time::Instant::now();
    let mut answers = Vec::new();
    while !f() {
        assert!(
            t0.elapsed() < limit,
            "condition not reached within {limit:?}"
        );
        answers.extend(keep_open(c, Duration::from_millis(10)).await);
    }
    answers
}
