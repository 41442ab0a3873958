//! The PostgreSQL source: a control connection (checks, the publication and slot, the lease,
//! deleting published rows) and the logical replication stream (`pgwire-replication`, the
//! `pgoutput` plugin), decoded into committed transactions of outbox rows.

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use pgwire_replication::{Lsn, ReplicationClient, ReplicationConfig, ReplicationEvent};
use tokio::task::JoinHandle;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::{redact, OutboxConfig};
use crate::error::{describe_pg, OutboxError};
use crate::pgoutput::{self, Message, Value};
use crate::row::{topic_for, unroutable, Change, OpenRows, OutboxRow, SourceTxn};
use crate::tls::{DbTls, TlsMode};

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// Server settings of the relay's sessions: keepalives so the server drops a vanished
/// relay's session (and lease) within seconds, and the bytea text format the decoder reads.
const SESSION_OPTIONS: &str = "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 \
     -c tcp_keepalives_count=3 -c bytea_output=hex";

/// SQLSTATEs the relay tells apart.
const INSUFFICIENT_PRIVILEGE: &str = "42501";
const DUPLICATE_OBJECT: &str = "42710";

pub struct PgSource {
    cfg: OutboxConfig,
    pg: tokio_postgres::Config,
    /// TLS of both connections (`sslmode` and the certificate files of the URL).
    tls: DbTls,
    client: tokio_postgres::Client,
    /// Drives the control connection; it ends when the connection does, and with it the lease.
    connection: JoinHandle<()>,
    /// The id column's SQL type, for deleting published rows by id.
    id_type: String,
    /// The table is partitioned (its rows must be published under its own name).
    partitioned: bool,
    user: String,
    database: String,
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The lease's advisory lock key: FNV-1a of the slot's name, so every instance of one relay
/// asks for the same lock and relays of different slots do not meet.
pub fn lease_key(slot: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "sluice-outbox:".bytes().chain(slot.bytes()) {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// Whether a session that failed under `sslmode=prefer` is tried again without TLS, as libpq
/// does: the TLS handshake failed (the connector's I/O error, not tokio-postgres' own refusal
/// of a setting), or the server refused the login of a session that was encrypted (28000:
/// pg_hba.conf has no `hostssl`/`host` line for it).
fn retry_plain(e: &tokio_postgres::Error, encrypted: bool) -> bool {
    let handshake = e.to_string().contains("TLS handshake")
        && std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
    let refused_encrypted = encrypted
        && e.code() == Some(&tokio_postgres::error::SqlState::INVALID_AUTHORIZATION_SPECIFICATION);
    handshake || refused_encrypted
}

impl PgSource {
    pub async fn connect(cfg: &OutboxConfig) -> Result<PgSource, OutboxError> {
        let (url, mut tls) = DbTls::from_postgres_url(&cfg.source)?;
        let mut pg = tokio_postgres::Config::from_str(&url)
            .map_err(|e| OutboxError::Setup(format!("--source {:?}: {e}", redact(&cfg.source))))?;
        if pg.get_ssl_mode() != SslMode::Prefer {
            // The driver found an sslmode this did not (a URL it reads differently).
            return Err(OutboxError::Setup(format!(
                "--source {:?}: sslmode could not be read unambiguously; percent-encode any \
                 ? or @ in the password and the parameters (%3F, %40)",
                redact(&cfg.source)
            )));
        }
        pg.connect_timeout(Duration::from_secs(5))
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(5))
            .keepalives_interval(Duration::from_secs(2))
            .keepalives_retries(3)
            // The server must notice a vanished relay soon too: its backend holds the lease.
            .options(SESSION_OPTIONS)
            .application_name("sluice-outbox");
        let connect = |pg: &mut tokio_postgres::Config, tls: &DbTls| {
            pg.ssl_mode(match tls.mode {
                TlsMode::Disable => SslMode::Disable,
                TlsMode::Prefer => SslMode::Prefer,
                TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => SslMode::Require,
            });
            let pg = pg.clone();
            let config = tls.client_config();
            async move { Ok::<_, OutboxError>(pg.connect(MakeRustlsConnect::new(config?)).await) }
        };
        let mut connected = connect(&mut pg, &tls).await?;
        let mut tls_error = None;
        if tls.mode == TlsMode::Prefer {
            let encrypted = tls.handshook();
            if let Some(e) = connected
                .as_ref()
                .err()
                .filter(|e| retry_plain(e, encrypted))
            {
                // libpq's prefer: a failed handshake, or a server that refuses the session
                // once encrypted (pg_hba.conf with only `hostnossl` lines), is tried again in
                // plain.
                tracing::warn!(error = %describe_pg(e), "TLS to the database failed under sslmode=prefer: connecting without it");
                tls_error = Some(describe_pg(e));
                tls.mode = TlsMode::Disable;
                connected = connect(&mut pg, &tls).await?;
            }
        }
        let (client, connection) = connected.map_err(|e| {
            let with_tls = tls_error
                .as_ref()
                .map(|t| format!(" (with TLS, first: {t})"))
                .unwrap_or_default();
            OutboxError::Database(format!(
                "cannot connect to {}: {}{with_tls}",
                redact(&cfg.source),
                describe_pg(&e)
            ))
        })?;
        let connection = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %describe_pg(&e), "the database connection ended");
            }
        });
        let user = pg.get_user().unwrap_or("postgres").to_string();
        let database = pg.get_dbname().unwrap_or(&user).to_string();
        Ok(PgSource {
            cfg: cfg.clone(),
            pg,
            tls,
            client,
            connection,
            id_type: String::new(),
            partitioned: false,
            user,
            database,
        })
    }

    /// wal_level, the role's right to replicate, the table and its columns.
    pub async fn check(&mut self) -> Result<(), OutboxError> {
        let level: String = self.client.query_one("SHOW wal_level", &[]).await?.get(0);
        if level != "logical" {
            return Err(OutboxError::Setup(format!(
                "the database has wal_level = {level}: the relay reads the change log through \
                 logical replication, which needs wal_level = logical in postgresql.conf (and \
                 a restart of the database)"
            )));
        }
        let may_replicate: Option<bool> = self
            .client
            .query_opt(
                "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user",
                &[],
            )
            .await?
            .map(|r| r.get(0));
        if may_replicate != Some(true) {
            return Err(OutboxError::Setup(format!(
                "user {} may not use logical replication: an administrator must run \
                 ALTER ROLE {} REPLICATION",
                self.user,
                quote_ident(&self.user)
            )));
        }
        let (schema, table) = self.cfg.table_name();
        let relation: Option<(u32, i8)> = self
            .client
            .query_opt(
                "SELECT c.oid, c.relkind FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
                &[&schema, &table],
            )
            .await?
            .map(|r| (r.get(0), r.get(1)));
        let Some((relation, kind)) = relation else {
            return Err(OutboxError::Setup(format!(
                "table {schema}.{table} does not exist in database {}",
                self.database
            )));
        };
        self.partitioned = kind == b'p' as i8;
        let rows = self
            .client
            .query(
                "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute \
                 WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                &[&relation],
            )
            .await?;
        let columns: HashMap<String, String> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        for wanted in self.cfg.columns.all() {
            if !columns.contains_key(wanted) {
                let mut have: Vec<&String> = columns.keys().collect();
                have.sort();
                return Err(OutboxError::Setup(format!(
                    "table {schema}.{table} has no column {wanted:?} (it has {have:?}); name the \
                     outbox columns with --column-* if they differ"
                )));
            }
        }
        self.id_type = columns
            .get(&self.cfg.columns.id)
            .cloned()
            .unwrap_or_default();
        Ok(())
    }

    /// Creates the publication (inserts into the outbox table only) and the slot if missing;
    /// where the user may not, the error names what an administrator must run.
    pub async fn ensure_publication_and_slot(&self) -> Result<(), OutboxError> {
        let (schema, table) = self.cfg.table_name();
        let publication = self.cfg.publication();
        let qualified = format!("{}.{}", quote_ident(&schema), quote_ident(&table));
        let create_publication = format!(
            "CREATE PUBLICATION {} FOR TABLE {qualified} WITH (publish = 'insert', \
             publish_via_partition_root = true)",
            quote_ident(publication)
        );
        let exists = self
            .client
            .query_opt(
                "SELECT pubinsert, pubviaroot FROM pg_publication WHERE pubname = $1",
                &[&publication],
            )
            .await?;
        match exists {
            Some(row) => {
                let publishes_inserts: bool = row.get(0);
                let via_root: bool = row.get(1);
                if self.partitioned && !via_root {
                    return Err(OutboxError::Setup(format!(
                        "publication {publication} publishes the partitions of {schema}.{table} \
                         under their own names: run ALTER PUBLICATION {} SET \
                         (publish_via_partition_root = true)",
                        quote_ident(publication)
                    )));
                }
                let covers = self
                    .client
                    .query_opt(
                        "SELECT 1 FROM pg_publication_tables WHERE pubname = $1 \
                         AND schemaname = $2 AND tablename = $3",
                        &[&publication, &schema, &table],
                    )
                    .await?
                    .is_some();
                if !covers || !publishes_inserts {
                    return Err(OutboxError::Setup(format!(
                        "publication {publication} exists but does not publish inserts into \
                         {schema}.{table}: run ALTER PUBLICATION {} ADD TABLE {qualified} (and \
                         publish = 'insert'), or give the relay another --publication",
                        quote_ident(publication)
                    )));
                }
            }
            None => {
                if let Err(e) = self.client.batch_execute(&create_publication).await {
                    match e.code().map(|c| c.code()) {
                        Some(DUPLICATE_OBJECT) => {} // another instance made it just now
                        Some(INSUFFICIENT_PRIVILEGE) => {
                            return Err(OutboxError::Setup(format!(
                                "user {} may not create the publication ({}): the table's \
                                 owner must run: {create_publication}",
                                self.user,
                                describe_pg(&e)
                            )))
                        }
                        _ => return Err(e.into()),
                    }
                }
            }
        }
        let slot = &self.cfg.slot;
        let existing = self
            .client
            .query_opt(
                "SELECT plugin::text, database::text, slot_type FROM pg_replication_slots \
                 WHERE slot_name = $1",
                &[slot],
            )
            .await?;
        match existing {
            Some(row) => {
                let (plugin, database, kind): (Option<String>, Option<String>, String) =
                    (row.get(0), row.get(1), row.get(2));
                if kind != "logical"
                    || plugin.as_deref() != Some("pgoutput")
                    || database.as_deref() != Some(&self.database)
                {
                    return Err(OutboxError::Setup(format!(
                        "replication slot {slot} exists but is a {kind} slot of plugin {} on \
                         database {}: give the relay its own --slot",
                        plugin.as_deref().unwrap_or("-"),
                        database.as_deref().unwrap_or("-")
                    )));
                }
            }
            None => {
                let made = self
                    .client
                    .query_one(
                        "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                        &[slot],
                    )
                    .await;
                if let Err(e) = made {
                    match e.code().map(|c| c.code()) {
                        Some(DUPLICATE_OBJECT) => {}
                        Some(INSUFFICIENT_PRIVILEGE) => {
                            return Err(OutboxError::Setup(format!(
                                "user {} may not create replication slot {slot} ({}): an \
                                 administrator must run ALTER ROLE {} REPLICATION",
                                self.user,
                                describe_pg(&e),
                                quote_ident(&self.user)
                            )))
                        }
                        _ => return Err(e.into()),
                    }
                } else {
                    tracing::info!(slot, "created the replication slot");
                }
            }
        }
        Ok(())
    }

    /// Takes the lease if no other instance holds it: a session advisory lock, held for as
    /// long as this control connection lives.
    pub async fn try_lease(&self) -> Result<bool, OutboxError> {
        Ok(self
            .client
            .query_one(
                "SELECT pg_try_advisory_lock($1)",
                &[&lease_key(&self.cfg.slot)],
            )
            .await?
            .get(0))
    }

    /// False once the control connection, and with it the lease, is gone.
    pub fn holds_lease(&self) -> bool {
        !self.connection.is_finished()
    }

    /// Resolves when the control connection, and with it the lease, is gone.
    pub async fn lease_lost(&mut self) -> OutboxError {
        let _ = (&mut self.connection).await;
        OutboxError::LeaseLost(format!(
            "the database connection ({})",
            redact(&self.cfg.source)
        ))
    }

    /// Deletes published rows by id.
    pub async fn delete(&self, ids: &[&str]) -> Result<u64, OutboxError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let (schema, table) = self.cfg.table_name();
        let sql = format!(
            "DELETE FROM {}.{} WHERE {} = ANY($1::text[]::{}[])",
            quote_ident(&schema),
            quote_ident(&table),
            quote_ident(&self.cfg.columns.id),
            self.id_type
        );
        Ok(self.client.execute(&sql, &[&ids]).await?)
    }

    /// The slot's confirmed position: where the stream starts when the relay asks for less.
    pub async fn slot_position(&self) -> Result<u64, OutboxError> {
        let text: Option<String> = self
            .client
            .query_opt(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.cfg.slot],
            )
            .await?
            .and_then(|r| r.get(0));
        match text {
            None => Ok(0),
            Some(text) => Lsn::parse(&text)
                .map(Lsn::as_u64)
                .map_err(|e| OutboxError::Database(format!("confirmed_flush_lsn {text:?}: {e}"))),
        }
    }

    /// Starts the change stream after `start` (the end of the last published transaction,
    /// or an earlier one to read the last batch again), or at the slot's confirmed position
    /// when nothing was published yet; transactions ending at or before `skip_through` are
    /// skipped as published (their row ids kept for `take_skipped` if `keep_skipped`). The
    /// slot is told `start` as flushed, never more, until the relay reports more.
    pub async fn stream(
        &self,
        start: Option<u64>,
        skip_through: Option<u64>,
        keep_skipped: bool,
    ) -> Result<PgStream, OutboxError> {
        let host = match self.pg.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            _ => {
                return Err(OutboxError::Setup(
                    "--source: name the database's host (a Unix socket is not supported)".into(),
                ))
            }
        };
        let port = self.pg.get_ports().first().copied().unwrap_or(5432);
        let password = self
            .pg
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default();
        let resume = skip_through.or(start).unwrap_or(0);
        let start = Lsn::from_u64(start.unwrap_or(0));
        let tls = self.tls.replication(&host);
        let config = ReplicationConfig::new(
            host,
            self.user.clone(),
            password,
            self.database.clone(),
            self.cfg.slot.clone(),
            self.cfg.publication().to_string(),
        )
        .with_port(port)
        .with_tls(tls)
        .with_start_lsn(start)
        .with_ack_lsn(start)
        .with_status_interval(Duration::from_secs(1))
        .with_wakeup_interval(Duration::from_secs(5))
        // Events received and not yet taken by the relay (8,192 by default, each up to a
        // row): fewer, since they wait while the relay sends a large transaction's parts.
        .with_buffer_size(1024)
        .with_options(SESSION_OPTIONS)
        .with_application_name("sluice-outbox");
        let mut client = ReplicationClient::connect(config)
            .await
            .map_err(|e| OutboxError::Stream(format!("starting replication: {e}")))?;
        // The worker connects and starts in the background: wait, so a slot still held by
        // a vanished instance's walsender is an error here, not a relay reported active.
        client
            .wait_started()
            .await
            .map_err(|e| OutboxError::Stream(format!("starting replication: {e}")))?;
        Ok(PgStream {
            client,
            decoder: Decoder::new(&self.cfg, resume, keep_skipped),
        })
    }
}

/// The replication stream and its decoder.
pub struct PgStream {
    client: ReplicationClient,
    decoder: Decoder,
}

impl PgStream {
    /// Waits for the next event and decodes it; Some when a transaction committed after the
    /// resume point ends (with outbox rows or none), or a large one's rows make a part.
    pub async fn next(&mut self) -> Result<Option<Change>, OutboxError> {
        let event = self
            .client
            .recv()
            .await
            .map_err(|e| OutboxError::Stream(e.to_string()))?
            .ok_or_else(|| {
                OutboxError::Stream("the database ended the replication stream".into())
            })?;
        self.decoder.event(event)
    }

    /// The ids of the rows of transactions skipped as published, if asked for.
    pub fn take_skipped(&mut self) -> Vec<String> {
        std::mem::take(&mut self.decoder.skipped)
    }

    /// Tells the database everything up to `end` is published: it may drop that WAL.
    pub fn confirm(&mut self, end: u64) {
        self.decoder.resume = self.decoder.resume.max(end);
        self.client.update_applied_lsn(Lsn::from_u64(end));
    }

    /// With nothing received left to publish: confirms the position the server says it has
    /// sent everything before (transactions without outbox rows, or none, are behind it), so
    /// the slot does not hold WAL the relay will never need while no outbox row is written.
    /// The progress topic keeps the last published end; a restart asks for that, and the
    /// server starts at the later confirmed position, skipping only what had no rows.
    /// Returns the new position, if it moved.
    pub fn confirm_idle(&mut self) -> Option<u64> {
        let through = self.decoder.sent_through;
        if self.decoder.open.is_some() || through <= self.decoder.resume {
            return None;
        }
        self.confirm(through);
        Some(through)
    }

    /// Rows decoded of the transaction still open.
    pub fn pending_rows(&self) -> usize {
        self.decoder.open.as_ref().map_or(0, |o| o.rows.len())
    }

    /// The end of the WAL the server last reported.
    pub fn server_wal_end(&self) -> u64 {
        self.decoder.server_wal_end
    }
}

/// The outbox table's column positions in the stream's tuples.
struct Layout {
    /// Positions of id, aggregatetype, aggregateid, type, payload and the header columns.
    positions: Vec<usize>,
    /// Whether the payload column is bytea (its text is hex).
    payload_bytea: bool,
}

struct OpenTxn {
    rows: OpenRows,
    /// The first row that cannot be published; the rows after it are not kept.
    unpublishable: Option<String>,
    /// Published already (it commits before the resume point): its rows are not kept, only
    /// their ids when asked for, handed out at its end.
    published: bool,
    skipped_ids: Vec<String>,
}

struct Decoder {
    cfg: OutboxConfig,
    layouts: HashMap<u32, Option<Layout>>,
    open: Option<OpenTxn>,
    server_wal_end: u64,
    /// Every transaction committing before this was sent (a keepalive between transactions).
    sent_through: u64,
    /// Transactions ending at or before this were published already.
    resume: u64,
    /// Whether to keep the ids of the rows of transactions skipped as published.
    keep_skipped: bool,
    skipped: Vec<String>,
}

impl Decoder {
    fn new(cfg: &OutboxConfig, resume: u64, keep_skipped: bool) -> Self {
        Decoder {
            cfg: cfg.clone(),
            layouts: HashMap::new(),
            open: None,
            server_wal_end: 0,
            sent_through: 0,
            resume,
            keep_skipped,
            skipped: Vec::new(),
        }
    }

    fn event(&mut self, event: ReplicationEvent) -> Result<Option<Change>, OutboxError> {
        match event {
            ReplicationEvent::Begin { final_lsn, .. } => {
                // Its commit record starts at `final_lsn`: the resume point (the end of a
                // published transaction, or a keepalive's position between transactions) lies
                // after that record if the transaction was published, else at or before it.
                let replaced = self.open.replace(OpenTxn {
                    rows: OpenRows::default(),
                    unpublishable: None,
                    published: final_lsn.as_u64() < self.resume,
                    skipped_ids: Vec::new(),
                });
                // A Begin inside a transaction (not in pgoutput's protocol): the one before
                // never committed, and the relay drops what it was sent of it.
                Ok(replaced
                    .filter(|o| o.rows.streamed())
                    .map(|_| Change::Abandoned))
            }
            ReplicationEvent::XLogData { data, wal_end, .. } => {
                self.server_wal_end = self.server_wal_end.max(wal_end.as_u64());
                self.message(&data)
            }
            ReplicationEvent::Commit {
                end_lsn,
                commit_time_micros,
                ..
            } => {
                let open = self
                    .open
                    .take()
                    .ok_or_else(|| OutboxError::Stream("a Commit came without its Begin".into()))?;
                if open.published {
                    self.skipped.extend(open.skipped_ids);
                    return Ok(None);
                }
                Ok(Some(Change::Txn(SourceTxn {
                    end: end_lsn.as_u64(),
                    position: crate::stats::lsn_text(end_lsn.as_u64()),
                    commit_time_us: commit_time_micros.saturating_add(PG_EPOCH_US),
                    rows: open.rows.into_rows(),
                    begin: None,
                    unpublishable: open.unpublishable,
                    reread_shape: false,
                })))
            }
            ReplicationEvent::KeepAlive { wal_end, .. } => {
                self.server_wal_end = self.server_wal_end.max(wal_end.as_u64());
                // Between transactions, the server has sent every transaction that committed
                // before this point: what is not yet received commits after it.
                if self.open.is_none() {
                    self.sent_through = self.sent_through.max(wal_end.as_u64());
                }
                Ok(None)
            }
            ReplicationEvent::Message { .. } => Ok(None),
            ReplicationEvent::StoppedAt { .. } => {
                Err(OutboxError::Stream("the replication stream stopped".into()))
            }
        }
    }

    /// Decodes one message; returns the open transaction's rows once they make a part.
    fn message(&mut self, data: &[u8]) -> Result<Option<Change>, OutboxError> {
        match pgoutput::decode(data).map_err(|e| OutboxError::Stream(e.to_string()))? {
            Message::Relation(r) => {
                let (schema, table) = self.cfg.table_name();
                let layout =
                    if r.namespace == schema && r.name == table {
                        let mut positions = Vec::new();
                        for wanted in self.cfg.columns.all() {
                            let at = r.columns.iter().position(|c| c.name == wanted).ok_or_else(
                                || {
                                    OutboxError::Setup(format!(
                                "the change stream's {schema}.{table} has no column {wanted:?} \
                                 (was the table altered?)"
                            ))
                                },
                            )?;
                            positions.push(at);
                        }
                        let payload_bytea = r.columns[positions[4]].type_oid == pgoutput::BYTEA_OID;
                        Some(Layout {
                            positions,
                            payload_bytea,
                        })
                    } else {
                        None // another table of the publication: not outbox rows
                    };
                self.layouts.insert(r.id, layout);
            }
            Message::Insert { relation, values } => {
                let Some(layout) = self.layouts.get(&relation) else {
                    return Err(OutboxError::Stream(format!(
                        "an insert into relation {relation} came before its Relation message"
                    )));
                };
                let Some(layout) = layout else {
                    return Ok(None);
                };
                let Some(open) = &mut self.open else {
                    return Err(OutboxError::Stream(
                        "an insert came outside a transaction".into(),
                    ));
                };
                if open.published {
                    // Only its ids are kept, handed out with its end.
                    if let (true, Some(Value::Text(id))) =
                        (self.keep_skipped, values.get(layout.positions[0]))
                    {
                        open.skipped_ids
                            .push(String::from_utf8_lossy(id).into_owned());
                    }
                    return Ok(None);
                }
                let row = row(&self.cfg, layout, &values);
                if open.unpublishable.is_none() {
                    match row {
                        Ok(row) => {
                            open.rows.push(row);
                            return Ok(open.rows.part(self.cfg.max_batch_rows));
                        }
                        Err(e) => open.unpublishable = Some(e.to_string()),
                    }
                }
            }
            Message::Other(_) => {}
        }
        Ok(None)
    }
}

/// An inserted row of the outbox table, routed as `cfg` says.
fn row(cfg: &OutboxConfig, layout: &Layout, values: &[Value]) -> Result<OutboxRow, OutboxError> {
    let text = |i: usize| -> Option<&[u8]> {
        match values.get(layout.positions[i]) {
            Some(Value::Text(t)) => Some(t.as_slice()),
            _ => None,
        }
    };
    let id = text(0).map(|t| String::from_utf8_lossy(t).into_owned());
    let aggregatetype = text(1).ok_or_else(|| {
        unroutable(
            id.as_deref(),
            "its aggregatetype is NULL, so it routes to no topic",
        )
    })?;
    let topic = topic_for(&cfg.topic_prefix, &String::from_utf8_lossy(aggregatetype))
        .map_err(|why| unroutable(id.as_deref(), &why))?;
    let payload = match text(4) {
        Some(t) if layout.payload_bytea => Some(pgoutput::bytea_from_text(t).ok_or_else(|| {
            unroutable(
                id.as_deref(),
                "its bytea payload is not in hex output format",
            )
        })?),
        Some(t) => Some(t.to_vec()),
        None => None,
    };
    let mut headers = Vec::new();
    if let Some(id) = &id {
        headers.push(("id".to_string(), id.as_bytes().to_vec()));
    }
    if let Some(kind) = text(3) {
        headers.push(("type".to_string(), kind.to_vec()));
    }
    for (n, name) in cfg.columns.headers.iter().enumerate() {
        if let Some(v) = text(5 + n) {
            headers.push((name.clone(), v.to_vec()));
        }
    }
    Ok(OutboxRow {
        id,
        topic,
        key: text(2).map(<[u8]>::to_vec),
        payload,
        headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outbox table's Relation message (relation 7, the default columns, payload text).
    fn relation() -> Vec<u8> {
        let columns = ["id", "aggregatetype", "aggregateid", "type", "payload"].map(|c| (c, 25));
        pgoutput::encode::relation(7, "public", "outbox", &columns)
    }

    /// An Insert of row `id` into relation 7.
    fn insert(id: &str) -> Vec<u8> {
        let values = [id, "order", "agg-1", "created", "{}"].map(|v| Some(v.as_bytes()));
        pgoutput::encode::insert(7, &values)
    }

    fn data(bytes: Vec<u8>) -> ReplicationEvent {
        ReplicationEvent::XLogData {
            wal_start: Lsn::from_u64(0),
            wal_end: Lsn::from_u64(0),
            server_time_micros: 0,
            data: bytes.into(),
        }
    }

    /// Feeds a transaction of `rows` rows (commit record at `final_lsn`, ending 8 later);
    /// returns what the decoder handed out, as (rows of each part, rows of the end or None).
    fn transaction(
        decoder: &mut Decoder,
        final_lsn: u64,
        rows: usize,
    ) -> (Vec<usize>, Option<usize>) {
        let mut parts = Vec::new();
        let mut end = None;
        let mut events = vec![ReplicationEvent::Begin {
            final_lsn: Lsn::from_u64(final_lsn),
            xid: 1,
            commit_time_micros: 0,
        }];
        events.push(data(relation()));
        events.extend((0..rows).map(|i| data(insert(&format!("{final_lsn}-{i}")))));
        events.push(ReplicationEvent::Commit {
            lsn: Lsn::from_u64(final_lsn),
            end_lsn: Lsn::from_u64(final_lsn + 8),
            commit_time_micros: 0,
        });
        for event in events {
            match decoder.event(event) {
                Ok(Some(Change::Part(rows))) => parts.push(rows.len()),
                Ok(Some(Change::Txn(txn))) => end = Some(txn.rows.len()),
                Ok(Some(Change::Abandoned)) => panic!("a transaction abandoned"),
                Ok(None) => {}
                Err(e) => panic!("decoding: {e}"),
            }
        }
        (parts, end)
    }

    /// A transaction of more than `max_batch_rows` rows is handed out in parts, then its end
    /// with the rest; one committed before the resume point is skipped whole (its ids kept
    /// when asked for), one at it is not.
    #[test]
    fn a_large_transaction_comes_in_parts_and_a_published_one_not_at_all() {
        let mut cfg = OutboxConfig::new("postgres://u@h/d", "outbox", "b:9092");
        cfg.max_batch_rows = 3;
        let mut decoder = Decoder::new(&cfg, 100, true);
        // Published: its commit record starts before the resume point (it ends at 98).
        assert_eq!(transaction(&mut decoder, 90, 7), (vec![], None));
        assert_eq!(decoder.skipped.len(), 7);
        assert_eq!(decoder.skipped[0], "90-0");
        // Its commit record starts at the resume point: not published.
        assert_eq!(transaction(&mut decoder, 100, 7), (vec![3, 3], Some(1)));
        assert_eq!(transaction(&mut decoder, 200, 2), (vec![], Some(2)));
        assert_eq!(transaction(&mut decoder, 300, 6), (vec![3, 3], Some(0)));
        assert_eq!(decoder.skipped.len(), 7);
        // A Begin inside a transaction whose rows were handed out: it is abandoned.
        let begin = |lsn| ReplicationEvent::Begin {
            final_lsn: Lsn::from_u64(lsn),
            xid: 2,
            commit_time_micros: 0,
        };
        assert!(matches!(decoder.event(begin(400)), Ok(None)));
        let parts: Vec<_> = (0..4)
            .map(|i| decoder.event(data(insert(&format!("400-{i}")))))
            .collect();
        assert!(matches!(parts[2], Ok(Some(Change::Part(ref rows))) if rows.len() == 3));
        assert!(matches!(
            decoder.event(begin(500)),
            Ok(Some(Change::Abandoned))
        ));
        assert!(matches!(decoder.event(begin(600)), Ok(None)));
    }

    #[test]
    fn one_slot_one_lease_key() {
        assert_eq!(lease_key("a"), lease_key("a"));
        assert_ne!(lease_key("a"), lease_key("b"));
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
    }
}
