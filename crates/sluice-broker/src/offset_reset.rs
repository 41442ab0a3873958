//! Resetting a consumer group's committed offsets from the admin API, with a preview: what
//! `kafka-consumer-groups --reset-offsets` does. Only a group without members may be reset
//! (members would overwrite the new offsets with their next commit).

use serde::Serialize;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::group::coordinator::{offset_record, Committed};
use crate::group::state::GroupState;

/// Where to move the offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTo {
    Earliest,
    Latest,
    Offset(i64),
    /// The first offset with a timestamp at or after this (ms since the epoch); the end if none.
    Timestamp(i64),
    /// The current committed offset (or the end when none) moved by this much.
    ShiftBy(i64),
}

/// One partition's offset before and after.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct OffsetChange {
    pub topic: String,
    pub partition: i32,
    pub current_offset: Option<i64>,
    pub new_offset: i64,
}

/// Why a reset was refused.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    #[error("group '{group}' is {state} with {members} member(s); stop its consumers first")]
    GroupActive {
        group: String,
        state: &'static str,
        members: usize,
    },
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

impl Broker {
    /// Computes (and unless `dry_run`, commits and makes durable) new offsets for `group` on
    /// `topic`'s `partitions` (all when empty). Targets are clamped to the log's range.
    pub async fn reset_group_offsets(
        &self,
        group: &str,
        topic: &str,
        partitions: &[i32],
        to: ResetTo,
        dry_run: bool,
    ) -> Result<Vec<OffsetChange>, ResetError> {
        if group.is_empty() {
            return Err(BrokerError::InvalidRequest("the group id is empty".into()).into());
        }
        // Asked of a node that does not coordinate the group, say so before asking leaders.
        self.groups
            .check(group)
            .map_err(|_| not_coordinator(group))?;
        let count = self.partition_count_of(topic)?;
        let targets: Vec<i32> = if partitions.is_empty() {
            (0..count).collect()
        } else {
            for &i in partitions {
                if !(0..count).contains(&i) {
                    return Err(BrokerError::UnknownTopic(format!("{topic}-{i}")).into());
                }
            }
            partitions.to_vec()
        };
        // Read on each partition's leader, which may be another node (before the coordinator's
        // lock is taken: nothing the lock guards depends on them).
        let timestamp = match to {
            ResetTo::Timestamp(ts) => Some(ts),
            _ => None,
        };
        let bounds = self.offset_bounds(topic, &targets, timestamp).await?;
        let waits = {
            let mut coordinator = self
                .groups
                .lock_for(group)
                .map_err(|_| not_coordinator(group))?;
            let state = coordinator.state_of(group);
            let members = coordinator.group(group).map_or(0, |g| g.members.len());
            if !matches!(state, GroupState::Empty | GroupState::Dead) || members > 0 {
                return Err(ResetError::GroupActive {
                    group: group.to_string(),
                    state: state.name(),
                    members,
                });
            }
            let committed = coordinator.committed(group);
            let mut changes = Vec::with_capacity(targets.len());
            for (&partition, b) in targets.iter().zip(&bounds) {
                let (start, end) = (b.log_start, b.end);
                let current = committed
                    .and_then(|c| c.get(&(topic.to_string(), partition)))
                    .map(|c| c.offset);
                let wanted = match to {
                    ResetTo::Earliest => start,
                    ResetTo::Latest => end,
                    ResetTo::Offset(o) => o,
                    ResetTo::Timestamp(_) => b.at_time.unwrap_or(end),
                    ResetTo::ShiftBy(n) => current.unwrap_or(end).saturating_add(n),
                };
                changes.push(OffsetChange {
                    topic: topic.to_string(),
                    partition,
                    current_offset: current,
                    new_offset: wanted.clamp(start, end),
                });
            }
            if dry_run {
                return Ok(changes);
            }
            let now = self.groups.now_ms();
            let records: Vec<_> = changes
                .iter()
                .map(|c| {
                    offset_record(
                        group,
                        &c.topic,
                        c.partition,
                        Committed {
                            offset: c.new_offset,
                            leader_epoch: -1,
                            metadata: String::new(),
                            commit_timestamp_ms: now,
                        },
                    )
                })
                .collect();
            let waits = self
                .groups
                .record(&mut coordinator, &records)
                .map_err(|e| not_written(&format!("{e:?}")))?;
            tracing::info!(%group, %topic, partitions = changes.len(), "reset group offsets");
            (waits, changes)
        };
        let (waits, changes) = waits;
        crate::commit::committed(waits)
            .await
            .map_err(|e| not_written(&format!("{e:?}")))?;
        Ok(changes)
    }
}

fn not_coordinator(group: &str) -> BrokerError {
    BrokerError::NotLeader(format!(
        "this node does not coordinate group '{group}': ask the node that leads its {} partition",
        crate::group::OFFSETS_TOPIC
    ))
}

fn not_written(reason: &str) -> BrokerError {
    BrokerError::Log(sluice_log::LogError::Offline {
        path: crate::group::OFFSETS_TOPIC.into(),
        reason: format!("the new offsets were not committed: {reason}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::broker_with_records;

    #[tokio::test]
    async fn preview_then_commit() {
        let (_dir, broker) = broker_with_records("t", 10);
        let preview = broker
            .reset_group_offsets("g", "t", &[], ResetTo::Offset(4), true)
            .await
            .unwrap();
        assert_eq!(
            preview,
            vec![OffsetChange {
                topic: "t".into(),
                partition: 0,
                current_offset: None,
                new_offset: 4
            }]
        );
        assert!(
            broker.group_status("g").is_none(),
            "a preview commits nothing"
        );
        broker
            .reset_group_offsets("g", "t", &[0], ResetTo::Offset(4), false)
            .await
            .unwrap();
        let status = broker.group_status("g").unwrap();
        assert_eq!(status.offsets[0].committed_offset, 4);
        assert_eq!(status.offsets[0].lag, Some(6));

        let shifted = broker
            .reset_group_offsets("g", "t", &[], ResetTo::ShiftBy(-100), true)
            .await
            .unwrap();
        assert_eq!(shifted[0].current_offset, Some(4));
        assert_eq!(shifted[0].new_offset, 0, "clamped to the log start");
        let by_time = broker
            .reset_group_offsets("g", "t", &[], ResetTo::Timestamp(1_007), true)
            .await
            .unwrap();
        assert_eq!(by_time[0].new_offset, 7);
        let latest = broker
            .reset_group_offsets("g", "t", &[], ResetTo::Latest, true)
            .await
            .unwrap();
        assert_eq!(latest[0].new_offset, 10);
    }

    #[tokio::test]
    async fn bad_targets() {
        let (_dir, broker) = broker_with_records("t", 1);
        assert!(matches!(
            broker
                .reset_group_offsets("g", "nope", &[], ResetTo::Earliest, true)
                .await,
            Err(ResetError::Broker(BrokerError::UnknownTopic(_)))
        ));
        assert!(matches!(
            broker
                .reset_group_offsets("g", "t", &[3], ResetTo::Earliest, true)
                .await,
            Err(ResetError::Broker(BrokerError::UnknownTopic(_)))
        ));
        assert!(matches!(
            broker
                .reset_group_offsets("", "t", &[], ResetTo::Earliest, true)
                .await,
            Err(ResetError::Broker(BrokerError::InvalidRequest(_)))
        ));
    }
}
