//! The ACLs in force and the decision Kafka's authorizer makes with them: a request is
//! allowed when an ACL allows the principal (or `User:*`) from its host (or `*`) the
//! operation (or one that implies it) on a pattern covering the resource, and no deny ACL
//! for the operation (or All) covers it. What no ACL allows is denied.
//!
//! ACLs are indexed by resource type, pattern type and name, so a check costs a few hash
//! lookups (one per prefix of the name when prefixed ACLs exist for the type), not a scan.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::binding::WILDCARD_PRINCIPAL;
use super::binding::{AclBinding, Operation, PatternType, Permission, ResourceType, WILDCARD};
use super::filter::AclFilter;

/// Who asks, for one decision.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    /// `User:alice`.
    pub principal: &'a str,
    /// The client's IP address as text.
    pub host: &'a str,
}

impl Requester<'_> {
    fn is_subject_of(&self, acl: &AclBinding) -> bool {
        (acl.principal == self.principal || acl.principal == WILDCARD_PRINCIPAL)
            && (acl.host == self.host || acl.host == WILDCARD)
    }
}

type ByName = HashMap<String, Vec<AclBinding>>;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<AclBinding>", into = "Vec<AclBinding>")]
pub struct AclSet {
    all: BTreeSet<AclBinding>,
    literal: HashMap<ResourceType, ByName>,
    prefixed: HashMap<ResourceType, ByName>,
    /// The lengths (bytes) of the prefixed patterns of each type: a check looks up only
    /// prefixes of those lengths, so its cost does not grow with the name's length.
    prefix_lengths: HashMap<ResourceType, BTreeSet<usize>>,
}

impl From<Vec<AclBinding>> for AclSet {
    fn from(acls: Vec<AclBinding>) -> Self {
        let mut set = AclSet {
            all: acls.into_iter().collect(),
            ..AclSet::default()
        };
        set.reindex();
        set
    }
}

impl From<AclSet> for Vec<AclBinding> {
    fn from(set: AclSet) -> Self {
        set.all.into_iter().collect()
    }
}

impl AclSet {
    pub fn len(&self) -> usize {
        self.all.len()
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &AclBinding> {
        self.all.iter()
    }

    /// Adds ACLs (one already present stays once, as in Kafka).
    pub fn add(&mut self, acls: impl IntoIterator<Item = AclBinding>) {
        self.all.extend(acls);
        self.reindex();
    }

    /// Removes exactly these ACLs.
    pub fn remove(&mut self, acls: &[AclBinding]) {
        for acl in acls {
            self.all.remove(acl);
        }
        self.reindex();
    }

    /// The ACLs a filter matches, in a stable order.
    pub fn matching(&self, filter: &AclFilter) -> Vec<AclBinding> {
        self.all
            .iter()
            .filter(|a| filter.matches(a))
            .cloned()
            .collect()
    }

    fn reindex(&mut self) {
        self.literal.clear();
        self.prefixed.clear();
        self.prefix_lengths.clear();
        for acl in &self.all {
            if acl.pattern_type == PatternType::Prefixed {
                self.prefix_lengths
                    .entry(acl.resource_type)
                    .or_default()
                    .insert(acl.resource_name.len());
            }
            let by_type = match acl.pattern_type {
                PatternType::Literal => &mut self.literal,
                PatternType::Prefixed => &mut self.prefixed,
            };
            by_type
                .entry(acl.resource_type)
                .or_default()
                .entry(acl.resource_name.clone())
                .or_default()
                .push(acl.clone());
        }
    }

    /// Every ACL whose pattern covers the resource.
    fn covering<'s>(
        &'s self,
        resource_type: ResourceType,
        name: &'s str,
    ) -> impl Iterator<Item = &'s AclBinding> + 's {
        let literal = self.literal.get(&resource_type);
        let exact = literal.and_then(|m| m.get(name));
        let wildcard = literal.and_then(|m| (name != WILDCARD).then(|| m.get(WILDCARD)).flatten());
        let prefixed = self.prefixed.get(&resource_type);
        let lengths = self.prefix_lengths.get(&resource_type);
        let prefixes = prefixed
            .zip(lengths)
            .into_iter()
            .flat_map(move |(m, lengths)| {
                lengths
                    .iter()
                    .take_while(move |l| **l <= name.len())
                    .filter_map(move |l| name.get(..*l))
                    .filter_map(move |p| m.get(p))
            });
        exact.into_iter().chain(wildcard).chain(prefixes).flatten()
    }

    /// Kafka's decision for one operation on one resource.
    pub fn allows(
        &self,
        who: Requester<'_>,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let mut allowed = false;
        for acl in self.covering(resource_type, name) {
            if !who.is_subject_of(acl) {
                continue;
            }
            match acl.permission {
                Permission::Deny => {
                    if acl.operation == operation || acl.operation == Operation::All {
                        return false;
                    }
                }
                Permission::Allow => allowed |= acl.operation.allows(operation),
            }
        }
        allowed
    }

    /// Whether some resource of the type would allow the operation (Kafka's
    /// `authorizeByResourceType`: an idempotent producer needs IdempotentWrite on the
    /// cluster or Write on any topic): an allow ACL that no deny ACL of the requester
    /// covers whole.
    pub fn allows_any(
        &self,
        who: Requester<'_>,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        let subject: Vec<&AclBinding> = self
            .all
            .iter()
            .filter(|a| a.resource_type == resource_type && who.is_subject_of(a))
            .collect();
        let denies = |allow: &AclBinding| {
            subject.iter().any(|d| {
                d.permission == Permission::Deny
                    && (d.operation == operation || d.operation == Operation::All)
                    && match (d.pattern_type, allow.pattern_type) {
                        (PatternType::Literal, _) if d.resource_name == WILDCARD => true,
                        (PatternType::Literal, PatternType::Literal) => {
                            d.resource_name == allow.resource_name
                        }
                        (PatternType::Literal, PatternType::Prefixed) => false,
                        (PatternType::Prefixed, _) => {
                            allow.resource_name.starts_with(&d.resource_name)
                        }
                    }
            })
        };
        subject.iter().any(|a| {
            a.permission == Permission::Allow && a.operation.allows(operation) && !denies(a)
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const ALICE: Requester<'static> = Requester {
        principal: "User:alice",
        host: "10.0.0.1",
    };

    fn acl(
        principal: &str,
        name: &str,
        pattern: PatternType,
        operation: Operation,
        permission: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: principal.into(),
            host: "*".into(),
            operation,
            permission,
        }
    }

    fn set(acls: Vec<AclBinding>) -> AclSet {
        AclSet::from(acls)
    }

    #[test]
    fn nothing_allowed_without_an_acl() {
        let acls = AclSet::default();
        assert!(!acls.allows(ALICE, Operation::Read, ResourceType::Topic, "orders"));
    }

    #[test]
    fn literal_prefixed_and_wildcard_allow() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        let acls = set(vec![
            acl("User:alice", "orders", Literal, Read, Allow),
            acl("User:alice", "pay-", Prefixed, Write, Allow),
            acl("User:*", "*", Literal, Describe, Allow),
        ]);
        assert!(acls.allows(ALICE, Read, ResourceType::Topic, "orders"));
        assert!(!acls.allows(ALICE, Read, ResourceType::Topic, "orders2"));
        assert!(acls.allows(ALICE, Write, ResourceType::Topic, "pay-eu"));
        assert!(!acls.allows(ALICE, Write, ResourceType::Topic, "pay"));
        assert!(acls.allows(ALICE, Describe, ResourceType::Topic, "anything"));
        assert!(!acls.allows(ALICE, Read, ResourceType::Group, "orders"));
    }

    #[test]
    fn deny_wins_and_takes_no_implication() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        let acls = set(vec![
            acl("User:*", "*", Literal, All, Allow),
            acl("User:alice", "secret", Prefixed, Read, Deny),
        ]);
        assert!(!acls.allows(ALICE, Read, ResourceType::Topic, "secret-1"));
        // A deny of Read leaves Describe (implied by the allow of All) alone, as in Kafka.
        assert!(acls.allows(ALICE, Describe, ResourceType::Topic, "secret-1"));
        assert!(acls.allows(ALICE, Read, ResourceType::Topic, "public"));
        let all_denied = set(vec![
            acl("User:alice", "orders", Literal, Read, Allow),
            acl("User:*", "orders", Literal, All, Deny),
        ]);
        assert!(!all_denied.allows(ALICE, Read, ResourceType::Topic, "orders"));
    }

    #[test]
    fn a_long_name_costs_what_a_short_one_does() {
        let acls = set(vec![acl(
            "User:alice",
            "team-",
            PatternType::Prefixed,
            Operation::Read,
            Permission::Allow,
        )]);
        let long = format!("team-{}", "x".repeat(1 << 20));
        // One lookup per prefix length (here one), not one per character.
        assert!(acls.allows(ALICE, Operation::Read, ResourceType::Topic, &long));
        assert!(!acls.allows(ALICE, Operation::Read, ResourceType::Topic, &long[5..]));
    }

    #[test]
    fn host_must_match() {
        let mut a = acl(
            "User:alice",
            "orders",
            PatternType::Literal,
            Operation::Read,
            Permission::Allow,
        );
        a.host = "10.0.0.2".into();
        let acls = set(vec![a]);
        assert!(!acls.allows(ALICE, Operation::Read, ResourceType::Topic, "orders"));
        let other = Requester {
            host: "10.0.0.2",
            ..ALICE
        };
        assert!(acls.allows(other, Operation::Read, ResourceType::Topic, "orders"));
    }

    #[test]
    fn any_resource_of_a_type() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        let acls = set(vec![acl("User:alice", "t-", Prefixed, Write, Allow)]);
        assert!(acls.allows_any(ALICE, Write, ResourceType::Topic));
        assert!(!acls.allows_any(ALICE, Read, ResourceType::Topic));
        let denied = set(vec![
            acl("User:alice", "t-1", Literal, Write, Allow),
            acl("User:alice", "t-", Prefixed, Write, Deny),
        ]);
        assert!(!denied.allows_any(ALICE, Write, ResourceType::Topic));
    }

    #[test]
    fn serde_keeps_the_index() {
        let acls = set(vec![acl(
            "User:alice",
            "o",
            PatternType::Prefixed,
            Operation::Read,
            Permission::Allow,
        )]);
        let text = serde_json::to_string(&acls).unwrap();
        let back: AclSet = serde_json::from_str(&text).unwrap();
        assert_eq!(back, acls);
        assert!(back.allows(ALICE, Operation::Read, ResourceType::Topic, "orders"));
    }

    fn arb_acl() -> impl Strategy<Value = AclBinding> {
        (
            prop::sample::select(vec!["a", "ab", "abc", "b", "*"]),
            prop::bool::ANY,
            prop::sample::select(Operation::ALL.to_vec()),
            prop::bool::ANY,
            prop::sample::select(vec!["User:alice", "User:bob", "User:*"]),
            prop::sample::select(vec!["10.0.0.1", "10.0.0.2", "*"]),
        )
            .prop_map(
                |(name, prefixed, operation, allow, principal, host)| AclBinding {
                    resource_type: ResourceType::Topic,
                    resource_name: name.into(),
                    pattern_type: if prefixed && name != "*" {
                        PatternType::Prefixed
                    } else {
                        PatternType::Literal
                    },
                    principal: principal.into(),
                    host: host.into(),
                    operation,
                    permission: if allow {
                        Permission::Allow
                    } else {
                        Permission::Deny
                    },
                },
            )
    }

    proptest! {
        /// The index gives the decision a scan of every ACL gives.
        #[test]
        fn index_agrees_with_a_scan(
            acls in prop::collection::vec(arb_acl(), 0..12),
            name in prop::sample::select(vec!["a", "ab", "abc", "abd", "b", "c"]),
            operation in prop::sample::select(Operation::ALL.to_vec()),
        ) {
            let indexed = set(acls.clone());
            let covering: Vec<&AclBinding> = acls
                .iter()
                .filter(|a| a.covers(ResourceType::Topic, name) && ALICE.is_subject_of(a))
                .collect();
            let denied = covering.iter().any(|a| {
                a.permission == Permission::Deny
                    && (a.operation == operation || a.operation == Operation::All)
            });
            let allowed = covering
                .iter()
                .any(|a| a.permission == Permission::Allow && a.operation.allows(operation));
            prop_assert_eq!(
                indexed.allows(ALICE, operation, ResourceType::Topic, name),
                allowed && !denied
            );
        }
    }
}
