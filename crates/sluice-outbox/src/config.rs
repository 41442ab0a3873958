//! The relay's settings: the same on the command line (`sluice outbox`) and in the TOML file's
//! `[outbox]` table.

use crate::client_props::ClientProperties;
use crate::tls::DbTls;
use serde::Deserialize;

use crate::error::OutboxError;

/// The outbox table's column names (Debezium's outbox event router's by default).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct Columns {
    /// Unique per row; sent as header `id`, and the key `--delete-published` deletes by.
    pub id: String,
    /// Routes the row: the topic is the prefix and this value.
    pub aggregatetype: String,
    /// The record key: one aggregate's rows stay in one partition, in commit order.
    pub aggregateid: String,
    /// Sent as header `type`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The record value: bytea as its bytes, any other type as its text.
    pub payload: String,
    /// More columns sent as headers of the same name (a NULL one is left out).
    pub headers: Vec<String>,
}

impl Default for Columns {
    fn default() -> Self {
        Columns {
            id: "id".into(),
            aggregatetype: "aggregatetype".into(),
            aggregateid: "aggregateid".into(),
            kind: "type".into(),
            payload: "payload".into(),
            headers: Vec::new(),
        }
    }
}

impl Columns {
    /// Every column the relay reads, in order: id, aggregatetype, aggregateid, type, payload,
    /// then the header columns.
    pub fn all(&self) -> Vec<&str> {
        let mut all = vec![
            self.id.as_str(),
            &self.aggregatetype,
            &self.aggregateid,
            &self.kind,
            &self.payload,
        ];
        all.extend(self.headers.iter().map(String::as_str));
        all
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxConfig {
    /// `postgres://USER[:PASSWORD]@HOST:PORT/DB`.
    pub source: String,
    /// `schema.table` (schema `public` when left out).
    pub table: String,
    /// Sluice's bootstrap address(es) (run inside `sluice serve`: that broker, if left out).
    #[serde(default)]
    pub brokers: String,
    /// How the relay's clients log in to Sluice (`[outbox.client]`: `security.protocol`,
    /// `sasl.*`, `ssl.*`, `client.id`); plaintext when empty.
    #[serde(default)]
    pub client: ClientProperties,
    /// The logical replication slot (created if missing); it names the relay too: every
    /// relay instance given the same source and slot is one relay, one active at a time.
    #[serde(default = "default_slot")]
    pub slot: String,
    /// The publication (created if missing); the slot's name by default.
    #[serde(default)]
    pub publication: Option<String>,
    #[serde(default)]
    pub topic_prefix: String,
    /// Delete each row from the table once it is published.
    #[serde(default)]
    pub delete_published: bool,
    #[serde(default)]
    pub columns: Columns,
    /// The compacted topic holding the relay's committed position.
    #[serde(default)]
    pub progress_topic: Option<String>,
    /// Rows in one Sluice transaction at most (a database transaction is never split).
    #[serde(default = "default_max_batch_rows")]
    pub max_batch_rows: usize,
    /// The relay's Sluice transactions' timeout (`transaction.timeout.ms`): a large database
    /// transaction is one Sluice transaction, open while its rows are read and sent.
    #[serde(default = "default_transaction_timeout_ms")]
    pub transaction_timeout_ms: u64,
    /// How often a standby asks for the lease, in milliseconds.
    #[serde(default = "default_standby_poll_ms")]
    pub standby_poll_ms: u64,
    /// Progress lines on stderr every this many seconds (0: none).
    #[serde(default = "default_report_secs")]
    pub report_secs: u64,
    /// Keep trying a database never reached or a login Sluice refused (inside `sluice serve`,
    /// which must not give up on its relay because the database started later or its user
    /// was made later); `sluice outbox` stops with the message instead.
    #[serde(skip)]
    pub retry_unreachable: bool,
}

fn default_slot() -> String {
    "sluice_outbox".into()
}
fn default_max_batch_rows() -> usize {
    5_000
}
fn default_transaction_timeout_ms() -> u64 {
    60_000
}
fn default_standby_poll_ms() -> u64 {
    500
}
fn default_report_secs() -> u64 {
    5
}

impl OutboxConfig {
    pub fn new(source: &str, table: &str, brokers: &str) -> Self {
        OutboxConfig {
            source: source.into(),
            table: table.into(),
            brokers: brokers.into(),
            client: ClientProperties::default(),
            slot: default_slot(),
            publication: None,
            topic_prefix: String::new(),
            delete_published: false,
            columns: Columns::default(),
            progress_topic: None,
            max_batch_rows: default_max_batch_rows(),
            transaction_timeout_ms: default_transaction_timeout_ms(),
            standby_poll_ms: default_standby_poll_ms(),
            report_secs: default_report_secs(),
            retry_unreachable: false,
        }
    }

    /// A MySQL or MariaDB source (its binary log) rather than PostgreSQL.
    pub fn is_mysql(&self) -> bool {
        self.source.starts_with("mysql://") || self.source.starts_with("mariadb://")
    }

    pub fn publication(&self) -> &str {
        self.publication.as_deref().unwrap_or(&self.slot)
    }

    /// The progress topic: one per relay, so only this relay's transactional id writes it.
    pub fn progress_topic(&self) -> String {
        self.progress_topic
            .clone()
            .unwrap_or_else(|| format!("sluice.outbox.{}", self.slot))
    }

    /// Which database this relay reads, as its position records name it: host, port and
    /// database, no user or password. A position written for another database is refused.
    pub fn source_identity(&self) -> String {
        let rest = self.source.split_once("://").map_or("", |(_, r)| r);
        let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
        let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
        let scheme = if self.is_mysql() { "mysql" } else { "postgres" };
        format!("{scheme}://{rest}")
    }

    /// The transactional id every instance of this relay shares: a new active instance
    /// fences the one before it.
    pub fn transactional_id(&self) -> String {
        format!("sluice-outbox-{}", self.slot)
    }

    /// `(schema, table)`.
    pub fn table_name(&self) -> (String, String) {
        match self.table.split_once('.') {
            Some((schema, table)) => (schema.to_string(), table.to_string()),
            None => ("public".to_string(), self.table.clone()),
        }
    }

    /// The settings' own checks, before anything is connected to.
    pub fn validate(&self) -> Result<(), OutboxError> {
        let bad = |what: String| Err(OutboxError::Setup(what));
        if !self.is_mysql()
            && !self.source.starts_with("postgres://")
            && !self.source.starts_with("postgresql://")
        {
            return bad(format!(
                "--source {:?}: give postgres://USER[:PASSWORD]@HOST:PORT/DB or \
                 mysql://USER[:PASSWORD]@HOST:PORT/DB (MariaDB too)",
                redact(&self.source)
            ));
        }
        let host = self.source_identity();
        let host = host.split_once("://").map_or("", |(_, r)| r);
        if host.is_empty() || host.starts_with('/') || host.starts_with(':') {
            return bad(format!(
                "--source {:?}: name the database's host (a Unix socket is not supported)",
                redact(&self.source)
            ));
        }
        if self.is_mysql() {
            DbTls::from_mysql_url(&self.source)?;
        } else {
            DbTls::from_postgres_url(&self.source)?;
        }
        let (schema, table) = self.table_name();
        if schema.is_empty() || table.is_empty() || table.contains('.') {
            return bad(format!(
                "--table {:?}: give TABLE or SCHEMA.TABLE",
                self.table
            ));
        }
        if self.brokers.trim().is_empty() {
            return bad("--brokers: give Sluice's HOST:PORT".into());
        }
        self.client.validate()?;
        // Slot names: lower-case letters, digits and underscores (PostgreSQL's rule).
        let slot_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 63
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        if !slot_ok(&self.slot) {
            return bad(format!(
                "--slot {:?}: a replication slot name is 1 to 63 lower-case letters, digits \
                 and underscores",
                self.slot
            ));
        }
        if !slot_ok(self.publication()) {
            return bad(format!(
                "--publication {:?}: use lower-case letters, digits and underscores",
                self.publication()
            ));
        }
        if self.max_batch_rows == 0 {
            return bad("max_batch_rows must be at least 1".into());
        }
        if !(1_000..=900_000).contains(&self.transaction_timeout_ms) {
            return bad(format!(
                "transaction_timeout_ms {} is out of range: 1000 to 900000 (Kafka's default \
                 transaction.max.timeout.ms)",
                self.transaction_timeout_ms
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for c in self.columns.all() {
            if c.is_empty() {
                return bad("a column name is empty".into());
            }
            if !seen.insert(c) {
                return bad(format!("column {c:?} is named twice"));
            }
        }
        Ok(())
    }
}

/// The source address with its password hidden, for messages: the one in the credentials and
/// a `password=` query parameter (which tokio-postgres accepts).
pub fn redact(source: &str) -> String {
    let Some((scheme, rest)) = source.split_once("://") else {
        return source.to_string();
    };
    let rest = match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => rest.to_string(),
        },
        None => rest.to_string(),
    };
    let rest = match rest.split_once('?') {
        Some((base, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key.eq_ignore_ascii_case("password") => {
                        format!("{key}=***")
                    }
                    _ => pair.to_string(),
                })
                .collect();
            format!("{base}?{}", query.join("&"))
        }
        None => rest,
    };
    format!("{scheme}://{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_in_messages() {
        assert_eq!(
            redact("postgres://app:secret@db:5432/shop?sslmode=require"),
            "postgres://app:***@db:5432/shop?sslmode=require"
        );
        assert_eq!(
            redact("postgres://app@db/shop?password=secret&sslmode=verify-full"),
            "postgres://app@db/shop?password=***&sslmode=verify-full"
        );
        assert_eq!(redact("mysql://app@db/shop"), "mysql://app@db/shop");
    }

    #[test]
    fn defaults_follow_debezium_and_the_slot_names_the_relay() {
        let c = OutboxConfig::new(
            "postgres://app@127.0.0.1:5432/shop",
            "outbox",
            "127.0.0.1:9092",
        );
        assert!(c.validate().is_ok());
        assert_eq!(c.table_name(), ("public".into(), "outbox".into()));
        assert_eq!(c.publication(), "sluice_outbox");
        assert_eq!(c.progress_topic(), "sluice.outbox.sluice_outbox");
        assert_eq!(c.transactional_id(), "sluice-outbox-sluice_outbox");
        assert_eq!(c.source_identity(), "postgres://127.0.0.1:5432/shop");
        let mut m = c.clone();
        m.source = "mysql://root:pw@db:3306/shop?ssl-mode=disabled".into();
        assert_eq!(m.source_identity(), "mysql://db:3306/shop");
        assert_eq!(
            c.columns.all(),
            ["id", "aggregatetype", "aggregateid", "type", "payload"]
        );
    }

    #[test]
    fn bad_settings_are_named() {
        let ok = OutboxConfig::new("postgres://a@h:1/d", "s.t", "b:1");
        let mut c = ok.clone();
        c.source = "oracle://a:b@h:1/d".into();
        let e = c
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("oracle://a:***@h:1/d") && !e.contains(":b@"),
            "{e}"
        );
        let mut c = ok.clone();
        c.source = "mysql://a:b@h:1/d".into();
        assert!(c.validate().is_ok() && c.is_mysql());
        let mut c = ok.clone();
        c.source = "postgres:///d".into();
        assert!(c.validate().is_err(), "no host");
        let mut c = ok.clone();
        c.table = "a.b.c".into();
        assert!(c.validate().is_err());
        let mut c = ok.clone();
        c.slot = "Bad-Slot".into();
        assert!(c.validate().is_err());
        let mut c = ok.clone();
        c.columns.headers = vec!["id".into()];
        assert!(c.validate().is_err());
        let mut c = ok;
        c.brokers = " ".into();
        assert!(c.validate().is_err());
    }

    #[test]
    fn the_toml_table_takes_the_same_settings() {
        let c: OutboxConfig = match toml_like() {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(c.columns.kind, "event_type");
        assert!(c.delete_published);
    }

    fn toml_like() -> Result<OutboxConfig, serde_json::Error> {
        serde_json::from_str(
            r#"{"source": "postgres://a@h:1/d", "table": "outbox", "brokers": "b:1",
                "delete_published": true, "columns": {"type": "event_type"}}"#,
        )
    }
}
