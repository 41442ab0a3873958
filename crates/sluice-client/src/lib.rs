//! `sluice-client`: a small async Kafka client on the `kafka-protocol` crate. It knows nothing
//! of Sluice's internals, so whatever it drives — the CLI, the benchmark — works against any
//! Kafka-compatible broker.

pub mod acls;
pub mod blocking;
mod blocking_stream;
pub mod client;
pub mod cluster;
pub mod codec;
pub mod connection;
pub mod coordinator;
pub mod error;
pub mod leaders;
pub mod lean;
pub mod partitioner;
pub mod reassignment;
pub mod records;
pub mod security;
pub mod transactions;
pub mod users;

pub use client::{Client, ConfigEntry, Fetched, GroupDescription, GroupMember, PartitionMeta};
pub use connection::Connection;
pub use error::ClientError;
pub use leaders::Leaders;
pub use records::{InRecord, OutRecord};
