//! Pieces of the SCRAM message grammar (RFC 5802 §7) that the server and the client share:
//! attributes, user-name escaping, nonces and base64 fields. Every parser here takes what
//! the network sent and answers with [`AuthError::InvalidMessage`], never a panic, and no
//! message echoes the field it refuses (a proof or a password could be in it).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::error::AuthError;

pub(crate) fn invalid(what: impl Into<String>) -> AuthError {
    AuthError::InvalidMessage(what.into())
}

/// SCRAM messages are UTF-8 text (RFC 5802 §7).
pub(crate) fn utf8<'a>(token: &'a [u8], message: &str) -> Result<&'a str, AuthError> {
    std::str::from_utf8(token).map_err(|_| invalid(format!("{message} is not UTF-8")))
}

/// `saslname`: the user name with ',' and '=' escaped, so that it fits between commas.
/// '=' goes first, or the '=' of "=2C" would be escaped again.
pub(crate) fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// Inverse of [`encode_saslname`]. Any '=' not starting "=2C" or "=3D" is malformed
/// (RFC 5802 §5.1); the hex digits are matched without case, as ABNF strings are.
pub(crate) fn decode_saslname(encoded: &str) -> Result<String, AuthError> {
    let mut decoded = String::with_capacity(encoded.len());
    let mut rest = encoded;
    while let Some(at) = rest.find('=') {
        decoded.push_str(&rest[..at]);
        let escape = rest[at + 1..].get(..2).unwrap_or("");
        if escape.eq_ignore_ascii_case("2C") {
            decoded.push(',');
        } else if escape.eq_ignore_ascii_case("3D") {
            decoded.push('=');
        } else {
            return Err(invalid("a user name has '=' not followed by 2C or 3D"));
        }
        rest = &rest[at + 3..];
    }
    decoded.push_str(rest);
    Ok(decoded)
}

/// `c-nonce`/`s-nonce`: printable ASCII except ',' (RFC 5802 §7, `printable`).
pub(crate) fn is_valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// Splits one `key=value` attribute. RFC 5802 keys are one letter; Kafka's extensions
/// ("tokenauth") are words, so any ASCII word is taken as a key.
pub(crate) fn attribute(part: &str) -> Result<(&str, &str), AuthError> {
    match part.split_once('=') {
        Some((key, value))
            if !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            Ok((key, value))
        }
        _ => Err(invalid("expected a key=value attribute")),
    }
}

/// The next attribute, which must be `key`; `message` names where, for the error.
pub(crate) fn expect_attribute<'a>(
    part: Option<&'a str>,
    key: &str,
    message: &str,
) -> Result<&'a str, AuthError> {
    let part = part.ok_or_else(|| invalid(format!("{message} lacks the {key}= attribute")))?;
    match attribute(part) {
        Ok((found, value)) if found == key => Ok(value),
        _ => Err(invalid(format!("{message} lacks the {key}= attribute"))),
    }
}

/// A standard, padded base64 field.
pub(crate) fn decode_base64(value: &str, field: &str) -> Result<Vec<u8>, AuthError> {
    STANDARD
        .decode(value.as_bytes())
        .map_err(|_| invalid(format!("{field} is not valid base64")))
}

pub(crate) fn encode_base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn saslname_escapes_comma_and_equals() {
        assert_eq!(encode_saslname("a,b=c"), "a=2Cb=3Dc");
        assert_eq!(decode_saslname("a=2Cb=3Dc").unwrap(), "a,b=c");
        assert_eq!(decode_saslname("=3D2C").unwrap(), "=2C");
        assert_eq!(decode_saslname("x=2c").unwrap(), "x,");
        assert_eq!(decode_saslname("plain").unwrap(), "plain");
    }

    #[test]
    fn saslname_refuses_stray_equals() {
        for bad in ["a=", "a=2", "a=41", "=", "a=3Z", "é=é"] {
            assert!(
                matches!(decode_saslname(bad), Err(AuthError::InvalidMessage(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn nonces_are_printable_without_comma() {
        assert!(is_valid_nonce(
            "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
        ));
        assert!(!is_valid_nonce(""));
        assert!(!is_valid_nonce("a,b"));
        assert!(!is_valid_nonce("a b"));
        assert!(!is_valid_nonce("é"));
    }

    #[test]
    fn attributes_split_at_the_first_equals() {
        assert_eq!(
            attribute("s=QSXCR+Q6sek8bf92==").unwrap(),
            ("s", "QSXCR+Q6sek8bf92==")
        );
        assert_eq!(attribute("tokenauth=true").unwrap(), ("tokenauth", "true"));
        assert!(attribute("=x").is_err());
        assert!(attribute("novalue").is_err());
        assert!(expect_attribute(Some("r=abc"), "r", "m").is_ok());
        assert!(expect_attribute(Some("s=abc"), "r", "m").is_err());
        assert!(expect_attribute(None, "r", "m").is_err());
    }

    #[test]
    fn base64_is_strict() {
        assert_eq!(decode_base64("biws", "c").unwrap(), b"n,,");
        assert!(decode_base64("biw", "c").is_err());
        assert!(decode_base64("bi*s", "c").is_err());
        assert!(decode_base64("biws", "c").is_ok());
    }

    proptest! {
        #[test]
        fn saslname_round_trips(name in ".*") {
            let encoded = encode_saslname(&name);
            prop_assert!(!encoded.contains(','));
            prop_assert_eq!(decode_saslname(&encoded).unwrap(), name);
        }

        #[test]
        fn saslname_decode_never_panics(text in ".*") {
            let _ = decode_saslname(&text);
        }
    }
}
