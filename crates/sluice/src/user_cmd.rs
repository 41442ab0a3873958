//! `sluice user create|delete|list`: SASL users and their SCRAM credentials, over the Kafka
//! protocol (AlterUserScramCredentials, DescribeUserScramCredentials), so they work against
//! any Kafka broker too. The password is read from stdin or `SLUICE_USER_PASSWORD`, never
//! from the command line (other users can read a process's arguments), and is salted and
//! hashed before it leaves this process.

use std::io::{BufRead, Write};

use anyhow::{bail, Context};
use clap::Subcommand;
use sluice_auth::ScramMechanism;
use sluice_client::Client;

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user, or set its password (for SCRAM-SHA-256 and SCRAM-SHA-512 unless
    /// --mechanism says one); the password is the first line of stdin, or
    /// SLUICE_USER_PASSWORD
    Create {
        name: String,
        /// SCRAM-SHA-256 or SCRAM-SHA-512 [default: both]
        #[arg(long, short = 'm')]
        mechanism: Option<String>,
        /// PBKDF2 iterations, 4096 to 16384
        #[arg(long, default_value_t = sluice_auth::DEFAULT_ITERATIONS)]
        iterations: u32,
    },
    /// Delete a user (all its credentials, or one --mechanism's)
    Delete {
        name: String,
        #[arg(long, short = 'm')]
        mechanism: Option<String>,
    },
    /// List users and their mechanisms
    List,
}

fn mechanisms(named: Option<&str>) -> anyhow::Result<Vec<ScramMechanism>> {
    match named {
        None => Ok(vec![ScramMechanism::Sha256, ScramMechanism::Sha512]),
        Some(name) => ScramMechanism::from_name(name)
            .map(|m| vec![m])
            .with_context(|| format!("'{name}' is not SCRAM-SHA-256 or SCRAM-SHA-512")),
    }
}

fn read_password() -> anyhow::Result<String> {
    if let Ok(p) = std::env::var("SLUICE_USER_PASSWORD") {
        if !p.is_empty() {
            return Ok(p);
        }
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password from stdin")?;
    let password = line.trim_end_matches(['\r', '\n']).to_string();
    if password.is_empty() {
        bail!("no password: give it on stdin (first line) or in SLUICE_USER_PASSWORD");
    }
    Ok(password)
}

use sluice_broker::security::credentials::fresh_salt;

pub async fn run(bootstrap: &str, command: UserCommand) -> anyhow::Result<()> {
    let mut out = crate::stdout::lock();
    match command {
        UserCommand::Create {
            name,
            mechanism,
            iterations,
        } => {
            let mechanisms = mechanisms(mechanism.as_deref())?;
            if !(4096..=16384).contains(&iterations) {
                bail!("--iterations must be between 4096 and 16384, not {iterations}");
            }
            let password = read_password()?;
            let mut client = Client::connect(bootstrap, "sluice-cli").await?;
            for m in mechanisms {
                client
                    .set_scram_password(&name, m, &password, &fresh_salt(), iterations)
                    .await?;
                writeln!(out, "{name}: {} set ({iterations} iterations)", m.name())?;
            }
        }
        UserCommand::Delete { name, mechanism } => {
            let mut client = Client::connect(bootstrap, "sluice-cli").await?;
            let mechanisms = match mechanism {
                Some(m) => mechanisms(Some(&m))?,
                None => {
                    let described = client
                        .describe_users(Some(std::slice::from_ref(&name)))
                        .await?;
                    described
                        .iter()
                        .flat_map(|u| u.credentials.iter().map(|(m, _)| *m))
                        .collect()
                }
            };
            client.delete_scram_credentials(&name, &mechanisms).await?;
            writeln!(out, "{name}: deleted")?;
        }
        UserCommand::List => {
            let mut client = Client::connect(bootstrap, "sluice-cli").await?;
            for user in client.describe_users(None).await? {
                let creds: Vec<String> = user
                    .credentials
                    .iter()
                    .map(|(m, i)| format!("{} ({i} iterations)", m.name()))
                    .collect();
                writeln!(out, "{}\t{}", user.name, creds.join(", "))?;
            }
        }
    }
    Ok(())
}
