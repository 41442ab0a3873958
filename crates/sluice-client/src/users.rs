//! SASL users' SCRAM credentials (KIP-554): what `kafka-configs.sh --entity-type users` and
//! `sluice user` change and list. The password is salted and hashed here (PBKDF2, as Kafka's
//! admin client does); only the salted password crosses the wire.

use bytes::Bytes;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
};
use sluice_auth::ScramMechanism;

use crate::client::{check, s, Client};
use crate::error::ClientError;

/// A user's credentials as the broker describes them: (mechanism, iterations) each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDescription {
    pub name: String,
    pub credentials: Vec<(ScramMechanism, i32)>,
}

impl Client {
    /// Sets `user`'s password for `mechanism` (creating the user if needed). `salt` must be
    /// fresh randomness (16 bytes or more).
    pub async fn set_scram_password(
        &mut self,
        user: &str,
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<(), ClientError> {
        let salted = sluice_auth::salted_password(mechanism, password, salt, iterations);
        let request = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
            ScramCredentialUpsertion::default()
                .with_name(s(user))
                .with_mechanism(mechanism.kafka_type())
                .with_iterations(iterations as i32)
                .with_salt(Bytes::copy_from_slice(salt))
                .with_salted_password(Bytes::from(salted)),
        ]);
        let response = self.connection().call(&request, 0, 0).await?;
        for r in response.results {
            check(
                format!("setting {}'s {} password", r.user, mechanism.name()),
                r.error_code,
                r.error_message.as_ref(),
            )?;
        }
        Ok(())
    }

    /// Deletes `user`'s credentials for each of `mechanisms`.
    pub async fn delete_scram_credentials(
        &mut self,
        user: &str,
        mechanisms: &[ScramMechanism],
    ) -> Result<(), ClientError> {
        let request = AlterUserScramCredentialsRequest::default().with_deletions(
            mechanisms
                .iter()
                .map(|m| {
                    ScramCredentialDeletion::default()
                        .with_name(s(user))
                        .with_mechanism(m.kafka_type())
                })
                .collect(),
        );
        let response = self.connection().call(&request, 0, 0).await?;
        for r in response.results {
            check(
                format!("deleting {}'s credentials", r.user),
                r.error_code,
                r.error_message.as_ref(),
            )?;
        }
        Ok(())
    }

    /// The users named (every user for `None`) with their mechanisms.
    pub async fn describe_users(
        &mut self,
        users: Option<&[String]>,
    ) -> Result<Vec<UserDescription>, ClientError> {
        let request =
            DescribeUserScramCredentialsRequest::default().with_users(users.map(|names| {
                names
                    .iter()
                    .map(|n| UserName::default().with_name(s(n)))
                    .collect()
            }));
        let response = self.connection().call(&request, 0, 0).await?;
        check(
            "describing users",
            response.error_code,
            response.error_message.as_ref(),
        )?;
        let mut described = Vec::new();
        for r in response.results {
            check(
                format!("describing user {}", r.user),
                r.error_code,
                r.error_message.as_ref(),
            )?;
            described.push(UserDescription {
                name: r.user.to_string(),
                credentials: r
                    .credential_infos
                    .iter()
                    .filter_map(|c| {
                        ScramMechanism::from_kafka_type(c.mechanism).map(|m| (m, c.iterations))
                    })
                    .collect(),
            });
        }
        Ok(described)
    }
}
