//! Event-sourced bank transfers on Sluice, exactly once: accounts held in memory by
//! processors in a consumer group, commands and events on topics, every step written with its
//! input offsets in one Kafka transaction. Built on librdkafka (the `rdkafka` crate), the
//! client most non-JVM services run. See docs/bank.md.

pub mod bench;
pub mod checker;
pub mod clock;
pub mod error;
pub mod generator;
pub mod kafka;
pub mod ledger;
pub mod local_broker;
pub mod monitor;
pub mod processor;
pub mod record;
