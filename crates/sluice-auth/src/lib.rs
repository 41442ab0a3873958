//! Authentication and authorization as pure functions and state machines, with no sockets:
//! the broker feeds them the bytes of SaslAuthenticate requests and TLS peer certificates and
//! gets back the answer to send and, in the end, the principal; then asks the ACLs what that
//! principal may do.
//!
//! ```text
//!  SaslHandshake ─▶ SaslMechanism::from_name
//!  SaslAuthenticate(PLAIN)  ─▶ plain::parse_plain ─▶ ScramCredential::verifies_password
//!  SaslAuthenticate(SCRAM)  ─▶ ScramServer::step ×2 ─▶ ScramStep::Done { user, .. }
//!  TLS peer certificate     ─▶ principal::subject_dn ─▶ PrincipalMapper::map
//!  AlterUserScramCredentials ─▶ credential::validate ─▶ ScramCredential::from_salted_password
//! ```
//!
//! Nothing here draws randomness or reads the clock (STYLE.md §7): nonces and salts come
//! from the caller.

pub mod acl;
pub mod credential;
pub mod error;
pub mod mechanism;
pub mod plain;
pub mod principal;
pub mod scram_client;
pub mod scram_server;

mod primitives;
mod scram_message;

pub use credential::{apply_changes, salted_password, validate, ScramCredential};
pub use error::{AclError, AuthError, CertError, CredentialError, RuleError};
pub use mechanism::{SaslMechanism, ScramMechanism, DEFAULT_ITERATIONS, SALT_BYTES};
pub use plain::{parse_plain, PlainLogin};
pub use principal::{subject_dn, validity, PrincipalMapper};
pub use scram_client::ScramClient;
pub use scram_server::{ScramServer, ScramStep};
