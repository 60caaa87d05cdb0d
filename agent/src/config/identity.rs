//! DiameterIdentity values of the configuration (RFC 6733 §4.3.1: an
//! FQDN): `node.origin_host`, `node.origin_realm`, the peers' hosts and
//! realms, the route realms.

/// Why a value is not a DiameterIdentity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The value is empty.
    #[error("must not be empty")]
    Empty,
    /// Longer than a DNS name may be.
    #[error("`{0}` is longer than 255 characters")]
    TooLong(String),
    /// An empty label, or a character outside letters, digits, `-`, `_`.
    #[error("`{0}` is not a DiameterIdentity (dot-separated labels of letters, digits, `-`)")]
    NotAnIdentity(String),
}

/// A DiameterIdentity (RFC 6733 §4.3.1) is an FQDN: non-empty ASCII labels
/// of letters, digits and hyphens separated by dots.
pub(super) fn check_identity(s: &str) -> Result<(), IdentityError> {
    if s.is_empty() {
        return Err(IdentityError::Empty);
    }
    if s.len() > 255 {
        return Err(IdentityError::TooLong(s.to_owned()));
    }
    for label in s.split('.') {
        if label.is_empty()
            || !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(IdentityError::NotAnIdentity(s.to_owned()));
        }
    }
    Ok(())
}
