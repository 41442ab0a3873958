//! What can go wrong in the bank workload.

#[derive(Debug, thiserror::Error)]
pub enum BankError {
    #[error("a bank record of {0} bytes is not {RECORD_LEN} bytes long")]
    RecordLength(usize),
    #[error("unknown bank record tag {0}")]
    RecordTag(u8),
    #[error("a balance snapshot of {0} bytes is not 8 bytes long")]
    BalanceLength(usize),
    #[error("an account key of {0} bytes is not 4 bytes long")]
    AccountKey(usize),
    #[error("Kafka client: {context}: {source}")]
    Kafka {
        context: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    #[error("{0}")]
    Setup(String),
}

use crate::record::RECORD_LEN;

impl BankError {
    pub fn kafka(context: impl Into<String>, source: rdkafka::error::KafkaError) -> BankError {
        BankError::Kafka {
            context: context.into(),
            source,
        }
    }
}
