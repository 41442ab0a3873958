//! DescribeClientQuotas (KIP-546): the quotas set for users, client ids and addresses. Quotas
//! cannot be set on Sluice yet (AlterClientQuotas is not served, so `kafka-configs.sh --alter
//! --add-config producer_byte_rate=...` gets UNSUPPORTED_VERSION): every well-formed filter
//! matches no entity. Served because `kafka-configs.sh --describe --entity-type users` asks it
//! beside the users' SCRAM credentials. A malformed filter (an unknown entity type or match
//! type, one entity type twice, an exact match without a name) is INVALID_REQUEST, as in Kafka.

use kafka_protocol::messages::{
    DescribeClientQuotasRequest, DescribeClientQuotasResponse, ResponseKind,
};
use kafka_protocol::ResponseError;
use sluice_wire::Reply;

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 1);

const ENTITY_TYPES: [&str; 3] = ["user", "client-id", "ip"];
const MATCH_EXACT: i8 = 0;
const MATCH_ANY: i8 = 2;

pub fn handle(_broker: &Broker, request: DescribeClientQuotasRequest, _call: &Call) -> Reply {
    let response = DescribeClientQuotasResponse::default();
    let body = match check(&request) {
        Ok(()) => response.with_entries(Some(Vec::new())),
        Err(message) => response
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(str_bytes(&message))),
    };
    ResponseKind::DescribeClientQuotas(body).into()
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
