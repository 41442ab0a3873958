//! How the CLI's connections reach a broker: Kafka's `security.protocol` and what it needs,
//! as flags (and `SLUICE_*` variables) shared by the admin commands and `sluice bench`.

use anyhow::Context;

#[derive(Debug, Clone, clap::Args)]
pub struct SecurityArgs {
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (Kafka's security.protocol)
    #[arg(
        long,
        env = "SLUICE_SECURITY_PROTOCOL",
        default_value = "PLAINTEXT",
        global = true
    )]
    security_protocol: String,
    /// The PEM authorities the broker's certificate must chain to (SSL, SASL_SSL)
    #[arg(long, env = "SLUICE_TLS_CA_FILE", global = true)]
    tls_ca_file: Option<std::path::PathBuf>,
    /// SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN (SASL_*)
    #[arg(
        long,
        env = "SLUICE_SASL_MECHANISM",
        default_value = "SCRAM-SHA-512",
        global = true
    )]
    sasl_mechanism: String,
    /// The SASL user (SASL_*); the password comes from SLUICE_SASL_PASSWORD
    #[arg(long, env = "SLUICE_SASL_USERNAME", global = true)]
    sasl_username: Option<String>,
}

impl SecurityArgs {
    /// No TLS, no SASL.
    pub fn is_plaintext(&self) -> bool {
        self.security_protocol == "PLAINTEXT"
    }

    /// Sets how every connection this process opens reaches the brokers (once per process).
    pub fn configure(&self) -> anyhow::Result<()> {
        let (tls, sasl) = match self.security_protocol.as_str() {
            "PLAINTEXT" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            other => anyhow::bail!(
                "--security-protocol must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, not '{other}'"
            ),
        };
        let sasl = if sasl {
            let mechanism = sluice_auth::SaslMechanism::from_name(&self.sasl_mechanism)
                .with_context(|| {
                    format!(
                        "--sasl-mechanism must be SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN, not '{}'",
                        self.sasl_mechanism
                    )
                })?;
            let user = self
                .sasl_username
                .clone()
                .context("a SASL protocol needs --sasl-username (or SLUICE_SASL_USERNAME)")?;
            let password = std::env::var("SLUICE_SASL_PASSWORD")
                .ok()
                .filter(|p| !p.is_empty())
                .context("a SASL protocol needs the password in SLUICE_SASL_PASSWORD")?;
            Some(sluice_client::security::SaslLogin {
                mechanism,
                user,
                password,
            })
        } else {
            None
        };
        if tls && self.tls_ca_file.is_none() {
            anyhow::bail!(
                "--security-protocol {} needs --tls-ca-file",
                self.security_protocol
            );
        }
        sluice_client::security::configure(sluice_client::security::ClientSecurity {
            tls,
            tls_ca_file: self.tls_ca_file.clone(),
            sasl,
        })?;
        Ok(())
    }
}
