//! CreateAcls (`kafka-acls.sh --add`, `sluice acl add`): needs Alter on the cluster. Each
//! creation is checked on its own (an invalid one gets INVALID_REQUEST with the reason, the
//! others are made); the valid ones are written together, durably, before the answer.

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{CreateAclsRequest, CreateAclsResponse, ResponseKind};
use kafka_protocol::ResponseError;
use sluice_auth::acl::Operation;
use sluice_wire::Reply;

use super::acl_codes::{self, Refusal};
use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use crate::security::audit::AuditEvent;

pub const VERSIONS: Versions = Versions::new(1, 3);

pub fn handle(broker: &Broker, request: CreateAclsRequest, call: &Call) -> Reply {
    let refused = acl_codes::authorizer_on(broker).err().or_else(|| {
        (!call.authz(broker).cluster(Operation::Alter)).then(|| {
            (
                ResponseError::ClusterAuthorizationFailed,
                "Alter on the cluster is needed to create ACLs".to_string(),
            )
        })
    });
    let outcomes: Vec<Result<_, Refusal>> = request
        .creations
        .iter()
        .map(|c| match &refused {
            Some(r) => Err(r.clone()),
            None => acl_codes::binding(
                c.resource_type,
                &c.resource_name,
                c.resource_pattern_type,
                &c.principal,
                &c.host,
                c.operation,
                c.permission_type,
            ),
        })
        .collect();
    let Some(broker) = broker.arc() else {
        return Reply::Close("the broker is shutting down".into());
    };
    let by = call
        .session
        .principal()
        .map_or_else(|| "?".to_string(), |p| p.to_string());
    let peer = call.peer.addr.to_string();
    Reply::Later(Box::pin(async move {
        let valid: Vec<_> = outcomes.iter().filter_map(|o| o.clone().ok()).collect();
        let written = if valid.is_empty() {
            Ok(())
        } else {
            broker
                .create_acls(valid.clone())
                .await
                .map_err(|e| (e.response_error(), e.to_string()))
        };
        for acl in &valid {
            broker.audit.record(AuditEvent::AclChange {
                time_ms: broker.now_ms(),
                action: "create",
                acl: acl.to_string(),
                outcome: if written.is_ok() { "success" } else { "failed" },
                by: by.clone(),
                peer: peer.clone(),
            });
            if written.is_ok() {
                tracing::info!(%acl, by = %by, "ACL created");
            }
        }
        let results = outcomes
            .into_iter()
            .map(|o| match o.and_then(|_| written.clone()) {
                Ok(()) => AclCreationResult::default(),
                Err((error, message)) => AclCreationResult::default()
                    .with_error_code(error.code())
                    .with_error_message(Some(str_bytes(&message))),
            })
            .collect();
        Some(ResponseKind::CreateAcls(
            CreateAclsResponse::default().with_results(results),
        ))
    }))
}
