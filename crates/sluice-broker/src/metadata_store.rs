//! The single node's durable metadata: which topics exist, their ids, partition counts and
//! config overrides (`data/meta/topics.json`), and the cluster identity
//! (`data/meta/cluster.json`). Replaced atomically on every change. The cluster issue moves
//! this into the Raft metadata group; its shape stays the same.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::BrokerError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredTopic {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
    /// The partitions this node holds a replica of, in a cluster; `None`: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosted: Option<Vec<i32>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct TopicsFile {
    version: u32,
    topics: Vec<StoredTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterIdentity {
    pub cluster_id: String,
    pub node_id: i32,
    /// This directory's own id, made with it (added to directories that predate it at their
    /// next start). A cluster node registers with it, so that the controller can tell a node
    /// that came back with a wiped or replaced disk from one that kept its replicas.
    #[serde(default)]
    pub directory_id: Option<Uuid>,
}

/// A metadata file with a format version.
trait Versioned {
    fn version(&self) -> u32;
}

impl Versioned for TopicsFile {
    fn version(&self) -> u32 {
        self.version
    }
}

impl Versioned for UsersFile {
    fn version(&self) -> u32 {
        self.version
    }
}

/// SASL users by name, each with its SCRAM credentials (one per mechanism at most).
pub type Users = BTreeMap<String, Vec<sluice_auth::ScramCredential>>;

#[derive(Debug, Serialize, Deserialize)]
struct UsersFile {
    version: u32,
    users: Users,
}

impl Versioned for AclsFile {
    fn version(&self) -> u32 {
        self.version
    }
}

impl Versioned for QuotasFile {
    fn version(&self) -> u32 {
        self.version
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct QuotasFile {
    version: u32,
    quotas: sluice_cluster::metadata::ClientQuotas,
}

#[derive(Debug, Serialize, Deserialize)]
struct AclsFile {
    version: u32,
    acls: sluice_auth::acl::AclSet,
}

#[derive(Debug, Serialize, Deserialize)]
struct ProducerIdBlock {
    next_block_start: i64,
}

#[derive(Debug)]
pub struct MetadataStore {
    dir: PathBuf,
}

impl MetadataStore {
    pub fn open(dir: &Path) -> Result<MetadataStore, BrokerError> {
        fs::create_dir_all(dir).map_err(|source| BrokerError::Metadata {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(MetadataStore {
            dir: dir.to_path_buf(),
        })
    }

    pub fn load_topics(&self) -> Result<Vec<StoredTopic>, BrokerError> {
        Ok(self
            .read_json::<TopicsFile>("topics.json")?
            .map_or_else(Vec::new, |f| f.topics))
    }

    pub fn save_topics(&self, topics: &[StoredTopic]) -> Result<(), BrokerError> {
        self.write_json(
            "topics.json",
            &TopicsFile {
                version: 1,
                topics: topics.to_vec(),
            },
        )
    }

    /// The single node's SASL users and their SCRAM credentials (`data/meta/users.json`); in a
    /// cluster they live in the metadata log instead.
    pub fn load_users(&self) -> Result<Users, BrokerError> {
        Ok(self
            .read_json::<UsersFile>("users.json")?
            .map_or_else(Users::new, |f| f.users))
    }

    pub fn save_users(&self, users: &Users) -> Result<(), BrokerError> {
        self.write_json(
            "users.json",
            &UsersFile {
                version: 1,
                users: users.clone(),
            },
        )
    }

    /// The single node's ACLs (`data/meta/acls.json`); in a cluster they live in the
    /// metadata log instead.
    pub fn load_acls(&self) -> Result<sluice_auth::acl::AclSet, BrokerError> {
        Ok(self
            .read_json::<AclsFile>("acls.json")?
            .map_or_else(Default::default, |f| f.acls))
    }

    pub fn save_acls(&self, acls: &sluice_auth::acl::AclSet) -> Result<(), BrokerError> {
        self.write_json(
            "acls.json",
            &AclsFile {
                version: 1,
                acls: acls.clone(),
            },
        )
    }

    /// The single node's client quotas (`data/meta/quotas.json`); in a cluster they live in
    /// the metadata log instead.
    pub fn load_quotas(&self) -> Result<sluice_cluster::metadata::ClientQuotas, BrokerError> {
        Ok(self
            .read_json::<QuotasFile>("quotas.json")?
            .map_or_else(Default::default, |f| f.quotas))
    }

    pub fn save_quotas(
        &self,
        quotas: &sluice_cluster::metadata::ClientQuotas,
    ) -> Result<(), BrokerError> {
        self.write_json(
            "quotas.json",
            &QuotasFile {
                version: 1,
                quotas: quotas.clone(),
            },
        )
    }

    /// Reads the JSON file `name` (version 1); `None` when it does not exist.
    fn read_json<F: serde::de::DeserializeOwned + Versioned>(
        &self,
        name: &str,
    ) -> Result<Option<F>, BrokerError> {
        let path = self.dir.join(name);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(BrokerError::Metadata { path, source }),
        };
        let file: F = serde_json::from_str(&text).map_err(|e| BrokerError::CorruptMetadata {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if file.version() != 1 {
            return Err(BrokerError::CorruptMetadata {
                path,
                reason: format!("unknown version {}", file.version()),
            });
        }
        Ok(Some(file))
    }

    fn write_json<F: Serialize>(&self, name: &str, file: &F) -> Result<(), BrokerError> {
        let text =
            serde_json::to_string_pretty(file).map_err(|e| BrokerError::CorruptMetadata {
                path: self.dir.join(name),
                reason: e.to_string(),
            })?;
        self.replace(name, text.as_bytes())
    }

    /// The cluster id and node id this data directory belongs to, created on first start.
    /// A directory written by another node id is refused rather than silently adopted.
    pub fn identity(&self, node_id: i32) -> Result<ClusterIdentity, BrokerError> {
        let path = self.dir.join("cluster.json");
        match fs::read_to_string(&path) {
            Ok(text) => {
                let identity: ClusterIdentity =
                    serde_json::from_str(&text).map_err(|e| BrokerError::CorruptMetadata {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                let mut identity = identity;
                if identity.node_id != node_id {
                    return Err(BrokerError::CorruptMetadata {
                        path,
                        reason: format!(
                            "this data directory belongs to node {}, not node {node_id}",
                            identity.node_id
                        ),
                    });
                }
                if identity.directory_id.is_none() {
                    identity.directory_id = Some(Uuid::new_v4());
                    let text = serde_json::to_string_pretty(&identity).unwrap_or_default();
                    self.replace("cluster.json", text.as_bytes())?;
                }
                Ok(identity)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let identity = ClusterIdentity {
                    cluster_id: new_cluster_id(),
                    node_id,
                    directory_id: Some(Uuid::new_v4()),
                };
                let text = serde_json::to_string_pretty(&identity).unwrap_or_default();
                self.replace("cluster.json", text.as_bytes())?;
                Ok(identity)
            }
            Err(source) => Err(BrokerError::Metadata { path, source }),
        }
    }

    /// The first producer id not yet handed out by any earlier run (0 on a new node).
    pub fn load_next_producer_id_block(&self) -> Result<i64, BrokerError> {
        let path = self.dir.join("producer-ids.json");
        match fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str::<ProducerIdBlock>(&text)
                .map(|b| b.next_block_start)
                .map_err(|e| BrokerError::CorruptMetadata {
                    path,
                    reason: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(source) => Err(BrokerError::Metadata { path, source }),
        }
    }

    /// Records that ids below `next_block_start` may have been handed out.
    pub fn save_next_producer_id_block(&self, next_block_start: i64) -> Result<(), BrokerError> {
        let text = serde_json::to_string(&ProducerIdBlock { next_block_start }).unwrap_or_default();
        self.replace("producer-ids.json", text.as_bytes())
    }

    /// Write to a temporary file, fsync, rename over, fsync the directory.
    fn replace(&self, name: &str, bytes: &[u8]) -> Result<(), BrokerError> {
        let path = self.dir.join(name);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let io = |source| BrokerError::Metadata {
            path: path.clone(),
            source,
        };
        let mut file = File::create(&tmp).map_err(io)?;
        file.write_all(bytes).map_err(io)?;
        file.sync_all().map_err(io)?;
        fs::rename(&tmp, &path).map_err(io)?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        Ok(())
    }
}

/// A Kafka-style cluster id: 16 random bytes, URL-safe base64 without padding.
fn new_cluster_id() -> String {
    cluster_id_from(Uuid::new_v4().into_bytes())
}

/// 16 bytes as a Kafka-style cluster id: URL-safe base64 without padding (22 characters).
pub fn cluster_id_from(bytes: [u8; 16]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for b in bytes {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(ALPHABET[((acc >> bits) & 0x3f) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (6 - bits)) & 0x3f) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_and_identity_persist() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetadataStore::open(dir.path()).unwrap();
        assert!(store.load_topics().unwrap().is_empty());
        let topics = vec![StoredTopic {
            name: "t".into(),
            id: Uuid::new_v4(),
            partitions: 3,
            configs: BTreeMap::from([("retention.ms".into(), "1".into())]),
            hosted: Some(vec![0, 2]),
        }];
        store.save_topics(&topics).unwrap();
        assert_eq!(store.load_topics().unwrap(), topics);
        let id = store.identity(1).unwrap();
        assert_eq!(id.cluster_id.len(), 22);
        assert_eq!(store.identity(1).unwrap(), id);
        assert!(store.identity(2).is_err());
        assert!(id.directory_id.is_some());
        // A directory from before directory ids gets one at its next start, and keeps it.
        fs::write(
            dir.path().join("cluster.json"),
            r#"{"cluster_id":"abc","node_id":1}"#,
        )
        .unwrap();
        let upgraded = store.identity(1).unwrap();
        assert_eq!(upgraded.cluster_id, "abc");
        assert!(upgraded.directory_id.is_some());
        assert_eq!(store.identity(1).unwrap(), upgraded);
        fs::write(dir.path().join("topics.json"), "{").unwrap();
        assert!(matches!(
            store.load_topics(),
            Err(BrokerError::CorruptMetadata { .. })
        ));
    }
}
