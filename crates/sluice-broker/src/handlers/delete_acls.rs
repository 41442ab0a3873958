//! DeleteAcls (`kafka-acls.sh --remove`, `sluice acl remove`): needs Alter on the cluster;
//! removes what each filter matches and answers, per filter, the ACLs removed. An invalid
//! filter gets INVALID_REQUEST and removes nothing; the others still apply.

use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::{DeleteAclsRequest, DeleteAclsResponse, ResponseKind};
use kafka_protocol::ResponseError;
use sluice_auth::acl::{AclBinding, Operation};
use sluice_wire::Reply;

use super::acl_codes::{self, Refusal};
use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use crate::security::audit::AuditEvent;

pub const VERSIONS: Versions = Versions::new(1, 3);

pub fn handle(broker: &Broker, request: DeleteAclsRequest, call: &Call) -> Reply {
    let refused = acl_codes::authorizer_on(broker).err().or_else(|| {
        (!call.authz(broker).cluster(Operation::Alter)).then(|| {
            (
                ResponseError::ClusterAuthorizationFailed,
                "Alter on the cluster is needed to delete ACLs".to_string(),
            )
        })
    });
    let filters: Vec<Result<_, Refusal>> = request
        .filters
        .iter()
        .map(|f| match &refused {
            Some(r) => Err(r.clone()),
            None => acl_codes::filter(
                f.resource_type_filter,
                f.resource_name_filter.as_ref(),
                f.pattern_type_filter,
                f.principal_filter.as_ref(),
                f.host_filter.as_ref(),
                f.operation,
                f.permission_type,
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
        let valid: Vec<_> = filters.iter().filter_map(|f| f.clone().ok()).collect();
        let deleted = if valid.is_empty() {
            Ok(Vec::new())
        } else {
            broker
                .delete_acls(valid)
                .await
                .map_err(|e| (e.response_error(), e.to_string()))
        };
        if let Ok(deleted) = &deleted {
            for acl in deleted.iter().flatten() {
                broker.audit.record(AuditEvent::AclChange {
                    time_ms: broker.now_ms(),
                    action: "delete",
                    acl: acl.to_string(),
                    outcome: "success",
                    by: by.clone(),
                    peer: peer.clone(),
                });
                tracing::info!(%acl, by = %by, "ACL deleted");
            }
        }
        let mut removed = deleted.clone().unwrap_or_default().into_iter();
        let results = filters
            .into_iter()
            .map(|f| {
                let outcome = f.and_then(|_| match &deleted {
                    Ok(_) => Ok(removed.next().unwrap_or_default()),
                    Err(e) => Err(e.clone()),
                });
                match outcome {
                    Ok(acls) => DeleteAclsFilterResult::default()
                        .with_matching_acls(acls.iter().map(matching).collect()),
                    Err((error, message)) => DeleteAclsFilterResult::default()
                        .with_error_code(error.code())
                        .with_error_message(Some(str_bytes(&message))),
                }
            })
            .collect();
        Some(ResponseKind::DeleteAcls(
            DeleteAclsResponse::default().with_filter_results(results),
        ))
    }))
}

fn matching(acl: &AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl::default()
        .with_resource_type(acl.resource_type.code())
        .with_resource_name(str_bytes(&acl.resource_name))
        .with_pattern_type(acl.pattern_type.code())
        .with_principal(str_bytes(&acl.principal))
        .with_host(str_bytes(&acl.host))
        .with_operation(acl.operation.code())
        .with_permission_type(acl.permission.code())
}
