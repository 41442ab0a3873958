//! Fetch sessions (KIP-227): a consumer that fetches many partitions sends the full list once;
//! after that its fetches name only the partitions whose position changed (and those it
//! forgets), and the answers carry only the partitions with something new: records, an error,
//! or a moved high watermark, last stable offset or log start.
//!
//! A request's `session_id` and `session_epoch` say what it is:
//! - epoch -1: no session (a full fetch, answered in full with session id 0); a non-zero id is
//!   closed first;
//! - epoch 0: a full fetch that opens a new session (closing the one named, if any);
//! - epoch n > 0: the n-th incremental fetch of that session; an unknown id is
//!   FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH.
//!
//! A session reads its partitions in a rotating order: the ones that just returned records go
//! to the back, so that a few busy partitions cannot starve the others of the response's byte
//! budget. At most [`MAX_SESSIONS`] are kept; when full, sessions idle for
//! [`IDLE_EVICTION_MS`] make room, and otherwise the fetch is answered without a session, as
//! Kafka does.

use std::collections::{HashMap, HashSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::FetchResponse;
use parking_lot::Mutex;
use uuid::Uuid;

/// Kafka's `max.incremental.fetch.session.cache.slots`.
pub const MAX_SESSIONS: usize = 1000;
/// Kafka's `min.incremental.fetch.session.eviction.ms`.
pub const IDLE_EVICTION_MS: i64 = 120_000;

const FINAL_EPOCH: i32 = -1;
const INITIAL_EPOCH: i32 = 0;

/// A partition as a fetch names it: by topic id from Fetch v13 on, by name before.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    pub topic_id: Uuid,
    pub topic: String,
    pub partition: i32,
}

/// What a fetch asks of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPosition {
    pub fetch_offset: i64,
    pub max_bytes: i32,
    pub current_leader_epoch: i32,
}

/// The high watermark, last stable offset and log start last sent for a partition.
type Sent = (i64, i64, i64);

#[derive(Debug)]
struct Cached {
    position: FetchPosition,
    sent: Option<Sent>,
}

#[derive(Debug)]
struct Session {
    epoch: i32,
    partitions: HashMap<PartitionKey, Cached>,
    /// The order to read them in (see the module doc).
    order: Vec<PartitionKey>,
    last_used_ms: i64,
}

/// How to answer a fetch.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Read what the request names and answer in full, with session id 0.
    Sessionless,
    /// Read what the request names and answer in full, with this new session's id.
    New(i32),
    /// Read the session's partitions and answer only what changed.
    Incremental(i32, Vec<(PartitionKey, FetchPosition)>),
    /// Answer only this error.
    Refused(ResponseError),
}

#[derive(Debug, Default)]
pub struct FetchSessions {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<i32, Session>,
    last_id: i32,
}

impl FetchSessions {
    /// Decides how to answer a fetch and updates the sessions for it. `wanted` is what the
    /// request names, `forgotten` what it drops from its session.
    pub fn begin(
        &self,
        session_id: i32,
        epoch: i32,
        wanted: &[(PartitionKey, FetchPosition)],
        forgotten: Vec<PartitionKey>,
        now_ms: i64,
    ) -> Plan {
        if epoch == FINAL_EPOCH && session_id == 0 {
            return Plan::Sessionless; // the common case of clients without sessions: no lock
        }
        let mut inner = self.inner.lock();
        if epoch == FINAL_EPOCH || epoch == INITIAL_EPOCH {
            if session_id != 0 {
                inner.sessions.remove(&session_id);
            }
            if epoch == FINAL_EPOCH {
                return Plan::Sessionless;
            }
            return match inner.open(wanted, now_ms) {
                Some(id) => Plan::New(id),
                None => Plan::Sessionless,
            };
        }
        if epoch < 0 {
            return Plan::Refused(ResponseError::InvalidFetchSessionEpoch);
        }
        let Some(session) = inner.sessions.get_mut(&session_id) else {
            return Plan::Refused(ResponseError::FetchSessionIdNotFound);
        };
        if session.epoch != epoch {
            return Plan::Refused(ResponseError::InvalidFetchSessionEpoch);
        }
        session.epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
        session.last_used_ms = now_ms;
        if !forgotten.is_empty() {
            for key in &forgotten {
                session.partitions.remove(key);
            }
            let partitions = &session.partitions;
            session.order.retain(|k| partitions.contains_key(k));
        }
        for (key, position) in wanted {
            session.add(key.clone(), position.clone());
        }
        let partitions = session
            .order
            .iter()
            .filter_map(|k| {
                let c = session.partitions.get(k)?;
                Some((k.clone(), c.position.clone()))
            })
            .collect();
        Plan::Incremental(session_id, partitions)
    }

    /// Finishes the answer of a session's fetch: records what each partition was told, and
    /// for an incremental fetch leaves out the partitions with nothing new. `key_of` names a
    /// response partition as the session does.
    pub fn finish(
        &self,
        session_id: i32,
        incremental: bool,
        response: &mut FetchResponse,
        key_of: impl Fn(
            &kafka_protocol::messages::fetch_response::FetchableTopicResponse,
            i32,
        ) -> PartitionKey,
    ) {
        let mut inner = self.inner.lock();
        let Some(session) = inner.sessions.get_mut(&session_id) else {
            // Closed or evicted meanwhile: answer in full, without a session.
            response.session_id = 0;
            return;
        };
        response.session_id = session_id;
        let mut returned = HashSet::new();
        for topic in &mut response.responses {
            let keys: Vec<PartitionKey> = topic
                .partitions
                .iter()
                .map(|p| key_of(topic, p.partition_index))
                .collect();
            let mut keep = Vec::with_capacity(topic.partitions.len());
            for (p, key) in std::mem::take(&mut topic.partitions).into_iter().zip(keys) {
                let now = sent_of(&p);
                let cached = session.partitions.get_mut(&key);
                let changed = cached.as_ref().is_none_or(|c| c.sent != Some(now));
                if let Some(c) = cached {
                    c.sent = Some(now);
                }
                let has_records = p.records.as_ref().is_some_and(|r| !r.is_empty());
                if has_records {
                    returned.insert(key);
                }
                // A preferred read replica (KIP-392) is always sent, as Kafka does: the
                // consumer must learn where to go even when nothing else changed.
                let redirected = p.preferred_read_replica.0 >= 0;
                if !incremental || changed || has_records || p.error_code != 0 || redirected {
                    keep.push(p);
                }
            }
            topic.partitions = keep;
        }
        if incremental {
            response.responses.retain(|t| !t.partitions.is_empty());
        }
        if !returned.is_empty() {
            let (busy, rest): (Vec<_>, Vec<_>) =
                session.order.drain(..).partition(|k| returned.contains(k));
            session.order = rest;
            session.order.extend(busy);
        }
    }

    /// How many sessions are open.
    pub fn len(&self) -> usize {
        self.inner.lock().sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    fn open(&mut self, wanted: &[(PartitionKey, FetchPosition)], now_ms: i64) -> Option<i32> {
        if self.sessions.len() >= MAX_SESSIONS {
            self.sessions
                .retain(|_, s| now_ms.saturating_sub(s.last_used_ms) < IDLE_EVICTION_MS);
            if self.sessions.len() >= MAX_SESSIONS {
                return None;
            }
        }
        let id = loop {
            self.last_id = if self.last_id == i32::MAX {
                1
            } else {
                self.last_id + 1
            };
            if !self.sessions.contains_key(&self.last_id) {
                break self.last_id;
            }
        };
        let mut session = Session {
            epoch: 1,
            partitions: HashMap::new(),
            order: Vec::new(),
            last_used_ms: now_ms,
        };
        for (key, position) in wanted {
            session.add(key.clone(), position.clone());
        }
        self.sessions.insert(id, session);
        Some(id)
    }
}

impl Session {
    /// Adds a partition (at the back) or updates its position.
    fn add(&mut self, key: PartitionKey, position: FetchPosition) {
        match self.partitions.get_mut(&key) {
            Some(cached) => cached.position = position,
            None => {
                self.order.push(key.clone());
                self.partitions.insert(
                    key,
                    Cached {
                        position,
                        sent: None,
                    },
                );
            }
        }
    }
}

fn sent_of(p: &PartitionData) -> Sent {
    (p.high_watermark, p.last_stable_offset, p.log_start_offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::fetch_response::FetchableTopicResponse;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    fn key(topic: &str, partition: i32) -> PartitionKey {
        PartitionKey {
            topic_id: Uuid::nil(),
            topic: topic.into(),
            partition,
        }
    }

    fn at(offset: i64) -> FetchPosition {
        FetchPosition {
            fetch_offset: offset,
            max_bytes: 1 << 20,
            current_leader_epoch: -1,
        }
    }

    fn response(parts: &[(i32, i64, bool)]) -> FetchResponse {
        FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(
                parts
                    .iter()
                    .map(|&(i, hw, data)| {
                        PartitionData::default()
                            .with_partition_index(i)
                            .with_high_watermark(hw)
                            .with_last_stable_offset(hw)
                            .with_records(Some(if data {
                                Bytes::from_static(b"batch")
                            } else {
                                Bytes::new()
                            }))
                    })
                    .collect(),
            )])
    }

    fn finish(s: &FetchSessions, id: i32, incremental: bool, r: &mut FetchResponse) -> Vec<i32> {
        s.finish(id, incremental, r, |t, p| key(t.topic.as_str(), p));
        r.responses
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
            .collect()
    }

    #[test]
    fn a_session_answers_only_what_changed() {
        let s = FetchSessions::default();
        let now = 1_000;
        let all = vec![
            (key("t", 0), at(0)),
            (key("t", 1), at(0)),
            (key("t", 2), at(0)),
        ];
        let Plan::New(id) = s.begin(0, 0, &all, vec![], now) else {
            panic!("a new session")
        };
        let mut r = response(&[(0, 5, true), (1, 0, false), (2, 0, false)]);
        assert_eq!(
            finish(&s, id, false, &mut r),
            vec![0, 1, 2],
            "the first answer is full"
        );
        assert_eq!(r.session_id, id);

        // Epoch 1: partition 0 moved on; only partition 2 has news (a higher watermark).
        let Plan::Incremental(_, parts) = s.begin(id, 1, &[(key("t", 0), at(5))], vec![], now)
        else {
            panic!("incremental")
        };
        assert_eq!(
            parts.iter().map(|p| p.0.partition).collect::<Vec<_>>(),
            vec![1, 2, 0],
            "partition 0 returned records, so it is read last"
        );
        assert_eq!(
            parts[2].1.fetch_offset, 5,
            "the request's new position is kept"
        );
        let mut r = response(&[(0, 5, false), (1, 0, false), (2, 9, false)]);
        assert_eq!(finish(&s, id, true, &mut r), vec![2]);

        // A forgotten partition is no longer read; stale and unknown sessions are refused.
        let Plan::Incremental(_, parts) = s.begin(id, 2, &[], vec![key("t", 1)], now) else {
            panic!("incremental")
        };
        assert_eq!(
            parts.iter().map(|p| p.0.partition).collect::<Vec<_>>(),
            vec![2, 0]
        );
        assert_eq!(
            s.begin(id, 2, &[], vec![], now),
            Plan::Refused(ResponseError::InvalidFetchSessionEpoch)
        );
        assert_eq!(
            s.begin(id + 7, 1, &[], vec![], now),
            Plan::Refused(ResponseError::FetchSessionIdNotFound)
        );
        // Epoch -1 closes it.
        assert_eq!(s.begin(id, -1, &[], vec![], now), Plan::Sessionless);
        assert!(s.is_empty());
    }

    #[test]
    fn a_preferred_read_replica_is_always_answered() {
        let s = FetchSessions::default();
        let all = vec![(key("t", 0), at(0)), (key("t", 1), at(0))];
        let Plan::New(id) = s.begin(0, 0, &all, vec![], 1_000) else {
            panic!("a new session")
        };
        let mut r = response(&[(0, 5, false), (1, 5, false)]);
        assert_eq!(finish(&s, id, false, &mut r), vec![0, 1]);
        // Nothing changed for either partition, but the leader now sends the consumer of
        // partition 1 to a follower (KIP-392): that must reach it.
        let Plan::Incremental(..) = s.begin(id, 1, &[], vec![], 1_000) else {
            panic!("incremental")
        };
        let mut r = response(&[(0, 5, false), (1, 5, false)]);
        r.responses[0].partitions[1].preferred_read_replica = kafka_protocol::messages::BrokerId(3);
        assert_eq!(finish(&s, id, true, &mut r), vec![1]);
    }

    #[test]
    fn a_full_cache_makes_room_from_idle_sessions_or_goes_without() {
        let s = FetchSessions::default();
        let start = 1_000;
        for _ in 0..MAX_SESSIONS {
            assert!(matches!(s.begin(0, 0, &[], vec![], start), Plan::New(_)));
        }
        assert_eq!(s.begin(0, 0, &[], vec![], start), Plan::Sessionless);
        let later = start + IDLE_EVICTION_MS + 1;
        assert!(matches!(s.begin(0, 0, &[], vec![], later), Plan::New(_)));
        assert_eq!(s.len(), 1, "the idle ones were evicted");
    }
}
