//! `sluice-bench`: load generation and latency measurement over the Kafka protocol only, so
//! the same client drives Sluice, Apache Kafka or any compatible broker.
//!
//! Producers and consumers run on their own threads with blocking sockets (sub-millisecond
//! timing); producers follow an open-loop schedule and stamp each record with its due time;
//! consumers in the same process record receive − due into HDR histograms and track every
//! sequence number for loss and duplication.

pub mod clock;
pub mod cluster;
pub mod compare;
pub mod consumer;
pub mod e2e;
pub mod error;
pub mod html;
pub mod latency;
pub mod machine;
pub mod payload;
pub mod producer;
pub mod report;
pub mod schedule;
pub mod sweep;
pub mod throughput;
pub mod timing;
pub mod tracker;

pub use e2e::{E2eConfig, E2eResult};
pub use error::BenchError;

/// The client every benchmark uses, named in every report.
pub const CLIENT_NAME: &str = concat!(
    "sluice-bench ",
    env!("CARGO_PKG_VERSION"),
    " (blocking Kafka-protocol client over kafka-protocol 0.18)"
);
