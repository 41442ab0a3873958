//! The authorizer (`authorizer = "acl"`): what one request's principal may do, asked by the
//! handlers once per resource they touch. With the authorizer off, or for a super user,
//! everything is allowed without looking at an ACL (one branch per check).
//!
//! The operation each API checks follows Kafka's table "Operations and resources on
//! protocols" (docs/security.md lists Sluice's copy of it). A denial the client is told about
//! is counted and, with an audit log, recorded; a topic merely left out of a listing
//! (Metadata of all topics) is not, as in Kafka.

use std::collections::BTreeSet;

use kafka_protocol::messages::ApiKey;
use sluice_auth::acl::{Operation, Requester, ResourceType, CLUSTER_NAME};

use super::acls::AclSnapshot;
use super::audit::AuditEvent;
use super::log_budget::Admit;
use super::session::Principal;
use crate::broker::Broker;
use crate::handlers::Call;

/// `authorizer` and `super.users`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// ACLs are enforced (Kafka's `authorizer.class.name` set to its standard authorizer).
    pub enabled: bool,
    /// Principals allowed everything (`User:admin`).
    pub super_users: BTreeSet<String>,
}

/// One request's authorization: who asks, from where, against which ACLs.
pub struct Authz<'a> {
    check: Option<Check<'a>>,
}

struct Check<'a> {
    broker: &'a Broker,
    /// The Kafka API asked; `None`: the admin HTTP port.
    api: Option<ApiKey>,
    acls: AclSnapshot,
    principal: String,
    host: String,
    peer: String,
}

impl Broker {
    /// The authorization of the request `call` carries.
    pub fn authz(&self, call: &Call) -> Authz<'_> {
        let api = call.api;
        let config = &self.config.security.authorizer;
        if !config.enabled {
            return Authz { check: None };
        }
        let principal = call
            .session
            .principal()
            .unwrap_or_else(|| Principal::user(Principal::ANONYMOUS))
            .to_string();
        if config.super_users.contains(&principal) {
            return Authz { check: None };
        }
        Authz {
            check: Some(Check {
                broker: self,
                api: Some(api),
                acls: self.acls(),
                principal,
                host: call.peer.addr.ip().to_canonical().to_string(),
                peer: call.peer.addr.to_string(),
            }),
        }
    }
}

impl Broker {
    /// The authorization of an admin HTTP request made as `principal` from `addr`.
    pub fn authz_admin(&self, principal: &str, addr: std::net::SocketAddr) -> Authz<'_> {
        let config = &self.config.security.authorizer;
        if !config.enabled || config.super_users.contains(principal) {
            return Authz { check: None };
        }
        Authz {
            check: Some(Check {
                broker: self,
                api: None,
                acls: self.acls(),
                principal: principal.to_string(),
                host: addr.ip().to_canonical().to_string(),
                peer: addr.to_string(),
            }),
        }
    }

    /// Whether `password` is `user`'s (checked against the user's strongest SCRAM
    /// credential; costs one key derivation — call it off the async workers).
    pub fn verify_password(&self, user: &str, password: &str) -> bool {
        use super::session::UserCredentials;
        self.user_lookup()
            .any(user)
            .is_some_and(|c| c.verifies_password(password))
    }

    /// The name of the topic with this id, here or in the cluster's metadata (for checking
    /// requests that name topics by id).
    pub fn topic_name_of(&self, id: uuid::Uuid) -> Option<String> {
        self.topics()
            .get_by_id(id)
            .map(|t| t.name.to_string())
            .or_else(|| {
                self.replication()
                    .and_then(|r| r.state().state.topics.get(&id).map(|t| t.name.clone()))
            })
    }
}

impl Authz<'_> {
    /// Everything allowed (tests, internal calls).
    pub fn everything() -> Authz<'static> {
        Authz { check: None }
    }

    /// Whether every check passes without looking (authorizer off, or a super user).
    pub fn is_unrestricted(&self) -> bool {
        self.check.is_none()
    }

    /// Whether the principal may create the topic (Create on the cluster or on the topic);
    /// a refusal is audited once, as for the topic.
    pub fn may_create_topic(&self, name: &str) -> bool {
        self.cluster_quietly(Operation::Create) || self.topic(Operation::Create, name)
    }

    /// Whether the operation on the resource is allowed; a denial is counted and audited.
    pub fn allows(&self, operation: Operation, resource: ResourceType, name: &str) -> bool {
        let Some(check) = &self.check else {
            return true;
        };
        let allowed = check.decide(operation, resource, name);
        if !allowed {
            check.denied(operation, resource, name);
        }
        allowed
    }

    /// As [`Authz::allows`], for filtering a listing: a denial is neither counted nor
    /// audited (the client is not told about the resource at all).
    pub fn shows(&self, operation: Operation, resource: ResourceType, name: &str) -> bool {
        self.check
            .as_ref()
            .is_none_or(|c| c.decide(operation, resource, name))
    }

    pub fn topic(&self, operation: Operation, name: &str) -> bool {
        self.allows(operation, ResourceType::Topic, name)
    }

    pub fn group(&self, operation: Operation, name: &str) -> bool {
        self.allows(operation, ResourceType::Group, name)
    }

    pub fn transactional_id(&self, operation: Operation, name: &str) -> bool {
        self.allows(operation, ResourceType::TransactionalId, name)
    }

    pub fn cluster(&self, operation: Operation) -> bool {
        self.allows(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// As [`Authz::cluster`], without recording a denial (a check that has another way in,
    /// like CreateTopics' Create on the cluster or on the topic).
    pub fn cluster_quietly(&self, operation: Operation) -> bool {
        self.shows(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// KIP-430's bit set of the operations allowed on the resource (bit = Kafka's operation
    /// code), among those the resource type takes; everything when nothing is checked.
    pub fn authorized_operations(&self, resource: ResourceType, name: &str) -> i32 {
        let supported = resource.operations();
        supported
            .iter()
            .filter(|op| self.shows(**op, resource, name))
            .fold(0, |bits, op| bits | (1 << op.code()))
    }

    /// Whether some resource of the type allows the operation (Kafka's
    /// `authorizeByResourceType`).
    pub fn any(&self, operation: Operation, resource: ResourceType) -> bool {
        self.check.as_ref().is_none_or(|c| {
            c.acls.allows_any(
                Requester {
                    principal: &c.principal,
                    host: &c.host,
                },
                operation,
                resource,
            )
        })
    }
}

impl Check<'_> {
    fn decide(&self, operation: Operation, resource: ResourceType, name: &str) -> bool {
        self.acls.allows(
            Requester {
                principal: &self.principal,
                host: &self.host,
            },
            operation,
            resource,
            name,
        )
    }

    fn denied(&self, operation: Operation, resource: ResourceType, name: &str) {
        // A client chooses the names: at most 256 characters of one go to the log.
        let name = match name.char_indices().nth(256) {
            Some((cut, _)) => &name[..cut],
            None => name,
        };
        self.broker.metrics.authorization_denied(self.api);
        let api = self
            .api
            .map_or_else(|| "admin-http".to_string(), |a| format!("{a:?}"));
        let admit = self.broker.denial_log.take(self.broker.liveness_ms());
        if let Admit::Log { skipped } | Admit::Last { skipped } = admit {
            if skipped > 0 {
                tracing::info!(
                    skipped,
                    "authorization denials not logged in the last window (each is counted in \
                     sluice_authorization_denials_total, and written to the audit log when one \
                     is set)"
                );
            }
        }
        if admit != Admit::Skip {
            tracing::info!(
                principal = %self.principal,
                peer = %self.peer,
                api = %api,
                operation = operation.name(),
                resource = resource.name(),
                name,
                "authorization denied"
            );
        }
        if let Admit::Last { .. } = admit {
            tracing::info!(
                "more authorization denials in this window are not logged (they are counted in \
                 sluice_authorization_denials_total, and written to the audit log when one is set)"
            );
        }
        self.broker.audit.record(AuditEvent::AuthorizationDenied {
            time_ms: self.broker.clock.now_ms(),
            principal: self.principal.clone(),
            peer: self.peer.clone(),
            api,
            operation: operation.name(),
            resource_type: resource.name(),
            resource_name: name.to_string(),
        });
    }
}
