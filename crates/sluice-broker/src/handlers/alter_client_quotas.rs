//! AlterClientQuotas (KIP-546; `kafka-configs.sh --alter --add-config
//! 'producer_byte_rate=1048576' --entity-type users --entity-name alice`): sets or removes the
//! limits of user, client-id and user+client-id entities (a null name is the type's default),
//! and the `connection_creation_rate` of ip entities (KIP-612; `--entity-type ips`), which
//! the listeners enforce. Needs AlterConfigs on the cluster. Each entry is checked on its own,
//! INVALID_REQUEST with the reason: an unknown entity type or key, a type twice, an ip with a
//! user or client id, an ip name that is not an address, a key of the other kind of entity, a
//! value that is not a positive number (a percentage above 100 too), a key set twice in one
//! entry.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_client_quotas_request::EntryData as RequestEntry;
use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse, ResponseKind};
use kafka_protocol::ResponseError;
use sluice_cluster::metadata::{
    quotas::{CONNECTION_CREATION_RATE, QUOTA_KEYS},
    EntityName, QuotaEntity, QuotaValue, QuotaValues,
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
        entity.ip.as_ref().map(|ip| format!("ip={}", name(ip))),
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
        ip: None,
    };
    for c in &entry.entity {
        let name = match &c.entity_name {
            None => EntityName::Default,
            Some(n) if n.is_empty() => return Err("an entity name is empty".into()),
            Some(n) if c.entity_type.as_str() == "ip" => EntityName::Named(address(n)?),
            Some(n) => EntityName::Named(n.to_string()),
        };
        let slot = match c.entity_type.as_str() {
            "user" => &mut entity.user,
            "client-id" => &mut entity.client_id,
            "ip" => &mut entity.ip,
            other => return Err(format!("unknown quota entity type '{other}'")),
        };
        if slot.replace(name).is_some() {
            return Err(format!(
                "entity type '{}' appears more than once",
                c.entity_type.as_str()
            ));
        }
    }
    let is_ip = entity.ip.is_some();
    if is_ip && (entity.user.is_some() || entity.client_id.is_some()) {
        return Err("an ip entity cannot be combined with a user or client id".into());
    }
    if !is_ip && entity.user.is_none() && entity.client_id.is_none() {
        return Err("the entity names no user, client id or ip".into());
    }
    let keys: &[&str] = if is_ip {
        &[CONNECTION_CREATION_RATE]
    } else {
        &QUOTA_KEYS
    };
    let mut set = BTreeMap::new();
    let mut remove = Vec::new();
    for op in &entry.ops {
        let key = op.key.to_string();
        if !keys.contains(&key.as_str()) {
            let kind = if is_ip {
                "an ip"
            } else {
                "a user or client id"
            };
            return Err(format!(
                "'{key}' is not a quota key of {kind} entity (Sluice takes {})",
                keys.join(", ")
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
        // An INT in Kafka: whole connections per second.
        if key == CONNECTION_CREATION_RATE
            && (op.value.fract() != 0.0 || op.value > f64::from(i32::MAX))
        {
            return Err(format!(
                "{key} must be a whole number of connections per second from 1 to {}, not {}",
                i32::MAX,
                op.value
            ));
        }
        set.insert(key, QuotaValue(op.value));
    }
    Ok((entity, set, remove))
}

/// An ip entity's name as the address it must be, in canonical form (`::ffff:10.0.0.7` is
/// `10.0.0.7`), which is how the listeners look it up.
fn address(name: &str) -> Result<String, String> {
    name.parse::<std::net::IpAddr>()
        .map(sluice_cluster::metadata::quotas::ip_entity_name)
        .map_err(|_| format!("ip entity name '{name}' is not an IP address"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, OpData};

    fn entry(entity: &[(&str, Option<&str>)], key: &str, value: f64) -> RequestEntry {
        RequestEntry::default()
            .with_entity(
                entity
                    .iter()
                    .map(|(t, n)| {
                        EntityData::default()
                            .with_entity_type(str_bytes(t))
                            .with_entity_name(n.map(str_bytes))
                    })
                    .collect(),
            )
            .with_ops(vec![OpData::default()
                .with_key(str_bytes(key))
                .with_value(value)])
    }

    #[test]
    fn ip_entities_take_an_address_and_only_the_connection_rate() {
        let rate = CONNECTION_CREATION_RATE;
        let (entity, set, _) = check(&entry(&[("ip", Some("::ffff:10.0.0.7"))], rate, 5.0))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(entity.ip, Some(EntityName::Named("10.0.0.7".into())));
        assert_eq!(set.get(rate), Some(&QuotaValue(5.0)));
        let (entity, _, _) =
            check(&entry(&[("ip", None)], rate, 5.0)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(entity.ip, Some(EntityName::Default));
        for (bad, key, why) in [
            (
                vec![("ip", Some("host.example"))],
                rate,
                "is not an IP address",
            ),
            (
                vec![("ip", Some("10.0.0.7")), ("user", Some("alice"))],
                rate,
                "cannot be combined",
            ),
            (
                vec![("ip", Some("10.0.0.7"))],
                "producer_byte_rate",
                "not a quota key of an ip entity",
            ),
            (
                vec![("user", Some("alice"))],
                rate,
                "not a quota key of a user or client id entity",
            ),
            (
                vec![("ip", Some("10.0.0.7")), ("ip", None)],
                rate,
                "more than once",
            ),
        ] {
            match check(&entry(&bad, key, 1.0)) {
                Err(e) => assert!(e.contains(why), "{bad:?} {key}: {e}"),
                Ok(_) => panic!("{bad:?} {key} was taken"),
            }
        }
        for value in [0.5, 1e-20, 2.5, 1e12] {
            match check(&entry(&[("ip", None)], rate, value)) {
                Err(e) => assert!(e.contains("whole number"), "{value}: {e}"),
                Ok(_) => panic!("{value} was taken"),
            }
        }
    }
}
