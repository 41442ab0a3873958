//! Where the outbox's columns are in a MySQL/MariaDB row event. A row event carries values by
//! position only; the table map before it names the columns only when the server logs them
//! (`binlog_row_metadata = FULL`, MariaDB 10.5+, MySQL 8.0.1+). The relay reads the binary log
//! behind the table's present shape, so an `ALTER TABLE` that moved, added or dropped columns
//! makes the positions read from `information_schema` at start wrong for the rows logged on
//! the other side of it.
//!
//! - Names in the table map: each event's columns are found by name, whatever the table's
//!   shape was when that row was written.
//! - No names: the positions read at start are used while the table map has as many columns
//!   as the table had then. With another count the table was altered, and the rows are
//!   refused (the relay stops before that transaction, naming the cause and the fix) rather
//!   than publishing another column's bytes as a key or payload. An alteration that keeps the
//!   count (a column moved, or one dropped and one added) cannot be told without names; the
//!   relay logs at start that the server does not name its columns.

use mysql_async::binlog::events::{OptionalMetadataField, TableMapEvent};

/// The outbox columns the relay reads, and where they were when it started.
#[derive(Debug, Clone, Default)]
pub struct Columns {
    /// id, aggregatetype, aggregateid, type, payload, then the header columns.
    pub wanted: Vec<String>,
    /// Their positions in the table when the relay started.
    pub at_start: Vec<usize>,
    /// How many columns the table had then.
    pub count_at_start: u64,
}

impl Columns {
    /// The positions of the wanted columns in the rows that follow `tme`, or why the rows
    /// cannot be read.
    pub fn locate(&self, tme: &TableMapEvent<'_>) -> Result<Vec<usize>, String> {
        match column_names(tme)? {
            Some(names) => self
                .wanted
                .iter()
                .map(|w| {
                    names
                        .iter()
                        .position(|n| n.eq_ignore_ascii_case(w))
                        .ok_or_else(|| {
                            format!(
                                "the table had no column {w:?} when this row was written (it had \
                                 {names:?}); it was altered: name the outbox columns with \
                                 --column-* if they were renamed"
                            )
                        })
                })
                .collect(),
            None if tme.columns_count() == self.count_at_start => Ok(self.at_start.clone()),
            None => Err(format!(
                "the table had {} columns when this row was written and {} when the relay \
                 started: it was altered, and without column names in the binary log \
                 (binlog_row_metadata = FULL) the relay cannot tell which value is which, so it \
                 stops here rather than publish one column's bytes as another's (see \
                 docs/outbox.md, \"Altering the outbox table\")",
                tme.columns_count(),
                self.count_at_start
            )),
        }
    }
}

/// The column names the table map carries, if the server logged them.
fn column_names(tme: &TableMapEvent<'_>) -> Result<Option<Vec<String>>, String> {
    for field in tme.iter_optional_meta() {
        let field = field.map_err(|e| format!("decoding a table map's metadata: {e}"))?;
        if let OptionalMetadataField::ColumnName(names) = field {
            return names
                .iter_names()
                .map(|n| {
                    n.map(|n| n.name().into_owned())
                        .map_err(|e| format!("decoding a table map's column names: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some);
        }
    }
    Ok(None)
}
