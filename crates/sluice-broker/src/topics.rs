//! The topics this broker hosts: create, delete, grow, reconfigure, look up.
//!
//! The metadata store is the source of truth. A change is made on disk first (partition
//! directories, then the metadata file), then published in memory, all under one lock so that
//! concurrent admin requests apply in some order. Lookups on the produce/fetch paths take only
//! a read lock.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use sluice_log::{Clock, Log, LogConfig};
use uuid::Uuid;

use crate::error::BrokerError;
use crate::metadata_store::{MetadataStore, StoredTopic};
use crate::partition::Partition;
use crate::topic_config::{self, Defaults};

/// Longest legal topic name (Kafka's limit, so that `<topic>-<partition>` fits a file name).
pub const MAX_TOPIC_NAME_BYTES: usize = 249;

pub struct Topic {
    pub name: Arc<str>,
    pub id: Uuid,
    /// Indexed by partition number; `None` where this node holds no replica (in a cluster).
    partitions: RwLock<Vec<Option<Arc<Partition>>>>,
    overrides: RwLock<BTreeMap<String, String>>,
}

impl std::fmt::Debug for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Topic({})", self.name)
    }
}

impl Topic {
    pub fn partition(&self, index: i32) -> Option<Arc<Partition>> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.read().get(i).cloned().flatten())
    }

    /// Why [`Topic::partition`] found nothing here: the topic has that partition but this
    /// node holds no replica of it (NOT_LEADER_OR_FOLLOWER, as Kafka answers, so that the
    /// client looks for it), or it has no such partition.
    pub fn missing_partition_error(&self, index: i32) -> kafka_protocol::error::ResponseError {
        if (0..self.partition_count()).contains(&index) {
            kafka_protocol::error::ResponseError::NotLeaderOrFollower
        } else {
            kafka_protocol::error::ResponseError::UnknownTopicOrPartition
        }
    }

    /// The partitions this node holds, in order.
    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().iter().flatten().cloned().collect()
    }

    /// Which partitions this node holds (`None` when it holds them all).
    fn hosted(&self) -> Option<Vec<i32>> {
        let all = self.partitions.read();
        if all.iter().all(Option::is_some) {
            return None;
        }
        Some(
            all.iter()
                .enumerate()
                .filter(|(_, p)| p.is_some())
                .map(|(i, _)| i as i32)
                .collect(),
        )
    }

    pub fn partition_count(&self) -> i32 {
        self.partitions.read().len() as i32
    }

    /// The topic's own config values (not the defaults).
    pub fn overrides(&self) -> BTreeMap<String, String> {
        self.overrides.read().clone()
    }

    /// The topic's own value of one config, if it sets it.
    pub fn override_of(&self, key: &str) -> Option<String> {
        self.overrides.read().get(key).cloned()
    }
}

/// Limits on what one admin request may ask for.
#[derive(Debug, Clone)]
pub struct TopicLimits {
    pub max_partitions_per_topic: i32,
}

impl Default for TopicLimits {
    fn default() -> Self {
        TopicLimits {
            max_partitions_per_topic: 10_000,
        }
    }
}

pub struct Topics {
    topics_dir: PathBuf,
    store: Arc<MetadataStore>,
    defaults: Defaults,
    limits: TopicLimits,
    clock: Arc<dyn Clock>,
    metrics: Arc<crate::metrics::Metrics>,
    by_name: RwLock<HashMap<Arc<str>, Arc<Topic>>>,
    /// Serializes changes (and the metadata file writes).
    changes: Mutex<()>,
    /// In a cluster the metadata decides: local creates, deletes and config changes are
    /// refused (they go to the controller), except for internal topics.
    clustered: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Topics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Topics({} topics)", self.by_name.read().len())
    }
}

/// The broker's own topics: clients may read them but not write or delete them.
pub fn is_internal(name: &str) -> bool {
    name == crate::group::OFFSETS_TOPIC || name == crate::txn::TXN_TOPIC
}

/// Refuses overrides of an internal topic that drop or change one of the configs its
/// coordinators' recovery depends on (`internal_log::PINNED`): every write fsynced (the
/// transaction and group coordinators answer "durable" from it), compacted and kept forever
/// (a coordinator rebuilds its state by reading the whole partition). Other configs, such as
/// `segment.bytes`, may change.
fn check_internal_pins(
    name: &str,
    configs: &std::collections::BTreeMap<String, String>,
) -> Result<(), BrokerError> {
    if !is_internal(name) {
        return Ok(());
    }
    let pinned = crate::internal_log::PINNED;
    match crate::internal_log::unpinned(configs) {
        None => Ok(()),
        Some((key, value)) => Err(BrokerError::InvalidConfig(topic_config::ConfigError(
            format!(
                "{key} of the internal topic {name} stays {value} (the broker's recovery \
                 depends on it); an AlterConfigs must keep {}",
                pinned
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ))),
    }
}

/// A manual replica assignment on a single node (CreateTopics, the admin API): every
/// partition on this node alone.
pub fn check_one_node_assignment(node: i32, assignment: &[Vec<i32>]) -> Result<(), BrokerError> {
    check_one_node_lists(node, assignment, None)
}

/// `assignment` for partitions numbered from `first`, which must number `adding` when given.
fn check_one_node_lists(
    node: i32,
    assignment: &[Vec<i32>],
    growing: Option<(i32, i64)>,
) -> Result<(), BrokerError> {
    let first = growing.map_or(0, |(current, _)| i64::from(current));
    if let Some((_, adding)) = growing.filter(|(_, n)| *n != assignment.len() as i64) {
        return Err(BrokerError::InvalidReplicaAssignment(format!(
            "{adding} partition(s) would be added, but the assignment names {}; name one \
             replica list per new partition",
            assignment.len()
        )));
    }
    match assignment
        .iter()
        .enumerate()
        .find(|(_, replicas)| replicas.as_slice() != [node])
    {
        Some((i, bad)) => Err(BrokerError::InvalidReplicaAssignment(format!(
            "partition {} of the assignment is on nodes {bad:?}; this cluster has only node \
             {node}",
            first + i as i64
        ))),
        None => Ok(()),
    }
}

/// Checks a topic name by Kafka's rules.
pub fn validate_topic_name(name: &str) -> Result<(), BrokerError> {
    let bad = |why: &str| {
        Err(BrokerError::InvalidTopic(format!(
            "invalid topic name '{name}': {why}"
        )))
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are not allowed");
    }
    if name.len() > MAX_TOPIC_NAME_BYTES {
        return bad("longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

impl Topics {
    /// Loads the topic list and opens (recovering) every partition's log.
    pub fn open(
        data_dir: &Path,
        store: Arc<MetadataStore>,
        defaults: Defaults,
        limits: TopicLimits,
        clock: Arc<dyn Clock>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Result<Topics, BrokerError> {
        let topics_dir = data_dir.join("topics");
        fs::create_dir_all(&topics_dir).map_err(|source| BrokerError::Metadata {
            path: topics_dir.clone(),
            source,
        })?;
        remove_deleted_dirs(&topics_dir);
        let topics = Topics {
            topics_dir,
            store,
            defaults,
            limits,
            clock,
            metrics,
            by_name: RwLock::new(HashMap::new()),
            changes: Mutex::new(()),
            clustered: std::sync::atomic::AtomicBool::new(false),
        };
        let mut known_dirs = std::collections::HashSet::new();
        for stored in topics.store.load_topics()? {
            let config = topic_config::resolve(&stored.configs, &topics.defaults)?;
            let min_insync = topics.standalone_min_insync(&stored.configs);
            let name: Arc<str> = Arc::from(stored.name.as_str());
            let mut partitions = Vec::new();
            for index in 0..stored.partitions {
                if stored.hosted.as_ref().is_some_and(|h| !h.contains(&index)) {
                    partitions.push(None);
                    continue;
                }
                known_dirs.insert(topics.partition_dir(&name, index));
                partitions.push(Some(topics.open_partition(
                    &name,
                    index,
                    config.clone(),
                    min_insync,
                )?));
            }
            let topic = Arc::new(Topic {
                name: Arc::clone(&name),
                id: stored.id,
                partitions: RwLock::new(partitions),
                overrides: RwLock::new(stored.configs),
            });
            topics.by_name.write().insert(name, topic);
        }
        if let Ok(entries) = fs::read_dir(&topics.topics_dir) {
            for entry in entries.flatten() {
                if !known_dirs.contains(&entry.path()) {
                    tracing::warn!(dir = %entry.path().display(), "directory belongs to no topic; leaving it alone");
                }
            }
        }
        Ok(topics)
    }

    /// `min.insync.replicas` for a topic's partitions on a single node: its own setting, else
    /// the default.
    fn standalone_min_insync(&self, overrides: &BTreeMap<String, String>) -> usize {
        topic_config::value_of(topic_config::MIN_INSYNC_REPLICAS, overrides, &self.defaults)
            // Validated as an integer of at least 1 when it was set.
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
    }

    /// On a single node the broker's own writes to an internal topic (offset commits,
    /// transaction states) need every in-sync replica it has: a `min.insync.replicas` above 1
    /// there would refuse them all, so it is refused.
    fn check_internal_min_insync(
        &self,
        name: &str,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), BrokerError> {
        let clustered = self.clustered.load(std::sync::atomic::Ordering::Acquire);
        let wanted = self.standalone_min_insync(configs);
        if clustered || !is_internal(name) || wanted <= 1 {
            return Ok(());
        }
        Err(BrokerError::InvalidConfig(topic_config::ConfigError(
            format!(
                "{} of the internal topic {name} cannot be {wanted} on a single node: it has \
                 one replica, and the broker's own writes to it would all be refused",
                topic_config::MIN_INSYNC_REPLICAS
            ),
        )))
    }

    fn partition_dir(&self, topic: &str, index: i32) -> PathBuf {
        self.topics_dir.join(format!("{topic}-{index}"))
    }

    /// Opens (recovering) one partition's log; `min_insync` is what a single node checks
    /// acks=all writes against (in a cluster the partition's role replaces it).
    fn open_partition(
        &self,
        topic: &Arc<str>,
        index: i32,
        config: LogConfig,
        min_insync: usize,
    ) -> Result<Arc<Partition>, BrokerError> {
        let dir = self.partition_dir(topic, index);
        let (log, report) = Log::open(&dir, config, Arc::clone(&self.clock))?;
        if report.truncated_bytes > 0 || report.removed_segments > 0 {
            tracing::warn!(%topic, partition = index, ?report, "recovered partition after an unclean shutdown");
        }
        let partition = Partition::new(
            Arc::clone(topic),
            index,
            log,
            self.clock.now_ms(),
            Arc::clone(&self.metrics),
        );
        partition.set_standalone_min_insync(min_insync);
        Ok(partition)
    }

    /// From now on the cluster's metadata decides (see [`Topics::sync_from_cluster`]).
    pub fn set_clustered(&self) {
        self.clustered
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn refuse_in_cluster(&self, name: &str) -> Result<(), BrokerError> {
        if self.clustered.load(std::sync::atomic::Ordering::Acquire) && !is_internal(name) {
            return Err(BrokerError::InvalidRequest(format!(
                "topic '{name}': in a cluster this change goes through the Kafka admin API \
                 (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs)"
            )));
        }
        Ok(())
    }

    pub fn defaults(&self) -> &Defaults {
        &self.defaults
    }

    pub fn get(&self, name: &str) -> Option<Arc<Topic>> {
        self.by_name.read().get(name).cloned()
    }

    pub fn get_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.by_name.read().values().find(|t| t.id == id).cloned()
    }

    /// All topics, by name.
    pub fn list(&self) -> Vec<Arc<Topic>> {
        let mut all: Vec<_> = self.by_name.read().values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    pub fn check_partition_count(&self, count: i32) -> Result<(), BrokerError> {
        if count < 1 {
            return Err(BrokerError::InvalidPartitions(format!(
                "number of partitions must be at least 1, not {count}"
            )));
        }
        if count > self.limits.max_partitions_per_topic {
            return Err(BrokerError::InvalidPartitions(format!(
                "{count} partitions exceed this broker's limit of {} per topic",
                self.limits.max_partitions_per_topic
            )));
        }
        Ok(())
    }

    fn stored(&self) -> Vec<StoredTopic> {
        self.list()
            .iter()
            .map(|t| StoredTopic {
                name: t.name.to_string(),
                id: t.id,
                partitions: t.partition_count(),
                configs: t.overrides(),
                hosted: t.hosted(),
            })
            .collect()
    }

    /// Creates a topic (or, with `validate_only`, only checks that it could be created).
    pub fn create(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Option<Arc<Topic>>, BrokerError> {
        validate_topic_name(name)?;
        self.refuse_in_cluster(name)?;
        self.check_partition_count(partitions)?;
        let config = topic_config::resolve(&configs, &self.defaults)?;
        let min_insync = self.standalone_min_insync(&configs);
        let _changes = self.changes.lock();
        if self.get(name).is_some() {
            return Err(BrokerError::TopicExists(name.to_string()));
        }
        if validate_only {
            return Ok(None);
        }
        let name: Arc<str> = Arc::from(name);
        let mut opened = Vec::new();
        for index in 0..partitions {
            let dir = self.partition_dir(&name, index);
            // A directory no topic owns is debris of an interrupted create or delete.
            if dir.exists() {
                tracing::warn!(dir = %dir.display(), "removing stale partition directory");
                let _ = fs::remove_dir_all(&dir);
            }
            match self.open_partition(&name, index, config.clone(), min_insync) {
                Ok(p) => opened.push(Some(p)),
                Err(e) => {
                    self.remove_partition_dirs(&name, 0..=index);
                    return Err(e);
                }
            }
        }
        let topic = Arc::new(Topic {
            name: Arc::clone(&name),
            id: Uuid::new_v4(),
            partitions: RwLock::new(opened),
            overrides: RwLock::new(configs),
        });
        let mut stored = self.stored();
        stored.push(StoredTopic {
            name: name.to_string(),
            id: topic.id,
            partitions,
            configs: topic.overrides(),
            hosted: None,
        });
        if let Err(e) = self.store.save_topics(&stored) {
            self.remove_partition_dirs(&name, 0..=partitions - 1);
            return Err(e);
        }
        self.by_name
            .write()
            .insert(Arc::clone(&name), Arc::clone(&topic));
        tracing::info!(topic = %name, partitions, "created topic");
        Ok(Some(topic))
    }

    /// Deletes a topic: forgotten in the metadata first, then its data removed.
    pub fn delete(&self, name: &str) -> Result<Arc<Topic>, BrokerError> {
        self.refuse_in_cluster(name)?;
        self.delete_here(name)
    }

    fn delete_here(&self, name: &str) -> Result<Arc<Topic>, BrokerError> {
        let _changes = self.changes.lock();
        let Some(topic) = self.get(name) else {
            return Err(BrokerError::UnknownTopic(name.to_string()));
        };
        let stored: Vec<StoredTopic> = self
            .stored()
            .into_iter()
            .filter(|t| t.name != name)
            .collect();
        self.store.save_topics(&stored)?;
        self.by_name.write().remove(name);
        self.remove_partitions(&topic, topic.partitions());
        tracing::info!(topic = %name, "deleted topic");
        Ok(topic)
    }

    /// A manual assignment of the partitions that growing topic `name` to `count` adds, on a
    /// single node: one list per new partition (as Kafka requires), each this node alone. An
    /// unknown topic or a count that is no increase is left to [`Topics::add_partitions`],
    /// which answers those first, as Kafka does.
    pub fn check_one_node_growth(
        &self,
        node: i32,
        name: &str,
        count: i32,
        assignment: &[Vec<i32>],
    ) -> Result<(), BrokerError> {
        let Some(current) = self.get(name).map(|t| t.partition_count()) else {
            return Ok(());
        };
        let adding = i64::from(count) - i64::from(current);
        if adding <= 0 {
            return Ok(());
        }
        check_one_node_lists(node, assignment, Some((current, adding)))
    }

    /// Grows a topic to `count` partitions.
    pub fn add_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        self.refuse_in_cluster(name)?;
        let _changes = self.changes.lock();
        let Some(topic) = self.get(name) else {
            return Err(BrokerError::UnknownTopic(name.to_string()));
        };
        let current = topic.partition_count();
        if count <= current {
            return Err(BrokerError::InvalidPartitions(format!(
                "topic '{name}' has {current} partitions; the new count must be larger, not {count}"
            )));
        }
        self.check_partition_count(count)?;
        if validate_only {
            return Ok(());
        }
        let overrides = topic.overrides();
        let config = topic_config::resolve(&overrides, &self.defaults)?;
        let min_insync = self.standalone_min_insync(&overrides);
        let mut added = Vec::new();
        for index in current..count {
            match self.open_partition(&topic.name, index, config.clone(), min_insync) {
                Ok(p) => added.push(Some(p)),
                Err(e) => {
                    self.remove_partition_dirs(&topic.name, current..=index);
                    return Err(e);
                }
            }
        }
        let mut stored = self.stored();
        if let Some(t) = stored.iter_mut().find(|t| t.name == name) {
            t.partitions = count;
        }
        if let Err(e) = self.store.save_topics(&stored) {
            self.remove_partition_dirs(&topic.name, current..=count - 1);
            return Err(e);
        }
        topic.partitions.write().extend(added);
        tracing::info!(topic = %name, from = current, to = count, "added partitions");
        Ok(())
    }

    /// Replaces a topic's config overrides.
    /// Whether `configs` would be valid overrides of the existing topic `name` (in a cluster
    /// the controller then applies them: see `Replication::set_topic_configs`).
    pub fn check_configs(
        &self,
        name: &str,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), BrokerError> {
        topic_config::resolve(configs, &self.defaults)?;
        if self.get(name).is_none() {
            return Err(BrokerError::UnknownTopic(name.to_string()));
        }
        check_internal_pins(name, configs)?;
        self.check_internal_min_insync(name, configs)
    }

    pub fn set_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        self.refuse_in_cluster(name)?;
        let config = topic_config::resolve(&configs, &self.defaults)?;
        check_internal_pins(name, &configs)?;
        self.check_internal_min_insync(name, &configs)?;
        let _changes = self.changes.lock();
        let Some(topic) = self.get(name) else {
            return Err(BrokerError::UnknownTopic(name.to_string()));
        };
        if validate_only {
            return Ok(());
        }
        let mut stored = self.stored();
        if let Some(t) = stored.iter_mut().find(|t| t.name == name) {
            t.configs = configs.clone();
        }
        self.store.save_topics(&stored)?;
        let min_insync = self.standalone_min_insync(&configs);
        *topic.overrides.write() = configs;
        for partition in topic.partitions() {
            partition.set_standalone_min_insync(min_insync);
            partition.set_config(config.clone())?;
        }
        tracing::info!(topic = %name, "altered topic configs");
        Ok(())
    }

    /// Closes partitions that are gone (a deleted topic, a replica moved away) and removes
    /// their directories: renamed aside at once, deleted in the background.
    fn remove_partitions(&self, topic: &Topic, partitions: Vec<Arc<Partition>>) {
        let mut doomed = Vec::new();
        for partition in partitions {
            partition.retire();
            let dir = self.partition_dir(&topic.name, partition.index);
            let aside = self.topics_dir.join(format!(
                "{}-{}.{}.deleted",
                topic.name,
                partition.index,
                topic.id.simple()
            ));
            match fs::rename(&dir, &aside) {
                Ok(()) => doomed.push(aside),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot move deleted partition aside")
                }
            }
        }
        std::thread::spawn(move || {
            for dir in doomed {
                if let Err(e) = fs::remove_dir_all(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove deleted partition");
                }
            }
        });
    }

    /// Makes this node's copy of a topic match the cluster's metadata: the topic with this id
    /// (a local topic of the same name but another id is an older, deleted one and goes), its
    /// config, and a replica for exactly the partitions in `hosted` (of `count`).
    pub fn sync_from_cluster(
        &self,
        name: &str,
        id: Uuid,
        count: i32,
        hosted: &[i32],
        configs: &BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, BrokerError> {
        let _changes = self.changes.lock();
        if let Some(old) = self.get(name).filter(|t| t.id != id) {
            self.by_name.write().remove(name);
            self.remove_partitions(&old, old.partitions());
        }
        let config = topic_config::resolve(configs, &self.defaults)?;
        let topic = match self.get(name) {
            Some(t) => t,
            None => Arc::new(Topic {
                name: Arc::from(name),
                id,
                partitions: RwLock::new(Vec::new()),
                overrides: RwLock::new(configs.clone()),
            }),
        };
        let mut changed = false;
        let mut gone = Vec::new();
        {
            let mut slots = topic.partitions.write();
            if slots.len() < count as usize {
                slots.resize(count as usize, None);
                changed = true;
            }
            for (index, slot) in slots.iter_mut().enumerate() {
                let wanted = hosted.contains(&(index as i32));
                match (slot.is_some(), wanted) {
                    (false, true) => {
                        let dir = self.partition_dir(name, index as i32);
                        if dir.exists() {
                            tracing::warn!(dir = %dir.display(), "removing stale partition directory");
                            let _ = fs::remove_dir_all(&dir);
                        }
                        let partition =
                            self.open_partition(&topic.name, index as i32, config.clone(), 1)?;
                        // Leaderless until the reconcile gives it its role: a new partition
                        // starts as a single node's leader, and a client's write reaching it
                        // in between would be taken in epoch 0 and acknowledged on one copy.
                        partition.follow(None, sluice_cluster::LeaderEpoch(0));
                        *slot = Some(partition);
                        changed = true;
                    }
                    (true, false) => {
                        gone.extend(slot.take());
                        changed = true;
                    }
                    _ => {}
                }
            }
        }
        if *topic.overrides.read() != *configs {
            *topic.overrides.write() = configs.clone();
            for partition in topic.partitions() {
                partition.set_config(config.clone())?;
            }
            changed = true;
        }
        let known = self.get(name).is_some();
        if changed || !known {
            self.by_name
                .write()
                .insert(Arc::clone(&topic.name), Arc::clone(&topic));
            self.store.save_topics(&self.stored())?;
        }
        if !gone.is_empty() {
            self.remove_partitions(&topic, gone);
        }
        if !known {
            tracing::info!(topic = %name, partitions = count, ?hosted, "topic from the cluster");
        }
        Ok(topic)
    }

    /// Deletes the local copies of topics the cluster deleted (never the internal topics).
    pub fn remove_deleted(&self, deleted: &std::collections::BTreeSet<Uuid>) {
        let doomed: Vec<Arc<Topic>> = self
            .list()
            .into_iter()
            .filter(|t| deleted.contains(&t.id) && !is_internal(&t.name))
            .collect();
        for topic in doomed {
            if let Err(e) = self.delete_here(&topic.name) {
                tracing::warn!(topic = %topic.name, error = %e, "cannot delete a topic the cluster deleted");
            }
        }
    }

    fn remove_partition_dirs(&self, topic: &str, indexes: std::ops::RangeInclusive<i32>) {
        for index in indexes {
            let _ = fs::remove_dir_all(self.partition_dir(topic, index));
        }
    }

    /// Every partition of every topic.
    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.list().iter().flat_map(|t| t.partitions()).collect()
    }
}

/// Removes what a delete interrupted by a crash left behind.
fn remove_deleted_dirs(topics_dir: &Path) {
    let Ok(entries) = fs::read_dir(topics_dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().ends_with(".deleted") {
            if let Err(e) = fs::remove_dir_all(entry.path()) {
                tracing::warn!(dir = %entry.path().display(), error = %e, "cannot remove deleted partition");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_log::SystemClock;

    fn open(dir: &Path) -> Topics {
        Topics::open(
            dir,
            Arc::new(MetadataStore::open(&dir.join("meta")).unwrap()),
            Defaults::default(),
            TopicLimits::default(),
            Arc::new(SystemClock),
            Arc::default(),
        )
        .unwrap()
    }

    #[test]
    fn topic_names_follow_kafkas_rules() {
        for ok in ["a", "a.b_c-D9", &"x".repeat(249)] {
            validate_topic_name(ok).unwrap();
        }
        for bad in ["", ".", "..", "a b", "a/b", "ü", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn topics_survive_a_restart_and_deletes_do_not_come_back() {
        let dir = tempfile::tempdir().unwrap();
        {
            let topics = open(dir.path());
            topics
                .create(
                    "a",
                    3,
                    BTreeMap::from([("retention.ms".into(), "1000".into())]),
                    false,
                )
                .unwrap();
            topics.create("b", 1, BTreeMap::new(), false).unwrap();
            assert!(matches!(
                topics.create("a", 1, BTreeMap::new(), false),
                Err(BrokerError::TopicExists(_))
            ));
            topics.add_partitions("b", 2, false).unwrap();
            topics.delete("a").unwrap();
            topics.create("c", 1, BTreeMap::new(), true).unwrap();
            assert!(topics.get("c").is_none(), "validate_only creates nothing");
        }
        let topics = open(dir.path());
        assert!(topics.get("a").is_none());
        assert_eq!(topics.get("b").unwrap().partition_count(), 2);
        let again = topics
            .create("a", 1, BTreeMap::new(), false)
            .unwrap()
            .unwrap();
        assert_eq!(again.partition_count(), 1);
    }

    #[test]
    fn an_internal_topic_keeps_its_durability_configs() {
        let dir = tempfile::tempdir().unwrap();
        let topics = open(dir.path());
        let name = crate::txn::TXN_TOPIC;
        crate::internal_log::ensure_topic(&topics, name, 1).unwrap();
        let mut configs = crate::internal_log::topic_configs();
        configs.insert("segment.bytes".into(), "2097152".into());
        topics.check_configs(name, &configs).unwrap();
        topics.set_configs(name, configs.clone(), false).unwrap();
        for (key, changed) in [
            ("flush.mode", Some("interval")),
            ("cleanup.policy", Some("compact,delete")),
            ("retention.ms", None),
        ] {
            let mut bad = configs.clone();
            match changed {
                Some(v) => bad.insert(key.into(), v.into()),
                None => bad.remove(key),
            };
            for refused in [
                topics.check_configs(name, &bad),
                topics.set_configs(name, bad.clone(), false),
            ] {
                match refused {
                    Err(BrokerError::InvalidConfig(e)) => assert!(e.0.starts_with(key), "{e:?}"),
                    other => panic!("{key}: {other:?}"),
                }
            }
        }
        // An ordinary topic may change them.
        topics.create("plain", 1, BTreeMap::new(), false).unwrap();
        let interval = BTreeMap::from([("flush.mode".into(), "interval".into())]);
        topics.set_configs("plain", interval, false).unwrap();
    }

    #[test]
    fn bad_requests_are_refused_with_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let topics = open(dir.path());
        assert!(matches!(
            topics.create("x", 0, BTreeMap::new(), false),
            Err(BrokerError::InvalidPartitions(_))
        ));
        assert!(matches!(
            topics.create("x", 100_000, BTreeMap::new(), false),
            Err(BrokerError::InvalidPartitions(_))
        ));
        assert!(matches!(
            topics.create("x", 1, BTreeMap::from([("nope".into(), "1".into())]), false),
            Err(BrokerError::InvalidConfig(_))
        ));
        topics.create("x", 2, BTreeMap::new(), false).unwrap();
        assert!(matches!(
            topics.add_partitions("x", 2, false),
            Err(BrokerError::InvalidPartitions(_))
        ));
        assert!(matches!(
            topics.add_partitions("y", 3, false),
            Err(BrokerError::UnknownTopic(_))
        ));
        assert!(matches!(
            topics.delete("y"),
            Err(BrokerError::UnknownTopic(_))
        ));
    }
}
