//! The audit log: one JSON line per security event — a login that succeeded or failed, a SASL
//! user created, changed or deleted (and who did it) — appended to `audit_log_file`, and/or
//! produced as one record to `audit_log_topic` (audit_topic.rs). Events are handed to each
//! sink through a bounded queue, so a slow disk or topic never holds up a request; an event
//! that finds a queue full is dropped and counted (`sluice_audit_events_dropped_total`),
//! never silently. The last [`RESERVED_FOR_CHANGES`] places of each queue are kept for
//! changes (users, ACLs, quotas), which only administrators make: a flood of failed logins
//! or refused requests cannot push out the record of who changed the access rules meanwhile.
//! And each sink writes where it lost events: an `events_dropped` line (or record) with how
//! many and since when, once it has room again, so the gap shows in the log itself.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use sluice_log::Clock;

use crate::security::audit_gap::Gap;

/// Events waiting for the writer at most.
const QUEUE: usize = 10_000;
/// Places of a queue that logins and refusals leave to changes.
pub const RESERVED_FOR_CHANGES: usize = 1_000;

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
    /// Written by a sink (never recorded by a request): `count` events it could not take
    /// (its queue full, its file or topic not writable), the first of them at `since_ms`.
    EventsDropped {
        time_ms: i64,
        count: u64,
        since_ms: i64,
    },
}

impl AuditEvent {
    /// A change an administrator made (users, ACLs, quotas), which the queues keep room for.
    fn is_change(&self) -> bool {
        matches!(
            self,
            AuditEvent::UserChange { .. }
                | AuditEvent::AclChange { .. }
                | AuditEvent::QuotaChange { .. }
        )
    }
}

#[derive(Debug)]
pub struct AuditLog {
    /// The file's queue; taken out when the log is stopped.
    sender: parking_lot::RwLock<Option<SyncSender<AuditEvent>>>,
    /// The file's counters, shared with its writer thread.
    file: Arc<FileCounts>,
    writer: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
    dropped: Arc<AtomicU64>,
    path: Option<PathBuf>,
    topic_gap: Gap,
    /// Stamps the `events_dropped` entries.
    clock: Arc<dyn Clock>,
    /// The topic sink: its name and queue; the receiving end waits in `topic_events` until
    /// the broker's background task takes it.
    topic: Option<(String, tokio::sync::mpsc::Sender<AuditEvent>)>,
    topic_events: parking_lot::Mutex<Option<tokio::sync::mpsc::Receiver<AuditEvent>>>,
}

impl AuditLog {
    /// No audit log.
    #[cfg(test)]
    pub fn off() -> AuditLog {
        AuditLog::new(Arc::new(sluice_log::SystemClock))
    }

    /// No sink yet; `clock` stamps the `events_dropped` entries.
    pub fn new(clock: Arc<dyn Clock>) -> AuditLog {
        let dropped = Arc::new(AtomicU64::new(0));
        AuditLog {
            sender: parking_lot::RwLock::new(None),
            file: Arc::new(FileCounts {
                queued: AtomicUsize::new(0),
                gap: Gap::default(),
                dropped: Arc::clone(&dropped),
            }),
            writer: parking_lot::Mutex::new(None),
            dropped,
            path: None,
            topic_gap: Gap::default(),
            clock,
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

    /// Counts `n` events the topic sink could not take or write.
    pub(crate) fn count_topic_dropped(&self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.dropped.fetch_add(n, Ordering::Relaxed);
        self.topic_gap.add(n, self.clock.now_ms());
    }

    /// The topic sink's `events_dropped` entry, if it lost events since its last one.
    pub(crate) fn take_topic_gap(&self) -> Option<AuditEvent> {
        self.topic_gap.take(self.clock.now_ms())
    }

    /// Puts back a topic gap entry that could not be written.
    pub(crate) fn restore_topic_gap(&self, entry: &AuditEvent) {
        self.topic_gap.restore(entry);
    }

    /// Appends to `path` (created if missing) from a writer thread.
    pub fn open(path: &Path, clock: Arc<dyn Clock>) -> std::io::Result<AuditLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let (log, receiver) = AuditLog::file_queue(path, clock);
        let shown = path.display().to_string();
        let counts = Arc::clone(&log.file);
        let clock = Arc::clone(&log.clock);
        let writer = std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_events(file, &receiver, &counts, &*clock, &shown))?;
        Ok(AuditLog {
            writer: parking_lot::Mutex::new(Some(writer)),
            ..log
        })
    }

    /// A log whose file sink's queue is `path`'s, and that queue's receiving end (no writer).
    fn file_queue(path: &Path, clock: Arc<dyn Clock>) -> (AuditLog, Receiver<AuditEvent>) {
        let (sender, receiver) = sync_channel(QUEUE);
        let log = AuditLog {
            sender: parking_lot::RwLock::new(Some(sender)),
            path: Some(path.to_path_buf()),
            ..AuditLog::new(clock)
        };
        (log, receiver)
    }

    pub fn record(&self, event: AuditEvent) {
        let change = event.is_change();
        let to_topic = |event| {
            if let Some((_, topic)) = &self.topic {
                let room = change || topic.capacity() > RESERVED_FOR_CHANGES;
                if !room || topic.try_send(event).is_err() {
                    self.count_topic_dropped(1);
                }
            }
        };
        if self.path.is_none() {
            to_topic(event);
            return;
        }
        if self.topic.is_some() {
            to_topic(event.clone());
        }
        // Counted before it is sent, so the writer never counts it down first.
        let queued = self.file.queued.fetch_add(1, Ordering::AcqRel);
        let room = change || queued < QUEUE - RESERVED_FOR_CHANGES;
        // Not sent when full, when the writer stopped on an error, or when the log stopped.
        let sent = room
            && self
                .sender
                .read()
                .as_ref()
                .is_some_and(|file| file.try_send(event).is_ok());
        if !sent {
            self.file.queued.fetch_sub(1, Ordering::AcqRel);
            self.file.lost(1, &*self.clock);
        }
    }

    /// Events lost because the writer fell behind (or stopped on an I/O error).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Stops taking events for the file (those that come later are counted as dropped) and
    /// waits until the queued ones are written, with the file's last `events_dropped` line.
    /// Called when the broker shuts down.
    pub fn stop(&self) {
        drop(self.sender.write().take());
        let writer = self.writer.lock().take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }
}

/// How long a writer with nothing to write waits before it looks for a gap to write down.
const GAP_CHECK: Duration = Duration::from_secs(1);

/// Events written between two flushes at most, so that a gap is written down (and what was
/// written reaches the file) while a flood goes on.
const FLUSH_EVERY: usize = 1_000;

/// The file sink's counters, shared by the log and its writer thread.
#[derive(Debug)]
struct FileCounts {
    /// Events in the queue; the writer counts down each one it takes.
    queued: AtomicUsize,
    gap: Gap,
    /// The log's count of every event lost, both sinks'.
    dropped: Arc<AtomicU64>,
}

impl FileCounts {
    /// Counts `n` events lost at the file.
    fn lost(&self, n: u64, clock: &dyn Clock) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
        self.gap.add(n, clock.now_ms());
    }
}

fn write_events(
    file: std::fs::File,
    events: &Receiver<AuditEvent>,
    counts: &FileCounts,
    clock: &dyn Clock,
    path: &str,
) {
    let mut out = std::io::BufWriter::new(file);
    let written = loop {
        let mut next = match events.recv_timeout(GAP_CHECK) {
            Ok(event) => Some(event),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break Ok(()),
        };
        // What is already queued goes out with one flush, up to FLUSH_EVERY events.
        let mut taken = 0;
        let mut failed = None;
        while let Some(event) = next {
            counts.queued.fetch_sub(1, Ordering::AcqRel);
            taken += 1;
            if let Err(e) = write_line(&mut out, &event) {
                // This one and those of this flush still in the buffer.
                counts.lost(u64::try_from(taken).unwrap_or(u64::MAX), clock);
                failed = Some(e);
                break;
            }
            next = if taken < FLUSH_EVERY {
                events.try_recv().ok()
            } else {
                None
            };
        }
        if let Some(e) = failed {
            break Err(e);
        }
        // Where events were lost, once there is room again (or every FLUSH_EVERY events).
        if let Err(e) = write_gap(&mut out, &counts.gap, clock).and_then(|()| out.flush()) {
            // Not known to be written: counted as lost.
            counts.lost(u64::try_from(taken).unwrap_or(u64::MAX), clock);
            break Err(e);
        }
    };
    match written {
        Ok(()) => {
            let _ = write_gap(&mut out, &counts.gap, clock).and_then(|()| out.flush());
        }
        Err(e) => {
            tracing::error!(%path, error = %e, "the audit log cannot be written; audit events are dropped (and counted) from now on");
            // Whatever comes now is lost, and counted, until the log is closed.
            for _ in events.iter() {
                counts.queued.fetch_sub(1, Ordering::AcqRel);
                counts.lost(1, clock);
            }
        }
    }
}

/// Writes `gap`'s entry, if events were lost; puts it back if that fails.
fn write_gap(out: &mut impl Write, gap: &Gap, clock: &dyn Clock) -> std::io::Result<()> {
    let Some(entry) = gap.take(clock.now_ms()) else {
        return Ok(());
    };
    write_line(out, &entry).inspect_err(|_| gap.restore(&entry))
}

fn write_line(out: &mut impl Write, event: &AuditEvent) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, event).map_err(std::io::Error::other)?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use sluice_log::SystemClock;

    #[test]
    fn events_are_appended_as_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(&path, Arc::new(SystemClock)).unwrap();
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
        log.stop();
        // Stopped: an event that comes later is counted, not written.
        log.record(denial(0));
        assert_eq!(log.dropped(), 1);
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

    fn denial(i: usize) -> AuditEvent {
        AuditEvent::AuthorizationDenied {
            time_ms: 1,
            principal: "User:mallory".into(),
            peer: "127.0.0.1:1".into(),
            api: "Produce".into(),
            operation: "Write",
            resource_type: "topic",
            resource_name: format!("t{i}"),
        }
    }

    #[test]
    fn a_flood_of_refusals_leaves_room_for_changes_and_the_file_says_what_it_lost() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        // The writer is stalled: nothing takes from the queue until it starts below.
        let (log, receiver) = AuditLog::file_queue(&path, Arc::new(SystemClock));
        for i in 0..QUEUE {
            log.record(denial(i));
        }
        log.record(AuditEvent::AclChange {
            time_ms: 2,
            action: "create",
            acl: "User:bob Write topic t".into(),
            outcome: "success",
            by: "User:admin".into(),
            peer: "127.0.0.1:2".into(),
        });
        let refused = u64::try_from(RESERVED_FOR_CHANGES).unwrap();
        assert_eq!(
            log.dropped(),
            refused,
            "the refusals past the reserve are dropped"
        );

        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let counts = Arc::clone(&log.file);
        let counted = Arc::clone(&log.file);
        let writer = std::thread::spawn(move || {
            write_events(file, &receiver, &counts, &SystemClock, "x");
        });
        log.stop();
        writer.join().unwrap();

        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let kept = QUEUE - RESERVED_FOR_CHANGES;
        assert_eq!(lines.len(), kept + 2);
        // The gap is written down after the first FLUSH_EVERY events, not after the flood.
        let gaps: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i]["event"] == "events_dropped")
            .collect();
        assert_eq!(gaps, [FLUSH_EVERY]);
        assert_eq!(lines[FLUSH_EVERY]["count"], refused);
        assert!(lines[FLUSH_EVERY]["since_ms"].as_i64().unwrap() > 0);
        let denials: Vec<&serde_json::Value> = lines
            .iter()
            .filter(|l| l["event"] == "authorization_denied")
            .collect();
        assert_eq!(denials.len(), kept);
        assert_eq!(denials[kept - 1]["resource_name"], format!("t{}", kept - 1));
        assert_eq!(lines[kept + 1]["event"], "acl_change", "the change is kept");
        assert_eq!(
            counted.queued.load(Ordering::Acquire),
            0,
            "the writer counted down what it took"
        );
    }

    /// Records `n` refusals, then runs the writer on a file opened for reading only, where
    /// every write fails; the events counted as dropped and those still counted as queued.
    fn lost_to_a_read_only_file(n: usize) -> (u64, usize) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        std::fs::write(&path, b"").unwrap();
        let (log, receiver) = AuditLog::file_queue(&path, Arc::new(SystemClock));
        for i in 0..n {
            log.record(denial(i));
        }
        let file = std::fs::File::open(&path).unwrap();
        let counts = Arc::clone(&log.file);
        log.stop();
        write_events(file, &receiver, &counts, &SystemClock, "x");
        (
            counts.dropped.load(Ordering::Relaxed),
            counts.queued.load(Ordering::Acquire),
        )
    }

    #[test]
    fn events_a_file_that_cannot_be_written_loses_are_counted() {
        // Five lines fit the writer's buffer: the flush fails.
        let (dropped, queued) = lost_to_a_read_only_file(5);
        assert_eq!(dropped, 5);
        assert_eq!(queued, 0);
    }

    #[test]
    fn events_lost_when_the_writers_buffer_cannot_be_written_are_counted() {
        // More than the writer's buffer holds: a line's write fails with earlier lines of
        // the same flush still in the buffer, and then the rest of the queue is drained.
        let (dropped, queued) = lost_to_a_read_only_file(500);
        assert_eq!(dropped, 500);
        assert_eq!(queued, 0);
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
