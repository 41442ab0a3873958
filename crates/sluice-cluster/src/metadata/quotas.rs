//! Client quotas as Kafka keeps them (KIP-546): per entity — a user, a client id, or a user
//! and client id together, each named or the type's default — a set of limits
//! (`producer_byte_rate`, `consumer_byte_rate`, ...). Kept in the metadata log (and on a
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

/// A quota entity: a user, a client id, or both.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
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

/// Every entity's limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<ClientQuota>", into = "Vec<ClientQuota>")]
pub struct ClientQuotas {
    by_entity: HashMap<QuotaEntity, QuotaValues>,
}

impl From<Vec<ClientQuota>> for ClientQuotas {
    fn from(quotas: Vec<ClientQuota>) -> Self {
        ClientQuotas {
            by_entity: quotas
                .into_iter()
                .filter(|q| !q.values.is_empty())
                .map(|q| (q.entity, q.values))
                .collect(),
        }
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

    pub fn get(&self, entity: &QuotaEntity) -> Option<&QuotaValues> {
        self.by_entity.get(entity)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&QuotaEntity, &QuotaValues)> {
        self.by_entity.iter()
    }

    /// Replaces one entity's limits (empty: the entity has none any more).
    pub fn set(&mut self, entity: QuotaEntity, values: QuotaValues) {
        if values.is_empty() {
            self.by_entity.remove(&entity);
        } else {
            self.by_entity.insert(entity, values);
        }
    }

    /// The quota `key` of a request from `user` with `client_id`, in Kafka's order of
    /// precedence (user+client, user+default client, user, default user+client, default
    /// user+default client, default user, client, default client), with the entity it came
    /// from.
    pub fn lookup(&self, user: &str, client_id: &str, key: &str) -> Option<(QuotaEntity, f64)> {
        if self.by_entity.is_empty() {
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
            let entity = QuotaEntity { user, client_id };
            let value = self.by_entity.get(&entity)?.get(key)?.0;
            Some((entity, value))
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
    fn serde_round_trip() {
        let mut q = ClientQuotas::default();
        q.set(entity(Some("<default>"), Some("x")), rate(7.5));
        let text = serde_json::to_string(&q).unwrap();
        let back: ClientQuotas = serde_json::from_str(&text).unwrap();
        assert_eq!(back, q);
    }
}
