//! Client quotas as Kafka keeps them (KIP-546): per entity — a user, a client id, or a user
//! and client id together, each named or the type's default — a set of limits
//! (`producer_byte_rate`, `consumer_byte_rate`, ...); and per client address (an `ip`
//! entity, named or the default, KIP-612) the rate at which it may open connections. Kept in the metadata log (and on a
//! single node in `data/meta/quotas.json`), indexed so that finding the quota of a request
//! is a few hash lookups in Kafka's order of precedence.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

/// One component of an entity: a name, or the type's default (`<default>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EntityName {
    Default,
    Named(String),
}

/// A quota entity: a user, a client id, or both; or a client address alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
    /// An address in its canonical text form (`10.0.0.7`, `::1`); never with a user or client
    /// id. Absent from records written before ip quotas existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<EntityName>,
}

/// One limit's value: finite and positive (checked before it is stored), so equality is an
/// equivalence.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QuotaValue(pub f64);

impl Eq for QuotaValue {}

/// An entity's limits by key.
pub type QuotaValues = BTreeMap<String, QuotaValue>;

/// An entity and its limits (key → value, e.g. `producer_byte_rate` → 1048576).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientQuota {
    pub entity: QuotaEntity,
    pub values: QuotaValues,
}

/// The quota keys Sluice takes and enforces: the byte rates and `request_percentage` (time on
/// the broker's threads, percent of one thread).
pub const QUOTA_KEYS: [&str; 3] = [
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
];

/// The quota key of `ip` entities, and the only one they take: new connections per second
/// from one address (KIP-612).
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

/// An address as ip entities name it: canonical text (`::ffff:10.0.0.7` is `10.0.0.7`), the
/// form quotas are stored under and the listeners look them up by.
pub fn ip_entity_name(ip: std::net::IpAddr) -> String {
    ip.to_canonical().to_string()
}

/// Every entity's limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<ClientQuota>", into = "Vec<ClientQuota>")]
pub struct ClientQuotas {
    by_entity: HashMap<QuotaEntity, QuotaValues>,
    /// How many of them are user or client id entities (the rest are ip entities), so that
    /// requests do no lookups when only ip quotas are set.
    clients: usize,
}

impl From<Vec<ClientQuota>> for ClientQuotas {
    fn from(quotas: Vec<ClientQuota>) -> Self {
        let by_entity: HashMap<QuotaEntity, QuotaValues> = quotas
            .into_iter()
            .filter(|q| !q.values.is_empty())
            .map(|q| (q.entity, q.values))
            .collect();
        let clients = by_entity.keys().filter(|e| e.ip.is_none()).count();
        ClientQuotas { by_entity, clients }
    }
}

impl From<ClientQuotas> for Vec<ClientQuota> {
    fn from(quotas: ClientQuotas) -> Self {
        let mut all: Vec<ClientQuota> = quotas
            .by_entity
            .into_iter()
            .map(|(entity, values)| ClientQuota { entity, values })
            .collect();
        all.sort_by(|a, b| a.entity.cmp(&b.entity));
        all
    }
}

impl ClientQuotas {
    pub fn is_empty(&self) -> bool {
        self.by_entity.is_empty()
    }

    /// Whether any user or client id entity has limits (ip entities aside).
    pub fn has_client_entities(&self) -> bool {
        self.clients > 0
    }

    pub fn get(&self, entity: &QuotaEntity) -> Option<&QuotaValues> {
        self.by_entity.get(entity)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&QuotaEntity, &QuotaValues)> {
        self.by_entity.iter()
    }

    /// Replaces one entity's limits (empty: the entity has none any more).
    pub fn set(&mut self, entity: QuotaEntity, values: QuotaValues) {
        let is_client = entity.ip.is_none();
        let (had, has) = if values.is_empty() {
            (self.by_entity.remove(&entity).is_some(), false)
        } else {
            (self.by_entity.insert(entity, values).is_some(), true)
        };
        if is_client {
            self.clients = self.clients + usize::from(has) - usize::from(had);
        }
    }

    /// The quota `key` of a request from `user` with `client_id`, in Kafka's order of
    /// precedence (user+client, user+default client, user, default user+client, default
    /// user+default client, default user, client, default client), with the entity it came
    /// from.
    pub fn lookup(&self, user: &str, client_id: &str, key: &str) -> Option<(QuotaEntity, f64)> {
        if self.clients == 0 {
            return None;
        }
        let named = |s: &str| Some(EntityName::Named(s.to_string()));
        let default = || Some(EntityName::Default);
        let order = [
            (named(user), named(client_id)),
            (named(user), default()),
            (named(user), None),
            (default(), named(client_id)),
            (default(), default()),
            (default(), None),
            (None, named(client_id)),
            (None, default()),
        ];
        order.into_iter().find_map(|(user, client_id)| {
            let entity = QuotaEntity {
                user,
                client_id,
                ip: None,
            };
            let value = self.by_entity.get(&entity)?.get(key)?.0;
            Some((entity, value))
        })
    }

    /// The connection creation rate of the address `ip` (canonical text form): its own, else
    /// the default address's, as in Kafka.
    pub fn connection_creation_rate(&self, ip: &str) -> Option<f64> {
        if self.by_entity.len() == self.clients {
            return None;
        }
        [EntityName::Named(ip.to_string()), EntityName::Default]
            .into_iter()
            .find_map(|name| {
                let entity = QuotaEntity {
                    user: None,
                    client_id: None,
                    ip: Some(name),
                };
                Some(
                    self.by_entity
                        .get(&entity)?
                        .get(CONNECTION_CREATION_RATE)?
                        .0,
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(user: Option<&str>, client: Option<&str>) -> QuotaEntity {
        let name = |n: &str| {
            if n == "<default>" {
                EntityName::Default
            } else {
                EntityName::Named(n.to_string())
            }
        };
        QuotaEntity {
            user: user.map(name),
            client_id: client.map(name),
            ip: None,
        }
    }

    fn rate(v: f64) -> QuotaValues {
        [("producer_byte_rate".to_string(), QuotaValue(v))].into()
    }

    #[test]
    fn precedence_is_kafkas() {
        let mut q = ClientQuotas::default();
        q.set(entity(None, Some("<default>")), rate(1.0));
        assert_eq!(
            q.lookup("alice", "app", "producer_byte_rate").map(|x| x.1),
            Some(1.0)
        );
        q.set(entity(None, Some("app")), rate(2.0));
        assert_eq!(
            q.lookup("alice", "app", "producer_byte_rate").map(|x| x.1),
            Some(2.0)
        );
        q.set(entity(Some("<default>"), None), rate(3.0));
        assert_eq!(
            q.lookup("alice", "app", "producer_byte_rate").map(|x| x.1),
            Some(3.0)
        );
        q.set(entity(Some("alice"), None), rate(4.0));
        assert_eq!(
            q.lookup("alice", "app", "producer_byte_rate").map(|x| x.1),
            Some(4.0)
        );
        assert_eq!(
            q.lookup("bob", "app", "producer_byte_rate").map(|x| x.1),
            Some(3.0)
        );
        q.set(entity(Some("alice"), Some("app")), rate(5.0));
        let (from, v) = q.lookup("alice", "app", "producer_byte_rate").unwrap();
        assert_eq!((from, v), (entity(Some("alice"), Some("app")), 5.0));
        assert_eq!(q.lookup("alice", "app", "consumer_byte_rate"), None);
        q.set(entity(Some("alice"), Some("app")), BTreeMap::new());
        assert_eq!(
            q.lookup("alice", "app", "producer_byte_rate").map(|x| x.1),
            Some(4.0)
        );
    }

    #[test]
    fn an_address_has_its_own_rate_else_the_default_one() {
        let mut q = ClientQuotas::default();
        let ip = |name: EntityName| QuotaEntity {
            user: None,
            client_id: None,
            ip: Some(name),
        };
        let rate = |v: f64| QuotaValues::from([(CONNECTION_CREATION_RATE.into(), QuotaValue(v))]);
        q.set(entity(Some("<default>"), None), self::rate(9.0));
        assert_eq!(q.connection_creation_rate("10.0.0.1"), None);
        assert!(q.has_client_entities());
        q.set(entity(Some("<default>"), None), BTreeMap::new());
        assert!(!q.has_client_entities());
        q.set(ip(EntityName::Default), rate(5.0));
        assert!(
            !q.has_client_entities(),
            "ip entities are not client entities"
        );
        q.set(entity(Some("<default>"), None), self::rate(9.0));
        q.set(entity(Some("<default>"), None), self::rate(8.0));
        assert!(q.has_client_entities());
        assert_eq!(q.connection_creation_rate("10.0.0.1"), Some(5.0));
        q.set(ip(EntityName::Named("10.0.0.1".into())), rate(2.0));
        assert_eq!(q.connection_creation_rate("10.0.0.1"), Some(2.0));
        assert_eq!(q.connection_creation_rate("10.0.0.2"), Some(5.0));
        // A user's lookup never lands on an address's entity.
        assert_eq!(q.lookup("alice", "app", CONNECTION_CREATION_RATE), None);
        // Records from before ip quotas read back without one; an address's entity round-trips.
        let old: QuotaEntity =
            serde_json::from_str(r#"{"user":{"Named":"a"},"client_id":null}"#).unwrap();
        assert_eq!(old.ip, None);
        let text = serde_json::to_string(&q).unwrap();
        assert_eq!(serde_json::from_str::<ClientQuotas>(&text).unwrap(), q);
    }

    #[test]
    fn serde_round_trip() {
        let mut q = ClientQuotas::default();
        q.set(entity(Some("<default>"), Some("x")), rate(7.5));
        let text = serde_json::to_string(&q).unwrap();
        let back: ClientQuotas = serde_json::from_str(&text).unwrap();
        assert_eq!(back, q);
    }
}
