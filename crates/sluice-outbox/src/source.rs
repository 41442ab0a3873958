//! The database the relay reads: PostgreSQL or MySQL/MariaDB, chosen by the source URL's
//! scheme. The relay sees one interface: prepare, take the lease, stream committed
//! transactions, confirm what is published, delete published rows.

use crate::config::OutboxConfig;
use crate::error::OutboxError;
use crate::mysql::{MySqlSource, MySqlStream};
use crate::postgres::{PgSource, PgStream};
use crate::row::Change;
use crate::sink::Progress;

pub enum Source {
    Postgres(Box<PgSource>),
    MySql(Box<MySqlSource>),
}

pub enum ChangeStream {
    Postgres(Box<PgStream>),
    MySql(Box<MySqlStream>),
}

impl Source {
    pub async fn connect(cfg: &OutboxConfig) -> Result<Source, OutboxError> {
        if cfg.is_mysql() {
            Ok(Source::MySql(Box::new(MySqlSource::connect(cfg).await?)))
        } else {
            Ok(Source::Postgres(Box::new(PgSource::connect(cfg).await?)))
        }
    }

    /// The checks, and what the source needs created (PostgreSQL's publication and slot).
    pub async fn prepare(&mut self) -> Result<(), OutboxError> {
        match self {
            Source::Postgres(pg) => {
                pg.check().await?;
                pg.ensure_publication_and_slot().await
            }
            Source::MySql(my) => my.check().await,
        }
    }

    pub async fn try_lease(&mut self) -> Result<bool, OutboxError> {
        match self {
            Source::Postgres(pg) => pg.try_lease().await,
            Source::MySql(my) => my.try_lease().await,
        }
    }

    /// An error once the lease is known to be gone (PostgreSQL: the control connection
    /// ended; MySQL: the lock, checked at most once a second).
    pub async fn verify_lease(&mut self) -> Result<(), OutboxError> {
        match self {
            Source::Postgres(pg) if pg.holds_lease() => Ok(()),
            Source::Postgres(pg) => Err(pg.lease_lost().await),
            Source::MySql(my) => my.verify_lease().await,
        }
    }

    pub async fn lease_lost(&mut self) -> OutboxError {
        match self {
            Source::Postgres(pg) => pg.lease_lost().await,
            Source::MySql(my) => my.lease_lost().await,
        }
    }

    pub async fn delete(&mut self, ids: &[&str]) -> Result<u64, OutboxError> {
        match self {
            Source::Postgres(pg) => pg.delete(ids).await,
            Source::MySql(my) => my.delete(ids).await,
        }
    }

    /// Where the database would start without a position from the relay (the slot's).
    pub async fn start_position(&mut self) -> Result<u64, OutboxError> {
        match self {
            Source::Postgres(pg) => pg.slot_position().await,
            Source::MySql(_) => Ok(0),
        }
    }

    /// The change stream after the committed position `resume`. With `reread_last_batch`
    /// it starts where that batch began instead, and hands the ids of the transactions it
    /// skips as published to [`ChangeStream::take_skipped`] (`--delete-published`: a relay
    /// stopped between a batch's commit and its delete deletes the rows then).
    pub async fn stream(
        &mut self,
        resume: Option<&Progress>,
        reread_last_batch: bool,
    ) -> Result<ChangeStream, OutboxError> {
        let batch_start = resume
            .filter(|_| reread_last_batch)
            .and_then(|p| p.batch_start.as_ref());
        let skip_through = resume.map(|p| p.end);
        match self {
            Source::Postgres(pg) => {
                let start = batch_start.map(|b| b.0).or(skip_through);
                Ok(ChangeStream::Postgres(Box::new(
                    pg.stream(start, skip_through, reread_last_batch).await?,
                )))
            }
            Source::MySql(my) => {
                let start = batch_start
                    .map(|b| b.1.as_str())
                    .or(resume.map(|p| p.position.as_str()));
                Ok(ChangeStream::MySql(Box::new(
                    my.stream(start, skip_through, reread_last_batch).await?,
                )))
            }
        }
    }
}

impl ChangeStream {
    /// The next transaction ended, or part of a large one's rows (see [`Change`]); None for
    /// an event that ends nothing.
    pub async fn next(&mut self) -> Result<Option<Change>, OutboxError> {
        match self {
            ChangeStream::Postgres(s) => s.next().await,
            ChangeStream::MySql(s) => s.next().await,
        }
    }

    pub fn confirm(&mut self, end: u64) {
        match self {
            ChangeStream::Postgres(s) => s.confirm(end),
            ChangeStream::MySql(s) => s.confirm(end),
        }
    }

    /// The ids of rows in transactions read again and skipped as published (see
    /// [`Source::stream`]); empty unless asked for.
    pub fn take_skipped(&mut self) -> Vec<String> {
        match self {
            ChangeStream::Postgres(s) => s.take_skipped(),
            ChangeStream::MySql(s) => s.take_skipped(),
        }
    }

    pub fn confirm_idle(&mut self) -> Option<u64> {
        match self {
            ChangeStream::Postgres(s) => s.confirm_idle(),
            ChangeStream::MySql(_) => None,
        }
    }

    /// MySQL: where the stream started when the relay had no position (see MySqlStream).
    pub fn start_to_commit(&self) -> Option<(u64, String)> {
        match self {
            ChangeStream::Postgres(_) => None,
            ChangeStream::MySql(s) => Some(s.start()),
        }
    }

    pub fn pending_rows(&self) -> usize {
        match self {
            ChangeStream::Postgres(s) => s.pending_rows(),
            ChangeStream::MySql(s) => s.pending_rows(),
        }
    }

    pub fn server_end(&self) -> u64 {
        match self {
            ChangeStream::Postgres(s) => s.server_wal_end(),
            ChangeStream::MySql(s) => s.server_end(),
        }
    }
}
