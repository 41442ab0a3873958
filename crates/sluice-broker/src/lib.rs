//! `sluice-broker`: the broker's state machines and the Kafka API handlers.
//!
//! [`Broker`] owns the [`topics::Topics`] (each topic's [`partition::Partition`]s and their
//! logs), implements [`sluice_wire::Service`] by dispatching each request to its handler in
//! [`handlers`], and runs the background flusher and retention. Kafka error codes are assigned
//! in [`error`] only. Sockets belong to `sluice-wire`.

pub mod broker;
pub mod browse;
pub mod commit;
pub mod config;
pub mod disk;
pub mod error;
pub mod fetch_session;
pub mod group;
pub mod handlers;
pub mod internal_log;
pub mod low_watermark;
pub mod metadata_store;
pub mod metrics;
pub mod offset_reset;
pub mod partition;
pub mod producer_ids;
pub mod publish;
pub mod quotas;
pub mod replica_role;
pub mod replication;
pub mod security;
pub mod shards;
#[cfg(test)]
mod test_support;
pub mod topic_admin;
pub mod topic_config;
pub mod topics;
pub mod txn;
pub mod verification_guard;

pub use broker::{Broker, BrokerStatus, ExtraMetrics, RelayStatus};
pub use config::BrokerConfig;
pub use error::BrokerError;
