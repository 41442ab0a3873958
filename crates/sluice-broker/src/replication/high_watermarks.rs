//! The high-watermark checkpoint: every local partition's high watermark, saved every few
//! seconds and when the node stops, and read back when it joins its cluster again.
//!
//! A replica's log holds records past the high watermark that no quorum may have: a
//! follower's copy of its leader's newest writes, a leader's own writes its followers have
//! not fetched. A restarted node that took its whole log as committed served those records to
//! consumers reading from it (KIP-392) and, leading again, acknowledged `acks=all` writes
//! before any follower held them. Kafka keeps `replication-offset-checkpoint` for the same
//! reason. Any high watermark this node once published is safe to restart from (committed
//! records never change), so an old checkpoint only makes the restarted replica wait for its
//! leader or followers a little longer; a partition the file does not list starts from its
//! log start.
//!
//! Text: a header line, then one `topic-id partition offset` per line, replaced atomically
//! (write, fsync, rename, fsync the directory). Keyed by topic id, so a topic deleted and
//! created again under the same name does not inherit the old one's.

use std::collections::BTreeMap;
use std::path::Path;

use sluice_log::Offset;
use uuid::Uuid;

use crate::topics::Topics;

pub(crate) const FILE_NAME: &str = "high-watermarks";
const HEADER: &str = "sluice-high-watermarks 1";

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct HighWatermarks(BTreeMap<(Uuid, i32), i64>);

impl HighWatermarks {
    /// The checkpoint in `dir`; empty when there is none. A file this version cannot read
    /// counts as none (every partition then starts from its log start), with a warning.
    pub(crate) fn read(dir: &Path) -> HighWatermarks {
        let path = dir.join(FILE_NAME);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return HighWatermarks::default(),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the high-watermark checkpoint; partitions start from their log start");
                return HighWatermarks::default();
            }
        };
        match Self::parse(&text) {
            Some(checkpoint) => checkpoint,
            None => {
                tracing::warn!(path = %path.display(), "unreadable high-watermark checkpoint; partitions start from their log start");
                HighWatermarks::default()
            }
        }
    }

    fn parse(text: &str) -> Option<HighWatermarks> {
        let mut lines = text.lines();
        if lines.next()? != HEADER {
            return None;
        }
        let mut out = BTreeMap::new();
        for line in lines.filter(|l| !l.is_empty()) {
            let mut fields = line.split(' ');
            let topic = Uuid::parse_str(fields.next()?).ok()?;
            let partition = fields.next()?.parse::<i32>().ok()?;
            let offset = fields.next()?.parse::<i64>().ok().filter(|o| *o >= 0)?;
            if fields.next().is_some() {
                return None;
            }
            out.insert((topic, partition), offset);
        }
        Some(HighWatermarks(out))
    }

    /// The high watermarks `topics` publish now.
    pub(crate) fn of(topics: &Topics) -> HighWatermarks {
        let mut out = BTreeMap::new();
        for topic in topics.list() {
            for p in topic.partitions() {
                out.insert((topic.id, p.index), p.progress().visible.0);
            }
        }
        HighWatermarks(out)
    }

    pub(crate) fn get(&self, topic: Uuid, partition: i32) -> Option<Offset> {
        self.0.get(&(topic, partition)).map(|o| Offset(*o))
    }

    pub(crate) fn write(&self, dir: &Path) -> std::io::Result<()> {
        let mut text = String::with_capacity(16 + self.0.len() * 48);
        text.push_str(HEADER);
        text.push('\n');
        for ((topic, partition), offset) in &self.0 {
            text.push_str(&format!("{topic} {partition} {offset}\n"));
        }
        sluice_log::replace_file(dir, FILE_NAME, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_reads_back_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(HighWatermarks::read(dir.path()), HighWatermarks::default());
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let written = HighWatermarks(BTreeMap::from([((a, 0), 10), ((a, 3), 0), ((b, 1), 7)]));
        written.write(dir.path()).unwrap();
        let read = HighWatermarks::read(dir.path());
        assert_eq!(read, written);
        assert_eq!(read.get(a, 3), Some(Offset(0)));
        assert_eq!(read.get(b, 0), None);
    }

    #[test]
    fn an_unreadable_checkpoint_counts_as_none() {
        let dir = tempfile::tempdir().unwrap();
        for text in [
            "",
            "nonsense\n",
            "sluice-high-watermarks 1\nnot-a-uuid 0 5\n",
            "sluice-high-watermarks 1\n00000000-0000-0000-0000-000000000001 0 -5\n",
            "sluice-high-watermarks 1\n00000000-0000-0000-0000-000000000001 0 5 9\n",
            "sluice-high-watermarks 2\n",
        ] {
            std::fs::write(dir.path().join(FILE_NAME), text).unwrap();
            assert_eq!(
                HighWatermarks::read(dir.path()),
                HighWatermarks::default(),
                "{text:?}"
            );
        }
    }
}
