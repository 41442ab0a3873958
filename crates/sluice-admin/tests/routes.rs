//! The router and the OpenAPI document agree: every documented operation is routed, every
//! route is documented, and errors are JSON.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use sluice_admin::{router, AppState};
use sluice_broker::{Broker, BrokerConfig};
use tower::ServiceExt;

fn state(dir: &std::path::Path, token: Option<&str>) -> AppState {
    let config = BrokerConfig {
        data_dir: dir.to_path_buf(),
        offsets_topic_partitions: 1,
        ..Default::default()
    };
    let broker = Broker::open(config, Arc::new(sluice_log::SystemClock)).expect("open broker");
    broker
        .topics()
        .create("t", 2, Default::default(), false)
        .expect("create topic");
    AppState::new(broker, token, "http://127.0.0.1:0".into())
}

async fn call(
    app: &axum::Router,
    method: &str,
    uri: &str,
    auth: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(token) = auth {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = if method == "POST" || method == "PUT" {
        request
            .header("content-type", "application/json")
            .body(Body::from("{}"))
    } else {
        request.body(Body::empty())
    }
    .expect("request");
    let response = app.clone().oneshot(request).await.expect("response");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn documented() -> Vec<(String, String)> {
    let doc: Value = serde_json::from_str(sluice_admin::openapi::DOCUMENT).expect("OpenAPI JSON");
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for method in ops.as_object().expect("operations").keys() {
            out.push((method.to_uppercase(), path.clone()));
        }
    }
    out
}

#[tokio::test]
async fn every_documented_operation_is_routed() {
    let dir = tempfile::tempdir().unwrap();
    let app = router(state(dir.path(), None));
    for (method, path) in documented() {
        let uri = path
            .replace("{topic}", "t")
            .replace("{partition}", "0")
            .replace("{group}", "g")
            .replace("{name}", "nope")
            .replace("{path}", "api/topics");
        let (status, body) = call(&app, &method, &uri, None).await;
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        let routed = !body["error"]
            .as_str()
            .unwrap_or("")
            .starts_with("no such endpoint");
        assert!(
            routed,
            "{method} {path} is documented but not routed: {body}"
        );
    }
}

#[test]
fn every_route_is_documented() {
    let source = include_str!("../src/lib.rs");
    let documented: Vec<String> = documented().into_iter().map(|(_, p)| p).collect();
    let mut seen = 0;
    for piece in source.split(".route(").skip(1) {
        let path = piece
            .trim_start()
            .trim_start_matches('"')
            .split('"')
            .next()
            .unwrap_or("")
            .replace("{*path}", "{path}");
        if path == "/" || path.starts_with("/assets/") {
            continue;
        }
        seen += 1;
        assert!(
            documented.contains(&path),
            "route {path} is not in openapi.json"
        );
    }
    assert!(seen >= 19, "found only {seen} routes in lib.rs");
}

#[tokio::test]
async fn errors_are_json_with_the_right_status() {
    let dir = tempfile::tempdir().unwrap();
    let app = router(state(dir.path(), None));
    let (status, body) = call(&app, "GET", "/api/nothing", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"].as_str().unwrap().contains("/api/nothing"));
    let (status, body) = call(&app, "PATCH", "/api/topics", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(body["error"].is_string());
    let (status, _) = call(&app, "GET", "/api/topics/missing", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = call(&app, "GET", "/api/topics/t/partitions/x/messages", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().contains("partition"));
    let (status, body) = call(&app, "POST", "/api/topics", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn the_token_guards_everything_but_health_and_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let token = "0123456789abcdef-token";
    let app = router(state(dir.path(), Some(token)));
    assert_eq!(call(&app, "GET", "/health", None).await.0, StatusCode::OK);
    for path in [
        "/api/topics",
        "/metrics",
        "/api/overview",
        "/api/openapi.json",
    ] {
        assert_eq!(
            call(&app, "GET", path, None).await.0,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
        assert_eq!(
            call(&app, "GET", path, Some("wrong")).await.0,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
    }
    let (status, body) = call(&app, "GET", "/api/topics", Some(token)).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = body
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"t"), "{names:?}");
}
