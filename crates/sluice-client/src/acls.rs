//! Kafka ACLs over the admin API: CreateAcls, DescribeAcls and DeleteAcls (KIP-140; the
//! pattern type came with v1, KIP-290; v2 and later are flexible, KIP-482). What `sluice acl`
//! and `kafka-acls.sh` change and list.
//!
//! kafka-protocol 0.18 encodes these APIs at v1 to v3 only (Kafka 4 dropped v0), so every
//! request carries its pattern type and a broker that speaks only v0 is answered with
//! [`ClientError::Unsupported`]. The conversions between sluice-auth's model and the wire are
//! pure functions: a code this client does not know is a protocol error, never a wrong ACL.
//! Refusals carry Kafka's error name (`SECURITY_DISABLED`) and the broker's message.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use sluice_auth::acl::{
    AclBinding, AclFilter, Operation, PatternFilter, PatternType, Permission, ResourceType,
};

use crate::client::{s, Client};
use crate::error::{kafka_error_name, ClientError};

/// The versions this client speaks of all three APIs.
const MIN_VERSION: i16 = 1;
const MAX_VERSION: i16 = 3;

/// Kafka's code for "any" in a filter's resource type, operation and permission.
const ANY: i8 = 1;

impl Client {
    /// Creates ACLs (one already present stays once). When the broker refuses some, the
    /// error names each with the broker's reason; the others were created.
    pub async fn create_acls(&mut self, acls: &[AclBinding]) -> Result<(), ClientError> {
        if acls.is_empty() {
            return Ok(());
        }
        let request =
            CreateAclsRequest::default().with_creations(acls.iter().map(creation).collect());
        let response = self
            .connection()
            .call(&request, MIN_VERSION, MAX_VERSION)
            .await?;
        created(acls, &response)
    }

    /// The ACLs that `filter` matches, sorted.
    pub async fn describe_acls(
        &mut self,
        filter: &AclFilter,
    ) -> Result<Vec<AclBinding>, ClientError> {
        let codes = FilterCodes::of(filter);
        let request = DescribeAclsRequest::default()
            .with_resource_type_filter(codes.resource_type)
            .with_resource_name_filter(filter.resource_name.as_deref().map(s))
            .with_pattern_type_filter(codes.pattern)
            .with_principal_filter(filter.principal.as_deref().map(s))
            .with_host_filter(filter.host.as_deref().map(s))
            .with_operation(codes.operation)
            .with_permission_type(codes.permission);
        let response = self
            .connection()
            .call(&request, MIN_VERSION, MAX_VERSION)
            .await?;
        described(response)
    }

    /// Deletes the ACLs each filter matches; returns those deleted, sorted, each once.
    pub async fn delete_acls(
        &mut self,
        filters: &[AclFilter],
    ) -> Result<Vec<AclBinding>, ClientError> {
        if filters.is_empty() {
            return Ok(Vec::new());
        }
        let request =
            DeleteAclsRequest::default().with_filters(filters.iter().map(delete_filter).collect());
        let response = self
            .connection()
            .call(&request, MIN_VERSION, MAX_VERSION)
            .await?;
        deleted(filters.len(), response)
    }
}

/// A refusal, named as Kafka names it.
fn refused(context: String, code: i16, message: Option<&StrBytes>) -> ClientError {
    ClientError::Kafka {
        context,
        code,
        name: kafka_error_name(code),
        message: message.map(|m| m.to_string()).filter(|m| !m.is_empty()),
    }
}

/// One error as is, several together under `context`.
fn failed(context: String, mut failures: Vec<ClientError>) -> Result<(), ClientError> {
    match failures.len() {
        0 => Ok(()),
        1 => Err(failures.remove(0)),
        _ => Err(ClientError::Several {
            context,
            errors: failures,
        }),
    }
}

fn creation(acl: &AclBinding) -> AclCreation {
    AclCreation::default()
        .with_resource_type(acl.resource_type.code())
        .with_resource_name(s(&acl.resource_name))
        .with_resource_pattern_type(acl.pattern_type.code())
        .with_principal(s(&acl.principal))
        .with_host(s(&acl.host))
        .with_operation(acl.operation.code())
        .with_permission_type(acl.permission.code())
}

fn created(acls: &[AclBinding], response: &CreateAclsResponse) -> Result<(), ClientError> {
    if response.results.len() != acls.len() {
        return Err(ClientError::Protocol(format!(
            "CreateAcls answered {} results for {} ACLs",
            response.results.len(),
            acls.len()
        )));
    }
    let failures: Vec<ClientError> = acls
        .iter()
        .zip(&response.results)
        .filter(|(_, r)| r.error_code != 0)
        .map(|(acl, r)| {
            refused(
                format!("creating ACL {acl}"),
                r.error_code,
                r.error_message.as_ref(),
            )
        })
        .collect();
    failed(
        format!("{} of {} ACLs refused", failures.len(), acls.len()),
        failures,
    )
}

/// A filter's enum fields as Kafka's codes (1 is ANY; the pattern's MATCH is 2).
struct FilterCodes {
    resource_type: i8,
    pattern: i8,
    operation: i8,
    permission: i8,
}

impl FilterCodes {
    fn of(filter: &AclFilter) -> FilterCodes {
        FilterCodes {
            resource_type: filter.resource_type.map_or(ANY, ResourceType::code),
            pattern: match filter.pattern {
                PatternFilter::Any => 1,
                PatternFilter::Match => 2,
                PatternFilter::Exactly(p) => p.code(),
            },
            operation: filter.operation.map_or(ANY, Operation::code),
            permission: filter.permission.map_or(ANY, Permission::code),
        }
    }
}

fn delete_filter(filter: &AclFilter) -> DeleteAclsFilter {
    let codes = FilterCodes::of(filter);
    DeleteAclsFilter::default()
        .with_resource_type_filter(codes.resource_type)
        .with_resource_name_filter(filter.resource_name.as_deref().map(s))
        .with_pattern_type_filter(codes.pattern)
        .with_principal_filter(filter.principal.as_deref().map(s))
        .with_host_filter(filter.host.as_deref().map(s))
        .with_operation(codes.operation)
        .with_permission_type(codes.permission)
}

/// An ACL as a response carries it; ANY, MATCH or an unknown code is the broker's mistake.
fn binding(
    resource_type: i8,
    resource_name: &StrBytes,
    pattern_type: i8,
    principal: &StrBytes,
    host: &StrBytes,
    operation: i8,
    permission: i8,
) -> Result<AclBinding, ClientError> {
    let unknown = |what: &str, code: i8| {
        ClientError::Protocol(format!(
            "the broker sent an ACL with {what} code {code}, which is not one ACL can have"
        ))
    };
    Ok(AclBinding {
        resource_type: ResourceType::from_code(resource_type)
            .ok_or_else(|| unknown("resource type", resource_type))?,
        resource_name: resource_name.to_string(),
        pattern_type: PatternType::from_code(pattern_type)
            .ok_or_else(|| unknown("pattern type", pattern_type))?,
        principal: principal.to_string(),
        host: host.to_string(),
        operation: Operation::from_code(operation)
            .ok_or_else(|| unknown("operation", operation))?,
        permission: Permission::from_code(permission)
            .ok_or_else(|| unknown("permission", permission))?,
    })
}

fn described(response: DescribeAclsResponse) -> Result<Vec<AclBinding>, ClientError> {
    if response.error_code != 0 {
        return Err(refused(
            "describing ACLs".into(),
            response.error_code,
            response.error_message.as_ref(),
        ));
    }
    let mut acls = Vec::new();
    for resource in &response.resources {
        for acl in &resource.acls {
            acls.push(binding(
                resource.resource_type,
                &resource.resource_name,
                resource.pattern_type,
                &acl.principal,
                &acl.host,
                acl.operation,
                acl.permission_type,
            )?);
        }
    }
    acls.sort();
    acls.dedup();
    Ok(acls)
}

fn deleted(filters: usize, response: DeleteAclsResponse) -> Result<Vec<AclBinding>, ClientError> {
    if response.filter_results.len() != filters {
        return Err(ClientError::Protocol(format!(
            "DeleteAcls answered {} results for {filters} filters",
            response.filter_results.len()
        )));
    }
    let mut removed = Vec::new();
    let mut failures = Vec::new();
    for result in &response.filter_results {
        if result.error_code != 0 {
            failures.push(refused(
                "deleting ACLs".into(),
                result.error_code,
                result.error_message.as_ref(),
            ));
            continue;
        }
        for m in &result.matching_acls {
            let acl = binding(
                m.resource_type,
                &m.resource_name,
                m.pattern_type,
                &m.principal,
                &m.host,
                m.operation,
                m.permission_type,
            )?;
            if m.error_code == 0 {
                removed.push(acl);
            } else {
                failures.push(refused(
                    format!("deleting ACL {acl}"),
                    m.error_code,
                    m.error_message.as_ref(),
                ));
            }
        }
    }
    removed.sort();
    removed.dedup();
    if !removed.is_empty() && !failures.is_empty() {
        // Say what did go, or the caller would think nothing changed.
        return Err(ClientError::Several {
            context: format!(
                "deleted {} ACL(s), but {} refused",
                removed.len(),
                failures.len()
            ),
            errors: failures,
        });
    }
    failed(format!("{} refused", failures.len()), failures)?;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::create_acls_response::AclCreationResult;
    use kafka_protocol::messages::delete_acls_response::{
        DeleteAclsFilterResult, DeleteAclsMatchingAcl,
    };
    use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
    use kafka_protocol::protocol::{Decodable, Encodable};

    use super::*;

    fn acl(name: &str, pattern: PatternType, operation: Operation) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: "User:alice".into(),
            host: "*".into(),
            operation,
            permission: Permission::Allow,
        }
    }

    fn round_trip<T: Encodable + Decodable>(message: &T, version: i16) -> T {
        let mut buf = BytesMut::new();
        message.encode(&mut buf, version).unwrap();
        T::decode(&mut buf.freeze(), version).unwrap()
    }

    #[test]
    fn creations_carry_kafkas_codes_at_every_version() {
        let prefixed = acl("pay-", PatternType::Prefixed, Operation::Write);
        let request = CreateAclsRequest::default().with_creations(vec![creation(&prefixed)]);
        for version in MIN_VERSION..=MAX_VERSION {
            let back = round_trip(&request, version);
            let c = &back.creations[0];
            assert_eq!(
                (c.resource_type, c.resource_pattern_type, c.operation),
                (2, 4, 4)
            );
            assert_eq!((c.permission_type, c.principal.as_str()), (3, "User:alice"));
            assert_eq!((c.resource_name.as_str(), c.host.as_str()), ("pay-", "*"));
        }
    }

    #[test]
    fn filters_send_any_as_one_and_null_names() {
        let codes = FilterCodes::of(&AclFilter::any());
        assert_eq!(
            (
                codes.resource_type,
                codes.pattern,
                codes.operation,
                codes.permission
            ),
            (1, 1, 1, 1)
        );
        let filter = AclFilter {
            resource_type: Some(ResourceType::Group),
            resource_name: Some("g".into()),
            pattern: PatternFilter::Match,
            principal: Some("User:bob".into()),
            operation: Some(Operation::Read),
            permission: Some(Permission::Deny),
            ..AclFilter::any()
        };
        let f = delete_filter(&filter);
        assert_eq!(
            (f.resource_type_filter, f.pattern_type_filter, f.operation),
            (3, 2, 3)
        );
        assert_eq!(f.permission_type, 2);
        assert_eq!(f.host_filter, None, "any host is null, not empty");
        let request = DeleteAclsRequest::default().with_filters(vec![
            f,
            delete_filter(&AclFilter {
                pattern: PatternFilter::Exactly(PatternType::Prefixed),
                ..AclFilter::any()
            }),
        ]);
        for version in MIN_VERSION..=MAX_VERSION {
            let back = round_trip(&request, version);
            assert_eq!(back.filters[0].resource_name_filter.as_deref(), Some("g"));
            assert_eq!(back.filters[1].resource_name_filter, None);
            assert_eq!(back.filters[1].pattern_type_filter, 4);
        }
    }

    #[test]
    fn refusals_name_the_error_and_keep_the_message() {
        let acls = [
            acl("t", PatternType::Literal, Operation::Read),
            acl("u", PatternType::Literal, Operation::Read),
        ];
        let ok = AclCreationResult::default();
        let disabled = AclCreationResult::default()
            .with_error_code(54)
            .with_error_message(Some(s("no authorizer is configured")));
        let response = CreateAclsResponse::default().with_results(vec![ok.clone(), disabled]);
        let e = created(&acls, &response).unwrap_err();
        let ClientError::Kafka {
            name,
            message,
            context,
            ..
        } = &e
        else {
            panic!("{e:?}");
        };
        assert_eq!(name, "SECURITY_DISABLED");
        assert_eq!(message.as_deref(), Some("no authorizer is configured"));
        assert!(context.contains("topic u"), "{context}");
        assert!(created(
            &acls,
            &CreateAclsResponse::default().with_results(vec![ok.clone(), ok])
        )
        .is_ok());
        // Every one refused: each named, all in one error.
        let denied = AclCreationResult::default().with_error_code(31);
        let e = created(
            &acls,
            &CreateAclsResponse::default().with_results(vec![denied.clone(), denied]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("2 of 2 ACLs refused"), "{e}");
        assert_eq!(e.matches("CLUSTER_AUTHORIZATION_FAILED").count(), 2, "{e}");
        // A short answer is the broker's mistake, not a success.
        assert!(matches!(
            created(&acls, &CreateAclsResponse::default()),
            Err(ClientError::Protocol(_))
        ));
    }

    fn description(principal: &str, operation: i8) -> AclDescription {
        AclDescription::default()
            .with_principal(s(principal))
            .with_host(s("*"))
            .with_operation(operation)
            .with_permission_type(3)
    }

    #[test]
    fn descriptions_become_bindings() {
        let response = DescribeAclsResponse::default().with_resources(vec![
            DescribeAclsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("t"))
                .with_pattern_type(3)
                .with_acls(vec![
                    description("User:bob", 4),
                    description("User:alice", 3),
                ]),
            DescribeAclsResource::default()
                .with_resource_type(4)
                .with_resource_name(s("kafka-cluster"))
                .with_pattern_type(3)
                .with_acls(vec![description("User:alice", 10)]),
        ]);
        let back = round_trip(&response, MAX_VERSION);
        let acls = described(back).unwrap();
        assert_eq!(acls.len(), 3);
        assert_eq!(
            acls[0],
            AclBinding {
                principal: "User:alice".into(),
                ..acl("t", PatternType::Literal, Operation::Read)
            }
        );
        assert_eq!(acls[1].principal, "User:bob");
        assert_eq!(acls[2].resource_type, ResourceType::Cluster);
        assert_eq!(acls[2].operation, Operation::DescribeConfigs);
    }

    #[test]
    fn a_described_any_or_unknown_code_is_a_protocol_error() {
        for (pattern, operation) in [(1, 3), (2, 3), (3, 1), (3, 0), (3, 99)] {
            let response = DescribeAclsResponse::default().with_resources(vec![
                DescribeAclsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("t"))
                    .with_pattern_type(pattern)
                    .with_acls(vec![description("User:bob", operation)]),
            ]);
            assert!(
                matches!(described(response), Err(ClientError::Protocol(_))),
                "pattern {pattern} operation {operation}"
            );
        }
        let refused = DescribeAclsResponse::default()
            .with_error_code(31)
            .with_error_message(Some(s("User:bob may not describe the cluster")));
        let e = described(refused).unwrap_err().to_string();
        assert!(
            e.contains("CLUSTER_AUTHORIZATION_FAILED (31): User:bob may not"),
            "{e}"
        );
    }

    fn matching(name: &str, error_code: i16) -> DeleteAclsMatchingAcl {
        DeleteAclsMatchingAcl::default()
            .with_error_code(error_code)
            .with_resource_type(2)
            .with_resource_name(s(name))
            .with_pattern_type(3)
            .with_principal(s("User:alice"))
            .with_host(s("*"))
            .with_operation(3)
            .with_permission_type(3)
    }

    #[test]
    fn deletions_list_what_went_and_what_did_not() {
        let response = DeleteAclsResponse::default().with_filter_results(vec![
            DeleteAclsFilterResult::default().with_matching_acls(vec![matching("b", 0)]),
            DeleteAclsFilterResult::default()
                .with_matching_acls(vec![matching("a", 0), matching("b", 0)]),
        ]);
        let gone = deleted(2, round_trip(&response, 2)).unwrap();
        let names: Vec<&str> = gone.iter().map(|a| a.resource_name.as_str()).collect();
        assert_eq!(names, ["a", "b"], "sorted, each once");

        let partial = DeleteAclsResponse::default()
            .with_filter_results(vec![DeleteAclsFilterResult::default()
                .with_matching_acls(vec![matching("a", 0), matching("b", 42)])]);
        let e = deleted(1, partial).unwrap_err().to_string();
        assert!(e.starts_with("deleted 1 ACL(s), but 1 refused: "), "{e}");
        assert!(e.contains("INVALID_REQUEST (42)"), "{e}");

        let disabled = DeleteAclsResponse::default().with_filter_results(vec![
            DeleteAclsFilterResult::default()
                .with_error_code(54)
                .with_error_message(Some(s("authorizer none"))),
        ]);
        let e = deleted(1, disabled).unwrap_err().to_string();
        assert_eq!(e, "deleting ACLs: SECURITY_DISABLED (54): authorizer none");
        assert!(matches!(
            deleted(2, DeleteAclsResponse::default()),
            Err(ClientError::Protocol(_))
        ));
    }
}
