//! Which ACLs a DescribeAcls or DeleteAcls request means (Kafka's `AclBindingFilter`): every
//! field may be "any", and the pattern type may be MATCH, "every ACL that would apply to
//! this resource name".

use serde::{Deserialize, Serialize};

use super::binding::{AclBinding, Operation, PatternType, Permission, ResourceType, WILDCARD};
use crate::error::AclError;

/// The pattern-type part of a filter (Kafka codes 1 to 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PatternFilter {
    /// Any pattern type; a name must then be the ACL's own.
    Any,
    /// The ACLs that apply to the name: literal equal or `*`, or a prefix of it.
    Match,
    Exactly(PatternType),
}

impl PatternFilter {
    pub fn from_code(code: i8) -> Option<PatternFilter> {
        match code {
            1 => Some(PatternFilter::Any),
            2 => Some(PatternFilter::Match),
            c => PatternType::from_code(c).map(PatternFilter::Exactly),
        }
    }
}

/// A filter over ACLs; `None` is Kafka's null or ANY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub resource_name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

impl AclFilter {
    /// Every ACL.
    pub fn any() -> AclFilter {
        AclFilter {
            resource_type: None,
            resource_name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    /// A filter from Kafka's codes: 1 is ANY, 0 (UNKNOWN) and codes Sluice does not know
    /// are refused.
    pub fn from_codes(
        resource_type: i8,
        resource_name: Option<String>,
        pattern: i8,
        principal: Option<String>,
        host: Option<String>,
        operation: i8,
        permission: i8,
    ) -> Result<AclFilter, AclError> {
        let any_or = |code: i8, what: &str| -> Result<Option<i8>, AclError> {
            match code {
                1 => Ok(None),
                0 => Err(AclError::Invalid(format!("the filter's {what} is UNKNOWN"))),
                c => Ok(Some(c)),
            }
        };
        let resource_type = match any_or(resource_type, "resource type")? {
            None => None,
            Some(c) => Some(
                ResourceType::from_code(c)
                    .ok_or_else(|| AclError::Invalid(format!("unknown resource type code {c}")))?,
            ),
        };
        let pattern = PatternFilter::from_code(pattern)
            .ok_or_else(|| AclError::Invalid(format!("unknown pattern type code {pattern}")))?;
        let operation = match any_or(operation, "operation")? {
            None => None,
            Some(c) => Some(
                Operation::from_code(c)
                    .ok_or_else(|| AclError::Invalid(format!("unknown operation code {c}")))?,
            ),
        };
        let permission = match any_or(permission, "permission type")? {
            None => None,
            Some(c) => Some(
                Permission::from_code(c)
                    .ok_or_else(|| AclError::Invalid(format!("unknown permission code {c}")))?,
            ),
        };
        Ok(AclFilter {
            resource_type,
            resource_name,
            pattern,
            principal,
            host,
            operation,
            permission,
        })
    }

    pub fn matches(&self, acl: &AclBinding) -> bool {
        self.resource_type.is_none_or(|t| t == acl.resource_type)
            && self.matches_pattern(acl)
            && self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && self.operation.is_none_or(|o| o == acl.operation)
            && self.permission.is_none_or(|p| p == acl.permission)
    }

    fn matches_pattern(&self, acl: &AclBinding) -> bool {
        match (self.pattern, &self.resource_name) {
            (PatternFilter::Exactly(p), _) if p != acl.pattern_type => false,
            (_, None) => true,
            (PatternFilter::Match, Some(name)) => match acl.pattern_type {
                PatternType::Literal => acl.resource_name == *name || acl.resource_name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&acl.resource_name),
            },
            (_, Some(name)) => acl.resource_name == *name,
        }
    }
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

    fn named(name: &str, pattern: PatternFilter) -> AclFilter {
        AclFilter {
            resource_name: Some(name.into()),
            pattern,
            ..AclFilter::any()
        }
    }

    #[test]
    fn any_matches_everything() {
        assert!(AclFilter::any().matches(&acl("x", PatternType::Prefixed)));
    }

    #[test]
    fn match_finds_what_applies_to_a_name() {
        let f = named("orders", PatternFilter::Match);
        assert!(f.matches(&acl("orders", PatternType::Literal)));
        assert!(f.matches(&acl("*", PatternType::Literal)));
        assert!(f.matches(&acl("ord", PatternType::Prefixed)));
        assert!(!f.matches(&acl("orders-eu", PatternType::Literal)));
        assert!(!f.matches(&acl("orders-", PatternType::Prefixed)));
    }

    #[test]
    fn any_and_exact_patterns_compare_names() {
        let any = named("ord", PatternFilter::Any);
        assert!(any.matches(&acl("ord", PatternType::Prefixed)));
        assert!(any.matches(&acl("ord", PatternType::Literal)));
        assert!(!any.matches(&acl("*", PatternType::Literal)));
        let literal = named("ord", PatternFilter::Exactly(PatternType::Literal));
        assert!(!literal.matches(&acl("ord", PatternType::Prefixed)));
    }

    #[test]
    fn codes_refuse_unknown() {
        assert!(AclFilter::from_codes(0, None, 1, None, None, 1, 1).is_err());
        assert!(AclFilter::from_codes(1, None, 1, None, None, 0, 1).is_err());
        assert!(AclFilter::from_codes(1, None, 9, None, None, 1, 1).is_err());
        assert!(AclFilter::from_codes(1, None, 1, None, None, 99, 1).is_err());
        let f = AclFilter::from_codes(2, Some("t".into()), 3, None, None, 3, 3).unwrap();
        assert_eq!(f.resource_type, Some(ResourceType::Topic));
        assert_eq!(f.operation, Some(Operation::Read));
    }
}
