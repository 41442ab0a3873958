//! `/api/users` and `/api/acls`: the SCRAM users and the ACLs, for the console's Security
//! page. Reading needs Describe on the cluster, changing Alter (as the Kafka ACL and SCRAM
//! APIs; the login layer checks it, `auth.rs`); changes are written as the Kafka APIs write them (durable before the answer) and
//! audited with who made them.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use sluice_auth::acl::{
    AclBinding, AclFilter, Operation, PatternFilter, PatternType, Permission, ResourceType,
};
use sluice_auth::{ScramCredential, ScramMechanism};
use sluice_broker::security::audit::AuditEvent;
use sluice_broker::security::credentials::{fresh_salt, UserChange};

use crate::auth::AdminPrincipal;
use crate::error::{ApiError, ApiJson};
use crate::AppState;

/// Iterations of new credentials made here (as `sluice user create`).
const ITERATIONS: u32 = sluice_auth::DEFAULT_ITERATIONS;

#[derive(Debug, Serialize)]
pub struct UserRow {
    pub name: String,
    /// `SCRAM-SHA-256 (8192 iterations)`, one per mechanism.
    pub mechanisms: Vec<String>,
}

pub async fn list_users(State(state): State<AppState>) -> Json<Vec<UserRow>> {
    Json(
        state
            .broker
            .users()
            .into_iter()
            .map(|(name, creds)| UserRow {
                name,
                mechanisms: creds
                    .iter()
                    .map(|c| format!("{} ({} iterations)", c.mechanism.name(), c.iterations))
                    .collect(),
            })
            .collect(),
    )
}

#[derive(Debug, Deserialize)]
pub struct NewUser {
    pub name: String,
    pub password: String,
}

/// Creates a user (or sets its password) with SCRAM-SHA-256 and SCRAM-SHA-512 credentials.
pub async fn create_user(
    State(state): State<AppState>,
    principal: Option<Extension<AdminPrincipal>>,
    ApiJson(body): ApiJson<NewUser>,
) -> Result<impl IntoResponse, ApiError> {
    if body.name.is_empty() || body.name.contains(['=', ',']) {
        return Err(ApiError::bad_request(
            "a user name must be non-empty and hold no '=' or ','",
        ));
    }
    if body.password.len() < 8 {
        return Err(ApiError::bad_request(
            "the password must be at least 8 characters",
        ));
    }
    let password = body.password;
    let upserts = tokio::task::spawn_blocking(move || {
        [ScramMechanism::Sha256, ScramMechanism::Sha512]
            .into_iter()
            .map(|m| ScramCredential::from_password(m, &password, fresh_salt(), ITERATIONS))
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    change_user(
        &state,
        principal,
        &body.name,
        UserChange {
            upserts,
            deletions: Vec::new(),
        },
    )
    .await?;
    Ok(StatusCode::CREATED)
}

pub async fn delete_user(
    State(state): State<AppState>,
    principal: Option<Extension<AdminPrincipal>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let Some(creds) = state.broker.users().get(&name).cloned() else {
        return Err(ApiError::not_found(format!("no user '{name}'")));
    };
    let deletions = creds.iter().map(|c| c.mechanism).collect();
    change_user(
        &state,
        principal,
        &name,
        UserChange {
            upserts: Vec::new(),
            deletions,
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn change_user(
    state: &AppState,
    principal: Option<Extension<AdminPrincipal>>,
    name: &str,
    change: UserChange,
) -> Result<(), ApiError> {
    let set = change.upserts.iter().map(|c| c.mechanism.name()).collect();
    let deleted = change.deletions.iter().map(|m| m.name()).collect();
    let outcome = state.broker.alter_user(name, change).await;
    state.broker.record_audit(AuditEvent::UserChange {
        time_ms: state.broker.now_ms(),
        user: name.to_string(),
        set,
        deleted,
        outcome: if outcome.is_ok() {
            "success"
        } else {
            "refused"
        },
        by: by(&principal),
        peer: "admin-http".into(),
    });
    Ok(outcome?)
}

/// One ACL as the API shows and takes it (Kafka's names, as `sluice acl list --json`).
#[derive(Debug, Serialize, Deserialize)]
pub struct AclRow {
    pub resource_type: String,
    pub resource_name: String,
    pub pattern_type: String,
    pub principal: String,
    #[serde(default = "any_host")]
    pub host: String,
    pub operation: String,
    pub permission: String,
}

fn any_host() -> String {
    "*".into()
}

impl From<&AclBinding> for AclRow {
    fn from(a: &AclBinding) -> Self {
        AclRow {
            resource_type: a.resource_type.name().into(),
            resource_name: a.resource_name.clone(),
            pattern_type: a.pattern_type.name().into(),
            principal: a.principal.clone(),
            host: a.host.clone(),
            operation: a.operation.name().into(),
            permission: a.permission.name().into(),
        }
    }
}

impl AclRow {
    fn binding(&self) -> Result<AclBinding, ApiError> {
        let bad =
            |what: &str, value: &str| ApiError::bad_request(format!("unknown {what} '{value}'"));
        let binding = AclBinding {
            resource_type: ResourceType::parse(&self.resource_type)
                .ok_or_else(|| bad("resource type", &self.resource_type))?,
            resource_name: self.resource_name.clone(),
            pattern_type: PatternType::parse(&self.pattern_type)
                .ok_or_else(|| bad("pattern type", &self.pattern_type))?,
            principal: self.principal.clone(),
            host: sluice_auth::acl::canonical_host(&self.host),
            operation: Operation::parse(&self.operation)
                .ok_or_else(|| bad("operation", &self.operation))?,
            permission: match self.permission.to_ascii_lowercase().as_str() {
                "allow" => Permission::Allow,
                "deny" => Permission::Deny,
                other => return Err(bad("permission", other)),
            },
        };
        binding
            .validate()
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(binding)
    }
}

fn authorizer_on(state: &AppState) -> Result<(), ApiError> {
    if state.broker.config().security.authorizer.enabled {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::CONFLICT,
            "the authorizer is off (start the broker with authorizer = acl): ACLs would not apply",
        ))
    }
}

pub async fn list_acls(State(state): State<AppState>) -> Json<Vec<AclRow>> {
    Json(state.broker.acls().iter().map(AclRow::from).collect())
}

pub async fn create_acl(
    State(state): State<AppState>,
    principal: Option<Extension<AdminPrincipal>>,
    ApiJson(row): ApiJson<AclRow>,
) -> Result<impl IntoResponse, ApiError> {
    authorizer_on(&state)?;
    let acl = row.binding()?;
    let outcome = state.broker.create_acls(vec![acl.clone()]).await;
    audit_acl(&state, &principal, "create", &acl, outcome.is_ok());
    outcome?;
    Ok((StatusCode::CREATED, Json(AclRow::from(&acl))))
}

/// Deletes exactly the ACL in the body.
pub async fn delete_acl(
    State(state): State<AppState>,
    principal: Option<Extension<AdminPrincipal>>,
    ApiJson(row): ApiJson<AclRow>,
) -> Result<impl IntoResponse, ApiError> {
    authorizer_on(&state)?;
    let acl = row.binding()?;
    let filter = AclFilter {
        resource_type: Some(acl.resource_type),
        resource_name: Some(acl.resource_name.clone()),
        pattern: PatternFilter::Exactly(acl.pattern_type),
        principal: Some(acl.principal.clone()),
        host: Some(acl.host.clone()),
        operation: Some(acl.operation),
        permission: Some(acl.permission),
    };
    let deleted = state.broker.delete_acls(vec![filter]).await?;
    if deleted.iter().flatten().next().is_none() {
        return Err(ApiError::not_found(format!("no such ACL: {acl}")));
    }
    audit_acl(&state, &principal, "delete", &acl, true);
    Ok(StatusCode::NO_CONTENT)
}

fn audit_acl(
    state: &AppState,
    principal: &Option<Extension<AdminPrincipal>>,
    action: &'static str,
    acl: &AclBinding,
    ok: bool,
) {
    state.broker.record_audit(AuditEvent::AclChange {
        time_ms: state.broker.now_ms(),
        action,
        acl: acl.to_string(),
        outcome: if ok { "success" } else { "failed" },
        by: by(principal),
        peer: "admin-http".into(),
    });
}

fn by(principal: &Option<Extension<AdminPrincipal>>) -> String {
    principal
        .as_ref()
        .map_or_else(|| "admin-http".to_string(), |p| p.0 .0.clone())
}
