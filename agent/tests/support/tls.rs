//! A raw TLS client for the tests (RFC 6733 §13): it does the
//! capabilities exchange and reports what the agent answered (the
//! certificates: [`super::pki`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use diameter::codec::Capabilities;
use diameter::codec::answer::put_capabilities;
use diameter::codec::header::frame_len;

use super::pki::Leaf;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tools::loadgen::TEST_APP;

/// A TLS client's material: the CA it trusts, its own leaf, the versions.
pub struct ClientSide<'a> {
    pub ca: &'a Path,
    pub leaf: Option<&'a Leaf>,
    pub versions: &'a [&'static rustls::SupportedProtocolVersion],
    /// The name the agent's certificate must have (SNI).
    pub server: &'a str,
}

/// What the agent did with a TLS client's CER.
#[derive(Debug)]
pub struct Exchange {
    /// The TLS version negotiated.
    pub version: rustls::ProtocolVersion,
    /// The CEA's Result-Code.
    pub cea_result: u32,
    /// Whether the agent closed the connection after the CEA.
    pub closed_after: bool,
}

/// Connects to `addr` over TLS as `side`, sends a CER from `origin_host`
/// and reads the CEA; with `wait_close`, also whether the agent then closes
/// (within 3 s). Err: the handshake or the exchange failed.
pub async fn tls_exchange(
    addr: std::net::SocketAddr,
    side: &ClientSide<'_>,
    origin_host: &str,
    wait_close: bool,
) -> std::io::Result<Exchange> {
    let mut s = tls_connect(addr, side).await?;
    let version = s.get_ref().1.protocol_version().unwrap();
    exchange_on(&mut s, version, origin_host, wait_close).await
}

/// The TLS handshake with `addr` as `side`.
pub async fn tls_connect(
    addr: std::net::SocketAddr,
    side: &ClientSide<'_>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(side.ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(side.versions)
        .unwrap()
        .with_root_certificates(roots);
    let config = match side.leaf {
        Some(l) => {
            let chain = CertificateDer::pem_file_iter(&l.cert)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(&l.key).unwrap();
            b.with_client_auth_cert(chain, key).unwrap()
        }
        None => b.with_no_client_auth(),
    };
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(side.server.to_owned()).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

/// The capabilities exchange of [`tls_exchange`] on a connected stream.
pub async fn exchange_on(
    s: &mut tokio_rustls::client::TlsStream<TcpStream>,
    version: rustls::ProtocolVersion,
    origin_host: &str,
    wait_close: bool,
) -> std::io::Result<Exchange> {
    let caps = Capabilities {
        origin_host: origin_host.into(),
        origin_realm: "example.org".into(),
        host_ip_addresses: vec![[127, 0, 0, 1].into()],
        product_name: "tls-test".into(),
        auth_application_ids: vec![TEST_APP],
        ..Capabilities::default()
    };
    let mut out = BytesMut::new();
    put_capabilities(&mut out, &caps, None, 1);
    s.write_all(&out).await?;
    let mut inbuf = BytesMut::new();
    let cea = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(n) = frame_len(&inbuf).map_err(std::io::Error::other)? {
                return Ok::<_, std::io::Error>(inbuf.split_to(n).freeze());
            }
            if s.read_buf(&mut inbuf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    })
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no CEA"))??;
    let (_, rc) = Capabilities::read(&cea).map_err(std::io::Error::other)?;
    let mut closed_after = false;
    if wait_close {
        let mut rest = Vec::new();
        closed_after = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut rest))
            .await
            .is_ok();
    }
    Ok(Exchange {
        version,
        cea_result: rc.unwrap_or(0),
        closed_after,
    })
}
