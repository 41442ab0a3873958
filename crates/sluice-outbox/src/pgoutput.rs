//! The parts of PostgreSQL's `pgoutput` logical replication protocol (version 1) the relay
//! reads: Relation messages (a table's columns, sent before its first change in a session)
//! and Insert messages (a new row, values in text format). Begin and Commit are decoded by
//! `pgwire-replication`; every other message (Update, Delete, Truncate, Type, Origin) is
//! not an outbox insert and is skipped.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("pgoutput message {tag:?} ends early (reading {what})")]
    Truncated { tag: char, what: &'static str },
    #[error("pgoutput message {tag:?}: {what} is not valid UTF-8")]
    NotUtf8 { tag: char, what: &'static str },
    #[error("pgoutput tuple column kind {0:?} is not one of n, u, t, b")]
    ColumnKind(char),
}

/// A table's shape as the Relation message gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    pub id: u32,
    pub namespace: String,
    pub name: String,
    pub columns: Vec<Column>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub type_oid: u32,
}

/// One column value of a tuple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    /// A TOASTed value the change does not carry (never in an insert).
    Unchanged,
    /// The value in the type's text output format (or binary, if asked for).
    Text(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Relation(Relation),
    Insert {
        relation: u32,
        values: Vec<Value>,
    },
    /// Anything the relay does not read.
    Other(u8),
}

struct Reader<'a> {
    tag: char,
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Truncated {
                tag: self.tag,
                what,
            });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let end = self
            .rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(DecodeError::Truncated {
                tag: self.tag,
                what,
            })?;
        let s = self.take(end, what)?;
        self.take(1, what)?;
        String::from_utf8(s.to_vec()).map_err(|_| DecodeError::NotUtf8 {
            tag: self.tag,
            what,
        })
    }
}

/// Decodes one pgoutput message (the payload of an XLogData).
pub fn decode(data: &[u8]) -> Result<Message, DecodeError> {
    let Some((&tag, rest)) = data.split_first() else {
        return Ok(Message::Other(0));
    };
    let mut r = Reader {
        tag: char::from(tag),
        rest,
    };
    match tag {
        b'R' => {
            let id = r.u32("relation id")?;
            let namespace = r.string("namespace")?;
            let name = r.string("relation name")?;
            r.u8("replica identity")?;
            let count = r.u16("column count")?;
            let mut columns = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                r.u8("column flags")?;
                let name = r.string("column name")?;
                let type_oid = r.u32("column type")?;
                r.u32("column type modifier")?;
                columns.push(Column { name, type_oid });
            }
            Ok(Message::Relation(Relation {
                id,
                namespace,
                name,
                columns,
            }))
        }
        b'I' => {
            let relation = r.u32("relation id")?;
            r.u8("new tuple marker")?;
            let count = r.u16("column count")?;
            let mut values = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                values.push(match r.u8("column kind")? {
                    b'n' => Value::Null,
                    b'u' => Value::Unchanged,
                    b't' | b'b' => {
                        let len = r.u32("value length")?;
                        let len = usize::try_from(len).unwrap_or(usize::MAX);
                        Value::Text(r.take(len, "value")?.to_vec())
                    }
                    other => return Err(DecodeError::ColumnKind(char::from(other))),
                });
            }
            Ok(Message::Insert { relation, values })
        }
        other => Ok(Message::Other(other)),
    }
}

/// `bytea`'s text output (`\x` and two hex digits a byte) as bytes; None if it is not that.
pub fn bytea_from_text(text: &[u8]) -> Option<Vec<u8>> {
    let hex = text.strip_prefix(b"\\x")?;
    if hex.len() % 2 != 0 {
        return None;
    }
    hex.chunks(2)
        .map(|pair| {
            let digit = |c: u8| char::from(c).to_digit(16);
            u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()
        })
        .collect()
}

/// The type oid of `bytea` (pg_type.dat): its values need decoding from hex.
pub const BYTEA_OID: u32 = 17;

/// The messages [`decode`] reads, encoded, for tests.
#[cfg(test)]
pub(crate) mod encode {
    /// A Relation message: relation `id`, `schema`.`table`, its columns' names and type oids.
    pub fn relation(id: u32, schema: &str, table: &str, columns: &[(&str, u32)]) -> Vec<u8> {
        let mut b = vec![b'R'];
        b.extend(id.to_be_bytes());
        for name in [schema, table] {
            b.extend(name.as_bytes());
            b.push(0);
        }
        b.push(b'd');
        b.extend(
            u16::try_from(columns.len())
                .unwrap_or(u16::MAX)
                .to_be_bytes(),
        );
        for (name, oid) in columns {
            b.push(0);
            b.extend(name.as_bytes());
            b.push(0);
            b.extend(oid.to_be_bytes());
            b.extend((-1i32).to_be_bytes());
        }
        b
    }

    /// An Insert into `relation`: each value as text, or NULL.
    pub fn insert(relation: u32, values: &[Option<&[u8]>]) -> Vec<u8> {
        let mut b = vec![b'I'];
        b.extend(relation.to_be_bytes());
        b.push(b'N');
        b.extend(
            u16::try_from(values.len())
                .unwrap_or(u16::MAX)
                .to_be_bytes(),
        );
        for value in values {
            match value {
                Some(v) => {
                    b.push(b't');
                    b.extend(u32::try_from(v.len()).unwrap_or(u32::MAX).to_be_bytes());
                    b.extend(*v);
                }
                None => b.push(b'n'),
            }
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation_bytes() -> Vec<u8> {
        encode::relation(
            16_385,
            "public",
            "outbox",
            &[("id", 2950), ("payload", BYTEA_OID)],
        )
    }

    #[test]
    fn a_relation_names_its_columns_and_types() {
        let Ok(Message::Relation(r)) = decode(&relation_bytes()) else {
            panic!("not a relation");
        };
        assert_eq!(
            (r.id, r.namespace.as_str(), r.name.as_str()),
            (16_385, "public", "outbox")
        );
        assert_eq!(
            r.columns,
            vec![
                Column {
                    name: "id".into(),
                    type_oid: 2950
                },
                Column {
                    name: "payload".into(),
                    type_oid: BYTEA_OID
                }
            ]
        );
    }

    #[test]
    fn an_insert_carries_text_and_null_values() {
        let b = encode::insert(16_385, &[Some(b"abc"), None]);
        assert_eq!(
            decode(&b),
            Ok(Message::Insert {
                relation: 16_385,
                values: vec![Value::Text(b"abc".to_vec()), Value::Null]
            })
        );
    }

    #[test]
    fn a_cut_message_is_an_error_not_a_panic() {
        let whole = relation_bytes();
        for cut in 1..whole.len() {
            assert!(decode(&whole[..cut]).is_err(), "cut at {cut}");
        }
        let mut insert = vec![b'I', 0, 0, 0, 1, b'N', 0, 1, b't', 0, 0, 0, 9, b'x'];
        assert!(decode(&insert).is_err());
        insert[8] = b'?';
        assert_eq!(decode(&insert), Err(DecodeError::ColumnKind('?')));
    }

    #[test]
    fn other_messages_are_skipped() {
        assert_eq!(decode(b"U\0\0\0\x01"), Ok(Message::Other(b'U')));
        assert_eq!(decode(b""), Ok(Message::Other(0)));
    }

    #[test]
    fn bytea_text_is_hex() {
        assert_eq!(bytea_from_text(b"\\x00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(bytea_from_text(b"\\x0"), None);
        assert_eq!(bytea_from_text(b"\\xzz"), None);
        assert_eq!(bytea_from_text(b"00"), None);
        assert_eq!(bytea_from_text(b"\\x"), Some(vec![]));
    }
}
