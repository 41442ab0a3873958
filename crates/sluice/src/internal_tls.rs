//! Mutual TLS on the internal listener (`internal_tls_cert_file`, `internal_tls_key_file`,
//! `internal_tls_ca_file`): the files are checked at start (as the Kafka listeners' are) and
//! watched, a renewed certificate is used for new connections without a restart.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use sluice_cluster::raft::transport::{TlsConfigs, Transport};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
pub struct InternalTlsSettings {
    pub certificate: PathBuf,
    pub key: PathBuf,
    pub authority: PathBuf,
    pub reload_interval: Duration,
}

impl InternalTlsSettings {
    /// The settings, when any is given: then all three are needed, and a cluster.
    pub fn resolve(
        certificate: Option<PathBuf>,
        key: Option<PathBuf>,
        authority: Option<PathBuf>,
        clustered: bool,
        reload_interval: Duration,
    ) -> anyhow::Result<Option<InternalTlsSettings>> {
        let given = [&certificate, &key, &authority]
            .iter()
            .filter(|p| p.is_some())
            .count();
        if given == 0 {
            return Ok(None);
        }
        if !clustered {
            bail!("internal_tls_* settings need cluster: a single node has no internal listener");
        }
        let (Some(certificate), Some(key), Some(authority)) = (certificate, key, authority) else {
            bail!(
                "mutual TLS on the internal listener needs all of internal_tls_cert_file, \
                 internal_tls_key_file and internal_tls_ca_file"
            );
        };
        Ok(Some(InternalTlsSettings {
            certificate,
            key,
            authority,
            reload_interval,
        }))
    }

    /// Reads the files and builds both sides of mutual TLS.
    pub fn load(&self) -> anyhow::Result<TlsConfigs> {
        let chain = crate::tls::load_chain(&self.certificate, "internal_tls_cert_file")?;
        let key = crate::tls::load_key(&self.key, "internal_tls_key_file")?;
        let authority = crate::tls::load_roots(&self.authority, "internal_tls_ca_file")?;
        TlsConfigs::new(chain, key, authority).with_context(|| {
            format!(
                "internal_tls_cert_file {} with internal_tls_key_file {} and internal_tls_ca_file {}",
                self.certificate.display(),
                self.key.display(),
                self.authority.display()
            )
        })
    }

    /// Loads the certificates into `transport` again whenever a file changes (a file that
    /// cannot be used is logged and the previous certificates stay).
    pub fn watch(self, transport: Arc<Transport>, shutdown: CancellationToken) {
        let files = vec![
            self.certificate.clone(),
            self.key.clone(),
            self.authority.clone(),
        ];
        let interval = self.reload_interval;
        crate::tls::watch_files(files, interval, shutdown, move || {
            transport.replace_tls(self.load()?);
            tracing::info!(
                certificate = %self.certificate.display(),
                "internal listener's TLS certificate reloaded"
            );
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(
        files: [Option<&str>; 3],
        clustered: bool,
    ) -> anyhow::Result<Option<InternalTlsSettings>> {
        let [c, k, a] = files.map(|f| f.map(PathBuf::from));
        InternalTlsSettings::resolve(c, k, a, clustered, Duration::from_secs(10))
    }

    #[test]
    fn all_three_files_and_a_cluster_or_none() {
        assert!(resolve([None, None, None], false).unwrap().is_none());
        assert!(resolve([Some("c"), Some("k"), Some("a")], true)
            .unwrap()
            .is_some());
        let missing = resolve([Some("c"), Some("k"), None], true).unwrap_err();
        assert!(missing.to_string().contains("internal_tls_ca_file"));
        let single = resolve([Some("c"), Some("k"), Some("a")], false).unwrap_err();
        assert!(single.to_string().contains("need cluster"));
    }
}
