//! Waiting for a coordinator's writes to be committed: on a single node that is durable (the
//! internal topics fsync every write), in a cluster it is the high watermark passing them (a
//! quorum of replicas holds them). Every coordinator write goes through [`committed`], and a
//! write that is not committed answers an error, never success.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use sluice_log::{LeaderEpoch, Offset};

use crate::error::BrokerError;
use crate::partition::Partition;

/// How long a coordinator write may take to commit (Kafka's `offsets.commit.timeout.ms`).
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// A write to wait for.
#[derive(Debug, Clone)]
pub struct Written {
    pub partition: Arc<Partition>,
    /// The offset after its last record.
    pub end: Offset,
    /// The leader epoch it was made in (see `Partition::wait_committed`).
    pub epoch: LeaderEpoch,
    /// A write (not a read's fence): once committed, enough replicas must still be in sync
    /// (`Partition::wait_committed_write`).
    pub write: bool,
}

impl Written {
    /// A write just made on `partition`, ending before `end`: in the partition's epoch now.
    /// Taken beside the write, not when its wait begins, which may be much later.
    pub fn now(partition: &Arc<Partition>, end: Offset) -> Written {
        Written {
            epoch: partition.progress().epoch,
            partition: Arc::clone(partition),
            end,
            write: true,
        }
    }
}

/// The writes to wait for.
pub type Waits = Vec<Written>;

/// Waits until every write is committed. A leadership change answers `NOT_COORDINATOR` (the
/// client finds the new coordinator); a failed log or a timeout `COORDINATOR_NOT_AVAILABLE`.
pub async fn committed(waits: Waits) -> Result<(), ResponseError> {
    for Written {
        partition,
        end,
        epoch,
        write,
    } in waits
    {
        let waited = if write {
            tokio::time::timeout(COMMIT_TIMEOUT, partition.wait_committed_write(end, epoch)).await
        } else {
            tokio::time::timeout(COMMIT_TIMEOUT, partition.wait_committed(end, epoch)).await
        };
        match waited {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(coordinator_error(&e)),
            Err(_) => {
                tracing::warn!(
                    ?partition,
                    end = end.0,
                    "a coordinator write was not committed in time"
                );
                return Err(ResponseError::CoordinatorNotAvailable);
            }
        }
    }
    Ok(())
}

/// What to wait for until everything `partition` holds now is committed; `None` when it is.
pub fn unsettled(partition: &Arc<Partition>) -> Option<Written> {
    // The log end with the epoch of its last record, read together: a new leader's tail not
    // committed yet was written in earlier epochs than the current one.
    let (end, newest) = partition.fetch_position();
    let progress = partition.progress();
    (progress.visible < end).then(|| Written {
        partition: Arc::clone(partition),
        end,
        epoch: newest.unwrap_or(progress.epoch),
        write: false,
    })
}

/// What an answer read from a coordinator's state waits on, in a cluster
/// ([`crate::shards::Shards::read_fence`]): everything `partition` holds now committed (`None`
/// when it is). Where the replica no longer leads (it stepped down, or its log was cut back)
/// the state may hold what another leader never will: the wait is then for the offset past
/// its log end, which [`committed`] answers at once with NOT_COORDINATOR.
pub fn fence(partition: &Arc<Partition>) -> Option<Written> {
    let progress = partition.progress();
    if !progress.leading {
        // No record is of epoch -1: the wait fails at once, leading again or not.
        return Some(Written {
            partition: Arc::clone(partition),
            end: progress.end.plus(1),
            epoch: LeaderEpoch(-1),
            write: false,
        });
    }
    unsettled(partition)
}

/// The error a coordinator answers for a write that failed.
pub fn coordinator_error(e: &BrokerError) -> ResponseError {
    match e {
        BrokerError::NotLeader(_) => ResponseError::NotCoordinator,
        other => {
            tracing::warn!(error = %other, "a coordinator write failed");
            ResponseError::CoordinatorNotAvailable
        }
    }
}
