//! The audit log: one JSON line per security event — a login that succeeded or failed, a SASL
//! user created, changed or deleted (and who did it) — appended to `audit_log_file`, and/or
//! produced as one record to `audit_log_topic` (audit_topic.rs). Events are handed to each
//! sink through a bounded queue, so a slow disk or topic never holds up a request; an event
//! that finds a queue full is dropped and counted (`sluice_audit_events_dropped_total`),
//! never silently.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};

use serde::Serialize;

/// Events waiting for the writer at most.
const QUEUE: usize = 10_000;

/// One security event.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuditEvent {
    Authentication {
        time_ms: i64,
        outcome: &'static str,
        /// The authenticated principal, or the user the client claimed when it failed.
        principal: String,
        mechanism: &'static str,
        peer: String,
        listener: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    UserChange {
        time_ms: i64,
        user: String,
        /// Mechanisms whose credential was set.
        set: Vec<&'static str>,
        /// Mechanisms whose credential was deleted.
        deleted: Vec<&'static str>,
        outcome: &'static str,
        /// Who asked.
        by: String,
        peer: String,
    },
    /// An ACL created or deleted.
    AclChange {
        time_ms: i64,
        /// `create` or `delete`.
        action: &'static str,
        acl: String,
        outcome: &'static str,
        by: String,
        peer: String,
    },
    /// A client quota set or removed (AlterClientQuotas).
    QuotaChange {
        time_ms: i64,
        /// `user=alice`, `client-id=<default>`, `user=alice,client-id=app`.
        entity: String,
        /// Keys set, with their new values.
        set: std::collections::BTreeMap<String, f64>,
        /// Keys removed.
        removed: Vec<String>,
        outcome: &'static str,
        by: String,
        peer: String,
    },
    /// A request (or part of one) the ACLs refused.
    AuthorizationDenied {
        time_ms: i64,
        principal: String,
        peer: String,
        api: String,
        operation: &'static str,
        resource_type: &'static str,
        resource_name: String,
    },
}

#[derive(Debug)]
pub struct AuditLog {
    sender: Option<SyncSender<AuditEvent>>,
    writer: Option<std::thread::JoinHandle<()>>,
    dropped: AtomicU64,
    path: Option<PathBuf>,
    /// The topic sink: its name and queue; the receiving end waits in `topic_events` until
    /// the broker's background task takes it.
    topic: Option<(String, tokio::sync::mpsc::Sender<AuditEvent>)>,
    topic_events: parking_lot::Mutex<Option<tokio::sync::mpsc::Receiver<AuditEvent>>>,
}

impl AuditLog {
    /// No audit log.
    pub fn off() -> AuditLog {
        AuditLog {
            sender: None,
            writer: None,
            dropped: AtomicU64::new(0),
            path: None,
            topic: None,
            topic_events: parking_lot::Mutex::new(None),
        }
    }

    /// Also sends every event to the topic `name` (created when the first event comes).
    pub fn with_topic(mut self, name: &str) -> AuditLog {
        let (sender, receiver) = tokio::sync::mpsc::channel(QUEUE);
        self.topic = Some((name.to_string(), sender));
        *self.topic_events.get_mut() = Some(receiver);
        self
    }

    /// The topic sink's name and queue, once (for the task that produces them).
    pub(crate) fn take_topic_events(
        &self,
    ) -> Option<(String, tokio::sync::mpsc::Receiver<AuditEvent>)> {
        let name = self.topic.as_ref()?.0.clone();
        self.topic_events.lock().take().map(|r| (name, r))
    }

    /// Counts an event a sink could not take.
    pub(crate) fn count_dropped(&self) {
        self.count_dropped_n(1);
    }

    pub(crate) fn count_dropped_n(&self, n: usize) {
        self.dropped
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Appends to `path` (created if missing) from a writer thread.
    pub fn open(path: &Path) -> std::io::Result<AuditLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let (sender, receiver) = sync_channel(QUEUE);
        let shown = path.display().to_string();
        let writer = std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_events(file, receiver, &shown))?;
        Ok(AuditLog {
            sender: Some(sender),
            writer: Some(writer),
            dropped: AtomicU64::new(0),
            path: Some(path.to_path_buf()),
            topic: None,
            topic_events: parking_lot::Mutex::new(None),
        })
    }

    pub fn record(&self, event: AuditEvent) {
        let to_topic = |event| {
            if let Some((_, topic)) = &self.topic {
                if topic.try_send(event).is_err() {
                    self.count_dropped();
                }
            }
        };
        let Some(file) = &self.sender else {
            to_topic(event);
            return;
        };
        if self.topic.is_some() {
            to_topic(event.clone());
        }
        match file.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.count_dropped();
            }
        }
    }

    /// Events lost because the writer fell behind (or stopped on an I/O error).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Stops taking events and waits until the queued ones are written.
    pub fn close(mut self) {
        self.sender = None;
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn write_events(file: std::fs::File, events: Receiver<AuditEvent>, path: &str) {
    let mut out = std::io::BufWriter::new(file);
    while let Ok(first) = events.recv() {
        let mut next = Some(first);
        // Everything already queued goes out with one flush.
        while let Some(event) = next {
            let written = serde_json::to_writer(&mut out, &event)
                .map_err(std::io::Error::other)
                .and_then(|()| out.write_all(b"\n"));
            if let Err(e) = written {
                tracing::error!(%path, error = %e, "the audit log cannot be written; audit events are dropped from now on");
                return;
            }
            next = events.try_recv().ok();
        }
        if let Err(e) = out.flush() {
            tracing::error!(%path, error = %e, "the audit log cannot be written; audit events are dropped from now on");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn events_are_appended_as_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(&path).unwrap();
        log.record(AuditEvent::Authentication {
            time_ms: 1,
            outcome: "failure",
            principal: "User:alice".into(),
            mechanism: "PLAIN",
            peer: "127.0.0.1:5".into(),
            listener: "SASL_SSL".into(),
            reason: Some("invalid user name or password".into()),
        });
        log.record(AuditEvent::UserChange {
            time_ms: 2,
            user: "bob".into(),
            set: vec!["SCRAM-SHA-256"],
            deleted: vec![],
            outcome: "success",
            by: "User:ANONYMOUS".into(),
            peer: "127.0.0.1:6".into(),
        });
        log.close();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "authentication");
        assert_eq!(lines[0]["principal"], "User:alice");
        assert_eq!(lines[1]["event"], "user_change");
        assert_eq!(lines[1]["set"][0], "SCRAM-SHA-256");
    }

    #[test]
    fn an_audit_log_that_is_off_records_nothing() {
        let log = AuditLog::off();
        log.record(AuditEvent::UserChange {
            time_ms: 0,
            user: "u".into(),
            set: vec![],
            deleted: vec![],
            outcome: "success",
            by: "User:x".into(),
            peer: "p".into(),
        });
        assert_eq!(log.dropped(), 0);
        assert!(log.path().is_none());
    }
}
