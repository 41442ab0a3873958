//! An outbox row as the relay publishes it, and a committed database transaction's rows.

use crate::error::OutboxError;

/// One row, routed: `topic` from aggregatetype (and the prefix), key from aggregateid, value
/// from payload, headers `id`, `type` and the configured header columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    /// The id column's text, None if NULL.
    pub id: Option<String>,
    pub topic: String,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl OutboxRow {
    /// The row's size as Sluice stores it, near enough for messages.
    pub fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len)
            + self.payload.as_ref().map_or(0, Vec::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }

    /// What a message about the row needs of it, kept while it is in flight.
    pub fn tag(&self) -> RowTag {
        RowTag {
            id: self.id.clone(),
            topic: self.topic.clone(),
            bytes: self.size(),
        }
    }
}

/// A row as messages name it: its id, topic and size ([`OutboxRow::size`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowTag {
    pub id: Option<String>,
    pub topic: String,
    pub bytes: usize,
}

impl RowTag {
    /// How messages name the row.
    pub fn describe(&self) -> String {
        match &self.id {
            Some(id) => format!("row id {id}"),
            None => "a row with a NULL id".to_string(),
        }
    }
}

/// What the change stream hands the relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A committed transaction: all its rows, or those not handed out before as parts.
    Txn(SourceTxn),
    /// Rows of a transaction still being read, handed out before its end once it holds
    /// enough rows ([`OpenRows::part`]), so that a large transaction is never held whole: the relay sends
    /// them into an open Sluice transaction; more parts may follow, then the transaction's
    /// [`Change::Txn`] with the rest and its position (or with why a row of it cannot be
    /// published, and the relay aborts).
    Part(Vec<OutboxRow>),
    /// The transaction whose parts were handed out ends without a commit (the change log went
    /// on with another one): the relay aborts the Sluice transaction it was sending them in.
    Abandoned,
}

/// The most bytes of rows an open transaction holds before they are handed out as a part.
pub const PART_BYTES: usize = 16 << 20;

/// An open transaction's rows not yet handed out, and whether some were (as parts).
#[derive(Debug, Default)]
pub struct OpenRows {
    rows: Vec<OutboxRow>,
    bytes: usize,
    streamed: bool,
}

impl OpenRows {
    pub fn push(&mut self, row: OutboxRow) {
        self.bytes += row.size();
        self.rows.push(row);
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Rows of it were handed out as parts.
    pub fn streamed(&self) -> bool {
        self.streamed
    }

    /// The rows, as a [`Change::Part`], once they make one: `max_rows` of them (the relay's
    /// batch size), or [`PART_BYTES`].
    pub fn part(&mut self, max_rows: usize) -> Option<Change> {
        if self.rows.len() < max_rows && self.bytes < PART_BYTES {
            return None;
        }
        self.streamed = true;
        self.bytes = 0;
        Some(Change::Part(std::mem::take(&mut self.rows)))
    }

    /// The rows not handed out, at the transaction's end.
    pub fn into_rows(self) -> Vec<OutboxRow> {
        self.rows
    }
}

/// A committed database transaction's outbox rows, in the order it wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTxn {
    /// The position just past its commit: once published, the relay resumes after it.
    pub end: u64,
    /// The same as the database writes it (`0/16B3748`, `binlog.000003:1234`).
    pub position: String,
    /// When the database committed it, in microseconds since the Unix epoch.
    pub commit_time_us: i64,
    pub rows: Vec<OutboxRow>,
    /// Where reading the change log again shows it (end and position of the transaction
    /// before it), where the source knows (MySQL; PostgreSQL's server starts decoding where
    /// its slot needs anyway, so the relay uses the previous batch's end there).
    pub begin: Option<(u64, String)>,
    /// Why a row of it cannot be published (it routes to no topic, say): the rows before it
    /// are published, then the relay stops.
    pub unpublishable: Option<String>,
    /// The refusal may clear once the relay reads the table's shape again (MySQL: the table
    /// may have been altered after this session read it): the relay starts a new session,
    /// and stops only if that session refuses the same transaction again.
    pub reread_shape: bool,
}

/// `txn` unless it ends at or before `published_through` (published already); the ids of a
/// skipped transaction's rows go to `skipped` when given.
pub fn unless_published(
    txn: Option<SourceTxn>,
    published_through: u64,
    skipped: Option<&mut Vec<String>>,
) -> Option<SourceTxn> {
    let txn = txn?;
    if txn.end > published_through {
        return Some(txn);
    }
    if let Some(skipped) = skipped {
        skipped.extend(txn.rows.into_iter().filter_map(|r| r.id));
    }
    None
}

/// The topic for an aggregatetype: the prefix and the value, which must be a legal Kafka
/// topic name (letters, digits, `.`, `_`, `-`; at most 249 characters).
pub fn topic_for(prefix: &str, aggregatetype: &str) -> Result<String, String> {
    let topic = format!("{prefix}{aggregatetype}");
    if aggregatetype.is_empty() {
        return Err("an empty aggregatetype routes to no topic".into());
    }
    if topic.len() > 249 {
        return Err(format!(
            "topic name {topic:?} is longer than 249 characters"
        ));
    }
    if topic == "." || topic == ".." {
        return Err(format!("{topic:?} is not a legal topic name"));
    }
    if let Some(c) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name {topic:?} has {c:?}: a topic name takes letters, digits, '.', '_' and '-'"
        ));
    }
    Ok(topic)
}

/// A row the relay cannot route stops it: skipping would lose the row.
pub fn unroutable(row_id: Option<&str>, why: &str) -> OutboxError {
    OutboxError::Row(format!(
        "outbox row {}: {why}; the relay stops before it (it was not published, and nothing \
         after it is)",
        row_id.unwrap_or("with a NULL id")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(end: u64, ids: &[&str]) -> SourceTxn {
        SourceTxn {
            end,
            position: end.to_string(),
            commit_time_us: 0,
            rows: ids
                .iter()
                .map(|id| OutboxRow {
                    id: Some(id.to_string()),
                    topic: "t".into(),
                    key: None,
                    payload: None,
                    headers: Vec::new(),
                })
                .collect(),
            begin: None,
            unpublishable: None,
            reread_shape: false,
        }
    }

    #[test]
    fn published_transactions_are_skipped_and_their_ids_kept_when_asked() {
        let mut skipped = Vec::new();
        assert!(unless_published(Some(txn(10, &["a", "b"])), 10, Some(&mut skipped)).is_none());
        assert!(unless_published(Some(txn(5, &["c"])), 10, None).is_none());
        assert_eq!(skipped, ["a", "b"]);
        let later = unless_published(Some(txn(11, &["d"])), 10, Some(&mut skipped));
        assert_eq!(later.map(|t| t.end), Some(11));
        assert_eq!(skipped, ["a", "b"]);
        assert!(unless_published(None, 10, Some(&mut skipped)).is_none());
    }

    #[test]
    fn topics_are_the_prefix_and_the_aggregatetype() {
        assert_eq!(topic_for("", "order"), Ok("order".to_string()));
        assert_eq!(topic_for("shop.", "order"), Ok("shop.order".to_string()));
        assert!(topic_for("", "").is_err());
        assert!(topic_for("", "order lines").is_err());
        assert!(topic_for("", "ordré").is_err());
        assert!(topic_for("", "..").is_err());
        assert!(topic_for("", &"x".repeat(250)).is_err());
    }
}
