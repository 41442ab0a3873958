//! `sluice acl add|list|remove`: Kafka ACLs over the Kafka protocol (CreateAcls, DescribeAcls,
//! DeleteAcls), so they work against any Kafka broker with an authorizer too. The flags follow
//! `kafka-acls.sh`: `add` makes every allowed principal × its hosts × each operation (and the
//! same for denied ones) on one resource.
//!
//! Everything given is checked before the broker is contacted: a typo in an operation or a
//! principal is an error here, not an ACL that grants nothing. `remove` with no selector is
//! refused unless `--all` says that every ACL is meant.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::IpAddr;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use sluice_auth::acl::{
    AclBinding, AclFilter, Operation, PatternFilter, PatternType, Permission, ResourceType,
    CLUSTER_NAME, WILDCARD,
};
use sluice_client::Client;

#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Add ACLs on one resource: each --allow-principal from each --allow-host (and each
    /// --deny-principal from each --deny-host) for each --operation
    Add(AddArgs),
    /// List ACLs: all of them, or those the selectors match
    List(ListArgs),
    /// Remove the ACLs the selectors match (every ACL only with --all); prints what went
    Remove(RemoveArgs),
}

/// The resource: exactly one for `add`, at most one to select by.
#[derive(Debug, Args)]
pub struct ResourceArgs {
    /// A topic (`*` is every topic)
    #[arg(long)]
    topic: Option<String>,
    /// A consumer group (`*` is every group)
    #[arg(long)]
    group: Option<String>,
    /// A transactional id (`*` is every one)
    #[arg(long)]
    transactional_id: Option<String>,
    /// The cluster (Kafka's one cluster resource, named kafka-cluster)
    #[arg(long, value_name = "kafka-cluster")]
    cluster: Option<Option<String>>,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    #[command(flatten)]
    resource: ResourceArgs,
    /// literal (the name itself; `*` matches every name) or prefixed (every name that starts
    /// with it)
    #[arg(long, default_value = "literal")]
    resource_pattern_type: String,
    /// A principal to allow, User:NAME or User:* (repeatable)
    #[arg(long)]
    allow_principal: Vec<String>,
    /// A principal to deny, User:NAME or User:* (repeatable); a deny wins over any allow
    #[arg(long)]
    deny_principal: Vec<String>,
    /// An IP address the allowed principals may connect from (repeatable) [default: *]
    #[arg(long)]
    allow_host: Vec<String>,
    /// An IP address the denied principals are denied from (repeatable) [default: *]
    #[arg(long)]
    deny_host: Vec<String>,
    /// Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs,
    /// AlterConfigs, IdempotentWrite or All (repeatable)
    #[arg(long)]
    operation: Vec<String>,
}

/// What `list` and `remove` select by; each given selector narrows the set.
#[derive(Debug, Args)]
pub struct Selectors {
    #[command(flatten)]
    resource: ResourceArgs,
    /// any (every pattern), match (every ACL that applies to the named resource: the literal
    /// name, `*` and the prefixes of the name), literal or prefixed
    #[arg(long, default_value = "any")]
    resource_pattern_type: String,
    /// ACLs of this principal, allow or deny (repeatable)
    #[arg(long)]
    principal: Vec<String>,
    /// Allow ACLs of this principal (repeatable)
    #[arg(long)]
    allow_principal: Vec<String>,
    /// Deny ACLs of this principal (repeatable)
    #[arg(long)]
    deny_principal: Vec<String>,
    /// Only the --allow-principal ACLs for this host (repeatable)
    #[arg(long)]
    allow_host: Vec<String>,
    /// Only the --deny-principal ACLs for this host (repeatable)
    #[arg(long)]
    deny_host: Vec<String>,
    /// ACLs for this operation (repeatable)
    #[arg(long)]
    operation: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    select: Selectors,
    /// One JSON object per ACL, one per line
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    select: Selectors,
    /// Remove every ACL (refused together with a selector)
    #[arg(long)]
    all: bool,
    /// Print the removed ACLs as JSON lines
    #[arg(long)]
    json: bool,
}

impl ResourceArgs {
    /// The one resource given, if any.
    fn resource(&self) -> anyhow::Result<Option<(ResourceType, String)>> {
        let cluster = match &self.cluster {
            None => None,
            Some(None) => Some(CLUSTER_NAME.to_string()),
            Some(Some(name)) if name == CLUSTER_NAME => Some(name.clone()),
            Some(Some(name)) => bail!(
                "--cluster takes no name ('{name}' given): Kafka has one cluster resource, \
                 {CLUSTER_NAME}"
            ),
        };
        let given: Vec<(ResourceType, String)> = [
            (ResourceType::Topic, self.topic.clone()),
            (ResourceType::Group, self.group.clone()),
            (ResourceType::TransactionalId, self.transactional_id.clone()),
            (ResourceType::Cluster, cluster),
        ]
        .into_iter()
        .filter_map(|(t, name)| name.map(|n| (t, n)))
        .collect();
        match given.as_slice() {
            [] => Ok(None),
            [(t, name)] => {
                if name.is_empty() {
                    bail!("the --{} name is empty", t.name());
                }
                Ok(Some((*t, name.clone())))
            }
            several => bail!(
                "give one resource, not {}",
                several
                    .iter()
                    .map(|(t, _)| format!("--{}", t.name()))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        }
    }
}

/// `User:NAME` or `User:*`: the principals Kafka's default principal builder makes.
fn principal(given: &str) -> anyhow::Result<String> {
    match given.strip_prefix("User:") {
        Some(name) if !name.is_empty() => Ok(given.to_string()),
        _ => {
            bail!("principal '{given}' must be User:NAME (e.g. User:alice), or User:* for everyone")
        }
    }
}

fn host(given: &str) -> anyhow::Result<String> {
    if given == WILDCARD || given.parse::<IpAddr>().is_ok() {
        Ok(given.to_string())
    } else {
        bail!("host '{given}' must be an IP address or * (Kafka's ACLs match addresses, not names)")
    }
}

/// The operations `kafka-acls.sh` accepts for a resource type; `All` goes with every type.
fn supported(resource_type: ResourceType) -> &'static [Operation] {
    resource_type.operations()
}

fn operation(given: &str, resource_type: Option<ResourceType>) -> anyhow::Result<Operation> {
    let op = Operation::parse(given).with_context(|| {
        format!(
            "unknown operation '{given}' (one of {})",
            Operation::ALL.map(Operation::name).join(", ")
        )
    })?;
    if let Some(t) = resource_type {
        if op != Operation::All && !supported(t).contains(&op) {
            bail!(
                "operation {} does not apply to a {}; it takes {}, All",
                op.name(),
                t.name(),
                supported(t)
                    .iter()
                    .map(|o| o.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    Ok(op)
}

fn operations(
    given: &[String],
    resource_type: Option<ResourceType>,
) -> anyhow::Result<Vec<Operation>> {
    given.iter().map(|o| operation(o, resource_type)).collect()
}

/// Principals with their hosts, for one permission.
fn entries(
    principals: &[String],
    hosts: &[String],
    flag: &str,
) -> anyhow::Result<Vec<(String, Option<String>)>> {
    if principals.is_empty() && !hosts.is_empty() {
        bail!("--{flag}-host goes with --{flag}-principal");
    }
    let hosts: Vec<Option<String>> = if hosts.is_empty() {
        vec![None]
    } else {
        hosts
            .iter()
            .map(|h| host(h).map(Some))
            .collect::<Result<_, _>>()?
    };
    let mut out = Vec::new();
    for p in principals {
        let p = principal(p)?;
        for h in &hosts {
            out.push((p.clone(), h.clone()));
        }
    }
    Ok(out)
}

impl AddArgs {
    /// The ACLs to create, each once, in a stable order.
    fn bindings(&self) -> anyhow::Result<Vec<AclBinding>> {
        let (resource_type, resource_name) = self.resource.resource()?.context(
            "give the resource: --topic NAME, --group NAME, --transactional-id NAME or --cluster",
        )?;
        let pattern_type = PatternType::parse(&self.resource_pattern_type).with_context(|| {
            format!(
                "--resource-pattern-type for add is literal or prefixed, not '{}'",
                self.resource_pattern_type
            )
        })?;
        if self.allow_principal.is_empty() && self.deny_principal.is_empty() {
            bail!("give --allow-principal or --deny-principal (User:NAME)");
        }
        if self.operation.is_empty() {
            bail!("give --operation (e.g. Read, Write, Describe; All for every one)");
        }
        let operations = operations(&self.operation, Some(resource_type))?;
        let mut acls = BTreeSet::new();
        for (permission, principals, hosts, flag) in [
            (
                Permission::Allow,
                &self.allow_principal,
                &self.allow_host,
                "allow",
            ),
            (
                Permission::Deny,
                &self.deny_principal,
                &self.deny_host,
                "deny",
            ),
        ] {
            for (principal, host) in entries(principals, hosts, flag)? {
                for &operation in &operations {
                    let acl = AclBinding {
                        resource_type,
                        resource_name: resource_name.clone(),
                        pattern_type,
                        principal: principal.clone(),
                        host: host.clone().unwrap_or_else(|| WILDCARD.to_string()),
                        operation,
                        permission,
                    };
                    acl.validate()?;
                    acls.insert(acl);
                }
            }
        }
        Ok(acls.into_iter().collect())
    }
}

impl Selectors {
    fn is_empty(&self) -> bool {
        let r = &self.resource;
        r.topic.is_none()
            && r.group.is_none()
            && r.transactional_id.is_none()
            && r.cluster.is_none()
            && self.resource_pattern_type.eq_ignore_ascii_case("any")
            && self.principal.is_empty()
            && self.allow_principal.is_empty()
            && self.deny_principal.is_empty()
            && self.allow_host.is_empty()
            && self.deny_host.is_empty()
            && self.operation.is_empty()
    }

    /// The filters whose union is the selection (one when nothing is given: every ACL).
    fn filters(&self) -> anyhow::Result<Vec<AclFilter>> {
        let resource = self.resource.resource()?;
        let pattern = match self.resource_pattern_type.to_ascii_lowercase().as_str() {
            "any" => PatternFilter::Any,
            "match" => PatternFilter::Match,
            other => PatternFilter::Exactly(PatternType::parse(other).with_context(|| {
                format!(
                    "--resource-pattern-type is any, match, literal or prefixed, not '{}'",
                    self.resource_pattern_type
                )
            })?),
        };
        if pattern == PatternFilter::Match && resource.is_none() {
            bail!("--resource-pattern-type match needs a resource to match (e.g. --topic NAME)");
        }
        let resource_type = resource.as_ref().map(|(t, _)| *t);
        let mut who: Vec<(Option<String>, Option<String>, Option<Permission>)> = Vec::new();
        for p in &self.principal {
            who.push((Some(principal(p)?), None, None));
        }
        for (permission, principals, hosts, flag) in [
            (
                Permission::Allow,
                &self.allow_principal,
                &self.allow_host,
                "allow",
            ),
            (
                Permission::Deny,
                &self.deny_principal,
                &self.deny_host,
                "deny",
            ),
        ] {
            for (p, h) in entries(principals, hosts, flag)? {
                who.push((Some(p), h, Some(permission)));
            }
        }
        if who.is_empty() {
            who.push((None, None, None));
        }
        let operations: Vec<Option<Operation>> = if self.operation.is_empty() {
            vec![None]
        } else {
            operations(&self.operation, resource_type)?
                .into_iter()
                .map(Some)
                .collect()
        };
        let mut filters = Vec::new();
        for (principal, host, permission) in &who {
            for operation in &operations {
                filters.push(AclFilter {
                    resource_type,
                    resource_name: resource.as_ref().map(|(_, n)| n.clone()),
                    pattern,
                    principal: principal.clone(),
                    host: host.clone(),
                    operation: *operation,
                    permission: *permission,
                });
            }
        }
        Ok(filters)
    }
}

impl RemoveArgs {
    fn filters(&self) -> anyhow::Result<Vec<AclFilter>> {
        match (self.all, self.select.is_empty()) {
            (true, true) => Ok(vec![AclFilter::any()]),
            (true, false) => bail!("--all removes every ACL; give it without selectors"),
            (false, true) => bail!(
                "remove needs a selector (--topic, --group, --transactional-id, --cluster, \
                 --principal, --allow-principal, --deny-principal, --operation, \
                 --resource-pattern-type), or --all to remove every ACL"
            ),
            (false, false) => self.select.filters(),
        }
    }
}

const COLUMNS: [&str; 7] = [
    "RESOURCE",
    "NAME",
    "PATTERN",
    "PRINCIPAL",
    "HOST",
    "OPERATION",
    "PERMISSION",
];

fn cells(acl: &AclBinding) -> [&str; 7] {
    [
        acl.resource_type.name(),
        &acl.resource_name,
        acl.pattern_type.name(),
        &acl.principal,
        &acl.host,
        acl.operation.name(),
        acl.permission.name(),
    ]
}

/// One ACL per line under a header, columns aligned; nothing for no ACLs.
fn write_table(out: &mut impl Write, acls: &[AclBinding]) -> std::io::Result<()> {
    if acls.is_empty() {
        return Ok(());
    }
    let mut widths = COLUMNS.map(str::len);
    for acl in acls {
        for (w, cell) in widths.iter_mut().zip(cells(acl)) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |row: [&str; 7]| {
        let mut text = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<w$}  "));
            }
        }
        writeln!(out, "{text}")
    };
    line(COLUMNS)?;
    for acl in acls {
        line(cells(acl))?;
    }
    Ok(())
}

/// One ACL as `--json` prints it: the table's columns, in its order.
#[derive(serde::Serialize)]
struct JsonAcl<'a> {
    resource_type: &'a str,
    resource_name: &'a str,
    pattern_type: &'a str,
    principal: &'a str,
    host: &'a str,
    operation: &'a str,
    permission: &'a str,
}

fn write_json(out: &mut impl Write, acls: &[AclBinding]) -> anyhow::Result<()> {
    for acl in acls {
        let [resource_type, resource_name, pattern_type, principal, host, operation, permission] =
            cells(acl);
        let row = JsonAcl {
            resource_type,
            resource_name,
            pattern_type,
            principal,
            host,
            operation,
            permission,
        };
        // As the io error itself: a reader gone away (`| head`) then ends the command quietly.
        serde_json::to_writer(&mut *out, &row).map_err(std::io::Error::from)?;
        writeln!(out)?;
    }
    Ok(())
}

pub async fn run(bootstrap: &str, command: AclCommand) -> anyhow::Result<()> {
    let mut out = crate::stdout::lock();
    match command {
        AclCommand::Add(args) => {
            let acls = args.bindings()?;
            let mut client = Client::connect(bootstrap, "sluice-cli").await?;
            client.create_acls(&acls).await?;
            writeln!(out, "added {} ACL(s):", acls.len())?;
            write_table(&mut out, &acls)?;
        }
        AclCommand::List(args) => {
            let filters = args.select.filters()?;
            let mut client = Client::connect(bootstrap, "sluice-cli").await?;
            let mut acls = BTreeSet::new();
            for filter in &filters {
                acls.extend(client.describe_acls(filter).await?);
            }
            let acls: Vec<AclBinding> = acls.into_iter().collect();
            if args.json {
                write_json(&mut out, &acls)?;
            } else if acls.is_empty() {
                crate::stdout::tell!("no ACLs match");
            } else {
                write_table(&mut out, &acls)?;
            }
        }
        AclCommand::Remove(args) => {
            let filters = args.filters()?;
            let mut client = Client::connect(bootstrap, "sluice-cli").await?;
            let removed = client.delete_acls(&filters).await?;
            if args.json {
                write_json(&mut out, &removed)?;
            } else if removed.is_empty() {
                writeln!(out, "no ACL matched; nothing removed")?;
            } else {
                writeln!(out, "removed {} ACL(s):", removed.len())?;
                write_table(&mut out, &removed)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: AclCommand,
    }

    fn parse(args: &[&str]) -> AclCommand {
        Cli::try_parse_from(std::iter::once("acl").chain(args.iter().copied()))
            .unwrap()
            .command
    }

    fn add(args: &[&str]) -> anyhow::Result<Vec<AclBinding>> {
        let mut all = vec!["add"];
        all.extend_from_slice(args);
        match parse(&all) {
            AclCommand::Add(a) => a.bindings(),
            other => panic!("{other:?}"),
        }
    }

    fn list(args: &[&str]) -> anyhow::Result<Vec<AclFilter>> {
        let mut all = vec!["list"];
        all.extend_from_slice(args);
        match parse(&all) {
            AclCommand::List(a) => a.select.filters(),
            other => panic!("{other:?}"),
        }
    }

    fn remove(args: &[&str]) -> anyhow::Result<Vec<AclFilter>> {
        let mut all = vec!["remove"];
        all.extend_from_slice(args);
        match parse(&all) {
            AclCommand::Remove(a) => a.filters(),
            other => panic!("{other:?}"),
        }
    }

    fn error(result: anyhow::Result<impl std::fmt::Debug>) -> String {
        format!("{:#}", result.unwrap_err())
    }

    #[test]
    fn add_makes_every_principal_host_and_operation() {
        let acls = add(&[
            "--topic",
            "orders",
            "--allow-principal",
            "User:alice",
            "--allow-principal",
            "User:bob",
            "--allow-host",
            "10.0.0.1",
            "--deny-principal",
            "User:mallory",
            "--operation",
            "read",
            "--operation",
            "Describe",
        ])
        .unwrap();
        assert_eq!(acls.len(), 2 * 2 + 2);
        assert!(acls.iter().all(|a| a.resource_type == ResourceType::Topic
            && a.resource_name == "orders"
            && a.pattern_type == PatternType::Literal));
        let alice: Vec<_> = acls
            .iter()
            .filter(|a| a.principal == "User:alice")
            .collect();
        assert_eq!(alice.len(), 2);
        assert!(alice
            .iter()
            .all(|a| a.host == "10.0.0.1" && a.permission == Permission::Allow));
        let mallory: Vec<_> = acls
            .iter()
            .filter(|a| a.principal == "User:mallory")
            .collect();
        assert!(mallory
            .iter()
            .all(|a| a.host == "*" && a.permission == Permission::Deny));
    }

    #[test]
    fn add_takes_each_resource_kind() {
        let acls = add(&[
            "--cluster",
            "--allow-principal",
            "User:ops",
            "--operation",
            "describe-configs",
        ])
        .unwrap();
        assert_eq!(acls[0].resource_type, ResourceType::Cluster);
        assert_eq!(acls[0].resource_name, CLUSTER_NAME);
        assert_eq!(acls[0].operation, Operation::DescribeConfigs);
        let acls = add(&[
            "--transactional-id",
            "tx-",
            "--resource-pattern-type",
            "prefixed",
            "--allow-principal",
            "User:*",
            "--operation",
            "Write",
        ])
        .unwrap();
        assert_eq!(acls[0].resource_type, ResourceType::TransactionalId);
        assert_eq!(acls[0].pattern_type, PatternType::Prefixed);
        assert_eq!(acls[0].principal, "User:*");
        let acls = add(&[
            "--group",
            "g",
            "--allow-principal",
            "User:a",
            "--operation",
            "Read",
            "--operation",
            "Read",
        ])
        .unwrap();
        assert_eq!(acls.len(), 1, "a repeated operation makes one ACL");
    }

    #[test]
    fn add_refuses_bad_input_naming_the_problem() {
        let base = ["--allow-principal", "User:alice", "--operation", "Read"];
        let with = |extra: &[&str]| {
            let mut v: Vec<&str> = extra.to_vec();
            v.extend_from_slice(&base);
            error(add(&v))
        };
        assert!(with(&[]).contains("give the resource"), "{}", with(&[]));
        let e = with(&["--topic", "a", "--group", "b"]);
        assert!(e.contains("--topic and --group"), "{e}");
        let e = with(&["--cluster", "prod"]);
        assert!(e.contains("--cluster takes no name"), "{e}");
        assert!(add(&[
            "--cluster",
            "kafka-cluster",
            "--allow-principal",
            "User:a",
            "--operation",
            "Alter"
        ])
        .is_ok());
        let e = with(&["--topic", ""]);
        assert!(e.contains("empty"), "{e}");
        let e = with(&["--topic", "t", "--resource-pattern-type", "match"]);
        assert!(e.contains("literal or prefixed"), "{e}");
        let e = with(&["--topic", "*", "--resource-pattern-type", "prefixed"]);
        assert!(e.contains("prefixed pattern cannot be '*'"), "{e}");
        let e = with(&["--cluster", "--resource-pattern-type", "prefixed"]);
        assert!(e.contains("cluster"), "{e}");

        let e = error(add(&[
            "--topic",
            "t",
            "--allow-principal",
            "alice",
            "--operation",
            "Read",
        ]));
        assert!(e.contains("principal 'alice' must be User:NAME"), "{e}");
        let e = error(add(&[
            "--topic",
            "t",
            "--deny-principal",
            "User:",
            "--operation",
            "Read",
        ]));
        assert!(e.contains("must be User:NAME"), "{e}");
        let e = error(add(&[
            "--topic",
            "t",
            "--allow-principal",
            "Group:x",
            "--operation",
            "Read",
        ]));
        assert!(e.contains("must be User:NAME"), "{e}");
        let e = error(add(&["--topic", "t", "--operation", "Read"]));
        assert!(e.contains("--allow-principal or --deny-principal"), "{e}");
        let e = error(add(&["--topic", "t", "--allow-principal", "User:a"]));
        assert!(e.contains("give --operation"), "{e}");
        let e = error(add(&[
            "--topic",
            "t",
            "--allow-principal",
            "User:a",
            "--operation",
            "Reed",
        ]));
        assert!(e.contains("unknown operation 'Reed'"), "{e}");
        let e = error(add(&[
            "--group",
            "g",
            "--allow-principal",
            "User:a",
            "--operation",
            "Write",
        ]));
        assert!(e.contains("Write does not apply to a group"), "{e}");
        let e = with(&["--topic", "t", "--allow-host", "example.com"]);
        assert!(
            e.contains("host 'example.com' must be an IP address"),
            "{e}"
        );
        let e = with(&["--topic", "t", "--deny-host", "10.0.0.1"]);
        assert!(e.contains("--deny-host goes with --deny-principal"), "{e}");
    }

    #[test]
    fn list_without_selectors_is_every_acl() {
        assert_eq!(list(&[]).unwrap(), vec![AclFilter::any()]);
    }

    #[test]
    fn list_selects_by_resource_pattern_and_principal() {
        let f = list(&[
            "--topic",
            "orders",
            "--resource-pattern-type",
            "match",
            "--principal",
            "User:bob",
        ])
        .unwrap();
        assert_eq!(
            f,
            vec![AclFilter {
                resource_type: Some(ResourceType::Topic),
                resource_name: Some("orders".into()),
                pattern: PatternFilter::Match,
                principal: Some("User:bob".into()),
                ..AclFilter::any()
            }]
        );
        let f = list(&["--resource-pattern-type", "PREFIXED"]).unwrap();
        assert_eq!(f[0].pattern, PatternFilter::Exactly(PatternType::Prefixed));
        assert_eq!(f[0].resource_type, None);
        let e = error(list(&["--resource-pattern-type", "match"]));
        assert!(e.contains("match needs a resource"), "{e}");
        let e = error(list(&["--resource-pattern-type", "exact"]));
        assert!(e.contains("any, match, literal or prefixed"), "{e}");
        let e = error(list(&["--principal", "bob"]));
        assert!(e.contains("must be User:NAME"), "{e}");
    }

    #[test]
    fn remove_builds_one_filter_per_principal_host_and_operation() {
        let f = remove(&[
            "--topic",
            "t",
            "--allow-principal",
            "User:a",
            "--allow-host",
            "10.0.0.1",
            "--allow-host",
            "10.0.0.2",
            "--deny-principal",
            "User:b",
            "--operation",
            "Read",
            "--operation",
            "Write",
        ])
        .unwrap();
        assert_eq!(f.len(), (2 + 1) * 2);
        let allow: Vec<_> = f
            .iter()
            .filter(|f| f.permission == Some(Permission::Allow))
            .collect();
        assert_eq!(allow.len(), 4);
        assert!(allow
            .iter()
            .all(|f| f.principal.as_deref() == Some("User:a")
                && f.host.as_deref().is_some_and(|h| h.starts_with("10.0.0."))));
        let deny: Vec<_> = f
            .iter()
            .filter(|f| f.permission == Some(Permission::Deny))
            .collect();
        assert!(deny
            .iter()
            .all(|f| f.principal.as_deref() == Some("User:b") && f.host.is_none()));
        assert!(f
            .iter()
            .all(|f| f.resource_name.as_deref() == Some("t") && f.pattern == PatternFilter::Any));
    }

    #[test]
    fn remove_never_removes_everything_by_accident() {
        let e = error(remove(&[]));
        assert!(e.contains("needs a selector") && e.contains("--all"), "{e}");
        assert_eq!(remove(&["--all"]).unwrap(), vec![AclFilter::any()]);
        let e = error(remove(&["--all", "--topic", "t"]));
        assert!(e.contains("without selectors"), "{e}");
        // An explicit "any" pattern selects nothing.
        let e = error(remove(&["--resource-pattern-type", "any"]));
        assert!(e.contains("needs a selector"), "{e}");
        assert_eq!(
            remove(&["--cluster"]).unwrap()[0].resource_name.as_deref(),
            Some(CLUSTER_NAME)
        );
        let e = error(remove(&["--cluster", "--operation", "Read"]));
        assert!(e.contains("Read does not apply to a cluster"), "{e}");
    }

    #[test]
    fn tables_align_and_json_names_each_field() {
        let acls = add(&[
            "--topic",
            "orders",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--operation",
            "Write",
        ])
        .unwrap();
        let mut text = Vec::new();
        write_table(&mut text, &acls).unwrap();
        let text = String::from_utf8(text).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("RESOURCE  NAME    PATTERN  PRINCIPAL"),
            "{text}"
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            [
                "topic",
                "orders",
                "literal",
                "User:alice",
                "*",
                "Read",
                "Allow"
            ]
        );
        // Columns start at the same place on every line.
        let at = |line: &str| {
            line.find("User:")
                .unwrap_or_else(|| line.find("PRINCIPAL").unwrap())
        };
        assert!(lines.iter().all(|l| at(l) == at(lines[0])), "{text}");

        let mut none = Vec::new();
        write_table(&mut none, &[]).unwrap();
        assert!(none.is_empty());

        let mut json = Vec::new();
        write_json(&mut json, &acls).unwrap();
        let first: serde_json::Value =
            serde_json::from_str(String::from_utf8(json).unwrap().lines().next().unwrap()).unwrap();
        assert_eq!(
            first,
            serde_json::json!({
                "resource_type": "topic", "resource_name": "orders", "pattern_type": "literal",
                "principal": "User:alice", "host": "*", "operation": "Read", "permission": "Allow"
            })
        );
    }
}
