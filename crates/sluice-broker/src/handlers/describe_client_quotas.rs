//! DescribeClientQuotas (KIP-546; `kafka-configs.sh --describe --entity-type users|clients`):
//! the entities a filter matches and their limits. Components: an exact name, the type's
//! default, or any entity of the type; `strict` leaves out entities with other types too. A
//! malformed filter (an unknown entity type or match type, one entity type twice, an exact
//! match without a name) is INVALID_REQUEST, as in Kafka. Needs DescribeConfigs on the
//! cluster.

use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    DescribeClientQuotasRequest, DescribeClientQuotasResponse, ResponseKind,
};
use kafka_protocol::ResponseError;
use sluice_cluster::metadata::{EntityName, QuotaEntity};
use sluice_wire::Reply;

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 1);

const ENTITY_TYPES: [&str; 3] = ["user", "client-id", "ip"];
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_ANY: i8 = 2;

pub fn handle(broker: &Broker, request: DescribeClientQuotasRequest, _call: &Call) -> Reply {
    let response = DescribeClientQuotasResponse::default();
    let body = match check(&request) {
        Ok(()) => {
            let quotas = broker.client_quotas();
            let mut matched: Vec<(&QuotaEntity, _)> = quotas
                .iter()
                .filter(|(entity, _)| matches(entity, &request.components, request.strict))
                .collect();
            matched.sort_by(|a, b| a.0.cmp(b.0));
            let entries = matched
                .into_iter()
                .map(|(entity, values)| {
                    EntryData::default()
                        .with_entity(describe(entity))
                        .with_values(
                            values
                                .iter()
                                .map(|(k, v)| {
                                    ValueData::default().with_key(str_bytes(k)).with_value(v.0)
                                })
                                .collect(),
                        )
                })
                .collect();
            response.with_entries(Some(entries))
        }
        Err(message) => response
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(str_bytes(&message))),
    };
    ResponseKind::DescribeClientQuotas(body).into()
}

fn describe(entity: &QuotaEntity) -> Vec<EntityData> {
    let name = |n: &EntityName| match n {
        EntityName::Default => None,
        EntityName::Named(n) => Some(str_bytes(n)),
    };
    let mut out = Vec::new();
    if let Some(user) = &entity.user {
        out.push(
            EntityData::default()
                .with_entity_type(str_bytes("user"))
                .with_entity_name(name(user)),
        );
    }
    if let Some(client) = &entity.client_id {
        out.push(
            EntityData::default()
                .with_entity_type(str_bytes("client-id"))
                .with_entity_name(name(client)),
        );
    }
    if let Some(ip) = &entity.ip {
        out.push(
            EntityData::default()
                .with_entity_type(str_bytes("ip"))
                .with_entity_name(name(ip)),
        );
    }
    out
}

/// Whether the entity matches every component (and, `strict`, has no other type).
fn matches(entity: &QuotaEntity, components: &[ComponentData], strict: bool) -> bool {
    let part = |t: &str| match t {
        "user" => Some(entity.user.as_ref()),
        "client-id" => Some(entity.client_id.as_ref()),
        "ip" => Some(entity.ip.as_ref()),
        _ => None,
    };
    let each = components.iter().all(|c| {
        let Some(Some(name)) = part(c.entity_type.as_str()) else {
            return false;
        };
        match c.match_type {
            MATCH_EXACT => {
                let wanted = c._match.as_deref().map(|m| {
                    // Addresses are stored canonical (`::ffff:10.0.0.7` is `10.0.0.7`).
                    match (c.entity_type.as_str(), m.parse::<std::net::IpAddr>()) {
                        ("ip", Ok(ip)) => sluice_cluster::metadata::quotas::ip_entity_name(ip),
                        _ => m.to_string(),
                    }
                });
                matches!(name, EntityName::Named(n) if Some(n) == wanted.as_ref())
            }
            MATCH_DEFAULT => *name == EntityName::Default,
            _ => true,
        }
    });
    let types = usize::from(entity.user.is_some())
        + usize::from(entity.client_id.is_some())
        + usize::from(entity.ip.is_some());
    each && (!strict || types == components.len())
}

fn check(request: &DescribeClientQuotasRequest) -> Result<(), String> {
    let mut seen: Vec<&str> = Vec::new();
    for c in &request.components {
        let entity = c.entity_type.as_str();
        if !ENTITY_TYPES.contains(&entity) {
            return Err(format!("unknown quota entity type '{entity}'"));
        }
        if seen.contains(&entity) {
            return Err(format!(
                "entity type '{entity}' appears more than once in the filter"
            ));
        }
        seen.push(entity);
        match c.match_type {
            MATCH_EXACT if c._match.is_none() => {
                return Err(format!("an exact match on '{entity}' needs a name"))
            }
            t if !(MATCH_EXACT..=MATCH_ANY).contains(&t) => {
                return Err(format!("unknown match type {t}"))
            }
            _ => {}
        }
    }
    Ok(())
}
