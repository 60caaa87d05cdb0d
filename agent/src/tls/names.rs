//! The names a peer's certificate gives it (RFC 6733 §13: the peer's
//! identity in the certificate is checked against the Origin-Host of its
//! CER/CEA): the DNS names of its subjectAltName extension (RFC 5280
//! §4.2.1.6), or, when it has none, the subject's commonName (RFC 6125
//! §6.4.4). Read from the DER of a certificate that rustls has already
//! verified; an unreadable one gives no names (and so matches nothing).

/// The DNS names of a certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertNames {
    /// subjectAltName dNSName entries, else the subject CN.
    pub names: Vec<String>,
}

impl CertNames {
    /// The names of the DER certificate `der`.
    #[must_use]
    pub fn of(der: &[u8]) -> Self {
        let (san, cn) = read(der).unwrap_or_default();
        Self {
            names: if san.is_empty() { cn } else { san },
        }
    }

    /// Whether `host` (an Origin-Host) is one of the names, ignoring ASCII
    /// case; a name `*.suffix` matches one label in front of `suffix`
    /// (RFC 6125 §6.4.3).
    #[must_use]
    pub fn matches(&self, host: &str) -> bool {
        self.names.iter().any(|n| match n.strip_prefix("*.") {
            Some(suffix) => host.split_once('.').is_some_and(|(label, rest)| {
                !label.is_empty() && rest.eq_ignore_ascii_case(suffix)
            }),
            None => n.eq_ignore_ascii_case(host),
        })
    }
}

impl std::fmt::Display for CertNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.names.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&self.names.join(","))
    }
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
/// `[3] EXPLICIT Extensions` of TBSCertificate.
const EXTENSIONS: u8 = 0xa3;
/// `dNSName [2] IA5String` of GeneralName.
const DNS_NAME: u8 = 0x82;
/// id-at-commonName, 2.5.4.3.
const CN: &[u8] = &[0x55, 0x04, 0x03];
/// id-ce-subjectAltName, 2.5.29.17.
const SAN: &[u8] = &[0x55, 0x1d, 0x11];

/// One DER TLV off the front of `b`: tag, contents, rest.
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, b) = b.split_first()?;
    let (len, b) = if first < 0x80 {
        (usize::from(first), b)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n]
            .iter()
            .fold(0usize, |a, &x| (a << 8) | usize::from(x));
        (len, &b[n..])
    };
    (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
}

/// The contents of a TLV with `tag` off the front of `b`, and the rest.
fn expect(b: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    tlv(b).and_then(|(t, v, rest)| (t == tag).then_some((v, rest)))
}

/// (SAN DNS names, subject CNs).
fn read(der: &[u8]) -> Option<(Vec<String>, Vec<String>)> {
    let (cert, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(cert, SEQUENCE)?;
    let mut rest = tbs;
    // [0] version, if present.
    if rest.first() == Some(&0xa0) {
        rest = tlv(rest)?.2;
    }
    // serialNumber, signature, issuer, validity.
    for _ in 0..4 {
        rest = tlv(rest)?.2;
    }
    let (subject, mut rest) = expect(rest, SEQUENCE)?;
    let cn = common_names(subject);
    rest = tlv(rest)?.2; // subjectPublicKeyInfo
    let mut san = Vec::new();
    while let Some((tag, v, next)) = tlv(rest) {
        if tag == EXTENSIONS {
            san = dns_names(v).unwrap_or_default();
        }
        rest = next;
    }
    Some((san, cn))
}

fn common_names(mut rdns: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    while let Some((SET, mut set, next)) = tlv(rdns) {
        while let Some((attr, after)) = expect(set, SEQUENCE) {
            if let Some((oid, value)) = expect(attr, OID)
                && oid == CN
                && let Some((_, v, _)) = tlv(value)
                && let Ok(s) = std::str::from_utf8(v)
            {
                out.push(s.to_owned());
            }
            set = after;
        }
        rdns = next;
    }
    out
}

fn dns_names(explicit: &[u8]) -> Option<Vec<String>> {
    let (mut exts, _) = expect(explicit, SEQUENCE)?;
    while let Some((ext, next)) = expect(exts, SEQUENCE) {
        let (oid, mut rest) = expect(ext, OID)?;
        if oid == SAN {
            if rest.first() == Some(&BOOLEAN) {
                rest = tlv(rest)?.2;
            }
            let (value, _) = expect(rest, OCTET_STRING)?;
            let (mut names, _) = expect(value, SEQUENCE)?;
            let mut out = Vec::new();
            while let Some((tag, v, after)) = tlv(names) {
                if tag == DNS_NAME
                    && let Ok(s) = std::str::from_utf8(v)
                {
                    out.push(s.to_owned());
                }
                names = after;
            }
            return Some(out);
        }
        exts = next;
    }
    Some(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(san: &[&str], cn: Option<&str>) -> Vec<u8> {
        let mut p =
            rcgen::CertificateParams::new(san.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        }
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "Example");
        let key = rcgen::KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn san_dns_names_are_the_names_and_the_cn_is_ignored_beside_them() {
        let n = CertNames::of(&cert(
            &["a.example.net", "b.example.net"],
            Some("c.example.net"),
        ));
        assert_eq!(n.names, ["a.example.net", "b.example.net"]);
        assert!(n.matches("B.Example.Net"));
        assert!(!n.matches("c.example.net"));
    }

    #[test]
    fn without_a_san_the_common_name_is_the_name() {
        let n = CertNames::of(&cert(&[], Some("peer.example.org")));
        assert_eq!(n.names, ["peer.example.org"]);
        assert!(n.matches("peer.example.org"));
        assert!(!n.matches("other.example.org"));
    }

    #[test]
    fn a_wildcard_covers_one_label() {
        let n = CertNames::of(&cert(&["*.example.net"], None));
        assert!(n.matches("s1.example.net"));
        assert!(!n.matches("a.s1.example.net"));
        assert!(!n.matches("example.net"));
    }

    #[test]
    fn bytes_that_are_no_certificate_give_no_names() {
        let good = cert(&["a.example.net"], None);
        for cut in [0, 1, 5, good.len() / 2] {
            assert!(CertNames::of(&good[..cut]).names.is_empty());
        }
        assert!(!CertNames::of(b"\x30\x84\xff\xff\xff\xff").matches(""));
    }
}
