//! SASL mechanism names as clients send them in SaslHandshake, and the SCRAM mechanisms'
//! numbers and limits as Kafka's AlterUserScramCredentials / DescribeUserScramCredentials
//! carry them (KIP-554).

use std::fmt;

/// A SCRAM mechanism (RFC 5802 with the hash of RFC 7677 or its SHA-512 sibling).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

/// Kafka's bounds on SCRAM iterations: the lower one from RFC 7677's advice, the upper one
/// from KIP-554 (more makes each login a CPU cost the broker pays).
const MIN_ITERATIONS: u32 = 4096;
const MAX_ITERATIONS: u32 = 16384;

/// The strength of the credentials Sluice makes itself (`sluice user create`, the console), and
/// of what an unknown user is shown during a SCRAM exchange: a login attempt must not tell an
/// unknown user from one created with the defaults by the iterations or the salt's length.
pub const DEFAULT_ITERATIONS: u32 = 8192;
/// Bytes of a salt that Sluice draws (see [`DEFAULT_ITERATIONS`]).
pub const SALT_BYTES: usize = 24;

impl ScramMechanism {
    /// Every SCRAM mechanism, in Kafka's type order (for DescribeUserScramCredentials).
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The IANA SASL name.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// Case-sensitive, as Kafka compares mechanism names.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "SCRAM-SHA-256" => Some(ScramMechanism::Sha256),
            "SCRAM-SHA-512" => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    /// The `mechanism` field of AlterUserScramCredentials / DescribeUserScramCredentials
    /// (0 is Kafka's UNKNOWN, which has no variant here).
    pub fn kafka_type(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn from_kafka_type(kafka_type: i8) -> Option<Self> {
        match kafka_type {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    pub fn min_iterations(self) -> u32 {
        MIN_ITERATIONS
    }

    pub fn max_iterations(self) -> u32 {
        MAX_ITERATIONS
    }

    /// Output size of the mechanism's hash, which is also the size of a salted password,
    /// a StoredKey, a ServerKey and a proof.
    pub fn hash_len_bytes(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }
}

impl fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// Stored as its SASL name, so that a credential file reads "SCRAM-SHA-256" rather than a
// Rust variant name that a rename would silently break.
impl serde::Serialize for ScramMechanism {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for ScramMechanism {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        ScramMechanism::from_name(&name).ok_or_else(|| {
            serde::de::Error::invalid_value(
                serde::de::Unexpected::Str(&name),
                &"SCRAM-SHA-256 or SCRAM-SHA-512",
            )
        })
    }
}

/// A mechanism a client may name in SaslHandshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SaslMechanism {
    Plain,
    Scram(ScramMechanism),
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(scram) => scram.name(),
        }
    }

    /// Case-sensitive, as Kafka compares mechanism names.
    pub fn from_name(name: &str) -> Option<Self> {
        if name == "PLAIN" {
            return Some(SaslMechanism::Plain);
        }
        ScramMechanism::from_name(name).map(SaslMechanism::Scram)
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scram_names_round_trip() {
        for m in ScramMechanism::ALL {
            assert_eq!(ScramMechanism::from_name(m.name()), Some(m));
            assert_eq!(ScramMechanism::from_kafka_type(m.kafka_type()), Some(m));
            assert_eq!(m.to_string(), m.name());
        }
        assert_eq!(ScramMechanism::Sha256.name(), "SCRAM-SHA-256");
        assert_eq!(ScramMechanism::Sha512.name(), "SCRAM-SHA-512");
    }

    #[test]
    fn kafka_types_match_kip_554() {
        assert_eq!(ScramMechanism::Sha256.kafka_type(), 1);
        assert_eq!(ScramMechanism::Sha512.kafka_type(), 2);
        assert_eq!(ScramMechanism::from_kafka_type(0), None);
        assert_eq!(ScramMechanism::from_kafka_type(3), None);
        assert_eq!(ScramMechanism::from_kafka_type(-1), None);
    }

    #[test]
    fn iteration_limits_are_kafkas() {
        for m in ScramMechanism::ALL {
            assert_eq!(m.min_iterations(), 4096);
            assert_eq!(m.max_iterations(), 16384);
        }
    }

    #[test]
    fn unknown_and_miscased_names_are_refused() {
        assert_eq!(ScramMechanism::from_name("scram-sha-256"), None);
        assert_eq!(ScramMechanism::from_name("SCRAM-SHA-1"), None);
        assert_eq!(SaslMechanism::from_name("plain"), None);
        assert_eq!(SaslMechanism::from_name("GSSAPI"), None);
        assert_eq!(SaslMechanism::from_name("OAUTHBEARER"), None);
    }

    #[test]
    fn sasl_names_round_trip() {
        for m in [
            SaslMechanism::Plain,
            SaslMechanism::Scram(ScramMechanism::Sha256),
            SaslMechanism::Scram(ScramMechanism::Sha512),
        ] {
            assert_eq!(SaslMechanism::from_name(m.name()), Some(m));
        }
        assert_eq!(SaslMechanism::Plain.name(), "PLAIN");
    }

    #[test]
    fn serde_uses_the_sasl_name() {
        let json = serde_json::to_string(&ScramMechanism::Sha512).unwrap();
        assert_eq!(json, "\"SCRAM-SHA-512\"");
        let back: ScramMechanism = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ScramMechanism::Sha512);
        assert!(serde_json::from_str::<ScramMechanism>("\"Sha512\"").is_err());
    }
}
