//! How this node's followers reach the leaders' Kafka listeners (Kafka's
//! `inter.broker.listener.name`): which listener, and with what — the node's internal
//! certificate as a client certificate and the authorities the leader's certificate must chain
//! to when that listener speaks TLS, a SASL login when it speaks SASL.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use sluice_auth::SaslMechanism;
use sluice_broker::replication::inter_broker::InterBroker;
use sluice_broker::security::SecurityProtocol;
use sluice_client::security::{ConnectionSecurity, SaslLogin};
use sluice_wire::rustls;
use tokio_util::sync::CancellationToken;

use crate::internal_tls::InternalTlsSettings;
use crate::settings::Listener;

/// What the settings give, before the files are read.
#[derive(Debug, Clone)]
pub struct InterBrokerSettings {
    /// The listener's name; `None`: the first listener.
    pub listener: Option<String>,
    pub protocol: SecurityProtocol,
    /// The authorities the leader's listener certificate must chain to (TLS listeners).
    pub authority: Option<PathBuf>,
    /// This node's certificate and key, presented to the leader (TLS listeners, when the
    /// internal listener has TLS).
    pub certificate: Option<(PathBuf, PathBuf)>,
    pub sasl: Option<SaslLogin>,
    pub reload_interval: Duration,
}

/// The settings as given (`inter_broker_*`). No `Debug`: it holds the password.
#[derive(Default)]
pub struct Given {
    pub listener_name: Option<String>,
    pub tls_ca_file: Option<PathBuf>,
    pub sasl_mechanism: Option<String>,
    pub sasl_username: Option<String>,
    pub sasl_password: Option<String>,
}

impl InterBrokerSettings {
    /// Checks the settings against the node's listeners: `None` for a single node (then none
    /// may be set).
    pub fn resolve(
        given: Given,
        listeners: &[Listener],
        clustered: bool,
        internal_tls: Option<&InternalTlsSettings>,
        client_certificates_required: bool,
        reload_interval: Duration,
    ) -> anyhow::Result<Option<InterBrokerSettings>> {
        let Given {
            listener_name,
            tls_ca_file,
            sasl_mechanism,
            sasl_username,
            sasl_password,
        } = given;
        let any = listener_name.is_some()
            || tls_ca_file.is_some()
            || sasl_mechanism.is_some()
            || sasl_username.is_some()
            || sasl_password.is_some();
        if !clustered {
            if any {
                bail!("inter_broker_* settings need cluster: a single node has no followers");
            }
            return Ok(None);
        }
        let listener = match &listener_name {
            Some(name) => listeners
                .iter()
                .find(|l| &l.name == name)
                .with_context(|| {
                    format!(
                        "inter_broker_listener_name {name} is none of this node's listeners ({})",
                        listeners
                            .iter()
                            .map(|l| l.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?,
            None => listeners.first().context("no Kafka listener")?,
        };
        let (name, protocol) = (&listener.name, listener.protocol);
        let (authority, certificate) = if protocol.uses_tls() {
            let authority = tls_ca_file
                .or_else(|| internal_tls.map(|t| t.authority.clone()))
                .with_context(|| {
                    format!(
                        "followers fetch over the {name} listener, which speaks TLS: give \
                         inter_broker_tls_ca_file (the authorities of the listeners' \
                         certificates) or internal_tls_ca_file"
                    )
                })?;
            let certificate = internal_tls.map(|t| (t.certificate.clone(), t.key.clone()));
            if certificate.is_none() && client_certificates_required {
                bail!(
                    "followers fetch over the {name} listener, which requires client certificates \
                     (tls_client_auth = required): give the nodes internal_tls_cert_file, \
                     internal_tls_key_file and internal_tls_ca_file (the followers present that \
                     certificate)"
                );
            }
            (Some(authority), certificate)
        } else {
            if tls_ca_file.is_some() {
                bail!("inter_broker_tls_ca_file is set but the {name} listener followers fetch over does not speak TLS");
            }
            (None, None)
        };
        let sasl = if protocol.uses_sasl() {
            let (Some(user), Some(password)) = (sasl_username, sasl_password) else {
                bail!(
                    "followers fetch over the {name} listener, which speaks SASL: give \
                     inter_broker_sasl_username and inter_broker_sasl_password \
                     (SLUICE_INTER_BROKER_SASL_PASSWORD), a user with ClusterAction on the cluster"
                );
            };
            let mechanism = sasl_mechanism.as_deref().unwrap_or("SCRAM-SHA-512");
            let mechanism = SaslMechanism::from_name(mechanism).with_context(|| {
                format!("inter_broker_sasl_mechanism '{mechanism}' is not SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN")
            })?;
            Some(SaslLogin {
                mechanism,
                user,
                password,
            })
        } else {
            if sasl_mechanism.is_some() || sasl_username.is_some() || sasl_password.is_some() {
                bail!("inter_broker_sasl_* is set but the {name} listener followers fetch over does not speak SASL");
            }
            None
        };
        Ok(Some(InterBrokerSettings {
            listener: listener_name,
            protocol,
            authority,
            certificate,
            sasl,
            reload_interval,
        }))
    }

    /// Reads the files: how a follower's connection to a leader is secured.
    pub fn load(&self) -> anyhow::Result<ConnectionSecurity> {
        let tls = match &self.authority {
            None => None,
            Some(authority) => {
                let setting = "inter_broker_tls_ca_file (or internal_tls_ca_file)";
                let roots = crate::tls::load_roots(authority, setting)?;
                let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
                .context("TLS 1.2 and 1.3")?
                .with_root_certificates(roots);
                let config = match &self.certificate {
                    None => builder.with_no_client_auth(),
                    Some((cert, key)) => builder
                        .with_client_auth_cert(
                            crate::tls::load_chain(cert, "internal_tls_cert_file")?,
                            crate::tls::load_key(key, "internal_tls_key_file")?,
                        )
                        .context("internal_tls_cert_file with internal_tls_key_file")?,
                };
                Some(Arc::new(config))
            }
        };
        Ok(ConnectionSecurity {
            tls,
            sasl: self.sasl.clone(),
        })
    }

    /// What the broker's followers use, loaded; its files watched and loaded again when they
    /// change (a renewed certificate is used from the next connection on).
    pub fn start(self, shutdown: CancellationToken) -> anyhow::Result<Arc<InterBroker>> {
        let inter_broker = Arc::new(InterBroker::new(self.listener.clone(), self.load()?));
        tracing::info!(
            listener = self.listener.as_deref().unwrap_or("(the first)"),
            protocol = ?self.protocol,
            client_certificate = self.certificate.is_some(),
            sasl_user = self.sasl.as_ref().map(|l| l.user.as_str()),
            "followers fetch from the leaders' inter-broker listener"
        );
        let mut files: Vec<PathBuf> = self.authority.iter().cloned().collect();
        if let Some((cert, key)) = &self.certificate {
            files.extend([cert.clone(), key.clone()]);
        }
        if !files.is_empty() {
            let installed = Arc::clone(&inter_broker);
            let interval = self.reload_interval;
            crate::tls::watch_files(files, interval, shutdown, move || {
                installed.replace_security(self.load()?);
                tracing::info!(
                    "the followers' TLS settings for the inter-broker listener reloaded"
                );
                Ok(())
            });
        }
        Ok(inter_broker)
    }
}
