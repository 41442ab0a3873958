//! The ACLs in force: on a single node in `data/meta/acls.json` (replaced and fsynced on every
//! change), in a cluster in the metadata log (every node applies the same ACLs, as Kafka's
//! KRaft controllers do).

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use sluice_auth::acl::{AclBinding, AclFilter, AclSet};

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::metadata_store::MetadataStore;

/// The single node's ACLs, as loaded from its metadata store.
#[derive(Debug)]
pub struct LocalAcls {
    store: Arc<MetadataStore>,
    acls: RwLock<Arc<AclSet>>,
    /// Serializes changes: each is read, changed and written whole.
    writing: Mutex<()>,
}

impl LocalAcls {
    pub fn open(store: Arc<MetadataStore>) -> Result<LocalAcls, BrokerError> {
        let acls = store.load_acls()?;
        Ok(LocalAcls {
            store,
            acls: RwLock::new(Arc::new(acls)),
            writing: Mutex::new(()),
        })
    }

    fn change(
        &self,
        edit: impl FnOnce(&mut AclSet) -> Vec<Vec<AclBinding>>,
    ) -> Result<Vec<Vec<AclBinding>>, BrokerError> {
        let _writing = self.writing.lock();
        let mut acls = AclSet::clone(&self.acls.read());
        let answer = edit(&mut acls);
        if acls != **self.acls.read() {
            self.store.save_acls(&acls)?;
            *self.acls.write() = Arc::new(acls);
        }
        Ok(answer)
    }
}

/// The ACLs one decision reads: a snapshot, so a request sees one set throughout.
pub enum AclSnapshot {
    Local(Arc<AclSet>),
    Cluster(Arc<sluice_cluster::raft::state_machine::Applied>),
}

impl std::ops::Deref for AclSnapshot {
    type Target = AclSet;

    fn deref(&self) -> &AclSet {
        match self {
            AclSnapshot::Local(acls) => acls,
            AclSnapshot::Cluster(applied) => &applied.state.acls,
        }
    }
}

impl Broker {
    /// The ACLs in force now.
    pub fn acls(&self) -> AclSnapshot {
        match self.replication.get() {
            Some(r) => AclSnapshot::Cluster(r.state()),
            None => AclSnapshot::Local(Arc::clone(&self.local_acls.acls.read())),
        }
    }

    /// Adds ACLs (already validated), durably: fsynced (single node) or committed and
    /// applied on this node (cluster).
    pub async fn create_acls(&self, acls: Vec<AclBinding>) -> Result<(), BrokerError> {
        match self.replication.get().cloned() {
            Some(replication) => {
                let before = replication.state().state.acls.clone();
                replication
                    .ask(sluice_cluster::requests::ControllerRequest::CreateAcls {
                        acls: acls.clone(),
                    })
                    .await?;
                // Committed once asked; wait until this node shows them, or shows another
                // change (a deletion another node made meanwhile may have removed one).
                replication
                    .applied_until(|s| {
                        acls.iter().all(|a| s.acls.iter().any(|b| b == a)) || s.acls != before
                    })
                    .await
            }
            None => {
                self.local_change(move |set| {
                    set.add(acls);
                    Vec::new()
                })
                .await?;
                Ok(())
            }
        }
    }

    /// Removes the ACLs each filter matches; answers, per filter, what it removed.
    pub async fn delete_acls(
        &self,
        filters: Vec<AclFilter>,
    ) -> Result<Vec<Vec<AclBinding>>, BrokerError> {
        match self.replication.get().cloned() {
            Some(replication) => {
                let before = replication.state().state.acls.clone();
                let reply = replication
                    .ask(sluice_cluster::requests::ControllerRequest::DeleteAcls { filters })
                    .await?;
                let sluice_cluster::requests::ControllerReply::AclsDeleted(deleted) = reply else {
                    return Err(BrokerError::ControllerUnavailable(format!(
                        "unexpected controller answer {reply:?}"
                    )));
                };
                replication
                    .applied_until(|s| {
                        deleted
                            .iter()
                            .flatten()
                            .all(|a| s.acls.iter().all(|b| b != a))
                            || s.acls != before
                    })
                    .await?;
                Ok(deleted)
            }
            None => {
                self.local_change(move |set| {
                    let deleted: Vec<Vec<AclBinding>> =
                        filters.iter().map(|f| set.matching(f)).collect();
                    let all: Vec<AclBinding> = deleted.iter().flatten().cloned().collect();
                    set.remove(&all);
                    deleted
                })
                .await
            }
        }
    }

    async fn local_change(
        &self,
        edit: impl FnOnce(&mut AclSet) -> Vec<Vec<AclBinding>> + Send + 'static,
    ) -> Result<Vec<Vec<AclBinding>>, BrokerError> {
        let Some(broker) = self.arc() else {
            return Err(BrokerError::ControllerUnavailable(
                "the broker is shutting down".into(),
            ));
        };
        tokio::task::spawn_blocking(move || broker.local_acls.change(edit))
            .await
            .map_err(|e| BrokerError::ControllerUnavailable(e.to_string()))?
    }
}
