//! What one authorization check costs: `AclSet::allows` for a topic, with 10 and 10,000 ACLs
//! (literal per-user topics, prefixed patterns and a wildcard), allowed and denied. A Produce
//! or Fetch makes one check per topic in the request.
#![allow(clippy::unwrap_used)] // benchmark code: panics fail the run

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use sluice_auth::acl::{
    AclBinding, AclSet, Operation, PatternType, Permission, Requester, ResourceType,
};

fn acls(users: usize) -> AclSet {
    let mut acls = Vec::new();
    for u in 0..users {
        for (name, pattern) in [
            (format!("orders-{u}"), PatternType::Literal),
            (format!("team-{u}-"), PatternType::Prefixed),
        ] {
            acls.push(AclBinding {
                resource_type: ResourceType::Topic,
                resource_name: name,
                pattern_type: pattern,
                principal: format!("User:user-{u}"),
                host: "*".into(),
                operation: Operation::Write,
                permission: Permission::Allow,
            });
        }
    }
    acls.push(AclBinding {
        resource_type: ResourceType::Topic,
        resource_name: "*".into(),
        pattern_type: PatternType::Literal,
        principal: "User:auditor".into(),
        host: "*".into(),
        operation: Operation::Describe,
        permission: Permission::Allow,
    });
    AclSet::from(acls)
}

fn checks(c: &mut Criterion) {
    for users in [5, 5_000] {
        let set = acls(users);
        let who = Requester {
            principal: "User:user-3",
            host: "10.0.0.7",
        };
        c.bench_function(&format!("allows literal, {} acls", set.len()), |b| {
            b.iter(|| {
                assert!(set.allows(
                    black_box(who),
                    Operation::Write,
                    ResourceType::Topic,
                    black_box("orders-3")
                ))
            })
        });
        c.bench_function(&format!("allows prefixed, {} acls", set.len()), |b| {
            b.iter(|| {
                assert!(set.allows(
                    black_box(who),
                    Operation::Write,
                    ResourceType::Topic,
                    black_box("team-3-payments-eu-west")
                ))
            })
        });
        c.bench_function(&format!("denies, {} acls", set.len()), |b| {
            b.iter(|| {
                assert!(!set.allows(
                    black_box(who),
                    Operation::Write,
                    ResourceType::Topic,
                    black_box("orders-4")
                ))
            })
        });
    }
}

criterion_group!(benches, checks);
criterion_main!(benches);
