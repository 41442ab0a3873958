//! What can stop the relay. A *fatal* error is one that waiting will not fix (a setting, the
//! table, a row Sluice cannot take): the relay stops with the message. Anything else (the
//! database or the broker restarting, a lost lease) ends one session, and the relay starts
//! again from its last committed position.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum OutboxError {
    /// A setting, the database's configuration or the outbox table is not what the relay
    /// needs; the message says what to change.
    #[error("{0}")]
    Setup(String),
    /// A committed row cannot be published (too large, an invalid topic name, a topic that
    /// cannot be created): skipping it would lose it, so the relay stops before it.
    #[error("{0}")]
    Row(String),
    #[error("the database: {0}")]
    Database(String),
    #[error("the change stream: {0}")]
    Stream(String),
    #[error("Sluice: {0}")]
    Broker(String),
    /// Sluice refused the relay's login or TLS handshake (a wrong password, an unknown user,
    /// a certificate not trusted).
    #[error("Sluice refused the relay's connection: {0}")]
    Login(String),
    #[error("the lease on {0} was lost")]
    LeaseLost(String),
    /// Topic `topic` refused a batch of rows it takes one by one: its `max.message.bytes`
    /// (`limit`) is below the batches the relay sends. The relay starts a new session whose
    /// batches are at most `batch_bytes`; the refused transaction was aborted, so it is
    /// published then, once.
    #[error(
        "topic {topic} takes batches of at most {limit} bytes (its max.message.bytes): sending \
         batches of at most {batch_bytes} bytes"
    )]
    BatchTooLarge {
        topic: String,
        limit: usize,
        batch_bytes: usize,
    },
}

impl OutboxError {
    /// Waiting does not fix it.
    pub fn is_fatal(&self) -> bool {
        matches!(self, OutboxError::Setup(_) | OutboxError::Row(_))
    }
}

impl From<tokio_postgres::Error> for OutboxError {
    fn from(e: tokio_postgres::Error) -> Self {
        OutboxError::Database(describe_pg(&e))
    }
}

/// The server's own message where there is one (tokio-postgres' Display says only "db error").
pub fn describe_pg(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        }
    }
}
