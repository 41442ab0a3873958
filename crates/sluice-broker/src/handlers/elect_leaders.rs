//! ElectLeaders (KIP-460): move leadership back to preferred replicas, as
//! `kafka-leader-election.sh --election-type preferred` asks. The controller elects a
//! partition's preferred replica (the first of its replicas) where it is live and in sync;
//! otherwise PREFERRED_LEADER_NOT_AVAILABLE, and ELECTION_NOT_NEEDED where it leads already.
//! An unclean election (`--election-type unclean`) is made only when an operator asks for it,
//! and only of partitions without a leader: the first live replica leads, in sync or not, and
//! records only the lost in-sync replicas had are gone. It is the way back for a partition whose
//! in-sync replicas are lost for good (a wiped disk); ELECTION_NOT_NEEDED where one leads,
//! ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is alive.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, ResponseKind};
use sluice_cluster::controller::Election;
use sluice_wire::Reply;

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 2);

const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

/// One partition's outcome: its error code and why.
type Outcome = (String, i32, Result<(), (i16, String)>);

pub fn handle(broker: &Broker, request: ElectLeadersRequest, call: &Call) -> Reply {
    let version = call.version;
    let election_type = if version >= 1 {
        request.election_type
    } else {
        PREFERRED
    };
    let named: Option<Vec<(String, i32)>> = request.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.topic.to_string(), *p)))
            .collect()
    });
    if election_type != PREFERRED && election_type != UNCLEAN {
        return Reply::Ready(Box::new(answer(
            version,
            Err((
                ResponseError::InvalidRequest.code(),
                format!("unknown election type {election_type}: 0 (preferred) or 1 (unclean)"),
            )),
            Vec::new(),
        )));
    }
    let Some(replication) = broker.replication().cloned() else {
        // One node: every partition is led by its only, preferred replica.
        let outcomes = named
            .unwrap_or_default()
            .into_iter()
            .map(|(topic, index)| {
                let known = broker
                    .topics()
                    .get(&topic)
                    .is_some_and(|t| t.partition(index).is_some());
                let outcome = if known {
                    Err((
                        ResponseError::ElectionNotNeeded.code(),
                        "the only replica leads".into(),
                    ))
                } else {
                    Err(unknown())
                };
                (topic, index, outcome)
            })
            .collect();
        return Reply::Ready(Box::new(answer(version, Ok(()), outcomes)));
    };
    let unclean = election_type == UNCLEAN;
    let broker = broker.arc();
    Reply::Later(Box::pin(async move {
        let asked = named.clone();
        let elected = match (unclean, broker) {
            (true, Some(broker)) => broker.elect_unclean(asked).await,
            (true, None) => Err(crate::error::BrokerError::ControllerUnavailable(
                "the broker is shutting down".into(),
            )),
            (false, _) => replication.elect_preferred(asked).await,
        };
        Some(match elected {
            Ok(outcomes) => answer(
                version,
                Ok(()),
                outcomes
                    .into_iter()
                    .map(|(topic, index, e)| (topic, index, outcome(e)))
                    .collect(),
            ),
            Err(e) => {
                let failed = (e.code(), e.to_string());
                let outcomes = named
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(topic, index)| (topic, index, Err(failed.clone())))
                    .collect();
                answer(version, Err(failed), outcomes)
            }
        })
    }))
}

fn unknown() -> (i16, String) {
    (
        ResponseError::UnknownTopicOrPartition.code(),
        "unknown topic or partition".into(),
    )
}

fn outcome(e: Election) -> Result<(), (i16, String)> {
    match e {
        Election::Elected => Ok(()),
        Election::NotNeeded => Err((
            ResponseError::ElectionNotNeeded.code(),
            "the partition is led already (by its preferred replica, for a preferred election)"
                .into(),
        )),
        Election::PreferredNotAvailable => Err((
            ResponseError::PreferredLeaderNotAvailable.code(),
            "the preferred replica is down or not in sync".into(),
        )),
        Election::NoLiveReplica => Err((
            ResponseError::EligibleLeadersNotAvailable.code(),
            "no replica of the partition is alive".into(),
        )),
        Election::UnknownPartition => Err(unknown()),
    }
}

/// The response: a request-wide error (v1+) and each partition's outcome, grouped by topic.
fn answer(version: i16, whole: Result<(), (i16, String)>, outcomes: Vec<Outcome>) -> ResponseKind {
    let mut results: Vec<ReplicaElectionResult> = Vec::new();
    for (topic, index, outcome) in outcomes {
        let entry = match outcome {
            Ok(()) => PartitionResult::default().with_partition_id(index),
            Err((code, message)) => PartitionResult::default()
                .with_partition_id(index)
                .with_error_code(code)
                .with_error_message(Some(str_bytes(&message))),
        };
        match results.iter_mut().find(|r| r.topic.as_str() == topic) {
            Some(r) => r.partition_result.push(entry),
            None => results.push(
                ReplicaElectionResult::default()
                    .with_topic(topic_name(&topic))
                    .with_partition_result(vec![entry]),
            ),
        }
    }
    let mut response = ElectLeadersResponse::default().with_replica_election_results(results);
    if let (Err((code, _)), true) = (whole, version >= 1) {
        response = response.with_error_code(code);
    }
    ResponseKind::ElectLeaders(response)
}
