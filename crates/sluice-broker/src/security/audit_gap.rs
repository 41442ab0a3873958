//! What one audit sink lost since it last said so: how many events, and when the first of
//! them was lost. The sink writes it down as an `events_dropped` entry once it has room again.

use crate::security::audit::AuditEvent;

/// Events one sink lost since it last wrote an `events_dropped` entry.
#[derive(Debug, Default)]
pub(crate) struct Gap {
    /// How many, and when the first was lost (ms since the epoch); `None` when nothing was.
    lost: parking_lot::Mutex<Option<(u64, i64)>>,
}

impl Gap {
    /// Counts `n` more events lost at `now_ms`.
    pub(crate) fn add(&self, n: u64, now_ms: i64) {
        if n == 0 {
            return;
        }
        let mut lost = self.lost.lock();
        *lost = Some(match *lost {
            Some((count, since_ms)) => (count.saturating_add(n), since_ms),
            None => (n, now_ms),
        });
    }

    /// The `events_dropped` entry for what was lost, if anything was; the count starts over.
    pub(crate) fn take(&self, now_ms: i64) -> Option<AuditEvent> {
        self.lost
            .lock()
            .take()
            .map(|(count, since_ms)| AuditEvent::EventsDropped {
                time_ms: now_ms,
                count,
                since_ms,
            })
    }

    /// Puts back what `take` took when its entry could not be written either, with what was
    /// lost since: the sum, from the earlier start.
    pub(crate) fn restore(&self, entry: &AuditEvent) {
        let AuditEvent::EventsDropped {
            count, since_ms, ..
        } = *entry
        else {
            return;
        };
        let mut lost = self.lost.lock();
        *lost = Some(match *lost {
            Some((more, later_ms)) => (count.saturating_add(more), since_ms.min(later_ms)),
            None => (count, since_ms),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(entry: Option<AuditEvent>) -> Option<(u64, i64, i64)> {
        match entry? {
            AuditEvent::EventsDropped {
                time_ms,
                count,
                since_ms,
            } => Some((count, since_ms, time_ms)),
            _ => None,
        }
    }

    #[test]
    fn a_gap_counts_from_its_first_loss_and_starts_over_when_taken() {
        let gap = Gap::default();
        assert!(gap.take(1).is_none());
        gap.add(0, 5);
        assert!(gap.take(6).is_none(), "nothing lost is no gap");
        gap.add(2, 10);
        gap.add(3, 20);
        assert_eq!(counted(gap.take(30)), Some((5, 10, 30)));
        assert!(gap.take(31).is_none());
    }

    #[test]
    fn a_gap_put_back_keeps_its_start_and_adds_what_was_lost_since() {
        let gap = Gap::default();
        gap.add(4, 100);
        let entry = gap.take(150);
        // Lost while the entry was being written, which then failed.
        gap.add(1, 200);
        if let Some(entry) = &entry {
            gap.restore(entry);
        }
        assert_eq!(counted(gap.take(300)), Some((5, 100, 300)));
    }
}
