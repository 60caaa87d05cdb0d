//! PEM files into rustls configurations (RFC 6733 §13: TLS 1.2 and 1.3, the
//! ring provider). Every error names its file.

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use super::{TlsError, TlsFiles, Version};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn versions(files: &TlsFiles) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, TlsError> {
    let mut v: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
    for ver in &files.versions {
        let p: &'static rustls::SupportedProtocolVersion = match ver {
            Version::Tls12 => &rustls::version::TLS12,
            Version::Tls13 => &rustls::version::TLS13,
        };
        if !v.iter().any(|q| std::ptr::eq(*q, p)) {
            v.push(p);
        }
    }
    if v.is_empty() {
        return Err(TlsError::NoVersion);
    }
    Ok(v)
}

fn file_error(file: &Path, e: &rustls_pki_types::pem::Error) -> TlsError {
    use rustls_pki_types::pem::Error as E;
    let why = match e {
        E::Io(io) => format!("cannot read ({io})"),
        E::NoItemsFound => "no PEM item of the expected kind in it".to_owned(),
        other => format!("not valid PEM ({other})"),
    };
    TlsError::File {
        file: file.to_owned(),
        why,
    }
}

/// The certificates of a PEM file, at least one.
fn certs(file: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(file)
        .map_err(|e| file_error(file, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(file, &e))?;
    if certs.is_empty() {
        return Err(TlsError::File {
            file: file.to_owned(),
            why: "no CERTIFICATE in it".into(),
        });
    }
    Ok(certs)
}

fn key(file: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(file).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::File {
            file: file.to_owned(),
            why: "no PRIVATE KEY in it".into(),
        },
        e => file_error(file, &e),
    })
}

fn roots(file: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for c in certs(file)? {
        store.add(c).map_err(|source| TlsError::Refused {
            what: format!("{}: CA certificate", file.display()),
            source,
        })?;
    }
    Ok(Arc::new(store))
}

/// The certificate and key, both or neither.
fn identity(
    files: &TlsFiles,
) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, TlsError> {
    match (&files.cert, &files.key) {
        (Some(c), Some(k)) => Ok(Some((certs(c)?, key(k)?))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(TlsError::Missing { what: "key" }),
        (None, Some(_)) => Err(TlsError::Missing { what: "cert" }),
    }
}

fn refused(files: &TlsFiles) -> impl Fn(rustls::Error) -> TlsError + '_ {
    move |source| TlsError::Refused {
        what: format!(
            "{} with {}",
            files.cert.as_deref().unwrap_or(Path::new("-")).display(),
            files.key.as_deref().unwrap_or(Path::new("-")).display()
        ),
        source,
    }
}

/// A listener's configuration: its certificate, and when `ca` is set a
/// client certificate required and verified against it.
pub(super) fn server(files: &TlsFiles) -> Result<rustls::ServerConfig, TlsError> {
    let (chain, key) = identity(files)?.ok_or(TlsError::Missing { what: "cert" })?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&versions(files)?)
        .map_err(refused(files))?;
    let builder = match &files.ca {
        Some(ca) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider())
                .build()
                .map_err(|e| TlsError::File {
                    file: ca.clone(),
                    why: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    builder.with_single_cert(chain, key).map_err(refused(files))
}

/// A dialled peer's configuration: its certificate must chain to `ca`;
/// the agent's certificate is presented when `cert` and `key` are set.
pub(super) fn client(files: &TlsFiles) -> Result<rustls::ClientConfig, TlsError> {
    let ca = files.ca.as_ref().ok_or(TlsError::Missing { what: "ca" })?;
    let inner = WebPkiServerVerifier::builder_with_provider(roots(ca)?, provider())
        .build()
        .map_err(|e| TlsError::File {
            file: ca.clone(),
            why: e.to_string(),
        })?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&versions(files)?)
        .map_err(refused(files))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ChainOnly(inner)));
    match identity(files)? {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(refused(files)),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// The webpki verification of the server's chain (trust anchor, validity
/// period, key usage, signatures) without its name: the names are checked
/// against the Origin-Host of the CEA once it arrives (RFC 6733 §13,
/// `super::names`), not against the address dialled.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain first and the name last: a name error
        // means the chain is good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
