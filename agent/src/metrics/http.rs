//! The HTTP/1.1 responder of the metrics endpoint: one request per
//! connection, `Connection: close`; `GET /metrics` (Prometheus text),
//! `GET /audit` (the DOIC evidence as JSON), `GET /audit?records` (the
//! audit log's records as written, JSON Lines: what `doic-agent audit --url`
//! reads), `GET /peers` and `GET /health` (JSON, [`super::status`]).
//! Another path is 404, another method 405, each with a one-line body.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::Sources;
use crate::workers::Stop;

/// Serves `/metrics` until shutdown.
pub(crate) async fn serve(sources: Arc<Sources>, stop: Stop, listener: std::net::TcpListener) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    let s = sources.clone();
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(Duration::from_secs(5), respond(&s, stream)).await;
                    });
                }
            }
            () = stop.stopped() => break,
        }
    }
}

async fn respond(sources: &Sources, mut stream: TcpStream) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || buf.len() > 8192 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = buf.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let (status, kind, body) = if path == "/audit" && query == "records" && method == "GET" {
        records(sources).await
    } else {
        page(sources, method, path)
    };
    let allow = if status.starts_with("405") {
        "Allow: GET\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

const TEXT: &str = "text/plain; charset=utf-8";
const PROMETHEUS: &str = "text/plain; version=0.0.4";
const JSON: &str = "application/json";
const JSON_LINES: &str = "application/jsonl";

/// `GET /audit?records`: the files of the audit log, oldest first, read
/// off the worker (a blocking task); 404 with a JSON error without a log.
async fn records(sources: &Sources) -> (&'static str, &'static str, String) {
    let Some(log) = sources.overload.as_ref().and_then(|ov| ov.audit_log()) else {
        return (
            "404 Not Found",
            JSON,
            String::from("{\"error\":\"no audit log: [audit] dir is not set\"}"),
        );
    };
    let log = log.clone();
    match tokio::task::spawn_blocking(move || log.read_back()).await {
        Ok(Ok(body)) => ("200 OK", JSON_LINES, body),
        Ok(Err(e)) => {
            tracing::warn!(cause = %e, "GET /audit?records: cannot read the audit log");
            let body = serde_json::json!({ "error": format!("cannot read the audit log: {e}") });
            ("500 Internal Server Error", JSON, body.to_string())
        }
        Err(_) => (
            "500 Internal Server Error",
            JSON,
            String::from("{\"error\":\"the audit log reader failed\"}"),
        ),
    }
}

/// The status line, content type and body for `method` on `path`.
fn page(sources: &Sources, method: &str, path: &str) -> (&'static str, &'static str, String) {
    const PATHS: [&str; 4] = ["/metrics", "/audit", "/peers", "/health"];
    if !PATHS.contains(&path) {
        let body = format!("no page {path}: try {}\n", PATHS.join(", "));
        return ("404 Not Found", TEXT, body);
    }
    if method != "GET" {
        return (
            "405 Method Not Allowed",
            TEXT,
            format!("{path} takes GET only\n"),
        );
    }
    match path {
        "/metrics" => ("200 OK", PROMETHEUS, super::render(sources)),
        "/audit" => match &sources.overload {
            Some(ov) => ("200 OK", JSON, crate::overload::audit_json(ov).to_string()),
            None => (
                "404 Not Found",
                JSON,
                String::from("{\"error\":\"overload control is off\"}"),
            ),
        },
        "/peers" => ("200 OK", JSON, super::status::peers_json(sources)),
        _ => match super::status::health(sources) {
            (true, body) => ("200 OK", JSON, body),
            (false, body) => ("503 Service Unavailable", JSON, body),
        },
    }
}
