//! Building and reading record batches, over the `kafka-protocol` record codec.

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::error::ClientError;

/// A record to send.
#[derive(Debug, Clone, Default)]
pub struct OutRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    pub timestamp_ms: i64,
}

/// A record received.
#[derive(Debug, Clone, PartialEq)]
pub struct InRecord {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

pub fn compression_from_name(name: &str) -> Option<Compression> {
    Some(match name {
        "none" => Compression::None,
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        _ => return None,
    })
}

/// Encodes `records` as one RecordBatch v2 (offsets from 0; the broker assigns real ones).
pub fn encode_batch(records: &[OutRecord], compression: Compression) -> Result<Bytes, ClientError> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch where offset − sequence changes; keep it constant.
            sequence: i as i32,
            timestamp: r.timestamp_ms,
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (StrBytes::from_string(k.clone()), v.clone()))
                .collect(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .map_err(|e| ClientError::Protocol(format!("encoding records: {e:#}")))?;
    // Not idempotent: the base sequence of a plain producer's batch is -1; the CRC covers it.
    if buf.len() >= 61 {
        buf[53..57].copy_from_slice(&(-1i32).to_be_bytes());
        let crc = crc32c::crc32c(&buf[21..]);
        buf[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    Ok(buf.freeze())
}

/// Decodes every whole batch in `bytes` (a trailing partial batch is ignored), skipping
/// control records.
pub fn decode_batches(bytes: &Bytes) -> Result<Vec<InRecord>, ClientError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while bytes.len() >= at + 12 {
        let length =
            i32::from_be_bytes([bytes[at + 8], bytes[at + 9], bytes[at + 10], bytes[at + 11]]);
        let total = 12
            + usize::try_from(length)
                .map_err(|_| ClientError::Protocol("negative batch length".into()))?;
        if bytes.len() < at + total {
            break;
        }
        let mut batch = bytes.slice(at..at + total);
        let set = RecordBatchDecoder::decode(&mut batch)
            .map_err(|e| ClientError::Protocol(format!("decoding records: {e:#}")))?;
        for r in set.records {
            if r.control {
                continue;
            }
            out.push(InRecord {
                offset: r.offset,
                timestamp_ms: r.timestamp,
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            });
        }
        at += total;
    }
    Ok(out)
}

/// The offset after the last whole batch in `bytes`, or `from` if there is none: where the
/// next fetch starts. A batch may end past its last record (compaction), hold no records at
/// all (a producer's emptied last batch) or hold only a transaction marker.
pub fn offset_after_batches(bytes: &Bytes, from: i64) -> i64 {
    let mut next = from;
    let mut at = 0usize;
    // Up to and including lastOffsetDelta; a whole header is 61 bytes (length 49 at least).
    while let Some(head) = bytes.get(at..at + 27) {
        let mut base = [0u8; 8];
        base.copy_from_slice(&head[0..8]);
        let length = i32::from_be_bytes([head[8], head[9], head[10], head[11]]);
        let last_delta = i32::from_be_bytes([head[23], head[24], head[25], head[26]]);
        let total = match usize::try_from(length) {
            Ok(length) if length >= 49 => 12 + length,
            _ => break,
        };
        if bytes.len() < at + total {
            break; // a partial batch at the end of a fetch
        }
        next = next.max(
            i64::from_be_bytes(base)
                .saturating_add(i64::from(last_delta))
                .saturating_add(1),
        );
        at += total;
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip() {
        let records: Vec<OutRecord> = (0..5)
            .map(|i| OutRecord {
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from(format!("v{i}"))),
                headers: vec![("h".into(), Some(Bytes::from_static(b"x")))],
                timestamp_ms: 1000 + i,
            })
            .collect();
        for c in ["none", "gzip", "snappy", "lz4", "zstd"] {
            let batch = encode_batch(&records, compression_from_name(c).unwrap()).unwrap();
            let back = decode_batches(&batch).unwrap();
            assert_eq!(back.len(), 5);
            assert_eq!(back[3].value.as_deref(), Some(&b"v3"[..]));
            assert_eq!(back[3].headers[0].0, "h");
            assert_eq!(i32::from_be_bytes(batch[53..57].try_into().unwrap()), -1);
        }
    }

    #[test]
    fn the_next_fetch_starts_after_the_last_whole_batch_not_the_last_record() {
        let record = |i: i64| OutRecord {
            key: None,
            value: Some(Bytes::from(format!("v{i}"))),
            headers: Vec::new(),
            timestamp_ms: 1000,
        };
        let batch = encode_batch(&[record(0), record(1)], Compression::None).unwrap();
        // The same batch at offset 10, ending at 14 with its last records cleaned away, then a
        // record-less header at 15-16 (a producer's emptied last batch), then half a batch.
        let mut at_10 = batch.to_vec();
        at_10[0..8].copy_from_slice(&10i64.to_be_bytes());
        at_10[23..27].copy_from_slice(&4i32.to_be_bytes());
        let mut emptied = at_10[..61].to_vec();
        emptied[0..8].copy_from_slice(&15i64.to_be_bytes());
        emptied[8..12].copy_from_slice(&49i32.to_be_bytes());
        emptied[23..27].copy_from_slice(&1i32.to_be_bytes());
        emptied[57..61].copy_from_slice(&0i32.to_be_bytes());
        let mut bytes = at_10.clone();
        assert_eq!(offset_after_batches(&Bytes::from(bytes.clone()), 10), 15);
        bytes.extend_from_slice(&emptied);
        assert_eq!(offset_after_batches(&Bytes::from(bytes.clone()), 10), 17);
        bytes.extend_from_slice(&batch[..40]);
        assert_eq!(offset_after_batches(&Bytes::from(bytes), 10), 17);
        assert_eq!(offset_after_batches(&Bytes::new(), 10), 10);
        assert_eq!(offset_after_batches(&Bytes::from(at_10), 20), 20);
    }
}
