//! `/api/outbox`: every outbox relay instance the cluster has heard from — the ones this
//! broker runs (`[outbox]` in its settings file), live, and every other instance (standalone
//! `sluice outbox` processes, relays inside other brokers) from its last report on the status
//! topic (`sluice_outbox::status_report`).

use std::collections::HashSet;

use axum::extract::State;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::Value;
use sluice_broker::browse::{BrowseFrom, BrowseRequest, BrowsedRecord, MAX_BROWSE};
use sluice_broker::BrokerError;
use sluice_outbox::status_report::{StatusReport, FORGOTTEN_AFTER, SILENT_AFTER, STATUS_TOPIC};

use crate::AppState;

pub async fn list(State(state): State<AppState>) -> impl IntoResponse {
    let reports = state
        .broker
        .browse_anywhere(BrowseRequest {
            topic: STATUS_TOPIC.to_string(),
            partition: 0,
            from: BrowseFrom::Newest,
            newest_first: true,
            limit: MAX_BROWSE,
        })
        .await;
    let reports = match reports {
        Ok(page) => page.records,
        Err(BrokerError::UnknownTopic(_)) => Vec::new(),
        Err(e) => {
            tracing::debug!(error = %e, "the outbox status topic was not read");
            Vec::new()
        }
    };
    Json(relays(
        state.broker.outbox_relays(),
        &reports,
        state.broker.now_ms(),
    ))
}

/// The relays to list: `local` (this process's, live) and, for every other instance, its
/// newest report among `reports` (newest first) unless it left (a tombstone) or has been
/// silent longer than [`FORGOTTEN_AFTER`]. Each gets `local`, `silent` and `report_age_ms`.
pub fn relays(local: Vec<Value>, reports: &[BrowsedRecord], now_ms: i64) -> Vec<Value> {
    let identity = |v: &Value| {
        let field = |name: &str| {
            v.get(name)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        StatusReport::key_of(&field("source"), &field("slot"), &field("instance"))
    };
    let mut seen: HashSet<String> = local.iter().map(identity).collect();
    let mut listed: Vec<Value> = local
        .into_iter()
        .map(|mut v| {
            if let Some(o) = v.as_object_mut() {
                o.insert("local".into(), true.into());
                o.insert("silent".into(), false.into());
                o.insert("report_age_ms".into(), 0.into());
            }
            v
        })
        .collect();
    for record in reports {
        let Some(key) = record.key.as_ref().map(|k| k.bytes.clone()) else {
            continue;
        };
        let Ok(key) = String::from_utf8(key.to_vec()) else {
            continue;
        };
        if !seen.insert(key) {
            continue;
        }
        // A tombstone (the instance stopped cleanly), or a value that is not a report.
        let Some(report) = record
            .value
            .as_ref()
            .and_then(|v| serde_json::from_slice::<StatusReport>(&v.bytes).ok())
        else {
            continue;
        };
        // The broker's append time where the topic keeps it (as the relays create it).
        let at = if record.timestamp_type == "LogAppendTime" {
            record.timestamp
        } else {
            report.reported_at_ms
        };
        let age = now_ms.saturating_sub(at).max(0);
        if age > millis(FORGOTTEN_AFTER) {
            continue;
        }
        let Ok(mut v) = serde_json::to_value(&report) else {
            continue;
        };
        if let Some(o) = v.as_object_mut() {
            o.remove("reported_at_ms");
            o.insert("local".into(), false.into());
            o.insert("silent".into(), (age > millis(SILENT_AFTER)).into());
            o.insert("report_age_ms".into(), age.into());
        }
        listed.push(v);
    }
    listed.sort_by_key(|v| {
        let field = |name: &str| {
            v.get(name)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        (field("source"), field("slot"), field("instance"))
    });
    listed
}

fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use serde_json::json;
    use sluice_broker::browse::ShownBytes;
    use sluice_outbox::Stats;

    fn shown(b: Vec<u8>) -> ShownBytes {
        let size = b.len();
        ShownBytes {
            bytes: Bytes::from(b),
            size,
        }
    }

    fn record(instance: &str, at: i64, report: bool) -> BrowsedRecord {
        let value = report.then(|| StatusReport {
            slot: "s".into(),
            source: "postgres://h:1/d".into(),
            instance: instance.into(),
            reported_at_ms: 0,
            snapshot: Stats::default().snapshot(),
        });
        BrowsedRecord {
            offset: 0,
            timestamp: at,
            timestamp_type: "LogAppendTime".into(),
            key: Some(shown(
                StatusReport::key_of("postgres://h:1/d", "s", instance).into_bytes(),
            )),
            value: value.map(|r| shown(serde_json::to_vec(&r).expect("serialises"))),
            headers: Vec::new(),
        }
    }

    #[test]
    fn the_newest_report_of_each_instance_is_listed_and_a_tombstone_removes_one() {
        let now = 1_000_000;
        let reports = [
            record("a:1", now - 1_000, true),
            record("b:2", now - 2_000, false),
            record("b:2", now - 4_000, true),
            record("a:1", now - 3_000, true),
            record("c:3", now - 30_000, true),
            record("d:4", now - 700_000, true),
        ];
        let local = vec![
            json!({"slot": "s", "source": "postgres://h:1/d", "instance": "c:3",
                                "state": "active"}),
        ];
        let listed = relays(local, &reports, now);
        let names: Vec<(&str, bool, bool, i64)> = listed
            .iter()
            .map(|v| {
                (
                    v["instance"].as_str().unwrap_or(""),
                    v["local"].as_bool().unwrap_or(false),
                    v["silent"].as_bool().unwrap_or(false),
                    v["report_age_ms"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        // b left (tombstone), d was forgotten, c is this process's own (live, not its report).
        assert_eq!(
            names,
            vec![("a:1", false, false, 1_000), ("c:3", true, false, 0)]
        );
        assert!(listed[0].get("reported_at_ms").is_none());
    }

    #[test]
    fn an_instance_silent_for_a_while_is_marked_so() {
        let now = 1_000_000;
        let listed = relays(Vec::new(), &[record("a:1", now - 11_000, true)], now);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["silent"], true);
        assert_eq!(listed[0]["state"], "starting");
    }
}
