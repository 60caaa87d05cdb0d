//! Certificates for the TLS tests (RFC 6733 §13), made at test time with
//! rcgen: a CA, leaves signed by it (expired, misnamed or named only by
//! their subject CN when asked), written as PEM files in a directory of the
//! test's own. Also included by the interop tests (freeDiameter's
//! `TLS_Cred` / `TLS_CA`), so it uses rcgen only.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

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
