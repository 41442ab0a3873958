//! One ACL in Kafka's model: a resource pattern (type, name, literal or prefixed) and an
//! entry (principal, host, operation, allow or deny). The enums carry Kafka's wire codes
//! (`org.apache.kafka.common.acl` and `...resource`), so CreateAcls, DescribeAcls and
//! DeleteAcls map one to one.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::AclError;

/// What an ACL protects. Codes 0 (UNKNOWN) and 1 (ANY) exist only in filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
    DelegationToken,
    User,
}

impl ResourceType {
    pub const ALL: [ResourceType; 6] = [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
        ResourceType::TransactionalId,
        ResourceType::DelegationToken,
        ResourceType::User,
    ];

    pub fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
            ResourceType::DelegationToken => 6,
            ResourceType::User => 7,
        }
    }

    pub fn from_code(code: i8) -> Option<ResourceType> {
        ResourceType::ALL.into_iter().find(|t| t.code() == code)
    }

    /// Kafka's names as `kafka-acls.sh` and `sluice acl` spell them (`topic`,
    /// `transactional-id`); case and `_`/`-` do not matter.
    pub fn parse(name: &str) -> Option<ResourceType> {
        ResourceType::ALL
            .into_iter()
            .find(|t| normalize(t.name()) == normalize(name))
    }

    /// The operations an ACL on this type may name besides `All` (Kafka's `AclEntry`): an
    /// ACL for another operation would never be consulted.
    pub fn operations(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Describe,
                Delete,
                Alter,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[Read, Describe, Delete],
            ResourceType::Cluster => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            ResourceType::TransactionalId => &[Describe, Write],
            ResourceType::DelegationToken => &[Describe],
            ResourceType::User => &[CreateTokens, DescribeTokens],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Topic => "topic",
            ResourceType::Group => "group",
            ResourceType::Cluster => "cluster",
            ResourceType::TransactionalId => "transactional-id",
            ResourceType::DelegationToken => "delegation-token",
            ResourceType::User => "user",
        }
    }
}

/// How an ACL's resource name matches: exactly (`*` matching every name) or as a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PatternType {
    Literal,
    Prefixed,
}

impl PatternType {
    pub fn code(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    pub fn from_code(code: i8) -> Option<PatternType> {
        match code {
            3 => Some(PatternType::Literal),
            4 => Some(PatternType::Prefixed),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PatternType::Literal => "literal",
            PatternType::Prefixed => "prefixed",
        }
    }

    pub fn parse(name: &str) -> Option<PatternType> {
        [PatternType::Literal, PatternType::Prefixed]
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }
}

/// What a principal does to a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    CreateTokens,
    DescribeTokens,
}

impl Operation {
    pub const ALL: [Operation; 13] = [
        Operation::All,
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
        Operation::ClusterAction,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::IdempotentWrite,
        Operation::CreateTokens,
        Operation::DescribeTokens,
    ];

    pub fn code(self) -> i8 {
        match self {
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
            Operation::CreateTokens => 13,
            Operation::DescribeTokens => 14,
        }
    }

    pub fn from_code(code: i8) -> Option<Operation> {
        Operation::ALL.into_iter().find(|o| o.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            Operation::All => "All",
            Operation::Read => "Read",
            Operation::Write => "Write",
            Operation::Create => "Create",
            Operation::Delete => "Delete",
            Operation::Alter => "Alter",
            Operation::Describe => "Describe",
            Operation::ClusterAction => "ClusterAction",
            Operation::DescribeConfigs => "DescribeConfigs",
            Operation::AlterConfigs => "AlterConfigs",
            Operation::IdempotentWrite => "IdempotentWrite",
            Operation::CreateTokens => "CreateTokens",
            Operation::DescribeTokens => "DescribeTokens",
        }
    }

    /// `Read`, `read`, `describe-configs` and `DESCRIBE_CONFIGS` all name one operation.
    pub fn parse(name: &str) -> Option<Operation> {
        Operation::ALL
            .into_iter()
            .find(|o| normalize(o.name()) == normalize(name))
    }

    /// Whether an ACL for `self` also grants `asked` (Kafka: All grants everything; Read,
    /// Write, Delete and Alter grant Describe; AlterConfigs grants DescribeConfigs). Deny
    /// ACLs take no such implications: only the operation itself or All.
    pub fn allows(self, asked: Operation) -> bool {
        self == asked
            || self == Operation::All
            || (asked == Operation::Describe
                && matches!(
                    self,
                    Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
                ))
            || (asked == Operation::DescribeConfigs && self == Operation::AlterConfigs)
    }
}

/// Allow or deny. A deny that matches wins over any allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Permission {
    Deny,
    Allow,
}

impl Permission {
    pub fn code(self) -> i8 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }

    pub fn from_code(code: i8) -> Option<Permission> {
        match code {
            2 => Some(Permission::Deny),
            3 => Some(Permission::Allow),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Permission::Deny => "Deny",
            Permission::Allow => "Allow",
        }
    }
}

/// Kafka's one cluster resource's name.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// A literal resource name, principal or host that matches all.
pub const WILDCARD: &str = "*";
/// The principal that matches every user.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// One ACL, as CreateAcls makes it and DescribeAcls lists it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    /// `User:alice`, or `User:*` for everyone.
    pub principal: String,
    /// The client's IP address as text, or `*`.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclBinding {
    /// Kafka's checks on a new ACL (what its controller refuses).
    pub fn validate(&self) -> Result<(), AclError> {
        if self.resource_name.is_empty() {
            return Err(AclError::Invalid("the resource name is empty".into()));
        }
        if self.resource_type == ResourceType::Cluster
            && (self.resource_name != CLUSTER_NAME || self.pattern_type != PatternType::Literal)
        {
            return Err(AclError::Invalid(format!(
                "a cluster ACL's resource is the literal name {CLUSTER_NAME}, not {} {:?}",
                self.pattern_type.name(),
                self.resource_name
            )));
        }
        if self.pattern_type == PatternType::Prefixed && self.resource_name == WILDCARD {
            // Kafka refuses it too: the literal `*` is the pattern that matches everything.
            return Err(AclError::Invalid(
                "a prefixed pattern cannot be '*' (use the literal name '*')".into(),
            ));
        }
        validate_principal(&self.principal)?;
        if self.host.is_empty() {
            return Err(AclError::Invalid(
                "the host is empty (use '*' for every host)".into(),
            ));
        }
        if self.host != WILDCARD && self.host.parse::<std::net::IpAddr>().is_err() {
            return Err(AclError::Invalid(format!(
                "host {:?} is not an IP address or '*'",
                self.host
            )));
        }
        Ok(())
    }

    /// Whether this ACL's pattern covers the resource `(resource_type, name)`.
    pub fn covers(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                PatternType::Literal => {
                    self.resource_name == name || self.resource_name == WILDCARD
                }
                PatternType::Prefixed => name.starts_with(&self.resource_name),
            }
    }
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} on {} {} ({}) from {}",
            self.permission.name(),
            self.principal,
            self.operation.name(),
            self.resource_type.name(),
            self.resource_name,
            self.pattern_type.name(),
            self.host
        )
    }
}

/// An ACL host in one form: an IP address as Rust prints it once IPv4-mapped IPv6 addresses
/// are unmapped (`0:0:0:0:0:0:0:1` → `::1`, `::ffff:10.0.0.7` → `10.0.0.7`), so that an ACL
/// written in Java's spelling matches the client's address; anything else (`*`) unchanged.
pub fn canonical_host(host: &str) -> String {
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().to_string(),
        Err(_) => host.to_string(),
    }
}

/// `Type:name` with a non-empty type and name (Kafka's `SecurityUtils.parseKafkaPrincipal`).
pub fn validate_principal(principal: &str) -> Result<(), AclError> {
    match principal.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(()),
        _ => Err(AclError::Invalid(format!(
            "principal {principal:?} is not of the form User:NAME"
        ))),
    }
}

fn normalize(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(name: &str, pattern: PatternType) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        }
    }

    #[test]
    fn codes_round_trip() {
        for t in ResourceType::ALL {
            assert_eq!(ResourceType::from_code(t.code()), Some(t));
            assert_eq!(ResourceType::parse(t.name()), Some(t));
        }
        for o in Operation::ALL {
            assert_eq!(Operation::from_code(o.code()), Some(o));
            assert_eq!(Operation::parse(o.name()), Some(o));
        }
        assert_eq!(
            ResourceType::from_code(1),
            None,
            "ANY is a filter, not a type"
        );
        assert_eq!(Operation::from_code(1), None);
        assert_eq!(Permission::from_code(1), None);
        assert_eq!(PatternType::from_code(2), None, "MATCH is a filter");
        assert_eq!(
            Operation::parse("describe_configs"),
            Some(Operation::DescribeConfigs)
        );
        assert_eq!(
            ResourceType::parse("TRANSACTIONAL_ID"),
            Some(ResourceType::TransactionalId)
        );
    }

    #[test]
    fn implications_follow_kafka() {
        use Operation::*;
        assert!(Read.allows(Describe));
        assert!(Write.allows(Describe));
        assert!(Delete.allows(Describe));
        assert!(Alter.allows(Describe));
        assert!(AlterConfigs.allows(DescribeConfigs));
        assert!(All.allows(IdempotentWrite));
        assert!(!Describe.allows(Read));
        assert!(!Create.allows(Describe));
        assert!(!Read.allows(Write));
        assert!(!DescribeConfigs.allows(AlterConfigs));
    }

    #[test]
    fn patterns_cover_names() {
        assert!(acl("orders", PatternType::Literal).covers(ResourceType::Topic, "orders"));
        assert!(!acl("orders", PatternType::Literal).covers(ResourceType::Topic, "orders2"));
        assert!(!acl("orders", PatternType::Literal).covers(ResourceType::Group, "orders"));
        assert!(acl("*", PatternType::Literal).covers(ResourceType::Topic, "anything"));
        assert!(acl("ord", PatternType::Prefixed).covers(ResourceType::Topic, "orders"));
        assert!(!acl("ord", PatternType::Prefixed).covers(ResourceType::Topic, "or"));
    }

    #[test]
    fn hosts_have_one_spelling() {
        assert_eq!(canonical_host("0:0:0:0:0:0:0:1"), "::1");
        assert_eq!(canonical_host("::ffff:10.0.0.7"), "10.0.0.7");
        assert_eq!(canonical_host("10.0.0.7"), "10.0.0.7");
        assert_eq!(canonical_host("*"), "*");
    }

    #[test]
    fn validation_refuses_what_kafka_refuses() {
        assert!(acl("orders", PatternType::Literal).validate().is_ok());
        assert!(acl("", PatternType::Literal).validate().is_err());
        assert!(acl("*", PatternType::Prefixed).validate().is_err());
        let mut a = acl("orders", PatternType::Literal);
        a.principal = "alice".into();
        assert!(a.validate().is_err());
        a.principal = "User:".into();
        assert!(a.validate().is_err());
        let mut a = acl("orders", PatternType::Literal);
        a.host = "not-an-ip".into();
        assert!(a.validate().is_err());
        a.host = "10.0.0.1".into();
        assert!(a.validate().is_ok());
        let mut a = acl("my-cluster", PatternType::Literal);
        a.resource_type = ResourceType::Cluster;
        assert!(a.validate().is_err());
        a.resource_name = CLUSTER_NAME.into();
        assert!(a.validate().is_ok());
    }
}
