//! `/api/openapi.json`: the admin API's OpenAPI 3.1 document (`openapi.json`, written by
//! `openapi_gen.py` beside it). A test checks that every route in [`crate::router`] is
//! documented and every documented operation is routed.

use axum::http::header;
use axum::response::IntoResponse;

pub const DOCUMENT: &str = include_str!("../openapi.json");

pub async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}
