//! `doic-agent audit --url`: the records of a running agent's audit log,
//! fetched with one HTTP/1.1 GET of `/audit?records` on its metrics
//! listener (`Connection: close`, the body up to the end of the stream), so
//! that the questions are asked of the same records as with `--dir`.

use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::time::Duration;

/// How long connecting, and then each read, may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Why the records could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Not `http://HOST:PORT[/audit]`.
    #[error("`{0}` is not an http://HOST:PORT/audit address of an agent's metrics listener")]
    Url(String),
    /// No connection or no answer.
    #[error("cannot reach the agent at {url}: {cause}")]
    Unreachable {
        /// The address.
        url: String,
        /// Why.
        cause: std::io::Error,
    },
    /// The agent answered, without an audit log.
    #[error("the agent at {url} has no audit log ({status}: {body})")]
    NoAudit {
        /// The address.
        url: String,
        /// Its status line.
        status: String,
        /// What it said.
        body: String,
    },
}

/// `(host:port, path)` of `http://HOST:PORT[/PATH]`; the path is `/audit`
/// when left out.
fn split(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest
        .find('/')
        .map_or((rest, "/audit"), |i| rest.split_at(i));
    let path = path.split('?').next().unwrap_or(path);
    (!authority.is_empty()).then_some((authority, if path == "/" { "/audit" } else { path }))
}

/// The audit log records of the agent at `url`, as JSON Lines.
///
/// # Errors
/// The address is wrong, the agent cannot be reached, or it has no audit
/// log.
pub fn records(url: &str) -> Result<String, FetchError> {
    let (authority, path) = split(url).ok_or_else(|| FetchError::Url(url.to_owned()))?;
    let unreachable = |cause| FetchError::Unreachable {
        url: url.to_owned(),
        cause,
    };
    let addr = authority
        .to_socket_addrs()
        .map_err(unreachable)?
        .next()
        .ok_or_else(|| unreachable(std::io::ErrorKind::NotFound.into()))?;
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(unreachable)?;
    s.set_read_timeout(Some(TIMEOUT)).map_err(unreachable)?;
    write!(
        s,
        "GET {path}?records HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .map_err(unreachable)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(unreachable)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) == Some("200") {
        return Ok(body.to_owned());
    }
    let said = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.trim().to_owned());
    Err(FetchError::NoAudit {
        url: url.to_owned(),
        status: status.split_once(' ').map_or(status, |(_, s)| s).to_owned(),
        body: said,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_name_the_metrics_listener_and_default_to_audit() {
        assert_eq!(
            split("http://127.0.0.1:9100/audit"),
            Some(("127.0.0.1:9100", "/audit"))
        );
        assert_eq!(
            split("http://127.0.0.1:9100"),
            Some(("127.0.0.1:9100", "/audit"))
        );
        assert_eq!(
            split("http://h:1/audit?x"),
            Some(("h:1", "/audit")),
            "the query is the client's own"
        );
        assert_eq!(split("127.0.0.1:9100"), None);
        assert_eq!(split("http:///audit"), None);
    }

    #[test]
    fn an_agent_that_is_not_there_is_one_line_naming_it() {
        // A port just freed: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/audit");
        let e = records(&url).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cannot reach the agent at {url}: ")),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }
}
