//! ACLs to and from the Create/Describe/DeleteAcls wire fields, and the refusal every ACL
//! API answers while the authorizer is off (SECURITY_DISABLED, as Kafka without an
//! `authorizer.class.name`).

use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use sluice_auth::acl::{AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType};

use crate::broker::Broker;

/// Why an ACL API cannot be served: the error and its message.
pub type Refusal = (ResponseError, String);

/// SECURITY_DISABLED while the authorizer is off.
pub fn authorizer_on(broker: &Broker) -> Result<(), Refusal> {
    if broker.config.security.authorizer.enabled {
        Ok(())
    } else {
        Err((
            ResponseError::SecurityDisabled,
            "No Authorizer is configured: start the broker with authorizer = acl".into(),
        ))
    }
}

/// An ACL from CreateAcls' fields, checked as Kafka checks a new ACL.
pub fn binding(
    resource_type: i8,
    resource_name: &StrBytes,
    pattern_type: i8,
    principal: &StrBytes,
    host: &StrBytes,
    operation: i8,
    permission: i8,
) -> Result<AclBinding, Refusal> {
    let invalid = |m: String| (ResponseError::InvalidRequest, m);
    let binding = AclBinding {
        resource_type: ResourceType::from_code(resource_type)
            .ok_or_else(|| invalid(format!("invalid resource type code {resource_type}")))?,
        resource_name: resource_name.to_string(),
        pattern_type: PatternType::from_code(pattern_type).ok_or_else(|| {
            invalid(format!(
                "invalid pattern type code {pattern_type}: an ACL is LITERAL (3) or PREFIXED (4)"
            ))
        })?,
        principal: principal.to_string(),
        host: sluice_auth::acl::canonical_host(host),
        operation: Operation::from_code(operation)
            .ok_or_else(|| invalid(format!("invalid operation code {operation}")))?,
        permission: Permission::from_code(permission).ok_or_else(|| {
            invalid(format!(
                "invalid permission type code {permission}: ALLOW (3) or DENY (2)"
            ))
        })?,
    };
    binding.validate().map_err(|e| invalid(e.to_string()))?;
    Ok(binding)
}

/// A filter from DescribeAcls' or DeleteAcls' fields.
#[allow(clippy::too_many_arguments)]
pub fn filter(
    resource_type: i8,
    resource_name: Option<&StrBytes>,
    pattern_type: i8,
    principal: Option<&StrBytes>,
    host: Option<&StrBytes>,
    operation: i8,
    permission: i8,
) -> Result<AclFilter, Refusal> {
    AclFilter::from_codes(
        resource_type,
        resource_name.map(|s| s.to_string()),
        pattern_type,
        principal.map(|s| s.to_string()),
        host.map(|s| sluice_auth::acl::canonical_host(s)),
        operation,
        permission,
    )
    .map_err(|e| (ResponseError::InvalidRequest, e.to_string()))
}
