//! SASL users and their SCRAM credentials: on a single node in `data/meta/users.json`
//! (replaced and fsynced on every change), in a cluster in the metadata log (every node
//! applies the same users). Only salted, hashed keys are kept (RFC 5802): never a password.

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use sluice_auth::{ScramCredential, ScramMechanism};

use super::session::UserCredentials;
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::metadata_store::{MetadataStore, Users};

/// The single node's users, as loaded from its metadata store.
#[derive(Debug)]
pub struct LocalUsers {
    store: Arc<MetadataStore>,
    users: RwLock<Users>,
    /// Serializes changes: each is read, changed and written whole.
    writing: Mutex<()>,
}

impl LocalUsers {
    pub fn open(store: Arc<MetadataStore>) -> Result<LocalUsers, BrokerError> {
        let users = store.load_users()?;
        Ok(LocalUsers {
            store,
            users: RwLock::new(users),
            writing: Mutex::new(()),
        })
    }

    fn change(&self, user: &str, change: &UserChange) -> Result<(), BrokerError> {
        let _writing = self.writing.lock();
        let mut users = self.users.read().clone();
        let updated = change.apply(users.get(user).cloned().unwrap_or_default());
        if updated.is_empty() {
            users.remove(user);
        } else {
            users.insert(user.to_string(), updated);
        }
        self.store.save_users(&users)?;
        *self.users.write() = users;
        Ok(())
    }
}

/// [`sluice_auth::SALT_BYTES`] bytes of salt from the operating system's random source
/// (through UUID v4).
pub fn fresh_salt() -> Vec<u8> {
    let mut salt = uuid::Uuid::new_v4().as_bytes().to_vec();
    salt.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    salt.truncate(sluice_auth::SALT_BYTES);
    salt
}

/// Changes to one user's credentials (AlterUserScramCredentials).
#[derive(Debug, Clone, Default)]
pub struct UserChange {
    pub upserts: Vec<ScramCredential>,
    pub deletions: Vec<ScramMechanism>,
}

impl UserChange {
    fn apply(&self, credentials: Vec<ScramCredential>) -> Vec<ScramCredential> {
        sluice_auth::apply_changes(credentials, &self.upserts, &self.deletions)
    }

    /// Whether `credentials` already show this change.
    fn shown_in(&self, credentials: Option<&Vec<ScramCredential>>) -> bool {
        let empty = Vec::new();
        let credentials = credentials.unwrap_or(&empty);
        self.upserts.iter().all(|u| credentials.contains(u))
            && self
                .deletions
                .iter()
                .all(|m| credentials.iter().all(|c| c.mechanism != *m))
    }
}

impl Broker {
    /// Every user and their credentials.
    pub fn users(&self) -> Users {
        match self.replication.get() {
            Some(r) => r.state().state.users.clone(),
            None => self.local_users.users.read().clone(),
        }
    }

    fn user_credentials(&self, user: &str) -> Option<Vec<ScramCredential>> {
        match self.replication.get() {
            Some(r) => r.state().state.users.get(user).cloned(),
            None => self.local_users.users.read().get(user).cloned(),
        }
    }

    /// Changes one user's credentials, durably: on return the change is fsynced (single
    /// node) or committed to the metadata log and applied on this node (cluster).
    pub async fn alter_user(&self, user: &str, change: UserChange) -> Result<(), BrokerError> {
        match self.replication.get().cloned() {
            Some(replication) => {
                let before = replication.state().state.users.get(user).cloned();
                replication
                    .ask(
                        sluice_cluster::requests::ControllerRequest::UserScramCredentials {
                            user: user.to_string(),
                            upserts: change.upserts.clone(),
                            deletions: change.deletions.clone(),
                        },
                    )
                    .await?;
                // Committed once asked; wait until this node shows it, or shows a later
                // change of the same user (which another node may have made meanwhile).
                replication
                    .applied_until(|s| {
                        let now = s.users.get(user);
                        change.shown_in(now) || now != before.as_ref()
                    })
                    .await
            }
            None => {
                let Some(broker) = self.arc() else {
                    return Err(BrokerError::ControllerUnavailable(
                        "the broker is shutting down".into(),
                    ));
                };
                let user = user.to_string();
                tokio::task::spawn_blocking(move || broker.local_users.change(&user, &change))
                    .await
                    .map_err(|e| BrokerError::ControllerUnavailable(e.to_string()))?
            }
        }
    }

    /// The credential lookups a login needs.
    pub(crate) fn user_lookup(&self) -> impl UserCredentials + '_ {
        Lookup(self)
    }
}

struct Lookup<'a>(&'a Broker);

impl UserCredentials for Lookup<'_> {
    fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        self.0
            .user_credentials(user)?
            .into_iter()
            .find(|c| c.mechanism == mechanism)
    }

    fn any(&self, user: &str) -> Option<ScramCredential> {
        // The strongest hash the user has.
        self.0
            .user_credentials(user)?
            .into_iter()
            .max_by_key(|c| c.mechanism.kafka_type())
    }
}
