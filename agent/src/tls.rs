//! TLS/TCP (RFC 6733 §13, §13.1): the material of each TLS listener and
//! `[[peer]]`, loaded from PEM files into rustls configurations (TLS 1.2 and
//! 1.3, the ring provider), and the check of the peer's certificate names
//! against the Origin-Host of its CER or CEA.
//!
//! §13.1: "the TLS handshake will begin when both ends are in the open
//! state, after completion of the TCP connect" — the agent runs the
//! handshake at once on connect (the TLS/TCP of §2.1, port 5658), before
//! any Diameter message; `Inband-Security-Id` (the older in-band start of
//! §6.10) is never offered.
//!
//! | module | what it does |
//! | --- | --- |
//! | `load` | PEM files into [`rustls::ServerConfig`] / [`rustls::ClientConfig`], errors naming the file |
//! | `names` | the certificate's DNS names (SAN dNSName, else the subject CN) and their match against an Origin-Host |
//!
//! **Reload.** A [`ServerTls`] or [`ClientTls`] ([`Swap`]) holds its current
//! configuration behind a lock taken once per connection (never per
//! message). [`Swap::reload`] reads the files
//! again and swap the configuration in: connections opened after the swap
//! use the new certificates, open connections keep theirs. A file that does
//! not load leaves the old material in place. [`Material::reload`] does it
//! for every listener and peer of the agent (what a SIGHUP reload calls;
//! `Agent::reload_tls`).

use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};

use serde::Deserialize;

mod load;
mod names;

pub use names::CertNames;

/// `tls = { cert, key, ca, versions }` of a listener or a `[[peer]]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The agent's certificate chain (PEM, leaf first). Required on a
    /// listener; on a `[[peer]]` the client certificate, with `key`.
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// The private key of `cert` (PEM: PKCS#8, PKCS#1 or SEC1).
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// Trusted CA certificates (PEM). On a listener: clients must present a
    /// certificate signed by one (mutual authentication), and its names are
    /// checked against the CER's Origin-Host. On a `[[peer]]` (required):
    /// the server's certificate must chain to one, and its names are
    /// checked against the CEA's Origin-Host.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// The TLS versions offered and accepted: `"1.2"`, `"1.3"`; default
    /// both.
    #[serde(default = "default_versions")]
    pub versions: Vec<Version>,
}

/// A TLS protocol version.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum Version {
    /// TLS 1.2 (RFC 5246).
    #[serde(rename = "1.2")]
    Tls12,
    /// TLS 1.3 (RFC 8446).
    #[serde(rename = "1.3")]
    Tls13,
}

fn default_versions() -> Vec<Version> {
    vec![Version::Tls12, Version::Tls13]
}

/// TLS material that cannot be used; the message names the key's file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A required file is not configured.
    #[error("{what} is required")]
    Missing {
        /// Which (`cert`, `key`, `ca`).
        what: &'static str,
    },
    /// A file cannot be read or parsed as PEM.
    #[error("{file}: {why}")]
    File {
        /// The file.
        file: PathBuf,
        /// Why (cannot read, no certificate in it, not a private key).
        why: String,
    },
    /// rustls refuses the material (key not matching the certificate, a CA
    /// that is not a certificate, no version).
    #[error("{what}: {source}")]
    Refused {
        /// What was refused, naming the files.
        what: String,
        /// rustls's reason.
        #[source]
        source: rustls::Error,
    },
    /// `versions` is empty.
    #[error("versions: must name at least one of \"1.2\", \"1.3\"")]
    NoVersion,
}

/// TLS material loaded from its files, swappable: the configuration in use
/// and the files to read it from again ([`Swap::reload`]).
#[derive(Debug)]
pub struct Swap<C> {
    files: TlsFiles,
    load: fn(&TlsFiles) -> Result<C, TlsError>,
    current: RwLock<Arc<C>>,
}

/// The TLS side of a listener: its current [`rustls::ServerConfig`].
pub type ServerTls = Swap<rustls::ServerConfig>;

/// The TLS side of a `[[peer]]` the agent dials: its current
/// [`rustls::ClientConfig`].
pub type ClientTls = Swap<rustls::ClientConfig>;

impl<C> Swap<C> {
    fn new(files: &TlsFiles, load: fn(&TlsFiles) -> Result<C, TlsError>) -> Result<Self, TlsError> {
        Ok(Self {
            current: RwLock::new(Arc::new(load(files)?)),
            files: files.clone(),
            load,
        })
    }

    /// Reads the files again and uses them for the connections made from
    /// now on; on an error the material in use stays.
    ///
    /// # Errors
    /// [`TlsError`] naming the file.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = Arc::new((self.load)(&self.files)?);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = fresh;
        Ok(())
    }

    /// The configuration for a connection made now.
    #[must_use]
    pub fn config(&self) -> Arc<C> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl ServerTls {
    /// Loads a listener's material.
    ///
    /// # Errors
    /// [`TlsError`] naming the file.
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        Swap::new(files, load::server)
    }
}

impl ClientTls {
    /// Loads a dialled peer's material.
    ///
    /// # Errors
    /// [`TlsError`] naming the file.
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        Swap::new(files, load::client)
    }
}

/// A [`Material`] part that did not reload.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {source}")]
pub struct ReloadError {
    /// The configuration key (`node.listen[1].tls`, `peer[0].tls`).
    pub key: String,
    /// Why.
    #[source]
    pub source: TlsError,
}

/// The TLS material of every TLS listener and `[[peer]]` of an agent, by
/// configuration key.
#[derive(Debug, Default)]
pub struct Material {
    /// TLS listeners: key and material.
    pub servers: Vec<(String, Arc<ServerTls>)>,
    /// TLS peers: key and material.
    pub clients: Vec<(String, Arc<ClientTls>)>,
}

impl Material {
    /// The listener material of `key` (`node.listen[i].tls`).
    #[must_use]
    pub fn server(&self, key: &str) -> Option<Arc<ServerTls>> {
        self.servers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, s)| s.clone())
    }

    /// The peer material of `key` (`peer[i].tls`).
    #[must_use]
    pub fn client(&self, key: &str) -> Option<Arc<ClientTls>> {
        self.clients
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, c)| c.clone())
    }

    /// Reloads every listener's and peer's files (what SIGHUP does). Each
    /// part that loads is swapped in; those that do not keep their old
    /// material.
    ///
    /// # Errors
    /// The parts that did not reload.
    pub fn reload(&self) -> Result<(), Vec<ReloadError>> {
        let servers = self.servers.iter().map(|(k, s)| (k, s.reload()));
        let clients = self.clients.iter().map(|(k, c)| (k, c.reload()));
        let failed: Vec<ReloadError> = servers
            .chain(clients)
            .filter_map(|(key, r)| {
                r.err().map(|source| ReloadError {
                    key: key.clone(),
                    source,
                })
            })
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed)
        }
    }
}
