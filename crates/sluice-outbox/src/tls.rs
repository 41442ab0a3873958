//! TLS to the source database, asked for the way each database's own clients ask for it, in
//! the `--source` URL's query:
//!
//! - PostgreSQL, as libpq: `sslmode` (`disable`, `prefer` — the default, `require`,
//!   `verify-ca`, `verify-full`), `sslrootcert`, `sslcert`, `sslkey`. As in libpq, `require`
//!   with a `sslrootcert` verifies the chain as `verify-ca` does.
//! - MySQL/MariaDB, as the `mysql` client: `ssl-mode` (`DISABLED` — the default here,
//!   `REQUIRED`, `VERIFY_CA`, `VERIFY_IDENTITY`), `ssl-ca`, `ssl-cert`, `ssl-key`.
//!
//! The parameters are taken out of the URL before the driver reads it (tokio-postgres knows
//! neither the `verify-*` modes nor the files). The certificates are checked by rustls with the
//! `ring` provider, as the broker's own listeners are.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::crypto::{self, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::config::redact;
use crate::error::OutboxError;

/// How much of TLS the connection insists on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// Plain TCP.
    Disable,
    /// TLS if the server offers it, unverified; plain otherwise (libpq's default).
    Prefer,
    /// TLS, the server's certificate not verified.
    Require,
    /// TLS, the certificate chained to `root_cert`, any host name.
    VerifyCa,
    /// TLS, the certificate chained to `root_cert` and naming the host connected to.
    VerifyFull,
}

impl TlsMode {
    pub fn verifies_chain(self) -> bool {
        matches!(self, TlsMode::VerifyCa | TlsMode::VerifyFull)
    }
}

/// The TLS settings of one `--source`.
#[derive(Debug, Clone)]
pub struct DbTls {
    pub mode: TlsMode,
    /// PEM file of the authorities the server's certificate must chain to.
    pub root_cert: Option<PathBuf>,
    /// PEM files of a client certificate and its key (the server may ask for one).
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// The certificate the server showed the control connection (under verify-ca its chain
    /// was verified): see [`DbTls::replication`] and [`DbTls::handshook`].
    presented: Arc<Mutex<Option<Vec<u8>>>>,
}

impl DbTls {
    /// Takes `sslmode`, `sslrootcert`, `sslcert` and `sslkey` out of a `postgres://` URL;
    /// returns the URL without them and the settings.
    pub fn from_postgres_url(source: &str) -> Result<(String, DbTls), OutboxError> {
        let (rest, params) = take_params(source, &["sslmode", "sslrootcert", "sslcert", "sslkey"]);
        let mode = match param(&params, "sslmode") {
            None | Some("prefer") => TlsMode::Prefer,
            Some("disable") => TlsMode::Disable,
            // libpq: "if a root CA file exists, require behaves as verify-ca".
            Some("require") if param(&params, "sslrootcert").is_some() => TlsMode::VerifyCa,
            Some("require") => TlsMode::Require,
            Some("verify-ca") => TlsMode::VerifyCa,
            Some("verify-full") => TlsMode::VerifyFull,
            Some("allow") => {
                return Err(setup(
                    source,
                    "sslmode=allow (plain first, TLS only if refused) is not supported: use \
                     disable, prefer, require, verify-ca or verify-full",
                ))
            }
            Some(other) => {
                return Err(setup(
                    source,
                    &format!(
                        "sslmode={other} is not a mode: use disable, prefer, require, verify-ca \
                         or verify-full"
                    ),
                ))
            }
        };
        let tls = DbTls::checked(
            source,
            mode,
            ("sslrootcert", param(&params, "sslrootcert")),
            ("sslcert", param(&params, "sslcert")),
            ("sslkey", param(&params, "sslkey")),
        )?;
        Ok((rest, tls))
    }

    /// Takes `ssl-mode`, `ssl-ca`, `ssl-cert` and `ssl-key` out of a `mysql://` URL; returns
    /// the URL without them and the settings. (mysql_async's own `require_ssl`,
    /// `verify_ca` and `verify_identity` are refused beside them, to keep one way to say it.)
    pub fn from_mysql_url(source: &str) -> Result<(String, DbTls), OutboxError> {
        let (rest, params) = take_params(source, &["ssl-mode", "ssl-ca", "ssl-cert", "ssl-key"]);
        let (_, driver_own) = take_params(&rest, &["require_ssl", "verify_ca", "verify_identity"]);
        if !driver_own.is_empty() {
            return Err(setup(
                source,
                "give TLS as ssl-mode=REQUIRED|VERIFY_CA|VERIFY_IDENTITY with ssl-ca=FILE (as \
                 the mysql client takes it), not require_ssl/verify_ca/verify_identity",
            ));
        }
        let mode =
            match param(&params, "ssl-mode")
                .map(str::to_ascii_uppercase)
                .as_deref()
            {
                None | Some("DISABLED") => TlsMode::Disable,
                Some("REQUIRED") => TlsMode::Require,
                Some("VERIFY_CA") => TlsMode::VerifyCa,
                Some("VERIFY_IDENTITY") => TlsMode::VerifyFull,
                Some("PREFERRED") => return Err(setup(
                    source,
                    "ssl-mode=PREFERRED (TLS only if the server offers it) is not supported by \
                     the MySQL driver: use REQUIRED, VERIFY_CA, VERIFY_IDENTITY or DISABLED",
                )),
                Some(other) => {
                    return Err(setup(
                        source,
                        &format!(
                            "ssl-mode={other} is not a mode: use DISABLED, REQUIRED, VERIFY_CA or \
                         VERIFY_IDENTITY"
                        ),
                    ))
                }
            };
        if mode == TlsMode::Require && param(&params, "ssl-ca").is_some() {
            return Err(setup(
                source,
                "ssl-mode=REQUIRED does not verify the server, so ssl-ca would be ignored: use \
                 ssl-mode=VERIFY_IDENTITY (or VERIFY_CA) with it",
            ));
        }
        let tls = DbTls::checked(
            source,
            mode,
            ("ssl-ca", param(&params, "ssl-ca")),
            ("ssl-cert", param(&params, "ssl-cert")),
            ("ssl-key", param(&params, "ssl-key")),
        )?;
        Ok((rest, tls))
    }

    /// The files exist and fit the mode: a verifying mode needs the authorities, a client
    /// certificate needs its key.
    fn checked(
        source: &str,
        mode: TlsMode,
        root: (&str, Option<&str>),
        cert: (&str, Option<&str>),
        key: (&str, Option<&str>),
    ) -> Result<DbTls, OutboxError> {
        for (name, path) in [root, cert, key] {
            if let Some(path) = path {
                if std::fs::metadata(path).is_err() {
                    return Err(setup(source, &format!("{name}={path}: no such file")));
                }
            }
        }
        if mode.verifies_chain() && root.1.is_none() {
            return Err(setup(
                source,
                &format!(
                    "verifying the server's certificate needs {}=FILE, the PEM certificates of \
                     the authorities it must chain to (the system's: \
                     /etc/ssl/certs/ca-certificates.crt)",
                    root.0
                ),
            ));
        }
        if cert.1.is_some() != key.1.is_some() {
            return Err(setup(
                source,
                &format!("a client certificate needs both {} and {}", cert.0, key.0),
            ));
        }
        if mode == TlsMode::Disable && (cert.1.is_some() || root.1.is_some()) {
            return Err(setup(
                source,
                &format!(
                    "{} or {} given with TLS disabled: set the mode too",
                    root.0, cert.0
                ),
            ));
        }
        Ok(DbTls {
            mode,
            root_cert: root.1.map(PathBuf::from),
            client_cert: cert.1.map(PathBuf::from),
            client_key: key.1.map(PathBuf::from),
            presented: Arc::default(),
        })
    }

    /// The rustls configuration of these settings (certificates read now).
    pub fn client_config(&self) -> Result<ClientConfig, OutboxError> {
        let provider = Arc::new(crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        if let Some(path) = &self.root_cert {
            let certs = read_certs(path)?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(OutboxError::Setup(format!(
                    "{}: no usable certificate in it",
                    path.display()
                )));
            }
        }
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| OutboxError::Setup(format!("TLS: {e}")))?;
        let chain = match self.mode {
            TlsMode::Disable | TlsMode::Prefer | TlsMode::Require => None,
            TlsMode::VerifyCa | TlsMode::VerifyFull => Some(
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                    .build()
                    .map_err(|e| OutboxError::Setup(format!("TLS: {e}")))?,
            ),
        };
        let verifier = Arc::new(ServerCheck {
            provider,
            chain,
            check_name: self.mode == TlsMode::VerifyFull,
            presented: Arc::clone(&self.presented),
        });
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert)?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    OutboxError::Setup(format!("{}: not a PEM private key: {e}", key.display()))
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| OutboxError::Setup(format!("the client certificate: {e}")))
            }
            _ => Ok(builder.with_no_client_auth()),
        }
    }

    /// The same settings for the replication stream's client (`pgwire-replication`), which
    /// connects to `host`.
    ///
    /// Under verify-ca that client still checks the name: it lets through only the error kind
    /// older rustls gave for a wrong name (`NotValidForName`), not the one rustls 0.23 gives
    /// (`NotValidForNameContext`). So it is given, as the name to check, one the certificate
    /// the control connection was shown carries (its chain verified there; the stream's is
    /// verified again): the name goes unchecked, as verify-ca means, and the chain does not.
    pub fn replication(&self, host: &str) -> pgwire_replication::TlsConfig {
        use pgwire_replication::SslMode;
        let name = match self.mode {
            TlsMode::VerifyCa => self.presented_name(),
            _ => None,
        };
        pgwire_replication::TlsConfig {
            mode: match self.mode {
                TlsMode::Disable => SslMode::Disable,
                TlsMode::Prefer => SslMode::Prefer,
                TlsMode::Require => SslMode::Require,
                TlsMode::VerifyCa => SslMode::VerifyCa,
                TlsMode::VerifyFull => SslMode::VerifyFull,
            },
            ca_pem_path: self.root_cert.clone(),
            // The host connected to, an IP address included (left unset, the crate refuses
            // verify-full to an IP address).
            sni_hostname: Some(name.unwrap_or_else(|| host.to_string())),
            client_cert_pem_path: self.client_cert.clone(),
            client_key_pem_path: self.client_key.clone(),
        }
    }

    /// Whether a server has shown a certificate to a connection made with these settings
    /// (under `prefer`: whether the session was encrypted at all).
    pub fn handshook(&self) -> bool {
        self.presented
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }

    /// A name the presented certificate is valid for: a DNS name of its subjectAltName (a
    /// wildcard's with a label in place of `*`), else an IP address of it.
    fn presented_name(&self) -> Option<String> {
        let der = self
            .presented
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()?;
        let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
        let mut ip = None;
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    x509_parser::extensions::GeneralName::DNSName(dns) => {
                        return Some(dns.replacen("*.", "sluice-outbox.", 1));
                    }
                    x509_parser::extensions::GeneralName::IPAddress(bytes) => {
                        ip = ip.or(match bytes.len() {
                            4 => <[u8; 4]>::try_from(*bytes)
                                .ok()
                                .map(|b| std::net::IpAddr::from(b).to_string()),
                            16 => <[u8; 16]>::try_from(*bytes)
                                .ok()
                                .map(|b| std::net::IpAddr::from(b).to_string()),
                            _ => None,
                        });
                    }
                    _ => {}
                }
            }
        }
        // Not the CN: webpki matches names against the subjectAltName only.
        ip
    }
}

fn setup(source: &str, what: &str) -> OutboxError {
    OutboxError::Setup(format!("--source {:?}: {what}", redact(source)))
}

fn read_certs(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, OutboxError> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| OutboxError::Setup(format!("{}: {e}", path.display())))?
        .collect();
    let certs =
        certs.map_err(|e| OutboxError::Setup(format!("{}: not PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(OutboxError::Setup(format!(
            "{}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

/// Splits `names` out of the URL's query: the URL without them (the other parameters kept as
/// written) and their percent-decoded values.
///
/// The query starts at the first `?` after the credentials, which end at the first `@`, as
/// tokio-postgres reads them: a `?` in a password is not the query (taking it for one left a
/// `sslmode=require` behind for the driver while this read the default).
fn take_params(source: &str, names: &[&str]) -> (String, Vec<(String, String)>) {
    let after_scheme = source.find("://").map_or(0, |i| i + 3);
    let after_creds = source[after_scheme..]
        .find('@')
        .map_or(after_scheme, |i| after_scheme + i + 1);
    let Some(mark) = source[after_creds..].find('?').map(|i| after_creds + i) else {
        return (source.to_string(), Vec::new());
    };
    let (base, query) = (&source[..mark], &source[mark + 1..]);
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if names.contains(&key) {
            let value = percent_encoding::percent_decode_str(value)
                .decode_utf8_lossy()
                .into_owned();
            taken.push((key.to_string(), value));
        } else {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, taken)
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// How the server's certificate is taken, per mode: under `prefer` and `require` any is
/// (encrypted, the peer not authenticated: libpq's meaning of them), under `verify-ca` its chain
/// is verified and not its name, under `verify-full` both. The handshake's signatures are
/// checked in every mode. The certificate shown is kept ([`DbTls::handshook`],
/// [`DbTls::replication`]).
#[derive(Debug)]
struct ServerCheck {
    provider: Arc<CryptoProvider>,
    /// The chain's verifier; `None`: the certificate is not verified.
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    presented: Arc<Mutex<Option<Vec<u8>>>>,
}

impl ServerCertVerifier for ServerCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = match &self.chain {
            None => ServerCertVerified::assertion(),
            Some(chain) => {
                match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
                    Err(rustls::Error::InvalidCertificate(
                        rustls::CertificateError::NotValidForName
                        | rustls::CertificateError::NotValidForNameContext { .. },
                    )) if !self.check_name => ServerCertVerified::assertion(),
                    other => other?,
                }
            }
        };
        *self
            .presented
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(end_entity.to_vec());
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_parameters_are_taken_out_of_the_url() {
        let (rest, tls) = DbTls::from_postgres_url(
            "postgres://app:pw@db:5432/shop?application_name=x&sslmode=require&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://app:pw@db:5432/shop?application_name=x&connect_timeout=3"
        );
        assert_eq!(tls.mode, TlsMode::Require);
        let (rest, tls) = DbTls::from_postgres_url("postgres://app@db/shop").unwrap();
        assert_eq!(rest, "postgres://app@db/shop");
        assert_eq!(tls.mode, TlsMode::Prefer, "libpq's default");
        let (rest, tls) =
            DbTls::from_postgres_url("postgres://app@db/shop?sslmode=disable").unwrap();
        assert_eq!(rest, "postgres://app@db/shop");
        assert_eq!(tls.mode, TlsMode::Disable);
    }

    #[test]
    fn a_question_mark_in_the_password_is_not_the_query() {
        let (rest, tls) =
            DbTls::from_postgres_url("postgres://u:p?x@db/s?sslmode=require").unwrap();
        assert_eq!(rest, "postgres://u:p?x@db/s");
        assert_eq!(tls.mode, TlsMode::Require);
        let (rest, tls) = DbTls::from_postgres_url("postgres://u:p?sslmode=disable@db/s").unwrap();
        assert_eq!(rest, "postgres://u:p?sslmode=disable@db/s");
        assert_eq!(tls.mode, TlsMode::Prefer);
    }

    #[test]
    fn bad_modes_and_missing_files_are_named() {
        let err = |s: &str| DbTls::from_postgres_url(s).unwrap_err().to_string();
        assert!(err("postgres://a:secret@db/x?sslmode=bogus").contains("sslmode=bogus"));
        assert!(!err("postgres://a:secret@db/x?sslmode=bogus").contains("secret"));
        assert!(err("postgres://a@db/x?sslmode=verify-full").contains("sslrootcert=FILE"));
        assert!(
            err("postgres://a@db/x?sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem")
                .contains("sslrootcert=/nonexistent/ca.pem: no such file")
        );
        assert!(err("postgres://a@db/x?sslmode=allow").contains("not supported"));
        let mysql = |s: &str| DbTls::from_mysql_url(s).unwrap_err().to_string();
        assert!(mysql("mysql://a@db/x?ssl-mode=PREFERRED").contains("not supported"));
        assert!(mysql("mysql://a@db/x?ssl-mode=VERIFY_CA").contains("ssl-ca=FILE"));
        assert!(mysql("mysql://a@db/x?require_ssl=true").contains("ssl-mode=REQUIRED"));
        assert!(mysql("mysql://a@db/x?ssl-mode=REQUIRED&ssl-ca=/etc/hosts").contains("ignored"));
        let (rest, tls) = DbTls::from_mysql_url("mysql://a@db/x?ssl-mode=required").unwrap();
        assert_eq!(rest, "mysql://a@db/x");
        assert_eq!(tls.mode, TlsMode::Require);
        assert_eq!(
            DbTls::from_mysql_url("mysql://a@db/x").unwrap().1.mode,
            TlsMode::Disable
        );
    }

    #[test]
    fn require_with_a_root_certificate_verifies_the_chain_as_libpq_does() {
        let dir = std::env::temp_dir().join(format!("sluice-outbox-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "not used").unwrap();
        let url = format!(
            "postgres://a@db/x?sslmode=require&sslrootcert={}",
            ca.display()
        );
        let (_, tls) = DbTls::from_postgres_url(&url).unwrap();
        assert_eq!(tls.mode, TlsMode::VerifyCa);
        assert_eq!(tls.root_cert.as_deref(), Some(ca.as_path()));
        // A file that is not PEM is refused when the connection's configuration is built.
        assert!(tls.client_config().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
