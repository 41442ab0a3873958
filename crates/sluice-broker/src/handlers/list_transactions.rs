//! ListTransactions: transactional ids, filtered by state, producer id, (v1+) how long their
//! transaction has been open and (v2+) an id pattern. Unknown state names are reported back.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::{Operation, ResourceType};
use sluice_wire::Reply;

const STATES: [&str; 6] = [
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
];

/// A `*`/`?` glob (Kafka takes a Java regex; a glob covers what operators type).
fn matches(pattern: &str, text: &str) -> bool {
    fn go(p: &[char], t: &[char]) -> bool {
        match (p.first(), t.first()) {
            (None, None) => true,
            (Some('*'), _) => go(&p[1..], t) || (!t.is_empty() && go(p, &t[1..])),
            (Some('?'), Some(_)) => go(&p[1..], &t[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &t[1..]),
            _ => false,
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    go(&p, &t)
}

pub const VERSIONS: Versions = Versions::new(0, 2);

pub fn handle(broker: &Broker, request: ListTransactionsRequest, call: &Call) -> Reply {
    // Only the transactional ids one may describe are listed (Kafka's check).
    let authz = call.authz(broker);
    let unknown: Vec<StrBytes> = request
        .state_filters
        .iter()
        .filter(|s| !STATES.contains(&s.as_str()))
        .cloned()
        .collect();
    let now = broker.txns.now_ms();
    let coordinator = broker.txns.coordinator.lock();
    let mut states: Vec<TransactionState> = coordinator
        .all()
        .filter(|m| {
            request.state_filters.is_empty()
                || request
                    .state_filters
                    .iter()
                    .any(|s| s.as_str() == m.state.name())
        })
        .filter(|m| {
            request.producer_id_filters.is_empty()
                || request
                    .producer_id_filters
                    .iter()
                    .any(|p| p.0 == m.producer_id)
        })
        .filter(|m| {
            request.duration_filter < 0
                || (m.start_ms >= 0 && now.saturating_sub(m.start_ms) >= request.duration_filter)
        })
        .filter(|m| {
            authz.shows(
                Operation::Describe,
                ResourceType::TransactionalId,
                &m.transactional_id,
            )
        })
        .filter(|m| {
            request
                .transactional_id_pattern
                .as_ref()
                .is_none_or(|p| p.is_empty() || matches(p, &m.transactional_id))
        })
        .map(|m| {
            TransactionState::default()
                .with_transactional_id(str_bytes(&m.transactional_id).into())
                .with_producer_id(ProducerId(m.producer_id))
                .with_transaction_state(str_bytes(m.state.name()))
        })
        .collect();
    // In a cluster, what was read is sent once every partition led here is committed.
    let waits = broker.txns.shards.settled_everywhere();
    drop(coordinator);
    states.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
    let response = ResponseKind::ListTransactions(
        ListTransactionsResponse::default()
            .with_unknown_state_filters(unknown)
            .with_transaction_states(states),
    );
    // A listing that could not be settled says LOAD_IN_PROGRESS whatever the wait's error:
    // the only error on which Kafka's admin client asks again.
    super::after_fence(response, waits, |mut response, _| {
        if let ResponseKind::ListTransactions(r) = &mut response {
            r.transaction_states.clear();
            r.error_code = ResponseError::CoordinatorLoadInProgress.code();
        }
        response
    })
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs() {
        assert!(matches("orders-*", "orders-7"));
        assert!(matches("*", ""));
        assert!(matches("a?c", "abc"));
        assert!(!matches("orders-*", "billing-1"));
    }
}
