//! XA transactions and MariaDB's GTID events in the binary log.
//!
//! An XA transaction is logged in two parts: its rows at `XA PREPARE` (ended by an
//! XA_PREPARE_LOG_EVENT), and later, after any number of other transactions, a statement
//! `XA COMMIT <xid>` or `XA ROLLBACK <xid>`. The relay holds a prepared transaction's rows
//! until then: published at the commit (in commit order, like any transaction), dropped at the
//! rollback. While one is held, the position the relay commits stays before its prepare, so a
//! restart reads it again (transactions in between are skipped as published by their ends).
//!
//! MariaDB marks a transaction's start with its own GTID event (type 162), which it turns into
//! a `BEGIN` statement only for replicas that do not say they understand GTIDs; an XA
//! transaction's GTID it cannot turn into anything, and it ends such a replica's stream
//! ("Failed to replace GTID event with backwards-compatible event": error 1236, for any XA
//! transaction on the server, whatever its tables). The relay therefore says it understands
//! them (`@mariadb_slave_capability`) and reads the GTID events itself.

/// MariaDB's GTID event.
pub const MARIADB_GTID_EVENT: u8 = 162;

/// `@mariadb_slave_capability` for a replica that takes GTID events as they are
/// (MARIA_SLAVE_CAPABILITY_GTID).
pub const MARIADB_GTID_CAPABILITY: u8 = 4;

/// The GTID event's flags: a statement outside a transaction (no commit follows), the first
/// and the second part of an XA transaction.
const FL_STANDALONE: u8 = 0x01;
const FL_PREPARED_XA: u8 = 0x40;
const FL_COMPLETED_XA: u8 = 0x80;

/// What a MariaDB GTID event (its body: sequence number, domain id, flags) starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GtidStarts {
    /// A transaction whose rows follow (an XA one's prepared part too), until its commit.
    Transaction,
    /// A statement with no transaction (DDL), or an XA transaction's `XA COMMIT`/`ROLLBACK`.
    Other,
}

pub fn mariadb_gtid(body: &[u8]) -> Option<GtidStarts> {
    let flags = *body.get(12)?;
    Some(
        if flags & (FL_STANDALONE | FL_COMPLETED_XA) != 0 && flags & FL_PREPARED_XA == 0 {
            GtidStarts::Other
        } else {
            GtidStarts::Transaction
        },
    )
}

/// Whether a MariaDB GTID event (its body) starts an XA transaction's prepared part.
pub fn mariadb_gtid_prepares_xa(body: &[u8]) -> bool {
    body.get(12)
        .is_some_and(|flags| flags & FL_PREPARED_XA != 0)
}

/// An XA statement in a query event; the xid as the server writes it (`X'7831',X'',1`), the
/// same text in a transaction's `XA END` and in its later `XA COMMIT`/`XA ROLLBACK`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XaStatement {
    Start,
    End(String),
    Commit(String),
    Rollback(String),
}

pub fn xa_statement(sql: &str) -> Option<XaStatement> {
    let sql = sql.trim();
    let rest = strip_prefix_ignore_case(sql, "XA ")?.trim_start();
    let (word, xid) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let xid = xid.trim().to_string();
    match word.to_ascii_uppercase().as_str() {
        "START" | "BEGIN" => Some(XaStatement::Start),
        "END" => Some(XaStatement::End(xid)),
        "COMMIT" => Some(XaStatement::Commit(xid)),
        "ROLLBACK" => Some(XaStatement::Rollback(xid)),
        _ => None,
    }
}

/// Whether an XA_PREPARE_LOG_EVENT's body is of `XA COMMIT ... ONE PHASE` (MySQL logs that as
/// a prepare that is also the commit).
pub fn prepare_is_one_phase(body: &[u8]) -> bool {
    body.first() == Some(&1)
}

/// The xid of an XA_PREPARE_LOG_EVENT's body (one-phase flag, format id, gtrid and bqual
/// lengths, then their bytes), written as the server writes it in `XA END`/`XA COMMIT`:
/// `X'<gtrid hex>',X'<bqual hex>',<format id>`.
pub fn prepared_xid(body: &[u8]) -> Option<String> {
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?))
    };
    let format = word(1)?;
    let gtrid = usize::try_from(word(5)?).ok()?;
    let bqual = usize::try_from(word(9)?).ok()?;
    let data = body.get(13..13usize.checked_add(gtrid)?.checked_add(bqual)?)?;
    // Lower case, as the servers write it (the relay compares xids ignoring case anyway).
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    Some(format!(
        "X'{}',X'{}',{}",
        hex(&data[..gtrid]),
        hex(&data[gtrid..]),
        format
    ))
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xa_statements_are_told_with_their_xid() {
        assert_eq!(
            xa_statement("XA START X'7831',X'',1"),
            Some(XaStatement::Start)
        );
        assert_eq!(
            xa_statement("XA END X'7831',X'',1"),
            Some(XaStatement::End("X'7831',X'',1".into()))
        );
        assert_eq!(
            xa_statement("xa commit X'7831',X'',1"),
            Some(XaStatement::Commit("X'7831',X'',1".into()))
        );
        assert_eq!(
            xa_statement(" XA ROLLBACK X'78',X'',1 "),
            Some(XaStatement::Rollback("X'78',X'',1".into()))
        );
        assert_eq!(xa_statement("BEGIN"), None);
        assert_eq!(xa_statement("XA"), None);
        assert_eq!(xa_statement("INSERT INTO xa VALUES (1)"), None);
    }

    #[test]
    fn gtid_flags_say_what_follows() {
        let body = |flags: u8| {
            let mut b = vec![0u8; 12];
            b.push(flags);
            b
        };
        assert_eq!(mariadb_gtid(&body(0x08)), Some(GtidStarts::Transaction));
        assert_eq!(mariadb_gtid(&body(FL_STANDALONE)), Some(GtidStarts::Other));
        assert_eq!(
            mariadb_gtid(&body(FL_PREPARED_XA | 0x08)),
            Some(GtidStarts::Transaction)
        );
        assert_eq!(
            mariadb_gtid(&body(FL_COMPLETED_XA | FL_STANDALONE)),
            Some(GtidStarts::Other)
        );
        assert_eq!(mariadb_gtid(&[0; 5]), None);
        assert!(mariadb_gtid_prepares_xa(&body(FL_PREPARED_XA | 0x08)));
        assert!(!mariadb_gtid_prepares_xa(&body(0x08)));
        assert!(!mariadb_gtid_prepares_xa(&body(
            FL_COMPLETED_XA | FL_STANDALONE
        )));
        assert!(!mariadb_gtid_prepares_xa(&[0; 5]));
        assert!(prepare_is_one_phase(&[1, 0, 0]));
        // A prepare event's body: one-phase flag, format id, gtrid and bqual lengths, data.
        let prepare_body = |format: u32, gtrid: &[u8], bqual: &[u8]| {
            let mut b = vec![0u8];
            b.extend(format.to_le_bytes());
            b.extend((gtrid.len() as u32).to_le_bytes());
            b.extend((bqual.len() as u32).to_le_bytes());
            b.extend(gtrid);
            b.extend(bqual);
            b
        };
        let prepare = prepare_body(1, b"x1", b"");
        assert_eq!(prepared_xid(&prepare).as_deref(), Some("X'7831',X'',1"));
        assert_eq!(
            prepared_xid(&prepare_body(7, b"z", b"-")).as_deref(),
            Some("X'7a',X'2d',7")
        );
        assert_eq!(prepared_xid(&prepare[..14]), None);
        assert!(!prepare_is_one_phase(&[0, 0, 0]));
    }
}
