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

use crate::mysql_labels::{self, Labels};

/// The outbox columns the relay reads, and where they were when it started.
#[derive(Debug, Clone, Default)]
pub struct Columns {
    /// id, aggregatetype, aggregateid, type, payload, then the header columns.
    pub wanted: Vec<String>,
    /// Their positions in the table when the relay started.
    pub at_start: Vec<usize>,
    /// How many columns the table had then.
    pub count_at_start: u64,
    /// The value names of those that were ENUM or SET columns then (one per wanted column).
    pub labels_at_start: Vec<Option<Labels>>,
}

/// Where the wanted columns are in a row event, and the value names of those that are ENUM or
/// SET columns there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// One per wanted column; [`ABSENT`] for a header column the table did not have.
    pub positions: Vec<usize>,
    /// One per wanted column.
    pub labels: Vec<Option<Labels>>,
    /// The names are the session's start's (no names in the log): a number they do not reach
    /// may be a name added since (ALTER TABLE), which a new session's start reads.
    pub labels_from_start: bool,
}

/// The first five wanted columns are the outbox's own; the rest are optional headers.
const REQUIRED: usize = 5;

/// Where a header column was not in the table when a row was written: read as NULL (no
/// header), as a NULL column is.
pub const ABSENT: usize = usize::MAX;

/// Why a row event's columns cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unplaced {
    /// No names in the log, and another column count than at start.
    CountChanged(String),
    Other(String),
}

impl Columns {
    /// Where the wanted columns are in the rows that follow `tme`, or why the rows cannot be
    /// read.
    pub fn locate(&self, tme: &TableMapEvent<'_>) -> Result<Located, Unplaced> {
        match column_names(tme).map_err(Unplaced::Other)? {
            Some(names) => {
                let positions = self.by_name(&names)?;
                match mysql_labels::from_table_map(tme).map_err(Unplaced::Other)? {
                    Some(by_column) => Ok(Located {
                        labels: positions
                            .iter()
                            .map(|p| by_column.get(*p).cloned().flatten())
                            .collect(),
                        positions,
                        labels_from_start: false,
                    }),
                    // Names without ENUM/SET names: not a server setting seen; the start's.
                    None => Ok(Located {
                        labels: self.start_labels(tme, &positions)?,
                        positions,
                        labels_from_start: true,
                    }),
                }
            }
            None if tme.columns_count() == self.count_at_start => Ok(Located {
                labels: self.start_labels(tme, &self.at_start)?,
                positions: self.at_start.clone(),
                labels_from_start: true,
            }),
            None => Err(Unplaced::CountChanged(format!(
                "the table had {} columns when this row was written and {} when the relay \
                 read its shape: it was altered, and without column names in the binary log \
                 (binlog_row_metadata = FULL) the relay cannot tell which value is which",
                tme.columns_count(),
                self.count_at_start
            ))),
        }
    }

    /// The value names read at the session's start, for the columns that are ENUM or SET in
    /// `tme` (its column types are there whatever `binlog_row_metadata` says). A column that is
    /// not one in `tme` is read as it is, whatever it was at the start. One that is, but was
    /// not at the start, became one since (an ALTER TABLE ... MODIFY): its numbers cannot be
    /// named from the start's shape, so the rows are refused for a new session to read the
    /// shape again; if the column is no ENUM or SET any more by then (changed back), its names
    /// are gone, and the relay stops.
    fn start_labels(
        &self,
        tme: &TableMapEvent<'_>,
        positions: &[usize],
    ) -> Result<Vec<Option<Labels>>, Unplaced> {
        positions
            .iter()
            .enumerate()
            .map(|(i, at)| {
                if *at == ABSENT || !mysql_labels::is_enum_or_set(tme, *at) {
                    return Ok(None);
                }
                match self.labels_at_start.get(i).cloned().flatten() {
                    Some(labels) => Ok(Some(labels)),
                    None => Err(Unplaced::CountChanged(format!(
                        "column {:?} is an ENUM or SET in the binary log, not when the relay \
                         read the table's shape: it was altered",
                        self.wanted.get(i).map(String::as_str).unwrap_or_default()
                    ))),
                }
            })
            .collect()
    }

    fn by_name(&self, names: &[String]) -> Result<Vec<usize>, Unplaced> {
        self.wanted
            .iter()
            .enumerate()
            .map(
                |(i, w)| match names.iter().position(|n| n.eq_ignore_ascii_case(w)) {
                    Some(at) => Ok(at),
                    None if i >= REQUIRED => Ok(ABSENT),
                    None => Err(Unplaced::Other(format!(
                        "the table had no column {w:?} when this row was written (it had \
                     {names:?}): it was altered (see docs/outbox.md, \"Altering the outbox \
                     table\")"
                    ))),
                },
            )
            .collect()
    }
}

/// The column names the table map carries, if the server logged them (one per column).
fn column_names(tme: &TableMapEvent<'_>) -> Result<Option<Vec<String>>, String> {
    for field in tme.iter_optional_meta() {
        let field = field.map_err(|e| format!("decoding a table map's metadata: {e}"))?;
        if let OptionalMetadataField::ColumnName(names) = field {
            let names = names
                .iter_names()
                .map(|n| {
                    n.map(|n| n.name().into_owned())
                        .map_err(|e| format!("decoding a table map's column names: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if names.len() as u64 != tme.columns_count() {
                return Err(format!(
                    "a table map names {} columns of {}",
                    names.len(),
                    tme.columns_count()
                ));
            }
            return Ok(Some(names));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns() -> Columns {
        Columns {
            wanted: [
                "id",
                "aggregatetype",
                "aggregateid",
                "type",
                "payload",
                "trace",
            ]
            .map(String::from)
            .to_vec(),
            at_start: vec![0, 1, 2, 3, 4, 5],
            count_at_start: 6,
            labels_at_start: vec![None; 6],
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn columns_are_found_by_name_wherever_they_are() {
        let got = columns()
            .by_name(&names(&[
                "note",
                "ID",
                "type",
                "aggregateid",
                "aggregatetype",
                "payload",
                "trace",
            ]))
            .unwrap();
        assert_eq!(got, vec![1, 4, 3, 2, 5, 6]);
    }

    #[test]
    fn a_missing_header_column_reads_as_null_and_a_missing_outbox_column_is_refused() {
        let got = columns()
            .by_name(&names(&[
                "id",
                "aggregatetype",
                "aggregateid",
                "type",
                "payload",
            ]))
            .unwrap();
        assert_eq!(got[5], ABSENT);
        let err = columns()
            .by_name(&names(&[
                "id",
                "aggregatetype",
                "aggregateid",
                "payload",
                "trace",
            ]))
            .unwrap_err();
        assert!(
            matches!(&err, Unplaced::Other(m) if m.contains("no column \"type\"")),
            "{err:?}"
        );
    }
}
