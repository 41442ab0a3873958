//! What the relay reports: its state, position, rows published and lag, for the progress
//! lines, `/metrics` and the console.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Starting,
    /// Another instance holds the lease; this one waits to take over.
    Standby,
    Active,
    /// A session ended (the database or Sluice went away); starting again.
    Retrying,
    Stopped,
    /// Stopped on an error waiting will not fix.
    Failed,
}

impl State {
    const ALL: [State; 6] = [
        State::Starting,
        State::Standby,
        State::Active,
        State::Retrying,
        State::Stopped,
        State::Failed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Standby => "standby",
            State::Active => "active",
            State::Retrying => "retrying",
            State::Stopped => "stopped",
            State::Failed => "failed",
        }
    }
}

#[derive(Debug, Default)]
pub struct Stats {
    state: AtomicU8,
    /// Rows published (committed into Sluice) by this instance.
    pub rows: AtomicU64,
    /// Database transactions published.
    pub txns: AtomicU64,
    /// Sluice transactions committed.
    pub batches: AtomicU64,
    /// The end of the last published database transaction.
    pub position: AtomicU64,
    /// The end of the database's WAL as last seen.
    pub wal_end: AtomicU64,
    /// From the last published transaction's database commit to its Sluice commit, µs.
    pub lag_us: AtomicI64,
    /// Rows received from the database and not yet committed into Sluice.
    pub pending_rows: AtomicU64,
    /// Times this instance became the active one.
    pub activations: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// The position as the database writes it, where it is not an LSN (a binlog file:offset).
    position_text: Mutex<Option<String>>,
}

/// A copy of the figures at one moment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    pub state: State,
    pub rows: u64,
    pub txns: u64,
    pub batches: u64,
    pub position: String,
    pub lag_ms: f64,
    pub lag_bytes: u64,
    pub pending_rows: u64,
    pub activations: u64,
    pub last_error: Option<String>,
}

impl Stats {
    pub fn set_state(&self, state: State) {
        let index = State::ALL.iter().position(|s| *s == state).unwrap_or(0);
        self.state
            .store(u8::try_from(index).unwrap_or(0), Ordering::Relaxed);
    }

    pub fn state(&self) -> State {
        State::ALL
            .get(usize::from(self.state.load(Ordering::Relaxed)))
            .copied()
            .unwrap_or(State::Starting)
    }

    /// Records the position: its number (for the lag) and, for a binlog, its text.
    pub fn set_position(&self, number: u64, text: Option<&str>) {
        self.position.store(number, Ordering::Relaxed);
        if let Ok(mut p) = self.position_text.lock() {
            *p = text.map(str::to_string);
        }
    }

    pub fn set_error(&self, error: Option<String>) {
        if let Ok(mut e) = self.last_error.lock() {
            *e = error;
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let position = self.position.load(Ordering::Relaxed);
        Snapshot {
            state: self.state(),
            rows: self.rows.load(Ordering::Relaxed),
            txns: self.txns.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            position: self
                .position_text
                .lock()
                .ok()
                .and_then(|p| p.clone())
                .unwrap_or_else(|| lsn_text(position)),
            lag_ms: self.lag_us.load(Ordering::Relaxed) as f64 / 1000.0,
            lag_bytes: self
                .wal_end
                .load(Ordering::Relaxed)
                .saturating_sub(position),
            pending_rows: self.pending_rows.load(Ordering::Relaxed),
            activations: self.activations.load(Ordering::Relaxed),
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }

    /// This relay's metric families as OpenMetrics text (no `# EOF`), labelled with its slot.
    pub fn prometheus(&self, slot: &str, out: &mut String) {
        let s = self.snapshot();
        let label = format!("slot=\"{}\"", slot.replace(['"', '\\', '\n'], "_"));
        let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "# HELP {name} {help}");
            let suffix = if kind == "counter" { "_total" } else { "" };
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{suffix}{{{labels}}} {value}");
            }
        };
        let states: Vec<(String, f64)> = State::ALL
            .iter()
            .map(|state| {
                (
                    format!("{label},state=\"{}\"", state.name()),
                    f64::from(u8::from(*state == s.state)),
                )
            })
            .collect();
        family(
            "sluice_outbox_state",
            "gauge",
            "1 for the relay's state (active: this instance publishes; standby: another does)",
            &states,
        );
        let one = |v: f64| vec![(label.clone(), v)];
        family(
            "sluice_outbox_rows_published",
            "counter",
            "Outbox rows this instance published into Sluice",
            &one(s.rows as f64),
        );
        family(
            "sluice_outbox_source_transactions",
            "counter",
            "Database transactions with outbox rows published",
            &one(s.txns as f64),
        );
        family(
            "sluice_outbox_commits",
            "counter",
            "Sluice transactions the relay committed",
            &one(s.batches as f64),
        );
        family(
            "sluice_outbox_last_batch_delay_seconds",
            "gauge",
            "From the last published batch's database commit to its Sluice commit",
            &one(s.lag_ms / 1000.0),
        );
        family(
            "sluice_outbox_lag_bytes",
            "gauge",
            "WAL the database has sent past the relay's position",
            &one(s.lag_bytes as f64),
        );
        family(
            "sluice_outbox_pending_rows",
            "gauge",
            "Rows received from the database and not yet committed into Sluice",
            &one(s.pending_rows as f64),
        );
        family(
            "sluice_outbox_activations",
            "counter",
            "Times this instance took the lease and became the active one",
            &one(s.activations as f64),
        );
    }
}

/// An LSN as PostgreSQL writes it.
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_export() {
        let s = Stats::default();
        for state in State::ALL {
            s.set_state(state);
            assert_eq!(s.state(), state);
        }
        s.set_state(State::Active);
        s.position.store(0x1_0000_00A0, Ordering::Relaxed);
        s.wal_end.store(0x1_0000_00F0, Ordering::Relaxed);
        assert_eq!(s.snapshot().position, "1/A0");
        assert_eq!(s.snapshot().lag_bytes, 0x50);
        let mut text = String::new();
        s.prometheus("app", &mut text);
        assert!(
            text.contains("sluice_outbox_state{slot=\"app\",state=\"active\"} 1"),
            "{text}"
        );
        assert!(text.contains("sluice_outbox_state{slot=\"app\",state=\"standby\"} 0"));
        assert!(text.contains("sluice_outbox_lag_bytes{slot=\"app\"} 80"));
    }
}
