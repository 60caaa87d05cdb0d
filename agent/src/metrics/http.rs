//! The HTTP/1.1 responder of the metrics endpoint: one request per
//! connection, `Connection: close`; `GET /metrics` (Prometheus text) and
//! `GET /audit` (the DOIC evidence as JSON).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::Sources;
use crate::runtime::Stop;

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
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    const TEXT: &str = "text/plain; version=0.0.4";
    const JSON: &str = "application/json";
    let (status, kind, body) = if method != "GET" {
        ("405 Method Not Allowed", TEXT, String::from("only GET\n"))
    } else if path == "/metrics" {
        ("200 OK", TEXT, super::render(sources))
    } else if path == "/audit" {
        match &sources.overload {
            Some(ov) => ("200 OK", JSON, crate::overload::audit_json(ov).to_string()),
            None => (
                "404 Not Found",
                JSON,
                String::from("{\"error\":\"overload control is off\"}"),
            ),
        }
    } else {
        ("404 Not Found", TEXT, String::from("try /metrics\n"))
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
