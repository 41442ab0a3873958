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
