//! DescribeAcls (`kafka-acls.sh --list`, `sluice acl list`): needs Describe on the cluster;
//! answers the ACLs the filter matches, grouped by resource pattern.

use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{DescribeAclsRequest, DescribeAclsResponse, ResponseKind};
use kafka_protocol::ResponseError;
use sluice_auth::acl::{AclBinding, Operation};
use sluice_wire::Reply;

use super::acl_codes;
use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(1, 3);

pub fn handle(broker: &Broker, request: DescribeAclsRequest, call: &Call) -> Reply {
    let answer = (|| {
        acl_codes::authorizer_on(broker)?;
        if !call.authz(broker).cluster(Operation::Describe) {
            return Err((
                ResponseError::ClusterAuthorizationFailed,
                "Describe on the cluster is needed to list ACLs".to_string(),
            ));
        }
        let filter = acl_codes::filter(
            request.resource_type_filter,
            request.resource_name_filter.as_ref(),
            request.pattern_type_filter,
            request.principal_filter.as_ref(),
            request.host_filter.as_ref(),
            request.operation,
            request.permission_type,
        )?;
        Ok(broker.acls().matching(&filter))
    })();
    let response = match answer {
        Ok(acls) => DescribeAclsResponse::default().with_resources(grouped(acls)),
        Err((error, message)) => DescribeAclsResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(&message))),
    };
    Reply::Ready(Box::new(ResponseKind::DescribeAcls(response)))
}

/// ACLs (sorted by resource first) as Kafka lists them: one entry per resource pattern.
fn grouped(acls: Vec<AclBinding>) -> Vec<DescribeAclsResource> {
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    let mut last: Option<(i8, String, i8)> = None;
    for acl in acls {
        let key = (
            acl.resource_type.code(),
            acl.resource_name.clone(),
            acl.pattern_type.code(),
        );
        if last.as_ref() != Some(&key) {
            resources.push(
                DescribeAclsResource::default()
                    .with_resource_type(key.0)
                    .with_resource_name(str_bytes(&key.1))
                    .with_pattern_type(key.2),
            );
            last = Some(key);
        }
        if let Some(resource) = resources.last_mut() {
            resource.acls.push(
                AclDescription::default()
                    .with_principal(str_bytes(&acl.principal))
                    .with_host(str_bytes(&acl.host))
                    .with_operation(acl.operation.code())
                    .with_permission_type(acl.permission.code()),
            );
        }
    }
    resources
}
