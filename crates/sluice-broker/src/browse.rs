//! Reading records for people (the console's message browser): a window of a partition's
//! records from the oldest, the newest, an offset or a time, decoded (decompressed, control
//! records left out), in either order.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;
use kafka_protocol::records::{RecordBatchDecoder, RecordSet, TimestampType};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sluice_log::batch::peek_extent;
use sluice_log::{BatchHeader, Offset};

use crate::broker::Broker;
use crate::error::BrokerError;

/// The most records one browse returns.
pub const MAX_BROWSE: usize = 500;
/// The most bytes of a key, value or header value a browse returns (the rest is cut).
pub const SHOWN_BYTES: usize = 64 * 1024;
/// A page stops before its shown bytes pass this, so that it crosses to another node (and to a
/// browser) in one answer of a bounded size; it holds at least one record.
pub const PAGE_BYTES: usize = 8 << 20;

/// Where a browse starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BrowseFrom {
    Oldest,
    Newest,
    Offset(i64),
    /// The first record with a timestamp at or after this (ms since the epoch).
    Timestamp(i64),
}

/// What a browse asks for: up to `limit` (≤ [`MAX_BROWSE`]) records of a partition from
/// `from`; `newest_first` walks backwards from the start point (inclusive), otherwise forwards.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BrowseRequest {
    pub topic: String,
    pub partition: i32,
    pub from: BrowseFrom,
    pub newest_first: bool,
    pub limit: usize,
}

/// A key, value or header value as the browser shows it: at most [`SHOWN_BYTES`] of it, and
/// its full size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShownBytes {
    #[serde(serialize_with = "to_base64", deserialize_with = "from_base64")]
    pub bytes: Bytes,
    pub size: usize,
}

impl ShownBytes {
    fn cut(b: Bytes) -> ShownBytes {
        let size = b.len();
        ShownBytes {
            bytes: b.slice(..size.min(SHOWN_BYTES)),
            size,
        }
    }

    pub fn truncated(&self) -> bool {
        self.bytes.len() < self.size
    }
}

fn to_base64<S: Serializer>(bytes: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&B64.encode(bytes))
}

fn from_base64<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
    let text = String::deserialize(d)?;
    B64.decode(text.as_bytes())
        .map(Bytes::from)
        .map_err(serde::de::Error::custom)
}

/// One record as the browser shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BrowsedRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub timestamp_type: String,
    pub key: Option<ShownBytes>,
    pub value: Option<ShownBytes>,
    pub headers: Vec<(String, Option<ShownBytes>)>,
}

impl BrowsedRecord {
    fn shown_bytes(&self) -> usize {
        let len = |b: &Option<ShownBytes>| b.as_ref().map_or(0, |b| b.bytes.len());
        len(&self.key)
            + len(&self.value)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + len(v))
                .sum::<usize>()
    }
}

/// A window of records and where the partition's ends were when it was read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BrowsePage {
    pub records: Vec<BrowsedRecord>,
    pub log_start_offset: i64,
    pub high_watermark: i64,
}

impl Broker {
    /// A window of a partition's records on this node's replica (see [`BrowseRequest`]).
    pub fn browse(&self, request: &BrowseRequest) -> Result<BrowsePage, BrokerError> {
        let (from, newest_first) = (request.from, request.newest_first);
        let limit = request.limit.clamp(1, MAX_BROWSE);
        let p = self.partition_of(&request.topic, request.partition)?;
        let progress = p.progress();
        let (start, end) = (progress.log_start.0, progress.visible.0);
        let anchor = match from {
            BrowseFrom::Oldest => start,
            BrowseFrom::Newest => end - 1,
            BrowseFrom::Offset(o) => o,
            BrowseFrom::Timestamp(t) => match p.offset_for_timestamp(t, false)? {
                Some((o, _)) => o.0,
                None => end,
            },
        };
        // Forwards from `anchor`, or the window of `limit` offsets ending at it.
        let (lo, hi) = if newest_first && from != BrowseFrom::Oldest {
            let hi = anchor.min(end - 1);
            (hi.saturating_sub(limit as i64 - 1).max(start), hi)
        } else {
            let lo = anchor.max(start);
            (lo, end - 1)
        };
        let mut records = Vec::new();
        let mut offset = lo;
        while offset <= hi && records.len() < limit {
            let (plan, _) = p.read(Offset(offset), 1 << 20, true)?;
            let bytes = p.load(&plan)?;
            if bytes.is_empty() {
                break;
            }
            let (batches, batches_end) = decode_batches(bytes)?;
            // Past the last batch read, which may end past its last record (a cleaned batch,
            // one emptied of its records, a transaction marker).
            let mut last = offset.max(batches_end - 1);
            for (set, log_append_time) in batches {
                for r in set.records {
                    last = last.max(r.offset);
                    if r.offset < offset || r.offset > hi || r.control || records.len() >= limit {
                        continue;
                    }
                    let record = BrowsedRecord {
                        offset: r.offset,
                        timestamp: log_append_time.unwrap_or(r.timestamp),
                        timestamp_type: match r.timestamp_type {
                            TimestampType::Creation => "CreateTime",
                            TimestampType::LogAppend => "LogAppendTime",
                        }
                        .to_string(),
                        key: r.key.map(ShownBytes::cut),
                        value: r.value.map(ShownBytes::cut),
                        headers: r
                            .headers
                            .into_iter()
                            .map(|(k, v)| (k.to_string(), v.map(ShownBytes::cut)))
                            .collect(),
                    };
                    records.push(record);
                }
            }
            offset = last.max(offset) + 1;
        }
        if newest_first && from != BrowseFrom::Oldest {
            records.reverse();
        }
        // The first records in the page's order that fit in PAGE_BYTES (one at least).
        let mut page_bytes = 0;
        let fit = records
            .iter()
            .position(|r| {
                page_bytes += r.shown_bytes();
                page_bytes > PAGE_BYTES
            })
            .map_or(records.len(), |i| i.max(1));
        records.truncate(fit);
        Ok(BrowsePage {
            records,
            log_start_offset: start,
            high_watermark: end,
        })
    }
}

/// Decoded batches and the offset after the last of them (0 if there is none).
type Decoded = (Vec<(RecordSet, Option<i64>)>, i64);

/// The batches in `bytes`, each decoded with the time the broker stamped on it where its
/// topic keeps LogAppendTime: that is the batch's max timestamp, which is every record's time
/// (the records' own deltas still hold the producer's times).
fn decode_batches(bytes: Bytes) -> Result<Decoded, BrokerError> {
    let bad = |e: String| BrokerError::InvalidRequest(format!("cannot decode stored records: {e}"));
    let mut batches = Vec::new();
    let mut end_offset = 0i64;
    let mut at = 0;
    while let Some(extent) = peek_extent(&bytes[at..]) {
        let end = at + extent.total_bytes;
        if end > bytes.len() {
            break;
        }
        let header = BatchHeader::parse(&bytes[at..end]).map_err(|e| bad(e.to_string()))?;
        let mut one = bytes.slice(at..end);
        let sets = RecordBatchDecoder::decode_all(&mut one).map_err(|e| bad(format!("{e:#}")))?;
        let stamped = header.is_log_append_time().then_some(header.max_timestamp);
        batches.extend(sets.into_iter().map(|set| (set, stamped)));
        end_offset = end_offset.max(extent.last_offset.0.saturating_add(1));
        at = end;
    }
    // A read returns whole batches: anything left is a damaged one.
    if at < bytes.len() {
        return Err(bad(format!(
            "{} bytes at the end are not a whole batch",
            bytes.len() - at
        )));
    }
    Ok((batches, end_offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::broker_with_records;

    fn ask(
        topic: &str,
        partition: i32,
        from: BrowseFrom,
        newest_first: bool,
        limit: usize,
    ) -> BrowseRequest {
        BrowseRequest {
            topic: topic.to_string(),
            partition,
            from,
            newest_first,
            limit,
        }
    }

    #[test]
    fn windows_forwards_and_backwards() {
        let (_dir, broker) = broker_with_records("t", 10);
        let page = broker
            .browse(&ask("t", 0, BrowseFrom::Oldest, false, 3))
            .unwrap();
        let offsets: Vec<i64> = page.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![0, 1, 2]);
        assert_eq!(page.high_watermark, 10);

        let page = broker
            .browse(&ask("t", 0, BrowseFrom::Newest, true, 3))
            .unwrap();
        let offsets: Vec<i64> = page.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![9, 8, 7]);

        let page = broker
            .browse(&ask("t", 0, BrowseFrom::Offset(5), true, 10))
            .unwrap();
        let offsets: Vec<i64> = page.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![5, 4, 3, 2, 1, 0]);

        let page = broker
            .browse(&ask("t", 0, BrowseFrom::Offset(8), false, 10))
            .unwrap();
        assert_eq!(page.records.len(), 2);
        let value = page.records[0].value.as_ref().map(|v| &v.bytes[..]);
        assert_eq!(value, Some(&b"value-8"[..]));

        let page = broker
            .browse(&ask("t", 0, BrowseFrom::Offset(50), false, 10))
            .unwrap();
        assert!(page.records.is_empty());
    }

    #[test]
    fn a_log_append_time_topic_shows_the_brokers_time_not_the_producers() {
        let (_dir, broker) = broker_with_records("t", 0);
        let configs = [("message.timestamp.type".to_string(), "LogAppendTime".into())];
        broker
            .topics()
            .create("stamped", 1, configs.into_iter().collect(), false)
            .unwrap();
        for topic in ["t", "stamped"] {
            let record = crate::publish::NewRecord {
                value: Some(Bytes::from_static(b"v")),
                timestamp_ms: Some(1_000),
                ..Default::default()
            };
            broker.publish(topic, 0, record).unwrap();
        }
        let shown = |topic: &str| {
            let page = broker
                .browse(&ask(topic, 0, BrowseFrom::Oldest, false, 1))
                .unwrap();
            (
                page.records[0].timestamp,
                page.records[0].timestamp_type.clone(),
            )
        };
        assert_eq!(shown("t"), (1_000, "CreateTime".to_string()));
        let (at, kind) = shown("stamped");
        assert_eq!(kind, "LogAppendTime");
        assert!(
            at > 1_600_000_000_000,
            "the broker's clock, not the producer's 1000: {at}"
        );
    }

    #[tokio::test]
    async fn large_values_are_cut_and_a_page_is_bounded() {
        let (_dir, broker) = broker_with_records("t", 0);
        for _ in 0..200 {
            broker
                .publish(
                    "t",
                    0,
                    crate::publish::NewRecord {
                        value: Some(Bytes::from(vec![7u8; 100 * 1024])),
                        ..Default::default()
                    },
                )
                .unwrap();
        }
        let page = broker
            .browse(&ask("t", 0, BrowseFrom::Newest, true, 500))
            .unwrap();
        // 64 KiB shown of each value: 128 of them fill the 8 MiB page.
        assert_eq!(page.records.len(), PAGE_BYTES / SHOWN_BYTES);
        assert_eq!(page.records[0].offset, 199, "newest first keeps the newest");
        let value = page.records[0].value.as_ref().unwrap();
        assert_eq!((value.bytes.len(), value.size), (SHOWN_BYTES, 100 * 1024));
        assert!(value.truncated());
        // The page crosses to another node as JSON and comes back the same.
        let json = serde_json::to_string(&page).unwrap();
        let back: BrowsePage = serde_json::from_str(&json).unwrap();
        assert_eq!(back.records[5].value, page.records[5].value);
        assert_eq!(back.records.len(), page.records.len());
    }

    #[test]
    fn by_time_and_bad_targets() {
        let (_dir, broker) = broker_with_records("t", 10);
        // broker_with_records stamps record i with time 1_000 + i.
        let page = broker
            .browse(&ask("t", 0, BrowseFrom::Timestamp(1_004), false, 2))
            .unwrap();
        let offsets: Vec<i64> = page.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![4, 5]);
        assert!(matches!(
            broker.browse(&ask("nope", 0, BrowseFrom::Oldest, false, 1)),
            Err(BrokerError::UnknownTopic(_))
        ));
        assert!(matches!(
            broker.browse(&ask("t", 7, BrowseFrom::Oldest, false, 1)),
            Err(BrokerError::UnknownTopic(_))
        ));
    }
}
