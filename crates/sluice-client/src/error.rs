use kafka_protocol::messages::ApiKey;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("connection to {addr}: {source}")]
    Io {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{addr} did not answer within {timeout_ms} ms")]
    Timeout { addr: String, timeout_ms: u64 },
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("{0}")]
    Security(String),
    #[error(
        "the broker does not support {api:?} at any version this client speaks ({min}..={max})"
    )]
    Unsupported { api: ApiKey, min: i16, max: i16 },
    #[error("{context}: {name} ({code}){}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        context: String,
        code: i16,
        name: String,
        message: Option<String>,
    },
    /// Several parts of one request were refused, each for its own reason.
    #[error("{context}: {}", joined(.errors))]
    Several {
        context: String,
        errors: Vec<ClientError>,
    },
}

fn joined(errors: &[ClientError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Kafka's own name for an error code, as `Errors.java` and the protocol guide spell it
/// (`SECURITY_DISABLED`, `CLUSTER_AUTHORIZATION_FAILED`): what an operator searches for.
pub fn kafka_error_name(code: i16) -> String {
    use kafka_protocol::error::{ParseResponseErrorCode, ResponseError};
    match code.err() {
        None => "NONE".into(),
        Some(ResponseError::Unknown(c)) => format!("UNKNOWN_ERROR_CODE_{c}"),
        // kafka-protocol's variants are Kafka's names in CamelCase, none with an acronym.
        Some(e) => {
            let mut name = String::new();
            for (i, c) in format!("{e:?}").chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    name.push('_');
                }
                name.push(c.to_ascii_uppercase());
            }
            name
        }
    }
}

impl ClientError {
    /// A Kafka error code in a response, with a name a person can look up.
    pub fn kafka(context: impl Into<String>, code: i16, message: Option<String>) -> Self {
        use kafka_protocol::error::ParseResponseErrorCode;
        let name = code
            .err()
            .map(|e| format!("{e:?}"))
            .unwrap_or_else(|| "NONE".into());
        ClientError::Kafka {
            context: context.into(),
            code,
            name,
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_names_are_kafkas() {
        assert_eq!(kafka_error_name(0), "NONE");
        assert_eq!(kafka_error_name(54), "SECURITY_DISABLED");
        assert_eq!(kafka_error_name(31), "CLUSTER_AUTHORIZATION_FAILED");
        assert_eq!(kafka_error_name(29), "TOPIC_AUTHORIZATION_FAILED");
        assert_eq!(kafka_error_name(42), "INVALID_REQUEST");
        assert_eq!(kafka_error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(kafka_error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(kafka_error_name(9999), "UNKNOWN_ERROR_CODE_9999");
    }
}
