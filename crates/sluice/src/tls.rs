//! TLS for the Kafka listeners: the certificate chain and key from PEM files, TLS 1.2 and 1.3
//! only, client certificates off, requested or required. Everything is checked at start (a
//! missing or unreadable file, a key that does not match the certificate, an expired
//! certificate stop `serve` with a message naming it), and the files are watched: a changed
//! certificate is loaded for new connections without a restart (open ones keep theirs); one
//! that fails the same checks is logged and the previous one stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};
use sluice_wire::rustls::pki_types::pem::PemObject;
use sluice_wire::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sluice_wire::rustls::server::WebPkiClientVerifier;
use sluice_wire::rustls::{self, RootCertStore, ServerConfig};
use sluice_wire::TlsAcceptorCell;
use tokio_util::sync::CancellationToken;

/// Kafka's `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub certificate: PathBuf,
    pub key: PathBuf,
    pub client_auth: ClientAuth,
    pub client_ca: Option<PathBuf>,
    pub reload_interval: Duration,
}

impl TlsSettings {
    /// The TLS settings, checked for consistency; `None` when no listener needs TLS (then
    /// none of them may be set, so that a typo in `listeners` does not go unnoticed).
    pub fn resolve(
        needed: bool,
        certificate: Option<PathBuf>,
        key: Option<PathBuf>,
        client_auth: Option<&str>,
        client_ca: Option<PathBuf>,
        reload_interval_ms: Option<u64>,
    ) -> anyhow::Result<Option<TlsSettings>> {
        // A CA file turns client certificates on (required unless said otherwise).
        let default_auth = if client_ca.is_some() {
            "required"
        } else {
            "none"
        };
        let client_auth = match client_auth.unwrap_or(default_auth) {
            "none" => ClientAuth::None,
            "requested" => ClientAuth::Requested,
            "required" => ClientAuth::Required,
            other => bail!("tls_client_auth must be none, requested or required, not '{other}'"),
        };
        if !needed {
            if certificate.is_some() || key.is_some() || client_ca.is_some() {
                bail!(
                    "tls_cert_file, tls_key_file or tls_client_ca_file is set but no listener is SSL or \
                     SASL_SSL"
                );
            }
            return Ok(None);
        }
        let (Some(certificate), Some(key)) = (certificate, key) else {
            bail!("an SSL or SASL_SSL listener needs tls_cert_file and tls_key_file (PEM files)");
        };
        if client_auth == ClientAuth::None && client_ca.is_some() {
            bail!("tls_client_ca_file is set but tls_client_auth is none: drop one of them");
        }
        if client_auth != ClientAuth::None && client_ca.is_none() {
            bail!("tls_client_auth={client_auth:?} needs tls_client_ca_file: the authorities client certificates must chain to");
        }
        let reload_interval = Duration::from_millis(reload_interval_ms.unwrap_or(10_000));
        if reload_interval < Duration::from_millis(100) {
            bail!("tls_reload_interval_ms must be at least 100");
        }
        Ok(Some(TlsSettings {
            certificate,
            key,
            client_auth,
            client_ca,
            reload_interval,
        }))
    }

    /// Reads the files and builds the server configuration.
    pub fn load(&self) -> anyhow::Result<Arc<ServerConfig>> {
        let chain = load_chain(&self.certificate, "tls_cert_file")?;
        let key = load_key(&self.key, "tls_key_file")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .context("TLS 1.2 and 1.3")?;
        let builder = match (&self.client_ca, self.client_auth) {
            (Some(ca), auth) if auth != ClientAuth::None => {
                let roots = load_roots(ca, "tls_client_ca_file")?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if auth == ClientAuth::Requested {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                builder.with_client_cert_verifier(
                    verifier
                        .build()
                        .with_context(|| format!("tls_client_ca_file {}", ca.display()))?,
                )
            }
            _ => builder.with_no_client_auth(),
        };
        let config = builder.with_single_cert(chain, key).with_context(|| {
            format!(
                "tls_cert_file {} with tls_key_file {}",
                self.certificate.display(),
                self.key.display()
            )
        })?;
        Ok(Arc::new(config))
    }

    /// Reloads the configuration into `cells` whenever a file's modification time changes.
    pub fn watch(self, cells: Vec<Arc<TlsAcceptorCell>>, shutdown: CancellationToken) {
        self.watch_with(shutdown, move |config| {
            for cell in &cells {
                cell.replace(Arc::clone(&config));
            }
        });
    }

    /// Hands the configuration to `install` whenever a file's modification time changes (a
    /// file that cannot be used is logged and the previous configuration stays).
    pub fn watch_with(
        self,
        shutdown: CancellationToken,
        install: impl Fn(Arc<ServerConfig>) + Send + Sync + 'static,
    ) {
        let files = [
            Some(&self.certificate),
            Some(&self.key),
            self.client_ca.as_ref(),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
        let interval = self.reload_interval;
        watch_files(files, interval, shutdown, move || {
            install(self.load()?);
            tracing::info!(certificate = %self.certificate.display(), "TLS certificate reloaded");
            Ok(())
        });
    }
}

/// Calls `reload` (on a blocking thread) whenever the modification time of one of `files`
/// changes; an error is logged, and whatever the last successful call installed stays.
pub fn watch_files(
    files: Vec<PathBuf>,
    interval: Duration,
    shutdown: CancellationToken,
    reload: impl Fn() -> anyhow::Result<()> + Send + Sync + 'static,
) {
    let stamps = move |files: &[PathBuf]| -> Vec<Option<SystemTime>> {
        files
            .iter()
            .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
            .collect()
    };
    let reload = Arc::new(reload);
    tokio::spawn(async move {
        let mut seen = stamps(&files);
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let now = stamps(&files);
            if now == seen {
                continue;
            }
            seen = now;
            let reload = Arc::clone(&reload);
            match tokio::task::spawn_blocking(move || reload()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(
                    error = format!("{e:#}"),
                    "the changed TLS files cannot be used; the previous certificate stays"
                ),
                Err(e) => tracing::error!(error = %e, "reloading TLS files failed"),
            }
        }
    });
}

/// A PEM certificate chain, leaf first, whose leaf is valid now; `setting` names the file in
/// errors.
pub fn load_chain(path: &Path, setting: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("{setting} {}", path.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("{setting} {}", path.display()))?;
    let Some(leaf) = chain.first() else {
        bail!(
            "{setting} {} holds no certificate (PEM 'BEGIN CERTIFICATE')",
            path.display()
        );
    };
    check_validity(leaf, path, setting)?;
    Ok(chain)
}

/// A PEM private key (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path, setting: &str) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .with_context(|| format!("{setting} {} (PEM private key)", path.display()))
}

/// The PEM authorities in `path` (at least one).
pub fn load_roots(path: &Path, setting: &str) -> anyhow::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path)
        .with_context(|| format!("{setting} {}", path.display()))?
    {
        let cert = cert.with_context(|| format!("{setting} {}", path.display()))?;
        roots
            .add(cert)
            .with_context(|| format!("{setting} {}", path.display()))?;
    }
    if roots.is_empty() {
        bail!("{setting} {} holds no certificate", path.display());
    }
    Ok(roots)
}

/// Refuses a certificate that is expired or not yet valid.
#[allow(clippy::disallowed_methods)] // the binary checks the certificate against the wall clock
fn check_validity(leaf: &CertificateDer<'_>, path: &Path, setting: &str) -> anyhow::Result<()> {
    let (not_before, not_after) = sluice_auth::validity(leaf.as_ref())
        .with_context(|| format!("{setting} {}", path.display()))?;
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if now > not_after {
        bail!(
            "{setting} {}: the certificate expired {} s ago (not after {} in Unix time)",
            path.display(),
            now - not_after,
            not_after
        );
    }
    if now < not_before {
        bail!(
            "{setting} {}: the certificate is not valid yet (not before {} in Unix time)",
            path.display(),
            not_before
        );
    }
    Ok(())
}
