//! Requests only a partition's leader answers (Produce, Fetch, ListOffsets, DeleteRecords),
//! sent to that leader. In a cluster the node a tool bootstrapped from leads only some
//! partitions; this keeps one connection per leader, learns the leaders from Metadata, and on
//! NOT_LEADER_OR_FOLLOWER (leadership moved) asks Metadata again and retries once. On a single
//! node every partition's leader is that node.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

use crate::client::{Client, Fetched};
use crate::error::ClientError;

pub struct Leaders {
    bootstrap: Client,
    /// (topic, partition) → leader node.
    leaders: HashMap<(String, i32), i32>,
    /// Node → `host:port`.
    addresses: HashMap<i32, String>,
    connections: HashMap<i32, Client>,
}

impl std::fmt::Debug for Leaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Leaders({:?})", self.bootstrap)
    }
}

/// Errors after which the leader is looked up again.
fn moved(e: &ClientError) -> bool {
    let ClientError::Kafka { code, .. } = e else {
        return matches!(e, ClientError::Io { .. } | ClientError::Connect { .. });
    };
    [
        ResponseError::NotLeaderOrFollower,
        ResponseError::LeaderNotAvailable,
        ResponseError::FencedLeaderEpoch,
        ResponseError::UnknownLeaderEpoch,
    ]
    .iter()
    .any(|r| r.code() == *code)
}

/// `$call` on the leader of `$topic`-`$partition`, and once more on the new leader if the
/// first answer says leadership moved.
macro_rules! on_leader {
    ($self:ident, $topic:expr, $partition:expr, |$client:ident| $call:expr) => {{
        let first = {
            let $client = $self.leader_of($topic, $partition).await?;
            $call.await
        };
        match first {
            Err(e) if moved(&e) => {
                $self.moved($topic, $partition).await?;
                let $client = $self.leader_of($topic, $partition).await?;
                $call.await
            }
            other => other,
        }
    }};
}

impl Leaders {
    /// Routes through `bootstrap`'s cluster; new connections carry its client id.
    pub fn new(bootstrap: Client) -> Leaders {
        Leaders {
            bootstrap,
            leaders: HashMap::new(),
            addresses: HashMap::new(),
            connections: HashMap::new(),
        }
    }

    /// The bootstrap connection, for requests any node answers.
    pub fn bootstrap(&mut self) -> &mut Client {
        &mut self.bootstrap
    }

    /// Learns `topic`'s leaders and the nodes' addresses from Metadata.
    pub async fn refresh(&mut self, topic: &str) -> Result<(), ClientError> {
        let metadata = self.bootstrap.metadata(Some(&[topic.to_string()])).await?;
        for b in &metadata.brokers {
            self.addresses
                .insert(b.node_id.0, format!("{}:{}", b.host, b.port));
        }
        self.leaders.retain(|(t, _), _| t != topic);
        for t in &metadata.topics {
            if t.name.as_ref().map(|n| n.as_str()) != Some(topic) {
                continue;
            }
            for p in &t.partitions {
                if p.leader_id.0 >= 0 {
                    self.leaders
                        .insert((topic.to_string(), p.partition_index), p.leader_id.0);
                }
            }
        }
        Ok(())
    }

    /// The connection to `topic`-`partition`'s leader (the bootstrap one when Metadata names
    /// no leader: its answer then carries the error).
    pub async fn leader_of(
        &mut self,
        topic: &str,
        partition: i32,
    ) -> Result<&mut Client, ClientError> {
        let key = (topic.to_string(), partition);
        if !self.leaders.contains_key(&key) {
            self.refresh(topic).await?;
        }
        let Some(node) = self.leaders.get(&key).copied() else {
            return Ok(&mut self.bootstrap);
        };
        if !self.connections.contains_key(&node) {
            let Some(addr) = self.addresses.get(&node).cloned() else {
                return Ok(&mut self.bootstrap);
            };
            let client_id = self.bootstrap.connection().client_id().to_string();
            let client = Client::connect(&addr, &client_id).await?;
            self.connections.insert(node, client);
        }
        self.connections
            .get_mut(&node)
            .ok_or_else(|| ClientError::Protocol(format!("no connection to node {node}")))
    }

    /// After an error that says leadership moved: forget the leaders (and the connection).
    async fn moved(&mut self, topic: &str, partition: i32) -> Result<(), ClientError> {
        if let Some(node) = self.leaders.get(&(topic.to_string(), partition)) {
            self.connections.remove(node);
        }
        // Give the cluster a moment to name the new leader.
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.refresh(topic).await
    }

    pub async fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        batch: Bytes,
        acks: i16,
    ) -> Result<i64, ClientError> {
        on_leader!(self, topic, partition, |c| c.produce(
            topic,
            partition,
            batch.clone(),
            acks
        ))
    }

    pub async fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait: Duration,
        max_bytes: i32,
    ) -> Result<Fetched, ClientError> {
        on_leader!(self, topic, partition, |c| c
            .fetch(topic, partition, offset, max_wait, max_bytes))
    }

    /// ListOffsets for each partition, each asked of its leader (see [`Client::list_offsets`]).
    pub async fn list_offsets(
        &mut self,
        topic: &str,
        partitions: &[i32],
        timestamp: i64,
    ) -> Result<Vec<(i32, i64, i64)>, ClientError> {
        let mut found = Vec::with_capacity(partitions.len());
        for p in partitions {
            found.extend(on_leader!(self, topic, *p, |c| c.list_offsets(
                topic,
                &[*p],
                timestamp
            ))?);
        }
        Ok(found)
    }

    /// DeleteRecords for each `(partition, before)`, each asked of its leader.
    pub async fn delete_records(
        &mut self,
        topic: &str,
        targets: &[(i32, i64)],
    ) -> Result<Vec<(i32, i64)>, ClientError> {
        let mut done = Vec::with_capacity(targets.len());
        for target in targets {
            done.extend(on_leader!(self, topic, target.0, |c| c
                .delete_records(topic, &[*target]))?);
        }
        Ok(done)
    }
}
