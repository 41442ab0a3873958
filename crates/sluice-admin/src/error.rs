//! Errors of the admin API: every failure is a JSON body `{"error": message}` with the HTTP
//! status that names its kind, and malformed request bodies and queries are caught here too.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::json;
use sluice_broker::offset_reset::ResetError;
use sluice_broker::BrokerError;

/// An admin API failure.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

impl From<BrokerError> for ApiError {
    fn from(e: BrokerError) -> ApiError {
        let status = match &e {
            BrokerError::TopicExists(_) | BrokerError::PolicyViolation(_) => StatusCode::CONFLICT,
            BrokerError::UnknownTopic(_)
            | BrokerError::UnknownTopicId(_)
            | BrokerError::NodeNotRegistered(_) => StatusCode::NOT_FOUND,
            BrokerError::InvalidTopic(_)
            | BrokerError::InvalidPartitions(_)
            | BrokerError::InvalidReplicationFactor(_)
            | BrokerError::InvalidReplicaAssignment(_)
            | BrokerError::InvalidConfig(_)
            | BrokerError::InvalidRequest(_)
            | BrokerError::MessageTooLarge(_) => StatusCode::BAD_REQUEST,
            BrokerError::InvalidTxnState(_) => StatusCode::CONFLICT,
            BrokerError::NotAuthorized(..) => StatusCode::FORBIDDEN,
            BrokerError::Log(l) if !l.is_storage() => StatusCode::BAD_REQUEST,
            BrokerError::NotLeader(_)
            | BrokerError::NotEnoughReplicas(_)
            | BrokerError::NotEnoughReplicasAfterAppend(_)
            | BrokerError::ControllerUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            BrokerError::TimedOut(_) => StatusCode::GATEWAY_TIMEOUT,
            BrokerError::Log(_)
            | BrokerError::Metadata { .. }
            | BrokerError::CorruptMetadata { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl From<ResetError> for ApiError {
    fn from(e: ResetError) -> ApiError {
        match e {
            ResetError::GroupActive { .. } => ApiError::new(StatusCode::CONFLICT, e.to_string()),
            ResetError::Broker(b) => b.into(),
        }
    }
}

/// `Json<T>` whose rejections (bad JSON, wrong content type, missing fields) are [`ApiError`]s.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    let status = match rejection {
        JsonRejection::MissingJsonContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError::new(status, format!("request body: {}", rejection.body_text()))
}

/// `Query<T>` whose rejections are [`ApiError`]s.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    ApiError::bad_request(format!("query string: {}", rejection.body_text()))
}

/// A path segment parsed as a number, or a 400 naming it.
pub fn parse_partition(text: &str) -> Result<i32, ApiError> {
    text.parse()
        .map_err(|_| ApiError::bad_request(format!("partition must be a number, not '{text}'")))
}
