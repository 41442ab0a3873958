//! ListPartitionReassignments (KIP-455): the reassignments still running, as
//! `kafka-reassign-partitions.sh --verify` and `sluice topic reassignments` show them: each
//! partition's replicas (the target first, then those leaving), the ones being added and the
//! ones leaving. Any node answers from its applied metadata. Partitions named that are not
//! being moved are left out, as Kafka does; an unknown one is left out too.

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, ResponseKind,
};
use sluice_cluster::metadata::PartitionChange;
use sluice_cluster::NodeId;
use sluice_wire::Reply;

use super::topic_name;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 0);

pub fn handle(broker: &Broker, request: ListPartitionReassignmentsRequest, _call: &Call) -> Reply {
    let mut topics: Vec<OngoingTopicReassignment> = Vec::new();
    if let Some(replication) = broker.replication() {
        let applied = replication.state();
        let state = &applied.state;
        let named: Option<Vec<(String, i32)>> = request.topics.as_ref().map(|ts| {
            ts.iter()
                .flat_map(|t| t.partition_indexes.iter().map(|i| (t.name.to_string(), *i)))
                .collect()
        });
        let moving: Vec<(String, i32, &PartitionChange)> = match named {
            None => state
                .partitions()
                .filter(|(.., p)| p.reassigning())
                .map(|(t, i, p)| (t.name.clone(), i, p))
                .collect(),
            Some(named) => named
                .into_iter()
                .filter_map(|(name, i)| {
                    let (_, p) = state.partition_by_name(&name, i)?;
                    p.reassigning().then_some((name, i, p))
                })
                .collect(),
        };
        for (name, index, p) in moving {
            let ids = |nodes: &[NodeId]| nodes.iter().map(|n| BrokerId(n.0)).collect();
            let entry = OngoingPartitionReassignment::default()
                .with_partition_index(index)
                .with_replicas(ids(&p.replicas))
                .with_adding_replicas(ids(&p.adding))
                .with_removing_replicas(ids(&p.removing));
            match topics.iter_mut().find(|t| t.name.as_str() == name) {
                Some(t) => t.partitions.push(entry),
                None => topics.push(
                    OngoingTopicReassignment::default()
                        .with_name(topic_name(&name))
                        .with_partitions(vec![entry]),
                ),
            }
        }
    }
    Reply::Ready(Box::new(ResponseKind::ListPartitionReassignments(
        ListPartitionReassignmentsResponse::default().with_topics(topics),
    )))
}
