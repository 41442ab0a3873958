//! The transactional outbox relay (`sluice outbox`): a service writes its messages as rows of
//! an outbox table in its own database transactions; the relay follows the database's change
//! log and publishes every committed row to Sluice exactly once, in commit order per key.
//!
//! - [`source`]: the database read, [`postgres`] (logical replication, `pgoutput`) or
//!   [`mysql`] (MySQL/MariaDB binary log, row format), and the lease;
//! - [`pgoutput`]: decoding the replication messages the relay reads;
//! - [`sink`]: the transactional producer and the committed position;
//! - [`relay`]: the loop tying them together; [`stats`]: what it reports;
//! - [`status_report`]: each instance's status, on a topic every broker's console reads.

pub mod client_props;
pub mod clock;
pub mod config;
pub mod error;
pub mod mysql;
pub mod mysql_columns;
pub mod mysql_labels;
pub mod mysql_xa;
pub mod pgoutput;
pub mod postgres;
pub mod relay;
pub mod row;
pub mod sink;
pub mod source;
pub mod stats;
pub mod status_report;
pub mod tls;

pub use client_props::ClientProperties;
pub use config::{Columns, OutboxConfig};
pub use error::OutboxError;
pub use relay::{report, run};
pub use stats::{Snapshot, State, Stats};
pub use status_report::StatusReports;
