//! `/api/outbox`: every outbox relay instance the cluster has heard from — the ones this
//! broker runs (`[outbox]` in its settings file), live, and every other instance (standalone
//! `sluice outbox` processes, relays inside other brokers) from its last report on the status
//! topic (`sluice_outbox::status_report`).

use std::collections::HashSet;
use std::time::Duration;

use axum::extract::State;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::Value;
use sluice_broker::browse::{BrowseFrom, BrowseRequest, BrowsedRecord, MAX_BROWSE};
use sluice_broker::BrokerError;
use sluice_outbox::status_report::{StatusReport, FORGOTTEN_AFTER, SILENT_AFTER, STATUS_TOPIC};

use sluice_auth::acl::{Operation, ResourceType};

use crate::auth::Access;
use crate::AppState;

/// How long the reports' partition may take to answer (a peer holding it that does not
/// answer must not hold up the overview page, which asks for this list).
const READ_WITHIN: Duration = Duration::from_secs(2);

pub async fn list(State(state): State<AppState>, access: Access) -> impl IntoResponse {
    let local = state.broker.outbox_relays();
    // The reports show databases' addresses and errors: only to who may read the topic.
    if !access.allows_quietly(&state, Operation::Read, ResourceType::Topic, STATUS_TOPIC) {
        return Json(relays(local, &[], state.broker.now_ms()));
    }
    let read = state.broker.browse_anywhere(BrowseRequest {
        topic: STATUS_TOPIC.to_string(),
        partition: 0,
        from: BrowseFrom::Newest,
        newest_first: true,
        limit: MAX_BROWSE,
    });
    let reports = match tokio::time::timeout(READ_WITHIN, read).await {
        Ok(Ok(page)) => page.records,
        Ok(Err(BrokerError::UnknownTopic(_))) => Vec::new(),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "the outbox status topic was not read");
            Vec::new()
        }
        Err(_) => {
            tracing::debug!("the outbox status topic was not read within 2 s");
            Vec::new()
        }
    };
    Json(relays(local, &reports, state.broker.now_ms()))
}

/// The relays to list: `local` (this process's, live) and, for every other instance, its
/// newest report among `reports` (newest first) unless it left (a tombstone) or has been
/// silent longer than [`FORGOTTEN_AFTER`]. Each gets `local`, `silent` and `report_age_ms`.
pub fn relays(local: Vec<Value>, reports: &[BrowsedRecord], now_ms: i64) -> Vec<Value> {
    let text = |v: &Value, name: &str| {
        v.get(name)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let identity = |v: &Value| {
        let started = v.get("started_at_ms").and_then(Value::as_i64).unwrap_or(0);
        StatusReport::key_of(
            &text(v, "source"),
            &text(v, "slot"),
            &text(v, "instance"),
            started,
        )
    };
    let mut seen: HashSet<String> = local.iter().map(identity).collect();
    let mut listed: Vec<Value> = local
        .into_iter()
        .map(|mut v| {
            if let Some(o) = v.as_object_mut() {
                o.remove("reported_at_ms");
                o.insert("local".into(), true.into());
                o.insert("silent".into(), false.into());
                o.insert("report_age_ms".into(), 0.into());
            }
            v
        })
        .collect();
    for record in reports {
        let Some(key) = record.key.as_ref() else {
            continue;
        };
        let Ok(key) = std::str::from_utf8(&key.bytes) else {
            continue;
        };
        if !seen.insert(key.to_string()) {
            continue;
        }
        // A tombstone (the instance stopped cleanly), or a value that is not a report. Read
        // as JSON, not as this version's report: a newer relay's are listed too.
        let Some(mut report) = record
            .value
            .as_ref()
            .and_then(|v| serde_json::from_slice::<Value>(&v.bytes).ok())
            .filter(|v| v.get("instance").is_some_and(Value::is_string))
        else {
            continue;
        };
        // The broker's append time where the topic keeps it (as the relays create it).
        let at = if record.timestamp_type == "LogAppendTime" {
            record.timestamp
        } else {
            report
                .get("reported_at_ms")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        let age = now_ms.saturating_sub(at).max(0);
        if age > millis(FORGOTTEN_AFTER) {
            continue;
        }
        // A relay that stopped on an error keeps showing that, not that it went quiet.
        let ended = matches!(
            report.get("state").and_then(Value::as_str),
            Some("failed" | "stopped")
        );
        if let Some(o) = report.as_object_mut() {
            o.remove("reported_at_ms");
            o.insert("local".into(), false.into());
            o.insert(
                "silent".into(),
                (!ended && age > millis(SILENT_AFTER)).into(),
            );
            o.insert("report_age_ms".into(), age.into());
        }
        listed.push(report);
    }
    listed.sort_by_key(|v| (text(v, "source"), text(v, "slot"), text(v, "instance")));
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
            started_at_ms: 9,
            reported_at_ms: 0,
            snapshot: Stats::default().snapshot(),
        });
        BrowsedRecord {
            offset: 0,
            timestamp: at,
            timestamp_type: "LogAppendTime".into(),
            key: Some(shown(
                StatusReport::key_of("postgres://h:1/d", "s", instance, 9).into_bytes(),
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
                                "started_at_ms": 9, "state": "active"}),
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

    #[test]
    fn a_failed_instance_shows_failed_not_silent_and_another_start_is_another_instance() {
        let now = 1_000_000;
        let mut failed = record("a:1", now - 60_000, true);
        if let Some(v) = failed.value.as_mut() {
            let mut json: Value = serde_json::from_slice(&v.bytes).expect("a report");
            json["state"] = "failed".into();
            *v = shown(serde_json::to_vec(&json).expect("serialises"));
        }
        // The same HOST:PID started again (a container's PID 1): listed apart.
        let local = vec![
            json!({"slot": "s", "source": "postgres://h:1/d", "instance": "a:1",
                                "started_at_ms": 10, "state": "active"}),
        ];
        let listed = relays(local, &[failed], now);
        assert_eq!(listed.len(), 2, "{listed:?}");
        let old = listed
            .iter()
            .find(|v| v["local"] == false)
            .expect("the failed one");
        assert_eq!(
            (&old["state"], &old["silent"]),
            (&json!("failed"), &json!(false))
        );
    }
}
