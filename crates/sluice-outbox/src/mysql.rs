//! The MySQL/MariaDB source: a control connection (checks, the lease, deleting published rows)
//! and the binary log in row format (`mysql_async`'s binlog stream), decoded into committed
//! transactions of outbox rows. The position is a binlog file and offset; as a number it is
//! `file sequence << 32 | offset`, which orders like the log.

use futures::StreamExt;
use mysql_async::binlog::events::{Event, EventData, RowsEventData};
use mysql_async::binlog::row::BinlogRow;
use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, ClientIdentity, Conn, Opts, SslOpts, Value};

use crate::config::{redact, OutboxConfig};
use crate::error::OutboxError;
use crate::mysql_columns::{Columns, Located, Unplaced};
use crate::mysql_labels::{self, Labels};
use crate::mysql_xa::{self, GtidStarts, XaStatement};
use crate::row::{topic_for, unroutable, Change, OpenRows, OutboxRow, SourceTxn};
use crate::tls::{DbTls, TlsMode};

/// Longer than this without an event or a heartbeat (one a second): the stream is dead.
const STREAM_SILENCE: std::time::Duration = std::time::Duration::from_secs(10);

fn db(what: &str, e: &mysql_async::Error) -> OutboxError {
    OutboxError::Database(format!("{what}: {e}"))
}

/// `binlog.000042:1234` as one ordered number.
pub fn position_number(file: &str, offset: u64) -> u64 {
    let sequence: u64 = file
        .rsplit('.')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (sequence << 32) | (offset & 0xFFFF_FFFF)
}

/// A Rotate event's file name up to its sequence number (the server's first, artificial
/// Rotate may carry checksum bytes after it).
fn binlog_name(raw: &str) -> String {
    let Some(dot) = raw.rfind('.') else {
        return raw.to_string();
    };
    let digits = raw[dot + 1..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    raw[..dot + 1 + digits].to_string()
}

/// `FILE:OFFSET` back into its parts.
pub fn parse_position(text: &str) -> Option<(String, u64)> {
    let (file, offset) = text.rsplit_once(':')?;
    Some((file.to_string(), offset.parse().ok()?))
}

/// A replica's server id for the binlog dump: stable per slot, away from small hand-set ids.
fn server_id(slot: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in slot.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    1_000_000 + hash % 1_000_000_000
}

/// The driver's TLS options for `tls` (`None`: plain TCP).
fn ssl_opts(tls: &DbTls) -> Option<SslOpts> {
    if tls.mode == TlsMode::Disable {
        return None;
    }
    // The driver's rustls takes the process's crypto provider: the broker's (ring).
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let mut ssl = SslOpts::default()
        .with_danger_accept_invalid_certs(!tls.mode.verifies_chain())
        .with_danger_skip_domain_validation(tls.mode != TlsMode::VerifyFull);
    if let Some(ca) = &tls.root_cert {
        ssl = ssl
            .with_root_certs(vec![ca.clone().into()])
            .with_disable_built_in_roots(true);
    }
    if let (Some(cert), Some(key)) = (&tls.client_cert, &tls.client_key) {
        ssl = ssl.with_client_identity(Some(ClientIdentity::new(
            cert.clone().into(),
            key.clone().into(),
        )));
    }
    Some(ssl)
}

pub struct MySqlSource {
    cfg: OutboxConfig,
    opts: Opts,
    conn: Conn,
    schema: String,
    table: String,
    /// The outbox columns and where they were at the last check.
    columns: Columns,
    lease: String,
    /// This connection holds the lease (a standby only checks that the connection lives).
    holding: bool,
    /// When the lease was last checked.
    checked: std::time::Instant,
}

impl MySqlSource {
    pub async fn connect(cfg: &OutboxConfig) -> Result<MySqlSource, OutboxError> {
        let url = cfg.source.replacen("mariadb://", "mysql://", 1);
        let (url, tls) = DbTls::from_mysql_url(&url)?;
        let opts = Opts::from_url(&url)
            .map_err(|e| OutboxError::Setup(format!("--source {:?}: {e}", redact(&cfg.source))))?;
        // TCP keepalives, and a short idle limit on the server, so a vanished relay's session
        // (and its lock, the lease) ends within seconds, not at the server's defaults (hours).
        let opts: Opts = mysql_async::OptsBuilder::from_opts(opts)
            .tcp_keepalive(Some(std::time::Duration::from_secs(5)))
            .setup(vec!["SET SESSION wait_timeout = 30".to_string()])
            .ssl_opts(ssl_opts(&tls))
            .into();
        let connect = Conn::new(opts.clone());
        let conn = match tokio::time::timeout(std::time::Duration::from_secs(5), connect).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                return Err(OutboxError::Database(format!(
                    "cannot connect to {}: {e}",
                    redact(&cfg.source)
                )))
            }
            Err(_) => {
                return Err(OutboxError::Database(format!(
                    "cannot connect to {}: no answer in 5 s",
                    redact(&cfg.source)
                )))
            }
        };
        let database = opts.db_name().unwrap_or_default().to_string();
        let (schema, table) = match cfg.table.split_once('.') {
            Some((s, t)) => (s.to_string(), t.to_string()),
            None => (database, cfg.table.clone()),
        };
        if schema.is_empty() {
            return Err(OutboxError::Setup(
                "--source names no database and --table no schema: give one".into(),
            ));
        }
        Ok(MySqlSource {
            lease: format!("sluice-outbox:{}", cfg.slot),
            cfg: cfg.clone(),
            opts,
            conn,
            schema,
            table,
            columns: Columns::default(),
            holding: false,
            checked: crate::clock::now(),
        })
    }

    /// The binary log (on, row format, full row images), the table and its columns.
    pub async fn check(&mut self) -> Result<(), OutboxError> {
        let settings: Option<(Option<i64>, Option<String>, Option<String>)> = self
            .conn
            .query_first("SELECT @@log_bin, @@binlog_format, @@binlog_row_image")
            .await
            .map_err(|e| db("reading the binlog settings", &e))?;
        let (log_bin, format, image) = settings.unwrap_or_default();
        if log_bin != Some(1) {
            return Err(OutboxError::Setup(
                "the database's binary log is off: the relay reads the change log from it; \
                 start the server with log_bin, binlog_format=ROW and binlog_row_image=FULL"
                    .into(),
            ));
        }
        if format.as_deref() != Some("ROW") {
            return Err(OutboxError::Setup(format!(
                "the database has binlog_format = {}: the relay needs row events, \
                 binlog_format = ROW",
                format.unwrap_or_default()
            )));
        }
        if image.as_deref() != Some("FULL") {
            return Err(OutboxError::Setup(format!(
                "the database has binlog_row_image = {}: the relay needs every column of an \
                 inserted row, binlog_row_image = FULL",
                image.unwrap_or_default()
            )));
        }
        let compressed: Vec<(String, String)> = self
            .conn
            .query(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN \
                 ('binlog_transaction_compression', 'log_bin_compress')",
            )
            .await
            .map_err(|e| db("reading the binlog settings", &e))?;
        if let Some((name, _)) = compressed
            .iter()
            .find(|(_, v)| v.eq_ignore_ascii_case("ON"))
        {
            return Err(OutboxError::Setup(format!(
                "the database has {name} = ON: the relay cannot read compressed binlog events; \
                 turn it off"
            )));
        }
        let columns: Vec<(String, String, String)> = self
            .conn
            .exec(
                "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                (&self.schema, &self.table),
            )
            .await
            .map_err(|e| db("reading the table's columns", &e))?;
        if columns.is_empty() {
            return Err(OutboxError::Setup(format!(
                "table {}.{} does not exist",
                self.schema, self.table
            )));
        }
        let mut positions = Vec::new();
        for wanted in self.cfg.columns.all() {
            let at = columns
                .iter()
                .position(|(name, _, _)| name == wanted)
                .ok_or_else(|| {
                    let have: Vec<&String> = columns.iter().map(|(n, _, _)| n).collect();
                    OutboxError::Setup(format!(
                        "table {}.{} has no column {wanted:?} (it has {have:?}); name the outbox \
                     columns with --column-* if they differ",
                        self.schema, self.table
                    ))
                })?;
            positions.push(at);
        }
        if columns[positions[0]].1.eq_ignore_ascii_case("uuid") {
            return Err(OutboxError::Setup(format!(
                "the id column of {}.{} is MariaDB's UUID type, which the binary log carries in \
                 its stored byte order: use CHAR(36) for the id",
                self.schema, self.table
            )));
        }
        let metadata: Vec<(String, String)> = self
            .conn
            .query("SHOW GLOBAL VARIABLES LIKE 'binlog_row_metadata'")
            .await
            .map_err(|e| db("reading the binlog settings", &e))?;
        if !metadata.iter().any(|(_, v)| v.eq_ignore_ascii_case("FULL")) {
            tracing::warn!(
                "the server does not log column names (binlog_row_metadata is not FULL): the \
                 relay places the outbox columns by the positions the table has now; rows \
                 written before an ALTER TABLE that changed the column count stop it, and one \
                 that moved a column without changing the count would go unseen (set \
                 binlog_row_metadata = FULL in the server's configuration)"
            );
        }
        // MariaDB adds a hidden column, in no `information_schema.COLUMNS`, behind each UNIQUE
        // key too long for a B-tree (index type HASH); the binary log's rows carry it, after
        // the table's own columns.
        let hidden: Option<i64> = self
            .conn
            .exec_first(
                "SELECT COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0 \
                 AND INDEX_TYPE = 'HASH'",
                (&self.schema, &self.table),
            )
            .await
            .map_err(|e| db("reading the table's keys", &e))?;
        self.columns = Columns {
            wanted: self
                .cfg
                .columns
                .all()
                .into_iter()
                .map(str::to_string)
                .collect(),
            labels_at_start: positions
                .iter()
                .map(|p| Labels::from_column_type(&columns[*p].2))
                .collect(),
            at_start: positions,
            count_at_start: columns.len() as u64 + hidden.map_or(0, |n| n.max(0) as u64),
        };
        Ok(())
    }

    /// Takes the lease if no other instance holds it: `GET_LOCK`, held for as long as this
    /// connection lives.
    pub async fn try_lease(&mut self) -> Result<bool, OutboxError> {
        let got: Option<Option<i64>> = self
            .conn
            .exec_first("SELECT GET_LOCK(?, 0)", (&self.lease,))
            .await
            .map_err(|e| db("asking for the lease", &e))?;
        self.holding = got.flatten() == Some(1);
        Ok(self.holding)
    }

    /// Checks, at most once a second, that this connection still holds the lease.
    pub async fn verify_lease(&mut self) -> Result<(), OutboxError> {
        if self.checked.elapsed() < std::time::Duration::from_secs(1) {
            return Ok(());
        }
        let held: Option<Option<i64>> = self
            .conn
            .exec_first("SELECT IS_USED_LOCK(?) = CONNECTION_ID()", (&self.lease,))
            .await
            .map_err(|e| OutboxError::LeaseLost(format!("the database connection ({e})")))?;
        self.checked = crate::clock::now();
        if held.flatten() == Some(1) {
            Ok(())
        } else {
            Err(OutboxError::LeaseLost(format!("lock {}", self.lease)))
        }
    }

    /// Resolves when this connection no longer holds the lease (checked every second), or,
    /// for a standby, when the connection is gone.
    pub async fn lease_lost(&mut self) -> OutboxError {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let sql = if self.holding {
                "SELECT IS_USED_LOCK(?) = CONNECTION_ID()"
            } else {
                "SELECT 1 + 0 * LENGTH(?)"
            };
            let held: Result<Option<Option<i64>>, _> =
                self.conn.exec_first(sql, (&self.lease,)).await;
            match held {
                Ok(Some(Some(1))) => {}
                Ok(_) => return OutboxError::LeaseLost(format!("lock {}", self.lease)),
                Err(e) => return OutboxError::LeaseLost(format!("the database connection ({e})")),
            }
        }
    }

    pub async fn delete(&mut self, ids: &[&str]) -> Result<u64, OutboxError> {
        let mut deleted = 0;
        for chunk in ids.chunks(1000) {
            let marks = vec!["?"; chunk.len()].join(",");
            let sql = format!(
                "DELETE FROM `{}`.`{}` WHERE `{}` IN ({marks})",
                self.schema.replace('`', "``"),
                self.table.replace('`', "``"),
                self.cfg.columns.id.replace('`', "``")
            );
            let params: Vec<Value> = chunk.iter().map(|i| Value::from(*i)).collect();
            self.conn
                .exec_drop(sql, params)
                .await
                .map_err(|e| db("deleting published rows", &e))?;
            deleted += self.conn.affected_rows();
        }
        Ok(deleted)
    }

    /// Starts reading the binary log after `resume` (`FILE:OFFSET`), or at its current end
    /// when nothing was published yet; transactions ending at or before `skip_through` (the
    /// position number of the last published one, if `resume` is earlier) are skipped as
    /// published, their row ids kept for `take_skipped` if `keep_skipped`.
    pub async fn stream(
        &mut self,
        resume: Option<&str>,
        skip_through: Option<u64>,
        keep_skipped: bool,
    ) -> Result<MySqlStream, OutboxError> {
        let (file, offset) = match resume.and_then(parse_position) {
            Some(p) => p,
            None => {
                // MySQL 8.4 renamed it; MariaDB and older MySQL know the old name only.
                let renamed: Result<Option<mysql_async::Row>, _> =
                    self.conn.query_first("SHOW BINARY LOG STATUS").await;
                let row: Option<mysql_async::Row> = match renamed {
                    Ok(row) => Ok(row),
                    Err(_) => self.conn.query_first("SHOW MASTER STATUS").await,
                }
                .map_err(|e| {
                    OutboxError::Setup(format!(
                        "SHOW MASTER STATUS: {e}: the user needs REPLICATION SLAVE and \
                             BINLOG MONITOR (MariaDB) or REPLICATION CLIENT (MySQL)"
                    ))
                })?;
                let row = row.ok_or_else(|| {
                    OutboxError::Setup("SHOW MASTER STATUS is empty: is log_bin on?".into())
                })?;
                let file: Option<String> = row.get(0);
                let offset: Option<u64> = row.get(1);
                (file.unwrap_or_default(), offset.unwrap_or(4))
            }
        };
        let mut conn = Conn::new(self.opts.clone())
            .await
            .map_err(|e| db("connecting for the binlog", &e))?;
        // A heartbeat every second while the log is idle: a stream that goes quiet for longer
        // is a dead connection (STREAM_SILENCE in next()).
        conn.query_drop("SET @master_heartbeat_period = 1000000000")
            .await
            .map_err(|e| db("setting the binlog heartbeat", &e))?;
        // MariaDB: GTID events as they are (an XA transaction's cannot be sent otherwise; see
        // mysql_xa). A user variable MySQL ignores.
        conn.query_drop(format!(
            "SET @mariadb_slave_capability = {}",
            mysql_xa::MARIADB_GTID_CAPABILITY
        ))
        .await
        .map_err(|e| db("declaring the binlog capabilities", &e))?;
        let request = BinlogStreamRequest::new(server_id(&self.cfg.slot))
            .with_filename(file.as_bytes())
            .with_pos(offset);
        let stream = conn.get_binlog_stream(request).await.map_err(|e| {
            OutboxError::Stream(format!(
                "reading the binary log from {file}:{offset}: {e} (the user needs REPLICATION \
                 SLAVE; a position no longer in the log means it was purged)"
            ))
        })?;
        let resume_number = position_number(&file, offset);
        let started = (resume_number, format!("{file}:{offset}"));
        Ok(MySqlStream {
            stream,
            schema: self.schema.clone(),
            table: self.table.clone(),
            columns: self.columns.clone(),
            header_names: self.cfg.columns.headers.clone(),
            prefix: self.cfg.topic_prefix.clone(),
            first_rotate: true,
            file,
            open: None,
            prepared: Vec::new(),
            resume: match (resume, skip_through) {
                (Some(_), Some(through)) => through.max(resume_number),
                (Some(_), None) => resume_number,
                (None, _) => 0,
            },
            last_end: started.clone(),
            started,
            seen: resume_number,
            keep_skipped,
            skipped: Vec::new(),
            max_rows: self.cfg.max_batch_rows,
        })
    }
}

struct OpenTxn {
    rows: OpenRows,
    unpublishable: Option<String>,
    /// See `SourceTxn::reread_shape`.
    reread_shape: bool,
    /// The end of the transaction before it (see `MySqlStream::last_end`).
    begin: (u64, String),
    /// An XA transaction's xid, from its `XA END`.
    xa: Option<String>,
    /// An XA transaction (its GTID event or `XA START` said so): held whole until its
    /// `XA COMMIT`, and published or skipped by where that ends.
    xa_started: bool,
    /// It began before the resume point: a transaction other than an XA one is published
    /// already then (it ends at or before that point), and its rows are not kept, only their
    /// ids when asked for.
    began_before_resume: bool,
    /// The ids of its rows when it is published already, handed out at its end.
    skipped_ids: Vec<String>,
}

impl OpenTxn {
    fn published(&self) -> bool {
        self.began_before_resume && !self.xa_started
    }
}

pub struct MySqlStream {
    stream: BinlogStream,
    schema: String,
    table: String,
    columns: Columns,
    header_names: Vec<String>,
    prefix: String,
    /// The binlog file being read (from the Rotate events).
    file: String,
    /// The server's first, artificial Rotate names the requested file, with the checksum
    /// bytes still on the name (it comes before the format description).
    first_rotate: bool,
    open: Option<OpenTxn>,
    /// XA transactions prepared and not yet committed or rolled back, oldest first (see
    /// mysql_xa).
    prepared: Vec<OpenTxn>,
    resume: u64,
    started: (u64, String),
    /// The position of the last event read.
    seen: u64,
    /// The end of the last transaction read (any table's; the stream's start before the
    /// first): reading from there shows the next transaction whole.
    last_end: (u64, String),
    /// Whether to keep the ids of the rows of transactions skipped as published.
    keep_skipped: bool,
    skipped: Vec<String>,
    /// Rows of an open transaction that make a part (`OpenRows::part`).
    max_rows: usize,
}

impl MySqlStream {
    /// The next transaction ended, or part of a large one's rows (see `Change`).
    pub async fn next(&mut self) -> Result<Option<Change>, OutboxError> {
        let event = tokio::time::timeout(STREAM_SILENCE, self.stream.next())
            .await
            .map_err(|_| {
                OutboxError::Stream(format!(
                    "no binlog event or heartbeat for {} s",
                    STREAM_SILENCE.as_secs()
                ))
            })?
            .ok_or_else(|| OutboxError::Stream("the database ended the binlog stream".into()))?
            .map_err(|e| {
                let text = e.to_string();
                let purged = [
                    "purged",
                    "Could not find first log",
                    "impossible position",
                    "position > file size",
                ]
                .iter()
                .any(|m| text.contains(m));
                if text.contains("1236") && purged {
                    // The position is gone from the server's log (purged, or a reset).
                    OutboxError::Setup(format!(
                        "the binary log no longer holds the relay's position: {text}; the \
                         rows since then cannot be relayed (raise the server's binlog expiry)"
                    ))
                } else if text.contains("1236") {
                    // The server cannot send its log from there to this replica (how MariaDB
                    // answered XA transactions before the relay took GTID events).
                    OutboxError::Setup(format!(
                        "the server refused to send its binary log to the relay: {text}"
                    ))
                } else {
                    OutboxError::Stream(format!("the binlog stream: {text}"))
                }
            })?;
        self.event(&event)
    }

    /// The ids of the rows of transactions skipped as published, if asked for.
    pub fn take_skipped(&mut self) -> Vec<String> {
        std::mem::take(&mut self.skipped)
    }

    fn event(&mut self, event: &Event) -> Result<Option<Change>, OutboxError> {
        let header = event.header();
        let data = event
            .read_data()
            .map_err(|e| OutboxError::Stream(format!("decoding a binlog event: {e}")))?;
        let end = u64::from(header.log_pos());
        if end > 0 {
            self.seen = position_number(&self.file, end);
        }
        match data {
            Some(EventData::RotateEvent(r)) => {
                let name = r.name();
                if !(self.first_rotate && !self.file.is_empty() && name.starts_with(&self.file)) {
                    self.file = binlog_name(&name);
                }
                self.first_rotate = false;
                self.seen = position_number(&self.file, r.position());
            }
            Some(EventData::QueryEvent(q)) => {
                let sql = q.query();
                if sql.eq_ignore_ascii_case("BEGIN") {
                    return Ok(self.begin(false));
                } else if sql.eq_ignore_ascii_case("COMMIT") {
                    return Ok(self.finish(end, header.timestamp()));
                } else {
                    match mysql_xa::xa_statement(&sql) {
                        Some(XaStatement::Start) => return Ok(self.begin(true)), // MySQL's XA START
                        Some(XaStatement::End(xid)) => {
                            if let Some(open) = &mut self.open {
                                open.xa = Some(xid);
                            }
                        }
                        Some(XaStatement::Commit(xid)) => {
                            if self.open.as_ref().is_some_and(|o| o.rows.streamed()) {
                                return Err(OutboxError::Row(format!(
                                    "XA COMMIT {xid} came inside a transaction whose rows the \
                                     relay was sending, which never committed: the binary log \
                                     is not as the relay understands it; it stops (nothing of \
                                     that transaction is published)"
                                )));
                            }
                            return Ok(self.commit_prepared(&xid, end, header.timestamp()));
                        }
                        Some(XaStatement::Rollback(xid)) => {
                            self.prepared.retain(|t| {
                                !t.xa
                                    .as_deref()
                                    .is_some_and(|x| x.eq_ignore_ascii_case(&xid))
                            });
                            let abandoned = self.open.take().filter(|o| o.rows.streamed());
                            self.mark_end(end);
                            return Ok(abandoned.map(|_| Change::Abandoned));
                        }
                        None => {}
                    }
                }
            }
            Some(EventData::XidEvent(_)) => return Ok(self.finish(end, header.timestamp())),
            Some(EventData::XaPrepareLogEvent(body)) => {
                if mysql_xa::prepare_is_one_phase(&body) {
                    return Ok(self.finish(end, header.timestamp()));
                }
                // Held until its XA COMMIT (or dropped at its XA ROLLBACK), known by the xid
                // of its XA END, else the one in the prepare event.
                if let Some(mut open) = self.open.take() {
                    if open.rows.streamed() {
                        return Err(OutboxError::Row(
                            "an XA transaction was prepared after the relay had sent its rows \
                             as those of a plain transaction; the relay stops before it"
                                .into(),
                        ));
                    }
                    if open.xa.is_none() {
                        open.xa = mysql_xa::prepared_xid(&body);
                    }
                    if open.xa.is_none() && (!open.rows.is_empty() || open.unpublishable.is_some())
                    {
                        return Err(OutboxError::Row(
                            "an XA transaction with outbox rows was prepared without an xid the \
                             relay can read: it cannot match its XA COMMIT; the relay stops \
                             before it"
                                .into(),
                        ));
                    }
                    self.prepared.push(open);
                }
                self.mark_end(end);
            }
            None if header.event_type_raw() == mysql_xa::MARIADB_GTID_EVENT
                && mysql_xa::mariadb_gtid(event.data()) == Some(GtidStarts::Transaction) =>
            {
                return Ok(self.begin(mysql_xa::mariadb_gtid_prepares_xa(event.data())));
            }
            Some(EventData::RowsEvent(rows)) => {
                let table_id = rows.table_id();
                let Some(tme) = self.stream.get_tme(table_id) else {
                    return Err(OutboxError::Stream(format!(
                        "a rows event for table {table_id} came before its table map"
                    )));
                };
                if tme.database_name() != self.schema || tme.table_name() != self.table {
                    return Ok(None);
                }
                let inserted: Vec<BinlogRow> = match &rows {
                    RowsEventData::WriteRowsEvent(w) => w
                        .rows(tme)
                        .map(|r| r.map(|(_, after)| after))
                        .collect::<Result<Vec<_>, _>>(),
                    RowsEventData::WriteRowsEventV1(w) => w
                        .rows(tme)
                        .map(|r| r.map(|(_, after)| after))
                        .collect::<Result<Vec<_>, _>>(),
                    _ => Ok(Vec::new()),
                }
                .map_err(|e| OutboxError::Stream(format!("decoding inserted rows: {e}")))?
                .into_iter()
                .flatten()
                .collect();
                // Deletes and updates of the table publish nothing: their columns need no place.
                let located = (!inserted.is_empty()).then(|| self.columns.locate(tme));
                let (decoded, reread): (Vec<Result<OutboxRow, OutboxError>>, bool) = match located {
                    None => (Vec::new(), false),
                    Some(Ok(located)) => {
                        let mut rows = Vec::with_capacity(inserted.len());
                        let mut reread = false;
                        for r in &inserted {
                            match self.row(r, &located) {
                                Ok(row) => rows.push(Ok(row)),
                                Err(RowRefused { why, reread: again }) => {
                                    rows.push(Err(why));
                                    reread = again;
                                    break;
                                }
                            }
                        }
                        (rows, reread)
                    }
                    Some(Err(Unplaced::CountChanged(why))) => {
                        // Perhaps altered after this session read the shape: the relay reads it
                        // again once, and stops only if that does not help.
                        let why =
                            format!("rows inserted into {}.{}: {why}", self.schema, self.table);
                        (vec![Err(OutboxError::Row(why))], true)
                    }
                    Some(Err(Unplaced::Other(why))) => {
                        let why = format!(
                            "rows inserted into {}.{}: {why}; the relay stops before their \
                             transaction (nothing of it or after it is published)",
                            self.schema, self.table
                        );
                        (vec![Err(OutboxError::Row(why))], false)
                    }
                };
                let Some(open) = &mut self.open else {
                    return Err(OutboxError::Stream(
                        "an insert came outside a transaction".into(),
                    ));
                };
                if open.published() {
                    // Its ids are handed out with its end.
                    if self.keep_skipped {
                        open.skipped_ids
                            .extend(decoded.into_iter().filter_map(|r| r.ok()?.id));
                    }
                    return Ok(None);
                }
                for row in decoded {
                    if open.unpublishable.is_some() {
                        break;
                    }
                    match row {
                        Ok(row) => {
                            open.rows.push(row);
                        }
                        Err(e) => {
                            open.unpublishable = Some(e.to_string());
                            open.reread_shape = reread;
                        }
                    }
                }
                if !open.xa_started && open.unpublishable.is_none() {
                    return Ok(open.rows.part(self.max_rows));
                }
            }
            _ => {}
        }
        Ok(None)
    }

    /// A transaction (or an XA transaction's part) ends at `end`: where reading shows the next
    /// one whole. Returns the position's number.
    fn mark_end(&mut self, end: u64) -> u64 {
        let number = position_number(&self.file, end);
        self.last_end = (number, format!("{}:{end}", self.file));
        number
    }

    /// A transaction starts (BEGIN, MariaDB's GTID event, MySQL's XA START); `xa`: an XA one.
    /// One still open then never committed (as a partial transaction at the end of a binary
    /// log the server crashed in): `Change::Abandoned` if its rows were handed out.
    fn begin(&mut self, xa: bool) -> Option<Change> {
        let replaced = self.open.replace(OpenTxn {
            rows: OpenRows::default(),
            unpublishable: None,
            reread_shape: false,
            // Transactions do not overlap in the log (an XA one's prepared part aside), and
            // the resume point is where one ended: one beginning before it ends at or before.
            began_before_resume: self.last_end.0 < self.resume,
            begin: self.last_end.clone(),
            xa: None,
            xa_started: xa,
            skipped_ids: Vec::new(),
        });
        replaced
            .filter(|o| o.rows.streamed())
            .map(|_| Change::Abandoned)
    }

    /// `XA COMMIT xid`: the prepared transaction's rows are committed here.
    fn commit_prepared(&mut self, xid: &str, end: u64, timestamp: u32) -> Option<Change> {
        match self
            .prepared
            .iter()
            .position(|t| t.xa.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(xid)))
        {
            Some(at) => self.open = Some(self.prepared.remove(at)),
            None => {
                // Prepared before where this stream started. One with outbox rows cannot be,
                // with a committed position (it stays before them), so it had none, or this is
                // the relay's first start and its rows came before the relay's position.
                tracing::info!(
                    xid,
                    "an XA transaction prepared before where the relay started reading was \
                     committed: it had no outbox rows, or (on the relay's first start) rows \
                     written before its first position, which are not relayed"
                );
                self.open = None;
            }
        }
        self.finish(end, timestamp)
    }

    /// A transaction ends at `end`: handed out unless published already (its ids kept then, if
    /// asked for).
    fn finish(&mut self, end: u64, timestamp: u32) -> Option<Change> {
        let number = self.mark_end(end);
        // Where a restart reads from: before the oldest XA transaction still held with outbox
        // rows, so that it sees those again (one without any, on another table or left
        // prepared by a crashed transaction manager, needs no reading again and must not pin
        // the position: its log would have to be kept for ever). Also this transaction's
        // begin, where `--delete-published` reads its last batch again from.
        let held = self
            .prepared
            .iter()
            .filter(|t| !t.rows.is_empty() || t.unpublishable.is_some())
            .map(|t| &t.begin)
            .min_by_key(|b| b.0)
            .filter(|b| b.0 < number)
            .cloned();
        let position = held
            .as_ref()
            .map_or_else(|| self.last_end.1.clone(), |b| b.1.clone());
        let open = self.open.take()?;
        if open.published() {
            self.skipped.extend(open.skipped_ids);
            return None;
        }
        let begin = match held {
            Some(held) if held.0 < open.begin.0 => held,
            _ => open.begin,
        };
        let streamed = open.rows.streamed();
        let txn = SourceTxn {
            end: number,
            position,
            begin: Some(begin),
            commit_time_us: i64::from(timestamp) * 1_000_000,
            rows: open.rows.into_rows(),
            unpublishable: open.unpublishable,
            reread_shape: open.reread_shape,
        };
        if streamed {
            return Some(Change::Txn(txn));
        }
        crate::row::unless_published(
            Some(txn),
            self.resume,
            self.keep_skipped.then_some(&mut self.skipped),
        )
        .map(Change::Txn)
    }

    fn row(&self, row: &BinlogRow, located: &Located) -> Result<OutboxRow, RowRefused> {
        // ENUM and SET values are numbers in the log: their names are published.
        let mut unnamed: Option<String> = None;
        let mut value = |i: usize| -> Option<Vec<u8>> {
            let raw = row.as_ref(*located.positions.get(i)?)?;
            let Some(labels) = located.labels.get(i).and_then(Option::as_ref) else {
                return plain_value(raw);
            };
            let number = match (labels, raw) {
                (_, BinlogValue::Value(Value::NULL)) => return None,
                (Labels::Enum(_), BinlogValue::Value(Value::Int(n))) => u64::try_from(*n).ok(),
                (Labels::Enum(_), BinlogValue::Value(Value::UInt(n))) => Some(*n),
                (Labels::Set(_), BinlogValue::Value(Value::Bytes(b))) => {
                    mysql_labels::set_bitmap(b)
                }
                _ => None,
            };
            let named = match number {
                Some(n) => labels.name(n).map_err(|e| e.0),
                None => Err(format!("a value logged as {raw:?}, not an ENUM or SET one")),
            };
            match named {
                Ok(name) => Some(name),
                Err(why) => {
                    let column = self.columns.wanted.get(i).cloned().unwrap_or_default();
                    unnamed.get_or_insert(format!("column {column:?}: {why}"));
                    None
                }
            }
        };
        // (A MariaDB UUID id column is refused in check(): its bytes are in stored order.)
        let id = value(0).map(|raw| String::from_utf8_lossy(&raw).into_owned());
        let aggregatetype = value(1);
        let key = value(2);
        let kind = value(3);
        let payload = value(4);
        let extra: Vec<Option<Vec<u8>>> =
            (0..self.header_names.len()).map(|n| value(5 + n)).collect();
        if let Some(why) = unnamed {
            return Err(RowRefused {
                why: unroutable(
                    id.as_deref(),
                    &format!(
                        "{why}: the names of its ENUM or SET values are not the ones the row was \
                         written with{}",
                        if located.labels_from_start {
                            " (the table may have been altered)"
                        } else {
                            ""
                        }
                    ),
                ),
                reread: located.labels_from_start,
            });
        }
        let refused = |why: OutboxError| RowRefused { why, reread: false };
        let aggregatetype = aggregatetype.ok_or_else(|| {
            refused(unroutable(
                id.as_deref(),
                "its aggregatetype is NULL, so it routes to no topic",
            ))
        })?;
        let topic = topic_for(&self.prefix, &String::from_utf8_lossy(&aggregatetype))
            .map_err(|why| refused(unroutable(id.as_deref(), &why)))?;
        let mut headers = Vec::new();
        if let Some(id) = &id {
            headers.push(("id".to_string(), id.as_bytes().to_vec()));
        }
        if let Some(kind) = kind {
            headers.push(("type".to_string(), kind));
        }
        for (name, v) in self.header_names.iter().zip(extra) {
            if let Some(v) = v {
                headers.push((name.clone(), v));
            }
        }
        Ok(OutboxRow {
            id,
            topic,
            key,
            payload,
            headers,
        })
    }

    /// Nothing to tell the server: it keeps its binary log by its own expiry settings.
    pub fn confirm(&mut self, end: u64) {
        self.resume = self.resume.max(end);
    }

    /// Rows read and not yet published: the open transaction's and the held XA ones'.
    pub fn pending_rows(&self) -> usize {
        self.open.as_ref().map_or(0, |o| o.rows.len())
            + self.prepared.iter().map(|t| t.rows.len()).sum::<usize>()
    }

    /// Where the stream started, as a position: committed before anything is published when
    /// the relay had none, so a restart does not start again at the log's end and skip what
    /// came in between.
    pub fn start(&self) -> (u64, String) {
        (self.started.0, self.started.1.clone())
    }

    pub fn server_end(&self) -> u64 {
        self.seen
    }
}

/// A value of a column that is not ENUM or SET, as published bytes.
fn plain_value(raw: &BinlogValue<'_>) -> Option<Vec<u8>> {
    match raw {
        BinlogValue::Value(Value::NULL) => None,
        BinlogValue::Value(Value::Bytes(b)) => Some(b.clone()),
        BinlogValue::Value(Value::Int(n)) => Some(n.to_string().into_bytes()),
        BinlogValue::Value(Value::UInt(n)) => Some(n.to_string().into_bytes()),
        BinlogValue::Value(other) => Some(other.as_sql(true).into_bytes()),
        BinlogValue::Jsonb(j) => serde_json::Value::try_from(j.clone())
            .ok()
            .and_then(|v| serde_json::to_vec(&v).ok()),
        BinlogValue::JsonDiff(_) => None,
    }
}

/// A row the relay cannot publish; `reread`: a new session, reading the table's shape again,
/// may place it (see [`SourceTxn::reread_shape`]).
struct RowRefused {
    why: OutboxError,
    reread: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_order_like_the_log() {
        assert!(position_number("binlog.000002", 4) > position_number("binlog.000001", 900_000));
        assert!(position_number("binlog.000001", 500) > position_number("binlog.000001", 400));
        assert_eq!(
            parse_position("mysql-bin.000003:1234"),
            Some(("mysql-bin.000003".to_string(), 1234))
        );
        assert_eq!(parse_position("nonsense"), None);
        assert_eq!(binlog_name("binlog.000001GFO\u{1}"), "binlog.000001");
        // A checksum starting with a digit is why the first Rotate keeps the requested name.
        assert_eq!(binlog_name("binlog.0000015\u{2}x"), "binlog.0000015");
        assert_eq!(binlog_name("binlog.000012"), "binlog.000012");
    }

    #[test]
    fn server_ids_are_stable_and_large() {
        assert_eq!(server_id("a"), server_id("a"));
        assert!(server_id("a") >= 1_000_000);
    }
}
