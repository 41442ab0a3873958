//! A stored SCRAM credential (RFC 5802 §3): the salt, the iteration count and the two keys
//! derived from the salted password. The password itself is never kept; Kafka's
//! AlterUserScramCredentials even sends only the salted password (KIP-554).
//!
//! ```text
//! SaltedPassword = Hi(password, salt, iterations)
//! ClientKey      = HMAC(SaltedPassword, "Client Key")
//! StoredKey      = H(ClientKey)                      ─┐ stored
//! ServerKey      = HMAC(SaltedPassword, "Server Key") ─┘
//! ```

use std::fmt;

use subtle::ConstantTimeEq;

use crate::mechanism::ScramMechanism;
use crate::primitives::{hash, hi, hmac};

pub use crate::error::CredentialError;

/// One user's credential for one SCRAM mechanism. Serializes to JSON with the mechanism as
/// its SASL name and the byte fields as standard base64, so that a credential file reads.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScramCredential {
    pub mechanism: ScramMechanism,
    #[serde(with = "base64_bytes")]
    pub salt: Vec<u8>,
    #[serde(with = "base64_bytes")]
    pub stored_key: Vec<u8>,
    #[serde(with = "base64_bytes")]
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl ScramCredential {
    /// Derives the keys from a salted password, as the broker does for an
    /// AlterUserScramCredentials upsertion. Call [`validate`] first. The salt is taken
    /// as anything that is bytes (`Vec<u8>`, `&[u8]`, `Bytes`).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: impl AsRef<[u8]>,
        salted_password: &[u8],
        iterations: u32,
    ) -> Self {
        let client_key = hmac(mechanism, salted_password, b"Client Key");
        ScramCredential {
            mechanism,
            salt: salt.as_ref().to_vec(),
            stored_key: hash(mechanism, &client_key),
            server_key: hmac(mechanism, salted_password, b"Server Key"),
            iterations,
        }
    }

    /// Derives the credential from a password (for tests, the CLI and static configs). The
    /// caller supplies the salt: this crate draws no randomness.
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        salt: impl AsRef<[u8]>,
        iterations: u32,
    ) -> Self {
        let salted = salted_password(mechanism, password, salt.as_ref(), iterations);
        ScramCredential::from_salted_password(mechanism, salt, &salted, iterations)
    }

    /// Whether `password` is the one this credential was made from, for SASL PLAIN logins
    /// checked against stored SCRAM credentials. The key comparison takes the same time
    /// wherever the keys differ.
    ///
    /// A credential with more iterations than Kafka accepts is refused without computing:
    /// it cannot come from AlterUserScramCredentials, and each check costs that many HMACs.
    pub fn verifies_password(&self, password: &str) -> bool {
        if self.iterations > self.mechanism.max_iterations() {
            return false;
        }
        let candidate =
            ScramCredential::from_password(self.mechanism, password, &self.salt, self.iterations);
        let stored = candidate.stored_key.ct_eq(&self.stored_key);
        let server = candidate.server_key.ct_eq(&self.server_key);
        (stored & server).into()
    }
}

// Hand-written so that logs show which credential without the keys: StoredKey and ServerKey
// are not the password, but StoredKey with one observed exchange lets an attacker log in.
impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("salt_bytes", &self.salt.len())
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// SaltedPassword = Hi(password, salt, iterations), RFC 5802 §3. Kafka hashes the UTF-8
/// bytes of the password as given (no SASLprep), and so does this.
/// A user's credentials after AlterUserScramCredentials: `deletions` removed, `upserts`
/// replacing the credential of their mechanism; one per mechanism, in Kafka's type order.
pub fn apply_changes(
    mut credentials: Vec<ScramCredential>,
    upserts: &[ScramCredential],
    deletions: &[ScramMechanism],
) -> Vec<ScramCredential> {
    credentials.retain(|c| {
        !deletions.contains(&c.mechanism) && !upserts.iter().any(|u| u.mechanism == c.mechanism)
    });
    credentials.extend(upserts.iter().cloned());
    credentials.sort_by_key(|c| c.mechanism.kafka_type());
    credentials
}

pub fn salted_password(
    mechanism: ScramMechanism,
    password: &str,
    salt: &[u8],
    iterations: u32,
) -> Vec<u8> {
    hi(mechanism, password.as_bytes(), salt, iterations)
}

/// The checks Kafka makes on an AlterUserScramCredentials upsertion before storing it
/// (answered with UNACCEPTABLE_CREDENTIAL). `iterations` takes the request's `i32` as well
/// as a `u32`, so that a negative count is refused rather than wrapped.
pub fn validate(
    mechanism: ScramMechanism,
    iterations: impl Into<i64>,
    salt: &[u8],
    salted_password: &[u8],
) -> Result<(), CredentialError> {
    let iterations = iterations.into();
    let (min, max) = (mechanism.min_iterations(), mechanism.max_iterations());
    if iterations < i64::from(min) || iterations > i64::from(max) {
        return Err(CredentialError::IterationsOutOfRange {
            iterations,
            min,
            max,
        });
    }
    if salt.is_empty() {
        return Err(CredentialError::EmptySalt);
    }
    if salted_password.len() != mechanism.hash_len_bytes() {
        return Err(CredentialError::SaltedPasswordLength {
            mechanism,
            expected_bytes: mechanism.hash_len_bytes(),
            actual_bytes: salted_password.len(),
        });
    }
    Ok(())
}

/// Serde adapter: `Vec<u8>` as a standard, padded base64 string.
mod base64_bytes {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;

    pub(super) fn serialize<S: serde::Serializer>(
        bytes: &[u8],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(deserializer)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;

    use super::*;

    #[test]
    fn changes_replace_per_mechanism_and_keep_one_of_each() {
        let cred = |m, pw: &str| ScramCredential::from_password(m, pw, b"salt", 4096);
        let before = vec![
            cred(ScramMechanism::Sha512, "old"),
            cred(ScramMechanism::Sha256, "old"),
        ];
        let after = apply_changes(before.clone(), &[cred(ScramMechanism::Sha512, "new")], &[]);
        assert_eq!(
            after,
            [
                cred(ScramMechanism::Sha256, "old"),
                cred(ScramMechanism::Sha512, "new")
            ]
        );
        let after = apply_changes(after, &[], &[ScramMechanism::Sha256]);
        assert_eq!(after, [cred(ScramMechanism::Sha512, "new")]);
        assert!(apply_changes(after, &[], &[ScramMechanism::Sha512]).is_empty());
    }

    /// RFC 7677 §3: user "user", password "pencil".
    fn rfc7677_salt() -> Vec<u8> {
        STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap()
    }

    #[test]
    fn keys_follow_rfc_5802() {
        let m = ScramMechanism::Sha256;
        let salt = rfc7677_salt();
        let salted = salted_password(m, "pencil", &salt, 4096);
        let cred = ScramCredential::from_salted_password(m, &salt, &salted, 4096);
        let client_key = hmac(m, &salted, b"Client Key");
        assert_eq!(cred.stored_key, hash(m, &client_key));
        assert_eq!(cred.server_key, hmac(m, &salted, b"Server Key"));
        assert_eq!(
            cred,
            ScramCredential::from_password(m, "pencil", &salt, 4096)
        );
        // The salt may come owned or borrowed (the broker has `Bytes`, the CLI a slice).
        assert_eq!(
            cred,
            ScramCredential::from_salted_password(m, salt.clone(), &salted, 4096)
        );
        assert_eq!(cred.stored_key.len(), 32);
    }

    #[test]
    fn verifies_the_right_password_only() {
        for m in ScramMechanism::ALL {
            let cred = ScramCredential::from_password(m, "pencil", b"salt", 4096);
            assert!(cred.verifies_password("pencil"));
            assert!(!cred.verifies_password("pencil "));
            assert!(!cred.verifies_password(""));
            assert!(!cred.verifies_password("Pencil"));
        }
    }

    #[test]
    fn absurd_iterations_are_not_computed() {
        let mut cred = ScramCredential::from_password(ScramMechanism::Sha256, "p", b"s", 4096);
        cred.iterations = u32::MAX;
        assert!(!cred.verifies_password("p"));
    }

    #[test]
    fn debug_hides_the_keys() {
        let cred = ScramCredential::from_password(ScramMechanism::Sha256, "pencil", b"s", 4096);
        let text = format!("{cred:?}");
        assert!(text.contains("SCRAM") || text.contains("Sha256"));
        assert!(!text.contains("stored_key"));
        assert!(!text.contains("server_key"));
    }

    #[test]
    fn json_is_readable_and_round_trips() {
        let cred = ScramCredential::from_password(ScramMechanism::Sha512, "pw", b"salt", 4096);
        let json = serde_json::to_value(&cred).unwrap();
        assert_eq!(json["mechanism"], "SCRAM-SHA-512");
        assert_eq!(json["salt"], "c2FsdA==");
        assert_eq!(json["iterations"], 4096);
        assert_eq!(
            json["stored_key"].as_str().unwrap(),
            STANDARD.encode(&cred.stored_key)
        );
        let back: ScramCredential = serde_json::from_value(json).unwrap();
        assert_eq!(back, cred);
    }

    #[test]
    fn json_with_bad_base64_or_mechanism_is_refused() {
        let good = serde_json::to_value(ScramCredential::from_password(
            ScramMechanism::Sha256,
            "pw",
            b"salt",
            4096,
        ))
        .unwrap();
        let mut bad = good.clone();
        bad["salt"] = "not base64!".into();
        assert!(serde_json::from_value::<ScramCredential>(bad).is_err());
        let mut bad = good;
        bad["mechanism"] = "SCRAM-SHA-1".into();
        assert!(serde_json::from_value::<ScramCredential>(bad).is_err());
    }

    #[test]
    fn validate_accepts_kafkas_range() {
        let m = ScramMechanism::Sha256;
        let salted = vec![0u8; 32];
        assert_eq!(validate(m, 4096, b"s", &salted), Ok(()));
        assert_eq!(validate(m, 16384u32, b"s", &salted), Ok(()));
        assert_eq!(
            validate(ScramMechanism::Sha512, 8192, b"s", &[0u8; 64]),
            Ok(())
        );
    }

    #[test]
    fn validate_refuses_what_kafka_calls_unacceptable() {
        let m = ScramMechanism::Sha256;
        let salted = vec![0u8; 32];
        assert_eq!(
            validate(m, 4095, b"s", &salted),
            Err(CredentialError::IterationsOutOfRange {
                iterations: 4095,
                min: 4096,
                max: 16384
            })
        );
        assert!(matches!(
            validate(m, 16385, b"s", &salted),
            Err(CredentialError::IterationsOutOfRange { .. })
        ));
        assert!(matches!(
            validate(m, -1i32, b"s", &salted),
            Err(CredentialError::IterationsOutOfRange { iterations: -1, .. })
        ));
        assert_eq!(
            validate(m, 4096, b"", &salted),
            Err(CredentialError::EmptySalt)
        );
        assert_eq!(
            validate(m, 4096, b"s", &[0u8; 64]),
            Err(CredentialError::SaltedPasswordLength {
                mechanism: m,
                expected_bytes: 32,
                actual_bytes: 64
            })
        );
        assert!(validate(ScramMechanism::Sha512, 4096, b"s", &salted).is_err());
    }
}
