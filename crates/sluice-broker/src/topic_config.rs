//! Topic configs: the names Kafka tools use, their types, validation, and how they resolve
//! over the broker's defaults into a [`LogConfig`].
//!
//! `flush.mode` and `flush.interval.ms` are Sluice's own (Kafka has `flush.messages` and
//! `flush.ms`); everything else means what it means in Kafka.

use std::collections::BTreeMap;

use sluice_log::{FlushMode, LogConfig, TimestampType};

/// Config types as DescribeConfigs v3 reports them (KIP-569).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int {
        min: i64,
    },
    Long {
        min: i64,
    },
    Choice(&'static [&'static str]),
    List(&'static [&'static str]),
    /// `*` or `partition:node` pairs (the throttled-replica lists).
    Replicas,
}

impl Kind {
    /// The `ConfigType` code of DescribeConfigs v3+.
    pub fn type_code(&self) -> i8 {
        match self {
            Kind::Int { .. } => 3,
            Kind::Long { .. } => 5,
            Kind::Choice(_) => 2,
            Kind::List(_) | Kind::Replicas => 7,
        }
    }
}

#[derive(Debug)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: Kind,
    pub default: &'static str,
    pub doc: &'static str,
}

pub const CLEANUP_POLICY: &str = "cleanup.policy";
pub const COMPRESSION_TYPE: &str = "compression.type";
pub const DELETE_RETENTION_MS: &str = "delete.retention.ms";
pub const FLUSH_MODE: &str = "flush.mode";
pub const FLUSH_INTERVAL_MS: &str = "flush.interval.ms";
pub const INDEX_INTERVAL_BYTES: &str = "index.interval.bytes";
pub const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
pub const TIMESTAMP_TYPE: &str = "message.timestamp.type";
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
pub const RETENTION_BYTES: &str = "retention.bytes";
pub const RETENTION_MS: &str = "retention.ms";
pub const SEGMENT_BYTES: &str = "segment.bytes";
pub const SEGMENT_MS: &str = "segment.ms";
pub const LEADER_THROTTLED_REPLICAS: &str = "leader.replication.throttled.replicas";
pub const FOLLOWER_THROTTLED_REPLICAS: &str = "follower.replication.throttled.replicas";

/// Every topic config Sluice knows, sorted by name.
pub const DEFS: &[ConfigDef] = &[
    ConfigDef {
        name: CLEANUP_POLICY,
        kind: Kind::List(&["delete", "compact"]),
        default: "delete",
        doc: "delete: remove old segments by retention; compact: keep the newest record per key; or both.",
    },
    ConfigDef {
        name: COMPRESSION_TYPE,
        kind: Kind::Choice(&["producer"]),
        default: "producer",
        doc: "Batches are stored as the producer compressed them.",
    },
    ConfigDef {
        name: DELETE_RETENTION_MS,
        kind: Kind::Long { min: 0 },
        default: "86400000",
        doc: "On compacted topics, how long tombstones are kept after they are written.",
    },
    ConfigDef {
        name: FLUSH_INTERVAL_MS,
        kind: Kind::Long { min: 1 },
        default: "100",
        doc: "With flush.mode=interval, how often appended data is fsynced.",
    },
    ConfigDef {
        name: FLUSH_MODE,
        kind: Kind::Choice(&["interval", "sync"]),
        default: "interval",
        doc: "sync: acknowledge a produce only after fsync (group commit); interval: fsync every flush.interval.ms.",
    },
    ConfigDef {
        name: FOLLOWER_THROTTLED_REPLICAS,
        kind: Kind::Replicas,
        default: "",
        doc: "Replicas (partition:node, or *) that copy from their leader at no more than \
              their node's follower.replication.throttled.rate.",
    },
    ConfigDef {
        name: INDEX_INTERVAL_BYTES,
        kind: Kind::Int { min: 0 },
        default: "4096",
        doc: "Bytes of log between entries of the sparse offset and time indexes.",
    },
    ConfigDef {
        name: LEADER_THROTTLED_REPLICAS,
        kind: Kind::Replicas,
        default: "",
        doc: "Replicas (partition:node, or *) whose leader sends to followers at no more than \
              its node's leader.replication.throttled.rate.",
    },
    ConfigDef {
        name: MAX_MESSAGE_BYTES,
        kind: Kind::Int { min: 1 },
        default: "1048588",
        doc: "Largest record batch accepted, in bytes.",
    },
    ConfigDef {
        name: TIMESTAMP_TYPE,
        kind: Kind::Choice(&["CreateTime", "LogAppendTime"]),
        default: "CreateTime",
        doc: "Keep the producer's timestamps (CreateTime) or stamp the broker's time on append (LogAppendTime).",
    },
    ConfigDef {
        name: MIN_INSYNC_REPLICAS,
        kind: Kind::Int { min: 1 },
        default: "1",
        doc: "Replicas that must have a write for acks=all to succeed.",
    },
    ConfigDef {
        name: RETENTION_BYTES,
        kind: Kind::Long { min: -1 },
        default: "-1",
        doc: "Delete the oldest segments while a partition is larger than this; -1 for no limit.",
    },
    ConfigDef {
        name: RETENTION_MS,
        kind: Kind::Long { min: -1 },
        default: "604800000",
        doc: "Delete segments whose newest record is older than this; -1 to keep forever.",
    },
    ConfigDef {
        name: SEGMENT_BYTES,
        kind: Kind::Int { min: 1024 },
        default: "1073741824",
        doc: "Roll to a new segment file at this size.",
    },
    ConfigDef {
        name: SEGMENT_MS,
        kind: Kind::Long { min: 1 },
        default: "604800000",
        doc: "Roll to a new segment file after this long.",
    },
];

pub fn def(name: &str) -> Option<&'static ConfigDef> {
    DEFS.iter().find(|d| d.name == name)
}

/// A config name or value that cannot be accepted, worded for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Checks one `name=value` pair.
pub fn validate(name: &str, value: &str) -> Result<(), ConfigError> {
    let Some(def) = def(name) else {
        return Err(ConfigError(format!("unknown topic config '{name}'")));
    };
    let bad = |why: String| ConfigError(format!("invalid value '{value}' for {name}: {why}"));
    match def.kind {
        Kind::Int { min } => {
            let v: i32 = value
                .trim()
                .parse()
                .map_err(|_| bad("not a 32-bit integer".into()))?;
            if i64::from(v) < min {
                return Err(bad(format!("must be at least {min}")));
            }
        }
        Kind::Long { min } => {
            let v: i64 = value
                .trim()
                .parse()
                .map_err(|_| bad("not an integer".into()))?;
            if v < min {
                return Err(bad(format!("must be at least {min}")));
            }
        }
        Kind::Choice(choices) => {
            if !choices.contains(&value) {
                return Err(bad(format!("must be one of {}", choices.join(", "))));
            }
        }
        Kind::Replicas => {
            crate::replication::throttle::check_replica_list(name, value).map_err(ConfigError)?;
        }
        Kind::List(choices) => {
            for item in value.split(',').map(str::trim) {
                if !choices.contains(&item) {
                    return Err(bad(format!(
                        "'{item}' is not one of {}",
                        choices.join(", ")
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Topic config values that apply when a topic does not set its own: the built-in defaults
/// of [`DEFS`] with the broker's settings over them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defaults {
    values: BTreeMap<&'static str, String>,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            values: DEFS
                .iter()
                .map(|d| (d.name, d.default.to_string()))
                .collect(),
        }
    }
}

impl Defaults {
    /// Overrides a default (from broker settings); validated like a topic config.
    pub fn set(&mut self, name: &str, value: impl Into<String>) -> Result<(), ConfigError> {
        let value = value.into();
        validate(name, &value)?;
        let def = def(name).ok_or_else(|| ConfigError(format!("unknown topic config '{name}'")))?;
        self.values.insert(def.name, value);
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }
}

/// The value of `name` for a topic: its override, else the broker default.
pub fn value_of<'a>(
    name: &str,
    overrides: &'a BTreeMap<String, String>,
    defaults: &'a Defaults,
) -> Option<&'a str> {
    overrides
        .get(name)
        .map(String::as_str)
        .or_else(|| defaults.get(name))
}

/// Resolves a topic's overrides over the defaults into the log's settings.
pub fn resolve(
    overrides: &BTreeMap<String, String>,
    defaults: &Defaults,
) -> Result<LogConfig, ConfigError> {
    for (name, value) in overrides {
        validate(name, value)?;
    }
    let get = |name: &str| value_of(name, overrides, defaults).unwrap_or("");
    let int = |name: &str| -> Result<i64, ConfigError> {
        get(name)
            .trim()
            .parse::<i64>()
            .map_err(|_| ConfigError(format!("{name} is not a number")))
    };
    let config = LogConfig {
        segment_bytes: int(SEGMENT_BYTES)? as u64,
        segment_ms: int(SEGMENT_MS)?,
        index_interval_bytes: int(INDEX_INTERVAL_BYTES)? as u64,
        retention_ms: int(RETENTION_MS)?,
        retention_bytes: int(RETENTION_BYTES)?,
        max_message_bytes: int(MAX_MESSAGE_BYTES)? as usize,
        flush: match get(FLUSH_MODE) {
            "sync" => FlushMode::Sync,
            _ => FlushMode::Interval {
                interval_ms: int(FLUSH_INTERVAL_MS)? as u64,
            },
        },
        timestamp_type: match get(TIMESTAMP_TYPE) {
            "LogAppendTime" => TimestampType::LogAppendTime,
            _ => TimestampType::CreateTime,
        },
        delete_policy: get(CLEANUP_POLICY).split(',').any(|p| p.trim() == "delete"),
        compact: get(CLEANUP_POLICY)
            .split(',')
            .any(|p| p.trim() == "compact"),
        delete_retention_ms: int(DELETE_RETENTION_MS)?,
    };
    config.validate().map_err(|e| ConfigError(e.to_string()))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defs_are_sorted_and_their_defaults_valid() {
        assert!(DEFS.windows(2).all(|w| w[0].name < w[1].name));
        for d in DEFS {
            validate(d.name, d.default).unwrap();
        }
        assert_eq!(
            resolve(&BTreeMap::new(), &Defaults::default()).unwrap(),
            LogConfig::default()
        );
    }

    #[test]
    fn overrides_win_over_broker_defaults() {
        let mut defaults = Defaults::default();
        defaults.set(FLUSH_MODE, "sync").unwrap();
        defaults.set(RETENTION_MS, "1000").unwrap();
        let overrides = BTreeMap::from([(RETENTION_MS.to_string(), "-1".to_string())]);
        let c = resolve(&overrides, &defaults).unwrap();
        assert_eq!(c.flush, FlushMode::Sync);
        assert_eq!(c.retention_ms, -1);
    }

    #[test]
    fn bad_names_and_values_are_explained() {
        assert!(validate("no.such", "1")
            .unwrap_err()
            .0
            .contains("unknown topic config"));
        assert!(validate(RETENTION_MS, "soon")
            .unwrap_err()
            .0
            .contains("not an integer"));
        assert!(validate(SEGMENT_BYTES, "10")
            .unwrap_err()
            .0
            .contains("at least 1024"));
        assert!(validate(SEGMENT_BYTES, "3000000000").is_err());
        assert!(validate(FLUSH_MODE, "sometimes")
            .unwrap_err()
            .0
            .contains("interval, sync"));
        assert!(validate(CLEANUP_POLICY, "shred").is_err());
        validate(CLEANUP_POLICY, "delete").unwrap();
        validate(CLEANUP_POLICY, "compact,delete").unwrap();
        let c = resolve(
            &BTreeMap::from([(CLEANUP_POLICY.into(), "compact".into())]),
            &Defaults::default(),
        )
        .unwrap();
        assert!(c.compact && !c.delete_policy);
    }
}
