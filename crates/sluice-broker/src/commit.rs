//! Waiting for a coordinator's writes to be committed: on a single node that is durable (the
//! internal topics fsync every write), in a cluster it is the high watermark passing them (a
//! quorum of replicas holds them). Every coordinator write goes through [`committed`], and a
//! write that is not committed answers an error, never success.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use sluice_log::Offset;

use crate::error::BrokerError;
use crate::partition::Partition;

/// How long a coordinator write may take to commit (Kafka's `offsets.commit.timeout.ms`).
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// The writes to wait for: (partition, the offset after the last record written).
pub type Waits = Vec<(Arc<Partition>, Offset)>;

/// Waits until every write is committed. A leadership change answers `NOT_COORDINATOR` (the
/// client finds the new coordinator); a failed log or a timeout `COORDINATOR_NOT_AVAILABLE`.
pub async fn committed(waits: Waits) -> Result<(), ResponseError> {
    // Every partition's leader epoch now, before the first wait: the later ones begin only
    // when the earlier are committed (see `Partition::wait_committed_in`).
    let epochs: Vec<i32> = waits.iter().map(|(p, _)| p.progress().epoch).collect();
    for ((partition, end), epoch) in waits.into_iter().zip(epochs) {
        match tokio::time::timeout(COMMIT_TIMEOUT, partition.wait_committed_in(end, epoch)).await {
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
pub fn unsettled(partition: &Arc<Partition>) -> Option<(Arc<Partition>, Offset)> {
    let progress = partition.progress();
    (progress.visible < progress.end).then(|| (Arc::clone(partition), progress.end))
}

/// What an answer read from a coordinator's state waits on, in a cluster
/// ([`crate::shards::Shards::read_fence`]): everything `partition` holds now committed (`None`
/// when it is). Where the replica no longer leads (it stepped down, or its log was cut back)
/// the state may hold what another leader never will: the wait is then for the offset past
/// its log end, which [`committed`] answers at once with NOT_COORDINATOR.
pub fn fence(partition: &Arc<Partition>) -> Option<(Arc<Partition>, Offset)> {
    let progress = partition.progress();
    if !progress.leading {
        return Some((Arc::clone(partition), progress.end.plus(1)));
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
