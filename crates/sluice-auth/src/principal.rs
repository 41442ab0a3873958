//! TLS client principals, as Kafka derives them: the certificate's subject distinguished
//! name in the form Java's `X500Principal.getName()` prints (`certificate`), then
//! `ssl.principal.mapping.rules` applied to it (`mapping`, KIP-371).

mod certificate;
mod mapping;

pub use crate::error::{CertError, RuleError};
pub use certificate::{subject_dn, validity};
pub use mapping::PrincipalMapper;
