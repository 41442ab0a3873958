//! The metadata state machine: applies committed commands to a [`ClusterState`] and publishes
//! each new state on a watch channel (the broker and the controller read it there). Snapshots
//! are the state as JSON, kept in `<dir>/snapshot.json`.

// openraft's `StorageError` is the error type its storage traits require; helpers return it too.
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{CommandOutcome, MetaTypes, StorageError};
use crate::metadata::ClusterState;

/// The applied metadata, as published.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Applied {
    pub state: ClusterState,
    pub last_applied: Option<LogId<u64>>,
    pub membership: StoredMembership<u64, BasicNode>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, BasicNode>,
    applied: Applied,
}

pub struct StateMachine {
    dir: PathBuf,
    applied: Applied,
    published: watch::Sender<Arc<Applied>>,
}

impl std::fmt::Debug for StateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateMachine(applied {:?})", self.applied.last_applied)
    }
}

fn sm_error(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_state_machine(openraft::AnyError::new(&e)).into()
}

impl StateMachine {
    /// The state machine restored from `<dir>/snapshot.json` if there is one, and a receiver
    /// of its states.
    pub fn open(dir: &Path) -> std::io::Result<(StateMachine, watch::Receiver<Arc<Applied>>)> {
        std::fs::create_dir_all(dir)?;
        let applied = read_snapshot(dir)?.map(|s| s.applied).unwrap_or_default();
        let (published, rx) = watch::channel(Arc::new(applied.clone()));
        Ok((
            StateMachine {
                dir: dir.to_path_buf(),
                applied,
                published,
            },
            rx,
        ))
    }

    fn publish(&self) {
        self.published.send_replace(Arc::new(self.applied.clone()));
    }
}

fn read_snapshot(dir: &Path) -> std::io::Result<Option<StoredSnapshot>> {
    match std::fs::read(dir.join("snapshot.json")) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes).map_err(std::io::Error::other)?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `<dir>/snapshot.json` atomically (temporary file, fsync, rename, fsync the directory).
fn write_snapshot(dir: &Path, snapshot: &StoredSnapshot) -> Result<(), StorageError> {
    let json = serde_json::to_vec(snapshot).map_err(sm_error)?;
    sluice_log::replace_file(dir, "snapshot.json", &json).map_err(sm_error)
}

fn snapshot_of(stored: StoredSnapshot) -> Result<Snapshot<MetaTypes>, StorageError> {
    let data = serde_json::to_vec(&stored.applied).map_err(sm_error)?;
    Ok(Snapshot {
        meta: stored.meta,
        snapshot: Box::new(Cursor::new(data)),
    })
}

/// Builds a snapshot from the state as it is when asked.
pub struct SnapshotBuilder {
    applied: Applied,
    dir: PathBuf,
}

impl RaftSnapshotBuilder<MetaTypes> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<MetaTypes>, StorageError> {
        let meta = SnapshotMeta {
            last_log_id: self.applied.last_applied,
            last_membership: self.applied.membership.clone(),
            snapshot_id: format!("{}", self.applied.last_applied.map_or(0, |l| l.index)),
        };
        let stored = StoredSnapshot {
            meta,
            applied: self.applied.clone(),
        };
        write_snapshot(&self.dir, &stored)?;
        snapshot_of(stored)
    }
}

impl RaftStateMachine<MetaTypes> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError> {
        Ok((self.applied.last_applied, self.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandOutcome>, StorageError>
    where
        I: IntoIterator<Item = Entry<MetaTypes>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut outcomes = Vec::new();
        for entry in entries {
            self.applied.last_applied = Some(entry.log_id);
            let outcome = match entry.payload {
                EntryPayload::Blank => CommandOutcome::default(),
                EntryPayload::Membership(m) => {
                    self.applied.membership = StoredMembership::new(Some(entry.log_id), m);
                    CommandOutcome::default()
                }
                EntryPayload::Normal(command) => {
                    // All the records of a command or none of them.
                    let mut next = self.applied.state.clone();
                    match command.records.iter().try_for_each(|r| next.apply(r)) {
                        Ok(()) => {
                            self.applied.state = next;
                            CommandOutcome::default()
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, at = %entry.log_id, "metadata command refused");
                            CommandOutcome {
                                refused: Some(e.to_string()),
                            }
                        }
                    }
                }
            };
            outcomes.push(outcome);
        }
        self.publish();
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            applied: self.applied.clone(),
            dir: self.dir.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let applied: Applied = serde_json::from_slice(snapshot.get_ref()).map_err(sm_error)?;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            applied,
        };
        write_snapshot(&self.dir, &stored)?;
        self.applied = stored.applied;
        self.publish();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<MetaTypes>>, StorageError> {
        read_snapshot(&self.dir)
            .map_err(sm_error)?
            .map(snapshot_of)
            .transpose()
    }
}
