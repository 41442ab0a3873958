//! DescribeUserScramCredentials (KIP-554; `kafka-configs.sh --describe --entity-type users`):
//! each user's SCRAM mechanisms and iteration counts, never the salts or keys. No list: every
//! user. A user asked for twice: DUPLICATE_RESOURCE, once; an unknown user: RESOURCE_NOT_FOUND.

use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, ResponseKind,
};
use kafka_protocol::ResponseError;
use sluice_auth::ScramCredential;
use sluice_wire::Reply;

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 0);

pub fn handle(
    broker: &Broker,
    request: DescribeUserScramCredentialsRequest,
    _call: &Call,
) -> Reply {
    let users = broker.users();
    // No list, or an empty one (librdkafka's "all"), describes every user, as in Kafka.
    let results = match request.users.filter(|asked| !asked.is_empty()) {
        None => users
            .iter()
            .map(|(name, creds)| described(name, creds))
            .collect(),
        Some(asked) => {
            let names: Vec<String> = asked.iter().map(|u| u.name.to_string()).collect();
            let mut answered: Vec<&String> = Vec::new();
            let mut results = Vec::new();
            for name in &names {
                if answered.contains(&name) {
                    continue;
                }
                answered.push(name);
                results.push(if names.iter().filter(|n| *n == name).count() > 1 {
                    failed(
                        name,
                        ResponseError::DuplicateResource,
                        "the user is named more than once",
                    )
                } else {
                    match users.get(name) {
                        Some(creds) => described(name, creds),
                        None => failed(
                            name,
                            ResponseError::ResourceNotFound,
                            "Attempt to describe a user credential that does not exist",
                        ),
                    }
                });
            }
            results
        }
    };
    ResponseKind::DescribeUserScramCredentials(
        DescribeUserScramCredentialsResponse::default().with_results(results),
    )
    .into()
}

fn described(name: &str, creds: &[ScramCredential]) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(str_bytes(name))
        .with_credential_infos(
            creds
                .iter()
                .map(|c| {
                    CredentialInfo::default()
                        .with_mechanism(c.mechanism.kafka_type())
                        .with_iterations(c.iterations as i32)
                })
                .collect(),
        )
}

fn failed(name: &str, error: ResponseError, message: &str) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(str_bytes(name))
        .with_error_code(error.code())
        .with_error_message(Some(str_bytes(message)))
}
