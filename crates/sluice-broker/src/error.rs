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
    /// The topic's configuration forbids the operation (e.g. DeleteRecords on a compacted-only
    /// topic).
    #[error("{0}")]
    PolicyViolation(String),
    #[error(transparent)]
    Log(#[from] LogError),
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
            BrokerError::PolicyViolation(_) => ResponseError::PolicyViolation,
            BrokerError::Log(e) => log_error(e),
            BrokerError::Metadata { .. } | BrokerError::CorruptMetadata { .. } => {
                ResponseError::KafkaStorageError
            }
        }
    }

    pub fn code(&self) -> i16 {
        self.response_error().code()
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
        LogError::Producer(ProducerError::UnknownProducer { .. }) => {
            ResponseError::UnknownProducerId
        }
    }
}

pub const NONE: i16 = 0;
