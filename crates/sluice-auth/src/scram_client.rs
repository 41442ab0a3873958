//! The client side of a SCRAM exchange (RFC 5802 §3), for Sluice's own CLI and benchmark
//! client. It sends no channel binding ("n,,") and no authorization id, as Kafka's Java
//! client does.
//!
//! ```text
//! ScramClient::new   ─▶ client-first  n,,n=user,r=cnonce
//! server_first(msg)  ─▶ client-final  c=biws,r=cnonce+snonce,p=proof
//! server_final(msg)  ─▶ Ok once the server's signature proves it knew the credential
//! ```
//!
//! The password is kept only until the server-first-message brings the salt.

use std::fmt;

use subtle::ConstantTimeEq;

use crate::credential::salted_password;
use crate::error::AuthError;
use crate::mechanism::ScramMechanism;
use crate::primitives::{hash, hmac, xor};
use crate::scram_message::{
    decode_base64, encode_base64, encode_saslname, expect_attribute, invalid, is_valid_nonce, utf8,
};

/// The gs2 header for "no channel binding, no authorization id".
const GS2_HEADER: &str = "n,,";

pub struct ScramClient {
    mechanism: ScramMechanism,
    client_nonce: String,
    client_first_bare: String,
    state: State,
}

enum State {
    AwaitingServerFirst { password: String },
    AwaitingServerFinal { server_signature: Vec<u8> },
    Failed,
}

impl ScramClient {
    /// Starts an exchange; the second value is the client-first-message to send.
    /// `client_nonce` is the caller's fresh random nonce.
    ///
    /// # Panics
    /// If `client_nonce` is empty or not printable ASCII without ',' (RFC 5802 §7).
    pub fn new(
        mechanism: ScramMechanism,
        user: &str,
        password: &str,
        client_nonce: String,
    ) -> (Self, Vec<u8>) {
        assert!(
            is_valid_nonce(&client_nonce),
            "a SCRAM client nonce must be non-empty printable ASCII without ','"
        );
        let client_first_bare = format!("n={},r={client_nonce}", encode_saslname(user));
        let client_first = format!("{GS2_HEADER}{client_first_bare}").into_bytes();
        let client = ScramClient {
            mechanism,
            client_nonce,
            client_first_bare,
            state: State::AwaitingServerFirst {
                password: password.to_owned(),
            },
        };
        (client, client_first)
    }

    /// Answers the server-first-message with the client-final-message. Refuses a nonce
    /// that does not extend the client's, and an iteration count outside Kafka's range: a
    /// low one weakens what an eavesdropper must brute-force, a huge one is a server making
    /// the client burn CPU.
    pub fn server_first(&mut self, message: &[u8]) -> Result<Vec<u8>, AuthError> {
        let state = std::mem::replace(&mut self.state, State::Failed);
        let State::AwaitingServerFirst { password } = state else {
            return Err(invalid("the server-first-message was already handled"));
        };
        let server_first = utf8(message, "server-first-message")?;
        let mut parts = server_first.split(',');
        if parts.clone().next().is_some_and(|p| p.starts_with("m=")) {
            return Err(AuthError::Unsupported(
                "mandatory SCRAM extensions (m=) are not supported".into(),
            ));
        }
        let nonce = expect_attribute(parts.next(), "r", "server-first-message")?;
        let salt = expect_attribute(parts.next(), "s", "server-first-message")?;
        let iterations = expect_attribute(parts.next(), "i", "server-first-message")?;
        // Extensions after i= are allowed and carry nothing this client acts on.

        let extends_ours =
            nonce.len() > self.client_nonce.len() && nonce.starts_with(&self.client_nonce);
        if !extends_ours || !is_valid_nonce(nonce) {
            return Err(invalid(
                "the server nonce (r=) does not extend the client's nonce",
            ));
        }
        let salt = decode_base64(salt, "the salt (s=)")?;
        if salt.is_empty() {
            return Err(invalid("the salt (s=) is empty"));
        }
        let iterations = parse_iterations(iterations)?;
        let (min, max) = (
            self.mechanism.min_iterations(),
            self.mechanism.max_iterations(),
        );
        if iterations < min || iterations > max {
            return Err(AuthError::Unsupported(format!(
                "{iterations} iterations is outside the accepted range [{min}, {max}]"
            )));
        }

        let salted = salted_password(self.mechanism, &password, &salt, iterations);
        let client_key = hmac(self.mechanism, &salted, b"Client Key");
        let stored_key = hash(self.mechanism, &client_key);
        let server_key = hmac(self.mechanism, &salted, b"Server Key");
        let without_proof = format!("c={},r={nonce}", encode_base64(GS2_HEADER.as_bytes()));
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_signature = hmac(self.mechanism, &stored_key, auth_message.as_bytes());
        let proof = xor(&client_key, &client_signature);
        self.state = State::AwaitingServerFinal {
            server_signature: hmac(self.mechanism, &server_key, auth_message.as_bytes()),
        };
        Ok(format!("{without_proof},p={}", encode_base64(&proof)).into_bytes())
    }

    /// Checks the server-final-message. `e=invalid-proof` and `e=unknown-user`, and a
    /// server signature that does not match, are [`AuthError::BadCredentials`]; any other
    /// `e=` is [`AuthError::InvalidMessage`] naming the server's error.
    pub fn server_final(&self, message: &[u8]) -> Result<(), AuthError> {
        let State::AwaitingServerFinal { server_signature } = &self.state else {
            return Err(invalid(
                "a server-final-message before the server-first-message was handled",
            ));
        };
        let message = utf8(message, "server-final-message")?;
        let first = message.split(',').next().unwrap_or("");
        if let Some(error) = first.strip_prefix("e=") {
            return Err(match error {
                "invalid-proof" | "unknown-user" => AuthError::BadCredentials,
                other => invalid(format!("the server answered e={}", printable(other))),
            });
        }
        let verifier = expect_attribute(Some(first), "v", "server-final-message")?;
        let signature = decode_base64(verifier, "the server signature (v=)")?;
        if bool::from(signature.ct_eq(server_signature)) {
            Ok(())
        } else {
            Err(AuthError::BadCredentials)
        }
    }
}

/// `i=`: decimal digits only (u32::from_str would also take a '+').
fn parse_iterations(text: &str) -> Result<u32, AuthError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid("the iteration count (i=) is not a number"));
    }
    text.parse()
        .map_err(|_| invalid("the iteration count (i=) is too large"))
}

/// The server's error name, bounded and printable, for a message a person reads.
fn printable(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect()
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::AwaitingServerFirst { .. } => "awaiting server-first",
            State::AwaitingServerFinal { .. } => "awaiting server-final",
            State::Failed => "failed",
        };
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    // RFC 7677 §3.
    const RFC_SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_client() -> (ScramClient, Vec<u8>) {
        ScramClient::new(
            ScramMechanism::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".into(),
        )
    }

    fn after_rfc_first() -> ScramClient {
        let (mut client, _) = rfc_client();
        client.server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
        client
    }

    #[test]
    fn reproduces_rfc_7677_exactly() {
        let (mut client, first) = rfc_client();
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let client_final = client.server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(client_final).unwrap(), RFC_CLIENT_FINAL);
        assert_eq!(client.server_final(RFC_SERVER_FINAL.as_bytes()), Ok(()));
    }

    #[test]
    fn wrong_server_signature_is_refused() {
        let client = after_rfc_first();
        assert_eq!(
            client.server_final(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
            Err(AuthError::BadCredentials)
        );
        assert!(matches!(
            client.server_final(b"v=***"),
            Err(AuthError::InvalidMessage(_))
        ));
        assert!(matches!(
            client.server_final(b"x=1"),
            Err(AuthError::InvalidMessage(_))
        ));
    }

    #[test]
    fn server_errors_become_auth_errors() {
        let client = after_rfc_first();
        assert_eq!(
            client.server_final(b"e=invalid-proof"),
            Err(AuthError::BadCredentials)
        );
        assert_eq!(
            client.server_final(b"e=unknown-user"),
            Err(AuthError::BadCredentials)
        );
        let err = client.server_final(b"e=other-error").unwrap_err();
        assert!(matches!(&err, AuthError::InvalidMessage(m) if m.contains("other-error")));
    }

    #[test]
    fn server_final_before_server_first_is_refused() {
        let (client, _) = rfc_client();
        assert!(matches!(
            client.server_final(RFC_SERVER_FINAL.as_bytes()),
            Err(AuthError::InvalidMessage(_))
        ));
    }

    #[test]
    fn server_first_twice_is_refused() {
        let mut client = after_rfc_first();
        assert!(matches!(
            client.server_first(RFC_SERVER_FIRST.as_bytes()),
            Err(AuthError::InvalidMessage(_))
        ));
    }

    #[test]
    fn nonce_must_extend_the_clients() {
        for nonce in ["rOprNGfwEbeRWgbNEkqO", "XOprNGfwEbeRWgbNEkqOabc", "abc"] {
            let (mut client, _) = rfc_client();
            let msg = format!("r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096");
            assert!(
                matches!(
                    client.server_first(msg.as_bytes()),
                    Err(AuthError::InvalidMessage(_))
                ),
                "{nonce}"
            );
        }
    }

    #[test]
    fn iterations_outside_kafkas_range_are_refused() {
        for i in ["4095", "1", "0", "16385", "4294967295"] {
            let (mut client, _) = rfc_client();
            let msg = format!("r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i={i}");
            assert!(
                matches!(
                    client.server_first(msg.as_bytes()),
                    Err(AuthError::Unsupported(_))
                ),
                "{i}"
            );
        }
    }

    #[test]
    fn malformed_server_first_messages_fail_cleanly() {
        let cases: &[&[u8]] = &[
            b"",
            b"r=rOprNGfwEbeRWgbNEkqOx",
            b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==",
            b"s=W22ZaJ0SNY7soEsUEjb6gQ==,r=rOprNGfwEbeRWgbNEkqOx,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqOx,s=!!!,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqOx,s=,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=",
            b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=+4096",
            b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=99999999999",
            b"r=rOprNGfwEbeRWgbNEkqOx y,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            b"\xff",
        ];
        for case in cases {
            let (mut client, _) = rfc_client();
            let result = client.server_first(case);
            assert!(
                matches!(result, Err(AuthError::InvalidMessage(_))),
                "{:?} gave {result:?}",
                String::from_utf8_lossy(case)
            );
        }
    }

    #[test]
    fn mandatory_extension_is_refused() {
        let (mut client, _) = rfc_client();
        assert!(matches!(
            client.server_first(b"m=x,r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"),
            Err(AuthError::Unsupported(_))
        ));
    }

    #[test]
    fn extensions_after_iterations_are_accepted() {
        let (mut client, _) = rfc_client();
        let msg = format!("{RFC_SERVER_FIRST},x=1");
        assert!(client.server_first(msg.as_bytes()).is_ok());
    }

    #[test]
    fn debug_shows_no_password() {
        let (client, _) = rfc_client();
        let text = format!("{client:?}");
        assert!(!text.contains("pencil"));
        assert!(text.contains("awaiting server-first"));
    }

    proptest! {
        #[test]
        fn arbitrary_server_messages_never_panic(
            first in proptest::collection::vec(any::<u8>(), 0..200),
            last in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let (mut client, _) = rfc_client();
            let _ = client.server_first(&first);
            let _ = client.server_final(&last);
            let client = after_rfc_first();
            let _ = client.server_final(&last);
        }
    }
}
