//! Finding the node that coordinates a consumer group or a transactional id (FindCoordinator):
//! group and transaction requests are answered only by the coordinator (others say
//! NOT_COORDINATOR).

use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;

use crate::client::{check, Client};
use crate::error::ClientError;

/// FindCoordinator's key types.
pub const GROUP: i8 = 0;
pub const TRANSACTION: i8 = 1;

/// How many times to ask while no coordinator is available (the internal topic is being
/// created, or its partition is electing a leader) or it is still loading, and how long to
/// wait between two asks (5 s in all).
pub(crate) const ATTEMPTS: usize = 20;
pub(crate) const PAUSE: Duration = Duration::from_millis(250);

impl Client {
    /// A new connection to the coordinator of `key` (`GROUP` or `TRANSACTION`).
    pub async fn coordinator(&mut self, key: &str, key_type: i8) -> Result<Client, ClientError> {
        let request = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(key.to_string()))
            .with_key_type(key_type);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let response = self.connection().call(&request, 1, 3).await?;
            let retry = [
                ResponseError::CoordinatorNotAvailable.code(),
                ResponseError::CoordinatorLoadInProgress.code(),
            ]
            .contains(&response.error_code);
            if retry && attempt < ATTEMPTS {
                tokio::time::sleep(PAUSE).await;
                continue;
            }
            check(
                format!("the coordinator of '{key}'"),
                response.error_code,
                response.error_message.as_ref(),
            )?;
            let addr = format!("{}:{}", response.host, response.port);
            let client_id = self.connection().client_id().to_string();
            return Client::connect(&addr, &client_id).await;
        }
    }
}
