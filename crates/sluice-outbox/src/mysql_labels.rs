//! The names of ENUM and SET values. The binary log carries an ENUM value as its number (1 for
//! the first name, 0 for MySQL's "invalid value" empty string) and a SET value as a bitmap of
//! its members, not their names. Publishing those numbers would route a row to a topic named
//! "2" or send a `type` header "3". The names come from the table map when the server logs
//! them (`binlog_row_metadata = FULL`: exact for each row event, whatever ALTER TABLE came
//! after it), else from the column's type in `information_schema` at the session's start.

use mysql_async::binlog::events::{OptionalMetadataField, TableMapEvent};
use mysql_async::consts::ColumnType;

/// An ENUM or SET column's value names, in their declared order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Labels {
    Enum(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
}

/// Why a value cannot be named: a number the names known for the row do not reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unnamed(pub String);

impl Labels {
    /// The names from an `information_schema.COLUMNS.COLUMN_TYPE` such as
    /// `enum('order','it''s')` or `set('a','b')`; None for any other type.
    pub fn from_column_type(column_type: &str) -> Option<Labels> {
        let text = column_type.trim();
        let (kind, inner) = text.split_once('(')?;
        let names = quoted_list(inner.strip_suffix(')')?)?;
        match kind.to_ascii_lowercase().as_str() {
            "enum" => Some(Labels::Enum(names)),
            "set" => Some(Labels::Set(names)),
            _ => None,
        }
    }

    /// The name of an ENUM number, or a SET bitmap's member names joined by commas (as
    /// MySQL shows them).
    pub fn name(&self, number: u64) -> Result<Vec<u8>, Unnamed> {
        match self {
            Labels::Enum(_) if number == 0 => Ok(Vec::new()),
            Labels::Enum(names) => usize::try_from(number - 1)
                .ok()
                .and_then(|i| names.get(i))
                .cloned()
                .ok_or_else(|| {
                    Unnamed(format!(
                        "ENUM value number {number}, of {} the relay knows",
                        names.len()
                    ))
                }),
            Labels::Set(names) => {
                let mut out = Vec::new();
                for bit in 0..64u32 {
                    if number & (1u64 << bit) == 0 {
                        continue;
                    }
                    let name = names.get(bit as usize).ok_or_else(|| {
                        Unnamed(format!(
                            "SET member number {}, of {} the relay knows",
                            bit + 1,
                            names.len()
                        ))
                    })?;
                    if !out.is_empty() {
                        out.push(b',');
                    }
                    out.extend_from_slice(name);
                }
                Ok(out)
            }
        }
    }
}

/// The number a binary log row carries for a SET (a little-endian bitmap of 1 to 8 bytes).
pub fn set_bitmap(bytes: &[u8]) -> Option<u64> {
    if bytes.len() > 8 {
        return None;
    }
    Some(
        bytes
            .iter()
            .rev()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)),
    )
}

/// Parses `'a','b''c'` into the names, as the server writes them in `COLUMN_TYPE`: a quote
/// doubled, and a backslash, NUL, newline, carriage return or Ctrl-Z escaped with a backslash.
fn quoted_list(text: &str) -> Option<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\'' {
            return None;
        }
        i += 1;
        let mut name = Vec::new();
        loop {
            match (bytes.get(i), bytes.get(i + 1)) {
                (Some(b'\''), Some(b'\'')) => {
                    name.push(b'\'');
                    i += 2;
                }
                (Some(b'\''), _) => {
                    i += 1;
                    break;
                }
                (Some(b'\\'), Some(escaped)) => {
                    name.push(match escaped {
                        b'0' => 0,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b'Z' => 0x1a,
                        other => *other,
                    });
                    i += 2;
                }
                (Some(b), _) => {
                    name.push(*b);
                    i += 1;
                }
                (None, _) => return None,
            }
        }
        names.push(name);
        match bytes.get(i) {
            None => break,
            Some(b',') => i += 1,
            Some(_) => return None,
        }
    }
    Some(names)
}

/// Whether a table map's column `column` is an ENUM or SET (its type is in the table map
/// whatever `binlog_row_metadata` says).
pub fn is_enum_or_set(tme: &TableMapEvent<'_>, column: usize) -> bool {
    matches!(
        tme.get_column_type(column),
        Ok(Some(
            ColumnType::MYSQL_TYPE_ENUM | ColumnType::MYSQL_TYPE_SET
        ))
    )
}

/// The names of each column of a table map's ENUM or SET names field.
fn each_columns_names<V>(
    columns: impl Iterator<Item = std::io::Result<V>>,
    kind: &str,
    names: impl Fn(&V) -> Vec<Vec<u8>>,
) -> Result<Vec<Vec<Vec<u8>>>, String> {
    columns
        .map(|c| {
            c.map(|c| names(&c))
                .map_err(|e| format!("decoding a table map's {kind} names: {e}"))
        })
        .collect()
}

/// The value names of each ENUM and SET column of a table map (by column index), when the
/// server logged them; None when it did not.
pub fn from_table_map(tme: &TableMapEvent<'_>) -> Result<Option<Vec<Option<Labels>>>, String> {
    let mut enums: Option<Vec<Vec<Vec<u8>>>> = None;
    let mut sets: Option<Vec<Vec<Vec<u8>>>> = None;
    for field in tme.iter_optional_meta() {
        let field = field.map_err(|e| format!("decoding a table map's metadata: {e}"))?;
        match field {
            OptionalMetadataField::EnumStrValue(values) => {
                enums = Some(each_columns_names(values.iter_values(), "ENUM", |c| {
                    c.values().iter().map(|v| v.value_raw().to_vec()).collect()
                })?);
            }
            OptionalMetadataField::SetStrValue(values) => {
                sets = Some(each_columns_names(values.iter_values(), "SET", |c| {
                    c.values().iter().map(|v| v.value_raw().to_vec()).collect()
                })?);
            }
            _ => {}
        }
    }
    let count = usize::try_from(tme.columns_count()).unwrap_or(usize::MAX);
    let mut enum_names = enums.unwrap_or_default().into_iter();
    let mut set_names = sets.unwrap_or_default().into_iter();
    let mut labels = Vec::with_capacity(count.min(4096));
    for column in 0..count {
        let kind = tme
            .get_column_type(column)
            .map_err(|e| format!("a table map's column {column}: {e}"))?;
        labels.push(match kind {
            Some(ColumnType::MYSQL_TYPE_ENUM) => {
                match enum_names.next() {
                    Some(names) => Some(Labels::Enum(names)),
                    None => return Ok(None), // names not logged
                }
            }
            Some(ColumnType::MYSQL_TYPE_SET) => match set_names.next() {
                Some(names) => Some(Labels::Set(names)),
                None => return Ok(None),
            },
            _ => None,
        });
    }
    Ok(Some(labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|n| n.as_bytes().to_vec()).collect()
    }

    #[test]
    fn column_types_give_their_names_with_quotes_and_case_kept() {
        assert_eq!(
            Labels::from_column_type("enum('Order','it''s','a,b')"),
            Some(Labels::Enum(names(&["Order", "it's", "a,b"])))
        );
        assert_eq!(
            Labels::from_column_type("SET('x','y')"),
            Some(Labels::Set(names(&["x", "y"])))
        );
        assert_eq!(Labels::from_column_type("varchar(64)"), None);
        assert_eq!(Labels::from_column_type("enum('open"), None);
        assert_eq!(
            Labels::from_column_type(r"enum('a\\b','c\nd','e''f')"),
            Some(Labels::Enum(names(&["a\\b", "c\nd", "e'f"])))
        );
    }

    #[test]
    fn numbers_are_named_and_unknown_ones_refused() {
        let e = Labels::Enum(names(&["order", "customer"]));
        assert_eq!(e.name(2), Ok(b"customer".to_vec()));
        assert_eq!(e.name(0), Ok(Vec::new()));
        assert!(e.name(3).is_err());
        let s = Labels::Set(names(&["a", "b", "c"]));
        assert_eq!(s.name(0b101), Ok(b"a,c".to_vec()));
        assert_eq!(s.name(0), Ok(Vec::new()));
        assert!(s.name(0b1000).is_err());
        assert_eq!(set_bitmap(&[0x05, 0x01]), Some(0x0105));
    }
}
