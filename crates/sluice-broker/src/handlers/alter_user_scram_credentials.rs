//! AlterUserScramCredentials (KIP-554; `kafka-configs.sh --alter --add-config
//! 'SCRAM-SHA-256=[password=...]' --entity-type users`, `sluice user create|delete`). The
//! client sends the salt and the salted password (PBKDF2 done on its side); the broker keeps
//! only the RFC 5802 stored and server keys derived from them. Per user: an unknown mechanism
//! is UNSUPPORTED_SASL_MECHANISM; an empty name, iterations outside 4096..=16384 or a salted
//! password of the wrong length UNACCEPTABLE_CREDENTIAL; one mechanism changed twice in one
//! request DUPLICATE_RESOURCE; deleting a credential that does not exist RESOURCE_NOT_FOUND.
//! A user's changes apply together, or not at all.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ResponseKind,
};
use kafka_protocol::ResponseError;
use sluice_auth::{ScramCredential, ScramMechanism};
use sluice_wire::Reply;

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use crate::security::audit::AuditEvent;
use crate::security::credentials::UserChange;

pub const VERSIONS: Versions = Versions::new(0, 0);

type Refusal = (ResponseError, String);

pub fn handle(broker: &Broker, request: AlterUserScramCredentialsRequest, call: &Call) -> Reply {
    // Users in the order the request first names them.
    let mut order: Vec<String> = Vec::new();
    let mut changes: BTreeMap<String, Result<UserChange, Refusal>> = BTreeMap::new();
    let mut seen: Vec<(String, i8)> = Vec::new();
    let users = broker.users();
    let mut note = |user: &str, mechanism: i8| -> Result<ScramMechanism, Refusal> {
        if !order.iter().any(|u| u == user) {
            order.push(user.to_string());
        }
        if user.is_empty() {
            return Err((
                ResponseError::UnacceptableCredential,
                "Username must not be empty".into(),
            ));
        }
        let m = ScramMechanism::from_kafka_type(mechanism).ok_or_else(|| {
            (
                ResponseError::UnsupportedSaslMechanism,
                format!("Unknown SCRAM mechanism {mechanism}"),
            )
        })?;
        if seen.iter().any(|(u, mm)| u == user && *mm == mechanism) {
            return Err((
                ResponseError::DuplicateResource,
                "A user credential cannot be altered twice in the same request".into(),
            ));
        }
        seen.push((user.to_string(), mechanism));
        Ok(m)
    };
    for deletion in &request.deletions {
        let user = deletion.name.to_string();
        let outcome = note(&user, deletion.mechanism).and_then(|m| {
            let exists = users
                .get(&user)
                .is_some_and(|creds| creds.iter().any(|c| c.mechanism == m));
            if exists {
                Ok(m)
            } else {
                Err((
                    ResponseError::ResourceNotFound,
                    "Attempt to delete a user credential that does not exist".into(),
                ))
            }
        });
        record(
            &mut changes,
            &user,
            outcome.map(|m| move |c: &mut UserChange| c.deletions.push(m)),
        );
    }
    for upsert in &request.upsertions {
        let user = upsert.name.to_string();
        let outcome = note(&user, upsert.mechanism).and_then(|m| {
            sluice_auth::validate(m, upsert.iterations, &upsert.salt, &upsert.salted_password)
                .map_err(|e| (ResponseError::UnacceptableCredential, e.to_string()))?;
            // `validate` bounds the iterations to 4096..=16384.
            let iterations = u32::try_from(upsert.iterations).unwrap_or_default();
            Ok(ScramCredential::from_salted_password(
                m,
                &upsert.salt,
                &upsert.salted_password,
                iterations,
            ))
        });
        record(
            &mut changes,
            &user,
            outcome.map(|c| move |ch: &mut UserChange| ch.upserts.push(c)),
        );
    }
    let Some(broker) = broker.arc() else {
        return Reply::Close("the broker is shutting down".into());
    };
    let by = call
        .session
        .principal()
        .map_or_else(|| "?".to_string(), |p| p.to_string());
    let peer = call.peer.addr.to_string();
    Reply::Later(Box::pin(async move {
        let mut results = Vec::new();
        for user in order {
            let (names, outcome) = match changes.remove(&user) {
                Some(Ok(change)) => {
                    let names = (
                        change.upserts.iter().map(|c| c.mechanism.name()).collect(),
                        change.deletions.iter().map(|m| m.name()).collect(),
                    );
                    let outcome = broker
                        .alter_user(&user, change)
                        .await
                        .map_err(|e| (e.response_error(), e.to_string()));
                    (names, outcome)
                }
                Some(Err(refusal)) => ((Vec::new(), Vec::new()), Err(refusal)),
                None => continue,
            };
            broker.audit.record(AuditEvent::UserChange {
                time_ms: broker.now_ms(),
                user: user.clone(),
                set: names.0,
                deleted: names.1,
                outcome: if outcome.is_ok() {
                    "success"
                } else {
                    "refused"
                },
                by: by.clone(),
                peer: peer.clone(),
            });
            let result = AlterUserScramCredentialsResult::default().with_user(str_bytes(&user));
            results.push(match outcome {
                Ok(()) => {
                    tracing::info!(%user, "SCRAM credentials changed");
                    result
                }
                Err((error, message)) => result
                    .with_error_code(error.code())
                    .with_error_message(Some(str_bytes(&message))),
            });
        }
        Some(ResponseKind::AlterUserScramCredentials(
            AlterUserScramCredentialsResponse::default().with_results(results),
        ))
    }))
}

/// Adds one change to a user's, or records the user's first refusal (which then stands for
/// the whole user).
fn record(
    changes: &mut BTreeMap<String, Result<UserChange, Refusal>>,
    user: &str,
    outcome: Result<impl FnOnce(&mut UserChange), Refusal>,
) {
    let entry = changes
        .entry(user.to_string())
        .or_insert_with(|| Ok(UserChange::default()));
    match (entry.as_mut(), outcome) {
        (Ok(change), Ok(apply)) => apply(change),
        (Ok(_), Err(refusal)) => *entry = Err(refusal),
        (Err(_), _) => {}
    }
}
