//! RFC 5802 §2.2's primitives H(), HMAC() and Hi(), for the hash a SCRAM mechanism names.
//! Everything SCRAM computes is built from these three and XOR.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

use crate::mechanism::ScramMechanism;

/// H(data).
pub(crate) fn hash(mechanism: ScramMechanism, data: &[u8]) -> Vec<u8> {
    match mechanism {
        ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
        ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
    }
}

/// HMAC(key, data).
pub(crate) fn hmac(mechanism: ScramMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC hashes an over-long key and pads a short one, so no key length is an error.
    const ANY_KEY: &str = "HMAC accepts a key of any length";
    match mechanism {
        ScramMechanism::Sha256 => {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect(ANY_KEY);
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        ScramMechanism::Sha512 => {
            let mut mac = Hmac::<Sha512>::new_from_slice(key).expect(ANY_KEY);
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
    }
}

/// Hi(str, salt, i): PBKDF2 with HMAC-H and an output of one hash length.
pub(crate) fn hi(
    mechanism: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Vec<u8> {
    let mut out = vec![0u8; mechanism.hash_len_bytes()];
    match mechanism {
        ScramMechanism::Sha256 => {
            pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
        }
        ScramMechanism::Sha512 => {
            pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
        }
    }
    out
}

/// a XOR b over the shorter length; callers check lengths first.
pub(crate) fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn hash_matches_known_digests() {
        assert_eq!(
            hex(&hash(ScramMechanism::Sha256, b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(hash(ScramMechanism::Sha512, b"abc").len(), 64);
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        assert_eq!(
            hex(&hmac(
                ScramMechanism::Sha256,
                b"Jefe",
                b"what do ya want for nothing?"
            )),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac(ScramMechanism::Sha512, b"Jefe", b"what do ya want for nothing?")),
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
        );
    }

    #[test]
    fn hi_is_pbkdf2() {
        // PBKDF2-HMAC-SHA256("password", "salt", 1, 32), a widely published vector.
        assert_eq!(
            hex(&hi(ScramMechanism::Sha256, b"password", b"salt", 1)),
            "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b"
        );
        assert_eq!(hi(ScramMechanism::Sha512, b"p", b"s", 2).len(), 64);
    }

    #[test]
    fn xor_is_bytewise() {
        assert_eq!(xor(&[0b1100, 0xff], &[0b1010, 0x0f]), vec![0b0110, 0xf0]);
    }
}
