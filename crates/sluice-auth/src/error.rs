//! The crate's errors, one small enum per kind of failure, so that the broker assigns Kafka
//! error codes in one mapping (STYLE.md §5):
//!
//! | error             | Kafka error code                                          |
//! |-------------------|-----------------------------------------------------------|
//! | `AuthError`       | SASL_AUTHENTICATION_FAILED (58)                           |
//! | `CredentialError` | UNACCEPTABLE_CREDENTIAL (93), per AlterUserScramCredentials result |
//! | `CertError`       | none: the TLS handshake or the broker's start is refused  |
//! | `RuleError`       | none: a configuration error at start                      |
//! | `AclError`        | INVALID_REQUEST (42), per CreateAcls/DeleteAcls result    |
//!
//! No message carries a password, a salted password or a SCRAM proof: they end up in logs
//! and in the `error_message` Kafka sends back to the client.

use crate::mechanism::ScramMechanism;

/// A failed SASL exchange.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The peer's message does not follow the grammar of its mechanism, or came out of
    /// sequence (a step after the exchange finished or failed).
    #[error("invalid SASL message: {0}")]
    InvalidMessage(String),
    /// Unknown user or wrong password. One variant for both, and a fixed text, so that the
    /// answer never tells which users exist.
    #[error("authentication failed: invalid credentials")]
    BadCredentials,
    /// A well-formed request for something Sluice does not do: channel binding, delegation
    /// tokens, acting for another user (an authorization id that differs from the user).
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// Why a SCRAM credential is refused (KIP-554's checks on AlterUserScramCredentials).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// Iterations outside the range Kafka accepts.
    #[error("{iterations} iterations is outside the accepted range [{min}, {max}]")]
    IterationsOutOfRange { iterations: i64, min: u32, max: u32 },
    /// A SCRAM salt must not be empty.
    #[error("the salt is empty")]
    EmptySalt,
    /// The salted password must be one output of the mechanism's hash.
    #[error("the salted password is {actual_bytes} bytes, {mechanism} needs {expected_bytes}")]
    SaltedPasswordLength {
        mechanism: ScramMechanism,
        expected_bytes: usize,
        actual_bytes: usize,
    },
}

/// A peer or broker certificate that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// Not a DER-encoded X.509 certificate.
    #[error("not a DER X.509 certificate: {0}")]
    Malformed(String),
    /// A certificate followed by more bytes: refused rather than guessing what they are.
    #[error("{0} unexpected bytes after the certificate")]
    TrailingBytes(usize),
}

/// A bad `ssl.principal.mapping.rules` value. Each variant names the offending rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The text is neither `DEFAULT` nor `RULE:pattern/replacement/[L|U]`.
    #[error("invalid principal mapping rule `{rule}`: {reason}")]
    Syntax { rule: String, reason: String },
    /// The pattern is not a regular expression this crate can run (Java-only syntax such as
    /// look-around or back-references is not supported).
    #[error("invalid pattern in principal mapping rule `{rule}`: {reason}")]
    Pattern { rule: String, reason: String },
    /// The replacement refers to a group the pattern does not have, or has a dangling `$`.
    #[error("invalid replacement in principal mapping rule `{rule}`: {reason}")]
    Replacement { rule: String, reason: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_credentials_does_not_say_which() {
        // The same text for an unknown user and a wrong password.
        assert_eq!(
            AuthError::BadCredentials.to_string(),
            "authentication failed: invalid credentials"
        );
    }

    #[test]
    fn credential_errors_name_the_limits() {
        let e = CredentialError::IterationsOutOfRange {
            iterations: 100,
            min: 4096,
            max: 16384,
        };
        assert_eq!(
            e.to_string(),
            "100 iterations is outside the accepted range [4096, 16384]"
        );
        let e = CredentialError::SaltedPasswordLength {
            mechanism: ScramMechanism::Sha512,
            expected_bytes: 64,
            actual_bytes: 3,
        };
        assert_eq!(
            e.to_string(),
            "the salted password is 3 bytes, SCRAM-SHA-512 needs 64"
        );
    }

    #[test]
    fn rule_errors_name_the_rule() {
        let e = RuleError::Syntax {
            rule: "DEFAUL".into(),
            reason: "expected DEFAULT".into(),
        };
        assert!(e.to_string().contains("`DEFAUL`"));
    }
}

/// An ACL or ACL filter Kafka would refuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    #[error("invalid ACL: {0}")]
    Invalid(String),
}
