//! AlterClientQuotas (KIP-546; `kafka-configs.sh --alter --add-config
//! 'producer_byte_rate=1048576' --entity-type users --entity-name alice`): sets or removes the
//! limits of user, client-id and user+client-id entities (a null name is the type's default).
//! Needs AlterConfigs on the cluster. Each entry is checked on its own, INVALID_REQUEST with
//! the reason: an unknown entity type or key, a type twice, `ip` entities (Sluice limits
//! addresses with `max_connections_per_ip` instead), a value that is not a positive number
//! (a percentage above 100 too), a key set twice in one entry.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_client_quotas_request::EntryData as RequestEntry;
use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse, ResponseKind};
use kafka_protocol::ResponseError;
use sluice_cluster::metadata::{
    quotas::QUOTA_KEYS, EntityName, QuotaEntity, QuotaValue, QuotaValues,
};
use sluice_wire::Reply;

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use crate::security::audit::AuditEvent;

pub const VERSIONS: Versions = Versions::new(0, 1);

/// One entry, checked: the entity, the limits to set and the keys to remove.
type Change = (QuotaEntity, QuotaValues, Vec<String>);

pub fn handle(broker: &Broker, request: AlterClientQuotasRequest, call: &Call) -> Reply {
    let by = call
        .session
        .principal()
        .map_or_else(|| "?".to_string(), |p| p.to_string());
    let peer = call.peer.addr.to_string();
    let checked: Vec<(Vec<EntityData>, Result<Change, String>)> = request
        .entries
        .iter()
        .map(|e| {
            let entity = e
                .entity
                .iter()
                .map(|c| {
                    EntityData::default()
                        .with_entity_type(c.entity_type.clone())
                        .with_entity_name(c.entity_name.clone())
                })
                .collect();
            (entity, check(e))
        })
        .collect();
    let validate_only = request.validate_only;
    let Some(broker) = broker.arc() else {
        return Reply::Close("the broker is shutting down".into());
    };
    Reply::Later(Box::pin(async move {
        let mut entries = Vec::new();
        for (entity, outcome) in checked {
            let outcome = match outcome {
                Ok(_) if validate_only => Ok(()),
                Ok((e, set, remove)) => {
                    let event = (describe(&e), set.clone(), remove.clone());
                    let outcome = broker
                        .alter_client_quota(e, set, remove)
                        .await
                        .map_err(|e| (e.response_error(), e.to_string()));
                    let (entity, set, removed) = event;
                    broker.audit.record(AuditEvent::QuotaChange {
                        time_ms: broker.now_ms(),
                        entity,
                        set: set.into_iter().map(|(k, v)| (k, v.0)).collect(),
                        removed,
                        outcome: if outcome.is_ok() {
                            "success"
                        } else {
                            "refused"
                        },
                        by: by.clone(),
                        peer: peer.clone(),
                    });
                    outcome
                }
                Err(reason) => Err((ResponseError::InvalidRequest, reason)),
            };
            let entry = EntryData::default().with_entity(entity);
            entries.push(match outcome {
                Ok(()) => entry,
                Err((error, message)) => entry
                    .with_error_code(error.code())
                    .with_error_message(Some(str_bytes(&message))),
            });
        }
        Some(ResponseKind::AlterClientQuotas(
            AlterClientQuotasResponse::default().with_entries(entries),
        ))
    }))
}

/// The entity as the audit log names it: `user=alice,client-id=<default>`.
fn describe(entity: &QuotaEntity) -> String {
    let name = |n: &EntityName| match n {
        EntityName::Default => "<default>".to_string(),
        EntityName::Named(n) => n.clone(),
    };
    [
        entity.user.as_ref().map(|u| format!("user={}", name(u))),
        entity
            .client_id
            .as_ref()
            .map(|c| format!("client-id={}", name(c))),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(",")
}

fn check(entry: &RequestEntry) -> Result<Change, String> {
    let mut entity = QuotaEntity {
        user: None,
        client_id: None,
    };
    for c in &entry.entity {
        let name = match &c.entity_name {
            None => EntityName::Default,
            Some(n) if n.is_empty() => return Err("an entity name is empty".into()),
            Some(n) => EntityName::Named(n.to_string()),
        };
        let slot = match c.entity_type.as_str() {
            "user" => &mut entity.user,
            "client-id" => &mut entity.client_id,
            "ip" => {
                return Err(
                    "ip quotas are not supported: limit addresses with max_connections_per_ip \
                     and max_connection_creation_rate"
                        .into(),
                )
            }
            other => return Err(format!("unknown quota entity type '{other}'")),
        };
        if slot.replace(name).is_some() {
            return Err(format!(
                "entity type '{}' appears more than once",
                c.entity_type.as_str()
            ));
        }
    }
    if entity.user.is_none() && entity.client_id.is_none() {
        return Err("the entity names no user or client id".into());
    }
    let mut set = BTreeMap::new();
    let mut remove = Vec::new();
    for op in &entry.ops {
        let key = op.key.to_string();
        if !QUOTA_KEYS.contains(&key.as_str()) {
            return Err(format!(
                "unknown quota key '{key}' (Sluice takes {})",
                QUOTA_KEYS.join(", ")
            ));
        }
        if set.contains_key(&key) || remove.contains(&key) {
            return Err(format!("quota key '{key}' appears more than once"));
        }
        if op.remove {
            remove.push(key);
            continue;
        }
        if !op.value.is_finite() || op.value <= 0.0 {
            return Err(format!("{key} must be a positive number, not {}", op.value));
        }
        if key == "request_percentage" && op.value > 100.0 * 1024.0 {
            return Err(format!("{key} {} is out of range", op.value));
        }
        set.insert(key, QuotaValue(op.value));
    }
    Ok((entity, set, remove))
}
