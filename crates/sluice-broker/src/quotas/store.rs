//! Where the quotas live: a single node's `data/meta/quotas.json` (replaced and fsynced on
//! every change), a cluster's metadata log.

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use sluice_cluster::metadata::{ClientQuotas, QuotaEntity, QuotaValues};

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::metadata_store::MetadataStore;

#[derive(Debug)]
pub struct LocalQuotas {
    store: Arc<MetadataStore>,
    quotas: RwLock<Arc<ClientQuotas>>,
    writing: Mutex<()>,
}

impl LocalQuotas {
    pub fn open(store: Arc<MetadataStore>) -> Result<LocalQuotas, BrokerError> {
        let quotas = store.load_quotas()?;
        Ok(LocalQuotas {
            store,
            quotas: RwLock::new(Arc::new(quotas)),
            writing: Mutex::new(()),
        })
    }

    fn change(
        &self,
        entity: QuotaEntity,
        set: QuotaValues,
        remove: &[String],
    ) -> Result<(), BrokerError> {
        let _writing = self.writing.lock();
        let mut quotas = ClientQuotas::clone(&self.quotas.read());
        let mut values = quotas.get(&entity).cloned().unwrap_or_default();
        for key in remove {
            values.remove(key);
        }
        values.extend(set);
        quotas.set(entity, values);
        self.store.save_quotas(&quotas)?;
        *self.quotas.write() = Arc::new(quotas);
        Ok(())
    }
}

/// The quotas one request reads.
pub enum QuotaSnapshot {
    Local(Arc<ClientQuotas>),
    Cluster(Arc<sluice_cluster::raft::state_machine::Applied>),
}

impl std::ops::Deref for QuotaSnapshot {
    type Target = ClientQuotas;

    fn deref(&self) -> &ClientQuotas {
        match self {
            QuotaSnapshot::Local(q) => q,
            QuotaSnapshot::Cluster(applied) => &applied.state.client_quotas,
        }
    }
}

impl Broker {
    pub fn client_quotas(&self) -> QuotaSnapshot {
        match self.replication.get() {
            Some(r) => QuotaSnapshot::Cluster(r.state()),
            None => QuotaSnapshot::Local(Arc::clone(&self.local_quotas.quotas.read())),
        }
    }

    /// Sets and removes limits of one entity, durably (fsynced, or committed and applied
    /// here).
    pub async fn alter_client_quota(
        &self,
        entity: QuotaEntity,
        set: QuotaValues,
        remove: Vec<String>,
    ) -> Result<(), BrokerError> {
        match self.replication.get().cloned() {
            Some(replication) => {
                let before = replication
                    .state()
                    .state
                    .client_quotas
                    .get(&entity)
                    .cloned();
                let mut expected = before.clone().unwrap_or_default();
                for key in &remove {
                    expected.remove(key);
                }
                expected.extend(set.clone());
                let expected = (!expected.is_empty()).then_some(expected);
                let watched = entity.clone();
                // Always asked, even when this node's (possibly stale) view shows no change:
                // the controller decides on the latest state, so no update is lost.
                replication
                    .ask(sluice_cluster::requests::ControllerRequest::ClientQuota {
                        entity,
                        set,
                        remove,
                    })
                    .await?;
                // Committed once asked: wait until this node shows the values asked for, or
                // another change of the entity.
                replication
                    .applied_until(|s| {
                        let now = s.client_quotas.get(&watched);
                        now == expected.as_ref() || now != before.as_ref()
                    })
                    .await
            }
            None => {
                let Some(broker) = self.arc() else {
                    return Err(BrokerError::ControllerUnavailable(
                        "the broker is shutting down".into(),
                    ));
                };
                tokio::task::spawn_blocking(move || {
                    broker.local_quotas.change(entity, set, &remove)
                })
                .await
                .map_err(|e| BrokerError::ControllerUnavailable(e.to_string()))?
            }
        }
    }
}
