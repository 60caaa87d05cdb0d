//! TLS for the tests (RFC 6733 §13): certificates made at test time with
//! rcgen (a CA, leaves signed by it, expired or misnamed ones) written as
//! PEM files in a directory of the test's own, and a raw TLS client that
//! does the capabilities exchange and reports what the agent answered.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use diameter::codec::Capabilities;
use diameter::codec::answer::put_capabilities;
use diameter::codec::header::frame_len;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tools::loadgen::TEST_APP;

/// A directory of PEM files, removed when dropped.
pub struct Pki {
    pub dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

/// A leaf's files.
#[derive(Clone, Debug)]
pub struct Leaf {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Leaf {
    /// `tls = { cert, key, ca }` with `ca`, and `versions` when given.
    pub fn toml(&self, ca: &Path, versions: Option<&str>) -> String {
        let v = versions.map_or(String::new(), |v| format!(", versions = {v}"));
        format!(
            "{{ cert = \"{}\", key = \"{}\", ca = \"{}\"{v} }}",
            self.cert.display(),
            self.key.display(),
            ca.display()
        )
    }
}

/// How a leaf is made.
#[derive(Clone, Copy, Debug, Default)]
pub struct LeafKind {
    /// The name only as the subject CN, no subjectAltName.
    pub cn_only: bool,
    /// Validity ended in 2001.
    pub expired: bool,
}

impl Pki {
    /// A CA named `name` and a directory for its files under the target
    /// directory's temp space.
    pub fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!(
            "doic-tls-{name}-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca = p.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        Pki { dir, ca, ca_key }
    }

    /// The CA certificate's file.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A leaf for `name` signed by the CA, as `file`-cert.pem / -key.pem.
    pub fn leaf(&self, file: &str, name: &str, kind: LeafKind) -> Leaf {
        let san = if kind.cn_only {
            vec![]
        } else {
            vec![name.to_owned()]
        };
        let mut p = CertificateParams::new(san).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, name);
        if kind.expired {
            p.not_before = rcgen::date_time_ymd(2000, 1, 1);
            p.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let leaf = Leaf {
            cert: self.dir.join(format!("{file}-cert.pem")),
            key: self.dir.join(format!("{file}-key.pem")),
        };
        std::fs::write(&leaf.cert, cert.pem()).unwrap();
        std::fs::write(&leaf.key, key.serialize_pem()).unwrap();
        leaf
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

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
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    let version = s.get_ref().1.protocol_version().unwrap();
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
