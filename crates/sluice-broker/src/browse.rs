//! Reading records for people (the console's message browser): a window of a partition's
//! records from the oldest, the newest, an offset or a time, decoded (decompressed, control
//! records left out), in either order.

use bytes::Bytes;
use kafka_protocol::records::{RecordBatchDecoder, TimestampType};
use serde::Serialize;
use sluice_log::Offset;

use crate::broker::Broker;
use crate::error::BrokerError;

/// The most records one browse returns.
pub const MAX_BROWSE: usize = 500;

/// Where a browse starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrowseFrom {
    Oldest,
    Newest,
    Offset(i64),
    /// The first record with a timestamp at or after this (ms since the epoch).
    Timestamp(i64),
}

/// One record as the browser shows it.
#[derive(Debug, Clone, Serialize)]
pub struct BrowsedRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub timestamp_type: &'static str,
    #[serde(skip)]
    pub key: Option<Bytes>,
    #[serde(skip)]
    pub value: Option<Bytes>,
    #[serde(skip)]
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// A window of records and where the partition's ends were when it was read.
#[derive(Debug, Clone)]
pub struct BrowsePage {
    pub records: Vec<BrowsedRecord>,
    pub log_start_offset: i64,
    pub high_watermark: i64,
}

impl Broker {
    /// Up to `limit` (≤ [`MAX_BROWSE`]) records of a partition. `newest_first` walks backwards
    /// from the start point (inclusive), otherwise forwards.
    pub fn browse(
        &self,
        topic: &str,
        partition: i32,
        from: BrowseFrom,
        newest_first: bool,
        limit: usize,
    ) -> Result<BrowsePage, BrokerError> {
        let limit = limit.clamp(1, MAX_BROWSE);
        let p = self.partition_of(topic, partition)?;
        let progress = p.progress();
        let (start, end) = (progress.log_start.0, progress.visible.0);
        let anchor = match from {
            BrowseFrom::Oldest => start,
            BrowseFrom::Newest => end - 1,
            BrowseFrom::Offset(o) => o,
            BrowseFrom::Timestamp(t) => match p.offset_for_timestamp(t)? {
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
            let mut buf = bytes;
            let sets = RecordBatchDecoder::decode_all(&mut buf).map_err(|e| {
                BrokerError::InvalidRequest(format!("cannot decode stored records: {e:#}"))
            })?;
            let mut last = offset;
            for set in sets {
                for r in set.records {
                    last = last.max(r.offset);
                    if r.offset < offset || r.offset > hi || r.control || records.len() >= limit {
                        continue;
                    }
                    records.push(BrowsedRecord {
                        offset: r.offset,
                        timestamp: r.timestamp,
                        timestamp_type: match r.timestamp_type {
                            TimestampType::Creation => "CreateTime",
                            TimestampType::LogAppend => "LogAppendTime",
                        },
                        key: r.key,
                        value: r.value,
                        headers: r
                            .headers
                            .into_iter()
                            .map(|(k, v)| (k.to_string(), v))
                            .collect(),
                    });
                }
            }
            offset = last.max(offset) + 1;
        }
        if newest_first && from != BrowseFrom::Oldest {
            records.reverse();
        }
        Ok(BrowsePage {
            records,
            log_start_offset: start,
            high_watermark: end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::broker_with_records;

    #[test]
    fn windows_forwards_and_backwards() {
        let (_dir, broker) = broker_with_records("t", 10);
        let page = broker.browse("t", 0, BrowseFrom::Oldest, false, 3).unwrap();
        let offsets: Vec<i64> = page.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![0, 1, 2]);
        assert_eq!(page.high_watermark, 10);

        let page = broker.browse("t", 0, BrowseFrom::Newest, true, 3).unwrap();
        let offsets: Vec<i64> = page.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![9, 8, 7]);

        let page = broker
            .browse("t", 0, BrowseFrom::Offset(5), true, 10)
            .unwrap();
        let offsets: Vec<i64> = page.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![5, 4, 3, 2, 1, 0]);

        let page = broker
            .browse("t", 0, BrowseFrom::Offset(8), false, 10)
            .unwrap();
        assert_eq!(page.records.len(), 2);
        assert_eq!(page.records[0].value.as_deref(), Some(&b"value-8"[..]));

        let page = broker
            .browse("t", 0, BrowseFrom::Offset(50), false, 10)
            .unwrap();
        assert!(page.records.is_empty());
    }

    #[test]
    fn by_time_and_bad_targets() {
        let (_dir, broker) = broker_with_records("t", 10);
        // broker_with_records stamps record i with time 1_000 + i.
        let page = broker
            .browse("t", 0, BrowseFrom::Timestamp(1_004), false, 2)
            .unwrap();
        let offsets: Vec<i64> = page.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![4, 5]);
        assert!(matches!(
            broker.browse("nope", 0, BrowseFrom::Oldest, false, 1),
            Err(BrokerError::UnknownTopic(_))
        ));
        assert!(matches!(
            broker.browse("t", 7, BrowseFrom::Oldest, false, 1),
            Err(BrokerError::UnknownTopic(_))
        ));
    }
}
