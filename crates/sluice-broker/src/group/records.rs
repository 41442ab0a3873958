//! What the group coordinator writes to `__consumer_offsets`: committed offsets and group
//! metadata, as keyed records (the topic is compacted, so the newest value per key is what
//! survives; a null value deletes the key). Replaying the topic rebuilds the coordinator.
//!
//! Keys: `[version:i16=1][kind:i8][fields]`, kind 0 = offset (group, topic, partition),
//! kind 1 = group (group), kind 2 = group of the new protocol, KIP-848 (group). Values are
//! JSON (small, rare, and readable with `sluice consume`). A binary that does not know a kind
//! skips its records.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

const KEY_VERSION: i16 = 1;
const KIND_OFFSET: i8 = 0;
const KIND_GROUP: i8 = 1;
const KIND_CONSUMER_GROUP: i8 = 2;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OffsetKey {
    pub group: String,
    pub topic: String,
    pub partition: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i64,
    pub rebalance_timeout_ms: i64,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub assignment: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    pub group: String,
    pub generation: i32,
    pub protocol_type: String,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<MemberRecord>,
    /// When the group became empty (written with an empty group; absent in records of
    /// versions before it was kept, whose offsets then expire from their commit time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_since_ms: Option<i64>,
}

/// A member of a group of the new protocol (KIP-848), as written: everything but its times
/// (a restored member's session and revocation deadline start when it is restored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerMemberRecord {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub rebalance_timeout_ms: i64,
    pub assigned: BTreeMap<String, BTreeSet<i32>>,
    pub revoking: BTreeMap<String, BTreeSet<i32>>,
    /// (topic, partition, the member epoch it was given at).
    pub assignment_epochs: Vec<(String, i32, i32)>,
}

/// A group of the new protocol (KIP-848) as written: its epochs, members, target assignment
/// and the partition counts its assignment was computed from. One record holds the whole
/// group, written whenever any of it changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroupRecord {
    pub group: String,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub members: Vec<ConsumerMemberRecord>,
    pub target: BTreeMap<String, BTreeMap<String, BTreeSet<i32>>>,
    pub subscribed_metadata: BTreeMap<String, i32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Offset(OffsetKey, OffsetValue),
    OffsetTombstone(OffsetKey),
    Group(GroupRecord),
    GroupTombstone(String),
    ConsumerGroup(ConsumerGroupRecord),
    ConsumerGroupTombstone(String),
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn get_str(buf: &mut &[u8]) -> Option<String> {
    let (len, rest) = buf.split_first_chunk::<2>()?;
    let len = u16::from_be_bytes(*len) as usize;
    let s = std::str::from_utf8(rest.get(..len)?).ok()?.to_string();
    *buf = &rest[len..];
    Some(s)
}

impl Record {
    /// The group whose partition of the offsets topic this record belongs in.
    pub fn group(&self) -> &str {
        match self {
            Record::Offset(k, _) | Record::OffsetTombstone(k) => &k.group,
            Record::Group(g) => &g.group,
            Record::GroupTombstone(g) => g,
            Record::ConsumerGroup(g) => &g.group,
            Record::ConsumerGroupTombstone(g) => g,
        }
    }

    pub fn key(&self) -> Vec<u8> {
        let mut out = KEY_VERSION.to_be_bytes().to_vec();
        match self {
            Record::Offset(k, _) | Record::OffsetTombstone(k) => {
                out.push(KIND_OFFSET as u8);
                put_str(&mut out, &k.group);
                put_str(&mut out, &k.topic);
                out.extend_from_slice(&k.partition.to_be_bytes());
            }
            Record::Group(_) | Record::GroupTombstone(_) => {
                out.push(KIND_GROUP as u8);
                put_str(&mut out, self.group());
            }
            Record::ConsumerGroup(_) | Record::ConsumerGroupTombstone(_) => {
                out.push(KIND_CONSUMER_GROUP as u8);
                put_str(&mut out, self.group());
            }
        }
        out
    }

    /// `None` for a tombstone.
    pub fn value(&self) -> Option<Vec<u8>> {
        match self {
            Record::Offset(_, v) => serde_json::to_vec(v).ok(),
            Record::Group(g) => serde_json::to_vec(g).ok(),
            Record::ConsumerGroup(g) => serde_json::to_vec(g).ok(),
            Record::OffsetTombstone(_)
            | Record::GroupTombstone(_)
            | Record::ConsumerGroupTombstone(_) => None,
        }
    }

    /// Reads a record back; `None` for keys that are not ours (or damaged).
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Option<Record> {
        let (version, mut rest) = key.split_first_chunk::<2>()?;
        if i16::from_be_bytes(*version) != KEY_VERSION {
            return None;
        }
        let (kind, tail) = rest.split_first()?;
        rest = tail;
        match *kind as i8 {
            KIND_OFFSET => {
                let group = get_str(&mut rest)?;
                let topic = get_str(&mut rest)?;
                let partition = i32::from_be_bytes(*rest.first_chunk::<4>()?);
                let key = OffsetKey {
                    group,
                    topic,
                    partition,
                };
                match value {
                    Some(v) => Some(Record::Offset(key, serde_json::from_slice(v).ok()?)),
                    None => Some(Record::OffsetTombstone(key)),
                }
            }
            KIND_GROUP => {
                let group = get_str(&mut rest)?;
                match value {
                    Some(v) => Some(Record::Group(serde_json::from_slice(v).ok()?)),
                    None => Some(Record::GroupTombstone(group)),
                }
            }
            KIND_CONSUMER_GROUP => {
                let group = get_str(&mut rest)?;
                match value {
                    Some(v) => Some(Record::ConsumerGroup(serde_json::from_slice(v).ok()?)),
                    None => Some(Record::ConsumerGroupTombstone(group)),
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let key = OffsetKey {
            group: "g".into(),
            topic: "t.x".into(),
            partition: 7,
        };
        let samples = vec![
            Record::Offset(
                key.clone(),
                OffsetValue {
                    offset: 42,
                    leader_epoch: 3,
                    metadata: "m".into(),
                    commit_timestamp_ms: 5,
                },
            ),
            Record::OffsetTombstone(key),
            Record::Group(GroupRecord {
                group: "g".into(),
                generation: 4,
                protocol_type: "consumer".into(),
                protocol_name: Some("range".into()),
                leader: Some("m1".into()),
                members: vec![MemberRecord {
                    id: "m1".into(),
                    instance_id: None,
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    session_timeout_ms: 10_000,
                    rebalance_timeout_ms: 30_000,
                    protocols: vec![("range".into(), vec![0, 1])],
                    assignment: vec![9],
                }],
                empty_since_ms: None,
            }),
            Record::GroupTombstone("g".into()),
            Record::ConsumerGroup(ConsumerGroupRecord {
                group: "g".into(),
                epoch: 5,
                assignment_epoch: 5,
                members: vec![ConsumerMemberRecord {
                    id: "m1".into(),
                    instance_id: Some("i".into()),
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    epoch: 5,
                    previous_epoch: 3,
                    subscribed_topic_names: vec!["t".into()],
                    subscribed_topic_regex: Some("t.*".into()),
                    server_assignor: Some("uniform".into()),
                    rebalance_timeout_ms: 30_000,
                    assigned: BTreeMap::from([("t".into(), BTreeSet::from([0, 2]))]),
                    revoking: BTreeMap::from([("t".into(), BTreeSet::from([1]))]),
                    assignment_epochs: vec![("t".into(), 0, 3), ("t".into(), 2, 5)],
                }],
                target: BTreeMap::from([(
                    "m1".into(),
                    BTreeMap::from([("t".into(), BTreeSet::from([0, 2]))]),
                )]),
                subscribed_metadata: BTreeMap::from([("t".into(), 3)]),
            }),
            Record::ConsumerGroupTombstone("g".into()),
        ];
        for r in samples {
            let value = r.value();
            assert_eq!(Record::decode(&r.key(), value.as_deref()), Some(r.clone()));
        }
        assert_eq!(Record::decode(b"\x00\x09junk", None), None);
        assert_eq!(Record::decode(b"", None), None);
    }
}
