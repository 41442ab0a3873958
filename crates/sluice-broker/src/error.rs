//! Errors of broker operations, and the one place they become Kafka error codes.

use kafka_protocol::error::ResponseError;
use sluice_log::{BatchErrorKind, LogError, ProducerError};

use crate::topic_config::ConfigError;

/// Why a topic or partition operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    #[error("unknown topic or partition: {0}")]
    UnknownTopic(String),
    #[error("unknown topic id {0}")]
    UnknownTopicId(uuid::Uuid),
    #[error("{0}")]
    InvalidTopic(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    #[error("{0}")]
    InvalidRequest(String),
    /// A batch larger than the topic's `max.message.bytes` (as another node refused it).
    #[error("{0}")]
    MessageTooLarge(String),
    /// The ACLs do not allow the operation on the resource (TOPIC_, GROUP_, CLUSTER_ or
    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
    #[error("not authorized: {1}")]
    NotAuthorized(ResponseError, String),
    #[error("{0}")]
    NodeNotRegistered(String),
    /// The topic's configuration forbids the operation (e.g. DeleteRecords on a compacted-only
    /// topic).
    #[error("{0}")]
    PolicyViolation(String),
    #[error(transparent)]
    Log(#[from] LogError),
    /// This node does not lead the partition (any more): the client should refresh metadata.
    #[error("{0}")]
    NotLeader(String),
    #[error("{0}")]
    NotEnoughReplicas(String),
    /// An acks=all write was committed while fewer replicas than `min.insync.replicas` were
    /// in sync: it may be on fewer copies than asked.
    #[error("{0}")]
    NotEnoughReplicasAfterAppend(String),
    /// The cluster's controller could not be reached or did not decide in time.
    #[error("{0}")]
    ControllerUnavailable(String),
    /// A transactional write whose transaction ended while it was being verified.
    #[error("{0}")]
    InvalidTxnState(String),
    /// Done here, but the replicas did not follow in time.
    #[error("{0}")]
    TimedOut(String),
    #[error("metadata store {path}: {source}")]
    Metadata {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("metadata store {path} is unreadable: {reason}")]
    CorruptMetadata {
        path: std::path::PathBuf,
        reason: String,
    },
}

impl BrokerError {
    /// The Kafka error a client gets for this.
    pub fn response_error(&self) -> ResponseError {
        match self {
            BrokerError::TopicExists(_) => ResponseError::TopicAlreadyExists,
            BrokerError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
            BrokerError::UnknownTopicId(_) => ResponseError::UnknownTopicId,
            BrokerError::InvalidTopic(_) => ResponseError::InvalidTopicException,
            BrokerError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
            BrokerError::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
            BrokerError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
            BrokerError::InvalidConfig(_) => ResponseError::InvalidConfig,
            BrokerError::InvalidRequest(_) => ResponseError::InvalidRequest,
            BrokerError::MessageTooLarge(_) => ResponseError::MessageTooLarge,
            BrokerError::NotAuthorized(error, _) => *error,
            BrokerError::NodeNotRegistered(_) => ResponseError::BrokerIdNotRegistered,
            BrokerError::PolicyViolation(_) => ResponseError::PolicyViolation,
            BrokerError::Log(e) => log_error(e),
            BrokerError::NotLeader(_) => ResponseError::NotLeaderOrFollower,
            BrokerError::NotEnoughReplicas(_) => ResponseError::NotEnoughReplicas,
            BrokerError::NotEnoughReplicasAfterAppend(_) => {
                ResponseError::NotEnoughReplicasAfterAppend
            }
            BrokerError::InvalidTxnState(_) => ResponseError::InvalidTxnState,
            BrokerError::ControllerUnavailable(_) | BrokerError::TimedOut(_) => {
                ResponseError::RequestTimedOut
            }
            BrokerError::Metadata { .. } | BrokerError::CorruptMetadata { .. } => {
                ResponseError::KafkaStorageError
            }
        }
    }

    pub fn code(&self) -> i16 {
        self.response_error().code()
    }

    /// True when the error is the storage's fault.
    pub fn is_storage(&self) -> bool {
        matches!(self, BrokerError::Log(e) if e.is_storage())
    }
}

/// The Kafka error for a log failure.
pub fn log_error(e: &LogError) -> ResponseError {
    match e {
        LogError::Io { .. } | LogError::Offline { .. } => ResponseError::KafkaStorageError,
        LogError::Batch(b) => match b.kind() {
            BatchErrorKind::Corrupt => ResponseError::CorruptMessage,
            BatchErrorKind::Invalid => ResponseError::InvalidRecord,
            BatchErrorKind::TooLarge => ResponseError::MessageTooLarge,
        },
        LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        LogError::NonContiguous { .. } => ResponseError::UnknownServerError,
        LogError::Config(_) => ResponseError::InvalidConfig,
        LogError::Producer(ProducerError::StaleEpoch { .. }) => ResponseError::InvalidProducerEpoch,
        LogError::Producer(ProducerError::OutOfOrder { .. }) => {
            ResponseError::OutOfOrderSequenceNumber
        }
    }
}

pub const NONE: i16 = 0;

/// Whether [`for_request_version`] may change a response of `api` at `version` (so that the
/// other replies, produce and fetch among them, pass untouched).
pub(crate) fn rewrites_errors(api: kafka_protocol::messages::ApiKey, version: i16) -> bool {
    use kafka_protocol::messages::ApiKey;
    match api {
        ApiKey::InitProducerId => version < 4,
        ApiKey::AddPartitionsToTxn | ApiKey::AddOffsetsToTxn | ApiKey::EndTxn => version < 2,
        _ => false,
    }
}

/// Error codes as the request's version knows them. PRODUCER_FENCED (90) came with KIP-588 in
/// InitProducerId v4 and AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2; older versions get
/// INVALID_PRODUCER_EPOCH (47), as Kafka answers them (a client that predates 90 reports it
/// as an unknown error instead of a fenced producer).
pub(crate) fn for_request_version(
    api: kafka_protocol::messages::ApiKey,
    version: i16,
    response: &mut kafka_protocol::messages::ResponseKind,
) {
    use kafka_protocol::messages::ResponseKind;
    if !rewrites_errors(api, version) {
        return;
    }
    let fenced = ResponseError::ProducerFenced.code();
    let older = ResponseError::InvalidProducerEpoch.code();
    let fix = |code: &mut i16| {
        if *code == fenced {
            *code = older;
        }
    };
    match response {
        ResponseKind::InitProducerId(r) => fix(&mut r.error_code),
        ResponseKind::AddOffsetsToTxn(r) => fix(&mut r.error_code),
        ResponseKind::EndTxn(r) => fix(&mut r.error_code),
        ResponseKind::AddPartitionsToTxn(r) => {
            for topic in &mut r.results_by_topic_v3_and_below {
                for p in &mut topic.results_by_partition {
                    fix(&mut p.partition_error_code);
                }
            }
        }
        _ => {}
    }
}
