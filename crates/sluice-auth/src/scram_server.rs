//! The server side of a SCRAM exchange (RFC 5802, RFC 7677), as Kafka's broker runs it
//! over two SaslAuthenticate round trips.
//!
//! ```text
//!  client                                         ScramServer
//!  client-first  n,,n=user,r=cnonce        ─────▶  step(): look the user up
//!                                          ◀─────  Challenge(r=cnonce+snonce,s=salt,i=4096)
//!  client-final  c=biws,r=…,p=proof        ─────▶  step(): check the proof
//!                                          ◀─────  Done { user, v=server-signature }
//! ```
//!
//! An unknown user is not told apart at the first step: the server answers with a salt
//! made up from the user name (RFC 5802 §9 suggests this) and fails at the proof with the
//! same [`AuthError::BadCredentials`] as a wrong password, after the same computation.
//!
//! Any error ends the exchange: later steps fail, as Kafka closes the connection.

use std::fmt;

use subtle::{Choice, ConstantTimeEq};

use crate::credential::ScramCredential;
use crate::error::AuthError;
use crate::mechanism::{ScramMechanism, DEFAULT_ITERATIONS, SALT_BYTES};
use crate::primitives::{hash, hmac, xor};
use crate::scram_message::{
    attribute, decode_base64, decode_saslname, encode_base64, expect_attribute, invalid,
    is_valid_nonce, utf8,
};

/// What the broker sends back after a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScramStep {
    /// The server-first-message, to send as the SaslAuthenticate response's auth_bytes.
    Challenge(Vec<u8>),
    /// The client proved it knows the password: `user` is authenticated, and
    /// `server_final` (the server-final-message) proves the server knew the credential.
    Done { user: String, server_final: Vec<u8> },
}

/// One SCRAM exchange on one connection.
pub struct ScramServer {
    mechanism: ScramMechanism,
    server_nonce: String,
    unknown_user_secret: Option<Vec<u8>>,
    state: State,
}

enum State {
    AwaitingClientFirst,
    AwaitingClientFinal(Box<Exchange>),
    Done,
    Failed,
}

/// What the first step learned, needed to check the client-final-message.
struct Exchange {
    user: String,
    credential: ScramCredential,
    /// False when `credential` was made up for an unknown user: the proof then fails.
    user_exists: Choice,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

/// The client-first-message, parsed.
struct ClientFirst<'a> {
    gs2_header: &'a str,
    bare: &'a str,
    user: String,
    client_nonce: &'a str,
}

impl ScramServer {
    /// `server_nonce` is the caller's fresh random nonce for this exchange (at least 18
    /// random bytes, e.g. base64 of them, is customary).
    ///
    /// # Panics
    /// If `server_nonce` is empty or not printable ASCII without ',' (RFC 5802 §7): the
    /// caller's bug, not the peer's.
    pub fn new(mechanism: ScramMechanism, server_nonce: String) -> Self {
        assert!(
            is_valid_nonce(&server_nonce),
            "a SCRAM server nonce must be non-empty printable ASCII without ','"
        );
        ScramServer {
            mechanism,
            server_nonce,
            unknown_user_secret: None,
            state: State::AwaitingClientFirst,
        }
    }

    /// Makes the salt shown to unknown users HMAC(secret, user name) instead of
    /// HMAC(server nonce, user name). With a secret that stays the same across connections
    /// (e.g. drawn once at broker start), an unknown user's salt is as stable as a real
    /// one's, so that asking twice does not reveal that the user does not exist.
    pub fn with_unknown_user_secret(mut self, secret: &[u8]) -> Self {
        self.unknown_user_secret = Some(secret.to_vec());
        self
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// The user the client-first-message named, while the exchange waits for its final
    /// message (for logs: whether the user exists is not told).
    pub fn user(&self) -> Option<&str> {
        match &self.state {
            State::AwaitingClientFinal(exchange) => Some(&exchange.user),
            _ => None,
        }
    }

    /// Feeds one SaslAuthenticate auth_bytes. `lookup` gets the user name and returns that
    /// user's credential for this server's mechanism, if any.
    pub fn step(
        &mut self,
        token: &[u8],
        lookup: &dyn Fn(&str) -> Option<ScramCredential>,
    ) -> Result<ScramStep, AuthError> {
        // Failed unless the step below succeeds: any error ends the exchange.
        let state = std::mem::replace(&mut self.state, State::Failed);
        let (next, answer) = match state {
            State::AwaitingClientFirst => self.client_first(token, lookup)?,
            State::AwaitingClientFinal(exchange) => self.client_final(token, *exchange)?,
            State::Done => return Err(invalid("the SCRAM exchange is already complete")),
            State::Failed => return Err(invalid("the SCRAM exchange already failed")),
        };
        self.state = next;
        Ok(answer)
    }

    fn client_first(
        &self,
        token: &[u8],
        lookup: &dyn Fn(&str) -> Option<ScramCredential>,
    ) -> Result<(State, ScramStep), AuthError> {
        let first = parse_client_first(utf8(token, "client-first-message")?)?;
        let (credential, user_exists) = match lookup(&first.user) {
            // A credential of another mechanism is the caller's mix-up; treated as no user
            // rather than checked against the wrong hash.
            Some(credential) if credential.mechanism == self.mechanism => {
                (credential, Choice::from(1))
            }
            _ => (self.unknown_user_credential(&first.user), Choice::from(0)),
        };
        let nonce = format!("{}{}", first.client_nonce, self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            encode_base64(&credential.salt),
            credential.iterations
        );
        let exchange = Exchange {
            user: first.user,
            credential,
            user_exists,
            gs2_header: first.gs2_header.to_owned(),
            client_first_bare: first.bare.to_owned(),
            server_first: server_first.clone(),
            nonce,
        };
        Ok((
            State::AwaitingClientFinal(Box::new(exchange)),
            ScramStep::Challenge(server_first.into_bytes()),
        ))
    }

    /// A credential for a user that does not exist: a salt that looks like any other (the
    /// length of the salts Sluice draws), the iterations of Sluice's own credentials, and keys
    /// that no proof matches (the check is also masked by `user_exists`).
    fn unknown_user_credential(&self, user: &str) -> ScramCredential {
        let key = self
            .unknown_user_secret
            .as_deref()
            .unwrap_or(self.server_nonce.as_bytes());
        let mut salt = hmac(self.mechanism, key, user.as_bytes());
        salt.truncate(SALT_BYTES);
        let zeros = vec![0u8; self.mechanism.hash_len_bytes()];
        ScramCredential {
            mechanism: self.mechanism,
            salt,
            stored_key: zeros.clone(),
            server_key: zeros,
            iterations: DEFAULT_ITERATIONS,
        }
    }

    fn client_final(
        &self,
        token: &[u8],
        exchange: Exchange,
    ) -> Result<(State, ScramStep), AuthError> {
        let message = utf8(token, "client-final-message")?;
        // The proof is the last attribute; AuthMessage covers everything before it.
        let (without_proof, proof) = message
            .rsplit_once(",p=")
            .ok_or_else(|| invalid("client-final-message lacks the p= attribute"))?;
        if proof.contains(',') {
            return Err(invalid("client-final-message has attributes after p="));
        }
        let mut parts = without_proof.split(',');
        let channel_binding = expect_attribute(parts.next(), "c", "client-final-message")?;
        let nonce = expect_attribute(parts.next(), "r", "client-final-message")?;
        for extension in parts {
            attribute(extension)?;
        }
        if decode_base64(channel_binding, "the channel binding (c=)")?
            != exchange.gs2_header.as_bytes()
        {
            return Err(invalid(
                "the channel binding (c=) does not match the client-first-message's gs2 header",
            ));
        }
        // Kafka's broker accepts a nonce that ends with the one it sent, and librdkafka before
        // 2.2 relies on it: it sends its own nonce twice (client nonce + the combined one).
        // The proof still covers the message as sent, and the server's fresh part must end it.
        if !nonce.ends_with(&exchange.nonce) {
            return Err(invalid("the nonce (r=) is not the one the server sent"));
        }
        let proof = decode_base64(proof, "the proof (p=)")?;
        if proof.len() != self.mechanism.hash_len_bytes() {
            return Err(invalid(format!(
                "the proof (p=) must be {} bytes",
                self.mechanism.hash_len_bytes()
            )));
        }

        let credential = &exchange.credential;
        let auth_message = format!(
            "{},{},{}",
            exchange.client_first_bare, exchange.server_first, without_proof
        );
        let client_signature = hmac(
            self.mechanism,
            &credential.stored_key,
            auth_message.as_bytes(),
        );
        let client_key = xor(&proof, &client_signature);
        let proof_matches = hash(self.mechanism, &client_key).ct_eq(&credential.stored_key);
        if !bool::from(proof_matches & exchange.user_exists) {
            return Err(AuthError::BadCredentials);
        }
        let server_signature = hmac(
            self.mechanism,
            &credential.server_key,
            auth_message.as_bytes(),
        );
        Ok((
            State::Done,
            ScramStep::Done {
                user: exchange.user,
                server_final: format!("v={}", encode_base64(&server_signature)).into_bytes(),
            },
        ))
    }
}

/// client-first-message = gs2-header client-first-message-bare (RFC 5802 §7).
fn parse_client_first(message: &str) -> Result<ClientFirst<'_>, AuthError> {
    // gs2-header = gs2-cbind-flag "," [ authzid ] ","
    let mut header = message.splitn(3, ',');
    let cbind_flag = header.next().unwrap_or("");
    match cbind_flag {
        "n" | "y" => {}
        flag if flag.starts_with("p=") => {
            return Err(AuthError::Unsupported(
                "SCRAM channel binding (-PLUS mechanisms, p=) is not supported".into(),
            ))
        }
        _ => {
            return Err(invalid(
                "client-first-message must start with a gs2 header (n, y or p=)",
            ))
        }
    }
    let authzid = header
        .next()
        .ok_or_else(|| invalid("client-first-message has an incomplete gs2 header"))?;
    let bare = header
        .next()
        .ok_or_else(|| invalid("client-first-message has an incomplete gs2 header"))?;
    let gs2_header = &message[..cbind_flag.len() + authzid.len() + 2];
    let authzid = match authzid {
        "" => None,
        _ => match authzid.strip_prefix("a=") {
            Some(encoded) => Some(decode_saslname(encoded)?),
            None => {
                return Err(invalid(
                    "the gs2 header's authorization id must start with a=",
                ))
            }
        },
    };

    // client-first-message-bare = [reserved-mext ","] username "," nonce ["," extensions]
    let mut parts = bare.split(',');
    if parts.clone().next().is_some_and(|p| p.starts_with("m=")) {
        return Err(AuthError::Unsupported(
            "mandatory SCRAM extensions (m=) are not supported".into(),
        ));
    }
    let user = decode_saslname(expect_attribute(parts.next(), "n", "client-first-message")?)?;
    if user.is_empty() {
        return Err(invalid("the user name (n=) is empty"));
    }
    let client_nonce = expect_attribute(parts.next(), "r", "client-first-message")?;
    if !is_valid_nonce(client_nonce) {
        return Err(invalid(
            "the client nonce (r=) must be printable ASCII without ','",
        ));
    }
    for extension in parts {
        let (key, value) = attribute(extension)?;
        // Kafka's delegation tokens authenticate through SCRAM with this extension
        // (KIP-48); Sluice has no tokens, so the login must not be taken for a user's.
        if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
            return Err(AuthError::Unsupported(
                "delegation token authentication (tokenauth=true) is not supported".into(),
            ));
        }
    }
    // Kafka's rule: no acting for another user.
    if authzid.as_ref().is_some_and(|authzid| *authzid != user) {
        return Err(AuthError::Unsupported(
            "an authorization id other than the user name is not supported".into(),
        ));
    }
    Ok(ClientFirst {
        gs2_header,
        bare,
        user,
        client_nonce,
    })
}

impl fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::AwaitingClientFirst => "awaiting client-first",
            State::AwaitingClientFinal(_) => "awaiting client-final",
            State::Done => "done",
            State::Failed => "failed",
        };
        f.debug_struct("ScramServer")
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
    use crate::scram_client::ScramClient;

    // RFC 7677 §3's example exchange.
    const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const RFC_SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
    const RFC_NONCE: &str = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";

    fn rfc_credential() -> ScramCredential {
        let salt = decode_base64("W22ZaJ0SNY7soEsUEjb6gQ==", "salt").unwrap();
        ScramCredential::from_password(ScramMechanism::Sha256, "pencil", &salt, 4096)
    }

    fn rfc_lookup(user: &str) -> Option<ScramCredential> {
        (user == "user").then(rfc_credential)
    }

    fn rfc_server() -> ScramServer {
        ScramServer::new(ScramMechanism::Sha256, RFC_SERVER_NONCE.into())
    }

    /// A server that has answered RFC 7677's client-first-message.
    fn after_rfc_first() -> ScramServer {
        let mut server = rfc_server();
        server
            .step(RFC_CLIENT_FIRST.as_bytes(), &rfc_lookup)
            .unwrap();
        server
    }

    fn final_with(channel: &str, nonce: &str, proof: &str) -> String {
        format!("c={channel},r={nonce},p={proof}")
    }

    const RFC_PROOF: &str = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";

    #[test]
    fn reproduces_rfc_7677_exactly() {
        let mut server = rfc_server();
        let first = server
            .step(RFC_CLIENT_FIRST.as_bytes(), &rfc_lookup)
            .unwrap();
        assert_eq!(
            first,
            ScramStep::Challenge(RFC_SERVER_FIRST.as_bytes().to_vec())
        );
        let done = server
            .step(RFC_CLIENT_FINAL.as_bytes(), &rfc_lookup)
            .unwrap();
        assert_eq!(
            done,
            ScramStep::Done {
                user: "user".into(),
                server_final: RFC_SERVER_FINAL.as_bytes().to_vec(),
            }
        );
    }

    #[test]
    fn no_step_after_done() {
        let mut server = after_rfc_first();
        server
            .step(RFC_CLIENT_FINAL.as_bytes(), &rfc_lookup)
            .unwrap();
        assert!(matches!(
            server.step(RFC_CLIENT_FINAL.as_bytes(), &rfc_lookup),
            Err(AuthError::InvalidMessage(_))
        ));
        assert!(matches!(
            server.step(RFC_CLIENT_FIRST.as_bytes(), &rfc_lookup),
            Err(AuthError::InvalidMessage(_))
        ));
    }

    #[test]
    fn no_step_after_a_failure() {
        let mut server = rfc_server();
        assert!(server.step(b"garbage", &rfc_lookup).is_err());
        // Even a correct message is refused now.
        assert!(matches!(
            server.step(RFC_CLIENT_FIRST.as_bytes(), &rfc_lookup),
            Err(AuthError::InvalidMessage(_))
        ));
    }

    #[test]
    fn full_round_trip_sha512() {
        let salt = b"a salt of some length";
        let cred = ScramCredential::from_password(ScramMechanism::Sha512, "s3cret,=é", salt, 4096);
        let lookup = |user: &str| (user == "ali,ce=").then(|| cred.clone());
        let (mut client, client_first) = ScramClient::new(
            ScramMechanism::Sha512,
            "ali,ce=",
            "s3cret,=é",
            "fyko+d2lbbFgONRv9qkxdawL".into(),
        );
        assert_eq!(client_first, b"n,,n=ali=2Cce=3D,r=fyko+d2lbbFgONRv9qkxdawL");
        let mut server = ScramServer::new(ScramMechanism::Sha512, "3rfcNHYJY1ZVvWVs7j".into());
        let ScramStep::Challenge(server_first) = server.step(&client_first, &lookup).unwrap()
        else {
            panic!("expected a challenge");
        };
        let client_final = client.server_first(&server_first).unwrap();
        let ScramStep::Done { user, server_final } = server.step(&client_final, &lookup).unwrap()
        else {
            panic!("expected done");
        };
        assert_eq!(user, "ali,ce=");
        client.server_final(&server_final).unwrap();
    }

    #[test]
    fn wrong_password_is_bad_credentials() {
        let (mut client, first) = ScramClient::new(
            ScramMechanism::Sha256,
            "user",
            "pencil2",
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        let mut server = rfc_server();
        let ScramStep::Challenge(server_first) = server.step(&first, &rfc_lookup).unwrap() else {
            panic!("expected a challenge");
        };
        let client_final = client.server_first(&server_first).unwrap();
        assert_eq!(
            server.step(&client_final, &rfc_lookup),
            Err(AuthError::BadCredentials)
        );
    }

    #[test]
    fn unknown_user_gets_a_challenge_then_bad_credentials() {
        let (mut client, first) =
            ScramClient::new(ScramMechanism::Sha256, "mallory", "pencil", "abc".into());
        let mut server = rfc_server();
        let ScramStep::Challenge(server_first) = server.step(&first, &rfc_lookup).unwrap() else {
            panic!("expected a challenge");
        };
        let text = String::from_utf8(server_first.clone()).unwrap();
        assert!(text.starts_with(&format!("r=abc{RFC_SERVER_NONCE},s=")));
        assert!(text.ends_with(&format!(",i={DEFAULT_ITERATIONS}")));
        let client_final = client.server_first(&server_first).unwrap();
        assert_eq!(
            server.step(&client_final, &rfc_lookup),
            Err(AuthError::BadCredentials)
        );
    }

    /// The salt's length and the iterations are those of a credential made with Sluice's
    /// defaults, for both mechanisms: they do not tell an unknown user from a real one.
    #[test]
    fn an_unknown_user_looks_like_one_made_with_the_defaults() {
        let attributes =
            |mechanism: ScramMechanism, lookup: &dyn Fn(&str) -> Option<ScramCredential>| {
                let mut server = ScramServer::new(mechanism, "nonce".into());
                let ScramStep::Challenge(first) = server.step(b"n,,n=alice,r=abc", lookup).unwrap()
                else {
                    panic!("expected a challenge");
                };
                let text = String::from_utf8(first).unwrap();
                let mut parts = text.split(',').skip(1);
                let salt = parts.next().unwrap().strip_prefix("s=").unwrap().to_owned();
                let iterations = parts.next().unwrap().to_owned();
                (decode_base64(&salt, "salt").unwrap().len(), iterations)
            };
        for mechanism in ScramMechanism::ALL {
            let made = ScramCredential::from_password(
                mechanism,
                "pencil",
                [7u8; SALT_BYTES],
                DEFAULT_ITERATIONS,
            );
            let real = attributes(mechanism, &|_: &str| Some(made.clone()));
            let unknown = attributes(mechanism, &|_: &str| None);
            assert_eq!(real, (SALT_BYTES, format!("i={DEFAULT_ITERATIONS}")));
            assert_eq!(unknown, real, "{mechanism:?}");
        }
    }

    #[test]
    fn unknown_user_salt_is_deterministic() {
        let challenge = |server: &mut ScramServer, user: &str| {
            let first = format!("n,,n={user},r=abc");
            server.step(first.as_bytes(), &|_: &str| None).unwrap()
        };
        let a = challenge(&mut rfc_server(), "mallory");
        let b = challenge(&mut rfc_server(), "mallory");
        let c = challenge(&mut rfc_server(), "trudy");
        assert_eq!(a, b);
        assert_ne!(a, c);
        // With a secret, the salt no longer follows the per-connection nonce.
        let with_secret = |nonce: &str| {
            let mut server = ScramServer::new(ScramMechanism::Sha256, nonce.into())
                .with_unknown_user_secret(b"broker secret");
            let ScramStep::Challenge(first) = challenge(&mut server, "mallory") else {
                panic!("expected a challenge");
            };
            let text = String::from_utf8(first).unwrap();
            text.split(',').nth(1).unwrap().to_owned()
        };
        assert_eq!(with_secret("nonce1"), with_secret("nonce2"));
    }

    #[test]
    fn credential_of_another_mechanism_is_no_user() {
        let lookup = |_: &str| {
            Some(ScramCredential::from_password(
                ScramMechanism::Sha512,
                "pencil",
                b"s",
                4096,
            ))
        };
        let (mut client, first) =
            ScramClient::new(ScramMechanism::Sha256, "user", "pencil", "abc".into());
        let mut server = rfc_server();
        let ScramStep::Challenge(server_first) = server.step(&first, &lookup).unwrap() else {
            panic!("expected a challenge");
        };
        let client_final = client.server_first(&server_first).unwrap();
        assert_eq!(
            server.step(&client_final, &lookup),
            Err(AuthError::BadCredentials)
        );
    }

    #[test]
    fn authzid_equal_to_the_user_is_accepted() {
        let mut server = rfc_server();
        let step = server.step(b"n,a=user,n=user,r=rOprNGfwEbeRWgbNEkqO", &rfc_lookup);
        assert_eq!(
            step,
            Ok(ScramStep::Challenge(RFC_SERVER_FIRST.as_bytes().to_vec()))
        );
        // The channel binding must then carry that header: base64("n,a=user,").
        let client_final = final_with("bixhPXVzZXIs", RFC_NONCE, RFC_PROOF);
        // The proof was computed for another AuthMessage, so it fails, but at the proof.
        assert_eq!(
            server.step(client_final.as_bytes(), &rfc_lookup),
            Err(AuthError::BadCredentials)
        );
    }

    #[test]
    fn y_flag_is_accepted_and_bound() {
        let mut server = rfc_server();
        server
            .step(b"y,,n=user,r=rOprNGfwEbeRWgbNEkqO", &rfc_lookup)
            .unwrap();
        // c=biws is "n,,", not the "y,," the client sent.
        assert!(matches!(
            server.step(RFC_CLIENT_FINAL.as_bytes(), &rfc_lookup),
            Err(AuthError::InvalidMessage(_))
        ));
    }

    #[test]
    fn authzid_for_another_user_is_refused() {
        let mut server = rfc_server();
        assert!(matches!(
            server.step(b"n,a=admin,n=user,r=abc", &rfc_lookup),
            Err(AuthError::Unsupported(_))
        ));
    }

    #[test]
    fn channel_binding_p_is_refused() {
        let mut server = rfc_server();
        assert!(matches!(
            server.step(b"p=tls-unique,,n=user,r=abc", &rfc_lookup),
            Err(AuthError::Unsupported(_))
        ));
    }

    #[test]
    fn tokenauth_is_refused() {
        for ext in ["tokenauth=true", "tokenauth=TRUE"] {
            let mut server = rfc_server();
            let first = format!("n,,n=user,r=abc,{ext}");
            let err = server.step(first.as_bytes(), &rfc_lookup).unwrap_err();
            assert!(matches!(&err, AuthError::Unsupported(m) if m.contains("delegation token")));
        }
    }

    #[test]
    fn unknown_extensions_are_ignored() {
        let mut server = rfc_server();
        let first = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO,tokenauth=false,x=1";
        assert!(matches!(
            server.step(first.as_bytes(), &rfc_lookup),
            Ok(ScramStep::Challenge(_))
        ));
    }

    #[test]
    fn mandatory_extension_is_refused() {
        let mut server = rfc_server();
        assert!(matches!(
            server.step(b"n,,m=ext,n=user,r=abc", &rfc_lookup),
            Err(AuthError::Unsupported(_))
        ));
    }

    #[test]
    fn malformed_client_first_messages_fail_cleanly() {
        let cases: &[&[u8]] = &[
            b"",
            b"n",
            b"n,",
            b"n,,",
            b"x,,n=user,r=abc",
            b"n,user,n=user,r=abc",
            b"n,,r=abc,n=user",
            b"n,,n=user",
            b"n,,n=user,r=",
            b"n,,n=,r=abc",
            b"n,,n=us=er,r=abc",
            b"n,,n=user,r=a b",
            b"n,,n=user,r=abc,junk",
            b"n,,n=\xff,r=abc",
        ];
        for case in cases {
            let mut server = rfc_server();
            let result = server.step(case, &rfc_lookup);
            assert!(
                matches!(result, Err(AuthError::InvalidMessage(_))),
                "{:?} gave {result:?}",
                String::from_utf8_lossy(case)
            );
        }
    }

    #[test]
    fn malformed_client_final_messages_fail_cleanly() {
        let cases = [
            // missing fields
            String::new(),
            format!("c=biws,r={RFC_NONCE}"),
            format!("r={RFC_NONCE},p={RFC_PROOF}"),
            format!("c=biws,p={RFC_PROOF}"),
            // proof not last
            format!("c=biws,r={RFC_NONCE},p={RFC_PROOF},x=y"),
            // bad base64
            final_with("bi*s", RFC_NONCE, RFC_PROOF),
            final_with("biws", RFC_NONCE, "not-base64!"),
            // wrong proof length
            final_with("biws", RFC_NONCE, "AAAA"),
            // wrong nonce: the client's alone, another server part, a prefix
            final_with("biws", "rOprNGfwEbeRWgbNEkqO", RFC_PROOF),
            final_with("biws", "rOprNGfwEbeRWgbNEkqOother", RFC_PROOF),
            final_with("biws", &RFC_NONCE[..RFC_NONCE.len() - 1], RFC_PROOF),
            // channel binding mismatch: "y,," and "n,a=user,"
            final_with("eSws", RFC_NONCE, RFC_PROOF),
            final_with("bixhPXVzZXIs", RFC_NONCE, RFC_PROOF),
        ];
        for case in &cases {
            let mut server = after_rfc_first();
            let result = server.step(case.as_bytes(), &rfc_lookup);
            assert!(
                matches!(result, Err(AuthError::InvalidMessage(_))),
                "{case:?} gave {result:?}"
            );
        }
    }

    #[test]
    fn client_final_extensions_are_covered_by_the_proof() {
        // Inserting an extension changes AuthMessage, so the RFC's proof no longer holds.
        let mut server = after_rfc_first();
        let tampered = format!("c=biws,r={RFC_NONCE},x=1,p={RFC_PROOF}");
        assert_eq!(
            server.step(tampered.as_bytes(), &rfc_lookup),
            Err(AuthError::BadCredentials)
        );
    }

    #[test]
    fn a_nonce_that_ends_with_the_servers_is_accepted_as_kafka_does() {
        // librdkafka 2.0.2 sends r=<client nonce><client nonce><server nonce>: the proof is
        // over what it sent, and Kafka's check (endsWith) lets it log in.
        use crate::primitives::{hash, hmac, xor};
        let doubled = format!("rOprNGfwEbeRWgbNEkqO{RFC_NONCE}");
        let without_proof = format!("c=biws,r={doubled}");
        let auth_message =
            format!("n=user,r=rOprNGfwEbeRWgbNEkqO,{RFC_SERVER_FIRST},{without_proof}");
        let salted = crate::salted_password(
            ScramMechanism::Sha256,
            "pencil",
            &rfc_credential().salt,
            4096,
        );
        let client_key = hmac(ScramMechanism::Sha256, &salted, b"Client Key");
        let signature = hmac(
            ScramMechanism::Sha256,
            &hash(ScramMechanism::Sha256, &client_key),
            auth_message.as_bytes(),
        );
        let proof = encode_base64(&xor(&client_key, &signature));
        let mut server = after_rfc_first();
        let step = server.step(format!("{without_proof},p={proof}").as_bytes(), &rfc_lookup);
        assert!(
            matches!(step, Ok(ScramStep::Done { ref user, .. }) if user == "user"),
            "{step:?}"
        );
    }

    #[test]
    fn flipped_proof_bit_is_bad_credentials() {
        let mut proof = decode_base64(RFC_PROOF, "p").unwrap();
        proof[0] ^= 1;
        let mut server = after_rfc_first();
        let client_final = final_with("biws", RFC_NONCE, &encode_base64(&proof));
        assert_eq!(
            server.step(client_final.as_bytes(), &rfc_lookup),
            Err(AuthError::BadCredentials)
        );
    }

    #[test]
    fn errors_never_echo_the_proof() {
        let mut server = after_rfc_first();
        let secret = "c2VjcmV0LXByb29mLXZhbHVl";
        let err = server
            .step(format!("c=biws,r=wrong,p={secret}").as_bytes(), &rfc_lookup)
            .unwrap_err();
        assert!(!err.to_string().contains(secret));
    }

    #[test]
    #[should_panic(expected = "nonce")]
    fn a_nonce_with_a_comma_is_the_callers_bug() {
        let _ = ScramServer::new(ScramMechanism::Sha256, "a,b".into());
    }

    #[test]
    fn debug_shows_no_secrets() {
        let server = after_rfc_first();
        let text = format!("{server:?}");
        assert!(text.contains("awaiting client-final"));
        assert!(!text.contains(RFC_SERVER_NONCE));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn arbitrary_first_tokens_never_panic(token in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut server = rfc_server();
            let _ = server.step(&token, &rfc_lookup);
            let _ = server.step(&token, &rfc_lookup);
        }

        #[test]
        fn arbitrary_final_tokens_never_panic(token in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut server = after_rfc_first();
            let _ = server.step(&token, &rfc_lookup);
        }

        #[test]
        fn grammar_shaped_tokens_never_panic(
            first in "[nyp]?(=[a-z]*)?,(a=[a-z=23CD]*)?,(n=[a-z=,23CD]*)?(,r=[!-~]*)?(,[a-z]+=[a-z]*)*",
            last in "(c=[A-Za-z0-9+/=]*)?(,r=[!-~]*)?(,[a-z]=[a-z]*)*(,p=[A-Za-z0-9+/=]*)?",
        ) {
            let mut server = rfc_server();
            let _ = server.step(first.as_bytes(), &rfc_lookup);
            let _ = server.step(last.as_bytes(), &rfc_lookup);
        }
    }
}
