//! SASL PLAIN (RFC 4616): one message, `authzid NUL authcid NUL passwd`. The broker checks
//! the password against the user's stored SCRAM credential
//! ([`crate::credential::ScramCredential::verifies_password`]), so no plain password is
//! ever stored.

use std::fmt;

use crate::error::AuthError;

/// A parsed PLAIN login. Its `Debug` leaves the password out, so that logging a login
/// cannot leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct PlainLogin {
    pub user: String,
    pub password: String,
}

impl fmt::Debug for PlainLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainLogin")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Parses a PLAIN message. As Kafka does, the authorization id must be empty or the user
/// itself (no acting for another user), and the user and password must not be empty.
pub fn parse_plain(token: &[u8]) -> Result<PlainLogin, AuthError> {
    let invalid = |what: &str| AuthError::InvalidMessage(format!("PLAIN message {what}"));
    let mut fields = token.split(|&b| b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(invalid("must be authzid NUL user NUL password"));
    };
    let text = |bytes: &[u8], field: &str| {
        String::from_utf8(bytes.to_vec())
            .map_err(|_| invalid(&format!("has a {field} that is not UTF-8")))
    };
    let authzid = text(authzid, "authorization id")?;
    let user = text(user, "user name")?;
    let password = text(password, "password")?;
    if user.is_empty() {
        return Err(invalid("has an empty user name"));
    }
    if password.is_empty() {
        return Err(invalid("has an empty password"));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(AuthError::Unsupported(
            "an authorization id other than the user name is not supported".into(),
        ));
    }
    Ok(PlainLogin { user, password })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn parses_rfc_4616_messages() {
        let login = parse_plain(b"\0tim\0tanstaaftanstaaf").unwrap();
        assert_eq!(login.user, "tim");
        assert_eq!(login.password, "tanstaaftanstaaf");
        let login = parse_plain(b"tim\0tim\0pw").unwrap();
        assert_eq!(login.user, "tim");
        let login = parse_plain("\0jörg\0pässwörd".as_bytes()).unwrap();
        assert_eq!(login.password, "pässwörd");
    }

    #[test]
    fn authzid_for_another_user_is_refused() {
        // RFC 4616's "Ursel" example acts as "Kurt": Kafka refuses that.
        assert!(matches!(
            parse_plain("Ursel\0Kurt\0xipj3plmq".as_bytes()),
            Err(AuthError::Unsupported(_))
        ));
    }

    #[test]
    fn malformed_messages_fail_cleanly() {
        let cases: &[&[u8]] = &[
            b"",
            b"tim",
            b"\0tim",
            b"\0tim\0",
            b"\0\0pw",
            b"\0tim\0pw\0",
            b"\0tim\0p\0w",
            b"\0\xff\0pw",
            b"\0tim\0\xff",
            b"\xff\0tim\0pw",
        ];
        for case in cases {
            assert!(
                matches!(parse_plain(case), Err(AuthError::InvalidMessage(_))),
                "{case:?}"
            );
        }
    }

    #[test]
    fn debug_and_errors_hide_the_password() {
        let login = parse_plain(b"\0tim\0hunter2").unwrap();
        let text = format!("{login:?}");
        assert!(text.contains("tim"));
        assert!(!text.contains("hunter2"));
        let err = parse_plain(b"\0tim\0hunter2\0").unwrap_err();
        assert!(!err.to_string().contains("hunter2"));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(token in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_plain(&token);
        }

        #[test]
        fn well_formed_logins_round_trip(user in "[^\0]{1,20}", password in "[^\0]{1,20}") {
            let token = format!("\0{user}\0{password}");
            let login = parse_plain(token.as_bytes()).unwrap();
            prop_assert_eq!(login, PlainLogin { user, password });
        }
    }
}
