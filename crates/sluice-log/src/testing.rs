//! Builders of valid record batches, and a reader of a whole log, for tests and benchmarks (not
//! part of the API).

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// A RecordBatch v2 of `count` records with `value_bytes`-byte values and keys `k<i>`,
/// timestamps `first_timestamp + i`, compressed with codec id `codec` (0 none … 4 zstd).
pub fn batch_bytes(
    base_offset: i64,
    count: usize,
    first_timestamp: i64,
    value_bytes: usize,
    codec: i16,
) -> Vec<u8> {
    let records: Vec<Record> = (0..count)
        .map(|i| {
            let mut r = plain_record(
                base_offset + i as i64,
                first_timestamp + i as i64,
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(vec![b'a' + (i % 26) as u8; value_bytes])),
            );
            r.headers = [(
                StrBytes::from_static_str("h"),
                Some(Bytes::from_static(b"v")),
            )]
            .into_iter()
            .collect();
            r
        })
        .collect();
    let compression = match codec {
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        4 => Compression::Zstd,
        _ => Compression::None,
    };
    encode(&records, compression)
}

/// A record of a producer without idempotence (the sequence only keeps the encoder from
/// splitting the batch; -1 is patched in by [`encode`]).
fn plain_record(offset: i64, timestamp: i64, key: Option<Bytes>, value: Option<Bytes>) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: offset as i32,
        timestamp,
        key,
        value,
        headers: Default::default(),
    }
}

/// One batch of `records`, with base sequence -1 as a producer without idempotence sends.
fn encode(records: &[Record], compression: Compression) -> Vec<u8> {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encoding test records");
    let mut bytes = buf.to_vec();
    assert_eq!(
        i32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize + 12,
        bytes.len(),
        "one batch"
    );
    set_producer(&mut bytes, -1, -1, -1, false);
    bytes
}

/// Like [`batch_bytes`], from an idempotent producer: id, epoch and first sequence set.
pub fn idempotent_batch_bytes(
    producer_id: i64,
    epoch: i16,
    first_sequence: i32,
    count: usize,
    value_bytes: usize,
) -> Vec<u8> {
    let mut bytes = batch_bytes(0, count, 1_000, value_bytes, 0);
    set_producer(&mut bytes, producer_id, epoch, first_sequence, false);
    bytes
}

/// Like [`idempotent_batch_bytes`], inside a transaction (the transactional attribute set).
pub fn transactional_batch_bytes(
    producer_id: i64,
    epoch: i16,
    first_sequence: i32,
    count: usize,
) -> Vec<u8> {
    let mut bytes = batch_bytes(0, count, 1_000, 8, 0);
    set_producer(&mut bytes, producer_id, epoch, first_sequence, true);
    bytes
}

/// An uncompressed batch of the given key → value records (`None` is a tombstone), all at
/// `timestamp`, from a producer without idempotence.
pub fn keyed_batch_bytes(records: &[(&str, Option<&str>)], timestamp: i64) -> Vec<u8> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| {
            plain_record(
                i as i64,
                timestamp,
                Some(Bytes::from(key.to_string())),
                value.map(|v| Bytes::from(v.to_string())),
            )
        })
        .collect();
    encode(&records, Compression::None)
}

/// Marks a batch as written by `producer_id` at `epoch` from `first_sequence` (inside a
/// transaction when `transactional`) and recomputes its CRC.
pub fn set_producer(
    bytes: &mut [u8],
    producer_id: i64,
    epoch: i16,
    first_sequence: i32,
    transactional: bool,
) {
    bytes[43..51].copy_from_slice(&producer_id.to_be_bytes());
    bytes[51..53].copy_from_slice(&epoch.to_be_bytes());
    bytes[53..57].copy_from_slice(&first_sequence.to_be_bytes());
    let mut attributes = i16::from_be_bytes([bytes[21], bytes[22]]);
    if transactional {
        attributes |= 0x10;
    }
    bytes[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// Reads `log` from its log start to its end: `visit` gets each read's bytes and the offset
/// still wanted, and returns the offset after what it took. Panics on a log that cannot be read
/// or a read that makes no progress: for tests only.
fn read_from_start(log: &crate::Log, mut visit: impl FnMut(Bytes, crate::Offset) -> crate::Offset) {
    let mut offset = log.log_start_offset();
    while offset < log.next_offset() {
        let buf = log
            .read(offset, 1 << 20, log.next_offset(), true)
            .expect("a readable log")
            .load()
            .expect("a readable segment");
        assert!(!buf.is_empty(), "no progress at offset {offset}");
        let before = offset;
        offset = visit(buf, offset);
        assert!(offset > before, "nothing at or after {before}");
    }
}

/// Every record of `log` from its log start, markers included, in offset order (records that
/// share a batch with the log start but lie below it are left out). Panics on a log that
/// cannot be read: for tests only.
pub fn records_from_start(log: &crate::Log) -> Vec<Record> {
    let mut out = Vec::new();
    read_from_start(log, |buf, mut offset| {
        let mut rest = buf;
        while !rest.is_empty() {
            let extent = crate::batch::peek_extent(&rest).expect("a whole batch");
            let mut batch = rest.split_to(extent.total_bytes);
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut batch)
                .expect("a decodable batch");
            out.extend(set.records.into_iter().filter(|r| r.offset >= offset.0));
            // A batch may end past its last record (a cleaned one) or hold none at all.
            offset = offset.max(crate::Offset(extent.last_offset.0 + 1));
        }
        offset
    });
    out
}

/// Appends every batch of `leader` from its log start to `follower`, as replication copies
/// them. Panics on a log that cannot be read or a batch the follower refuses: for tests only.
pub fn replicate_from_start(leader: &crate::Log, follower: &mut crate::Log) {
    read_from_start(leader, |buf, offset| {
        let mut next = offset;
        let mut rest = &buf[..];
        while !rest.is_empty() {
            let extent = crate::batch::peek_extent(rest).expect("a whole batch");
            let (batch, after) = rest.split_at(extent.total_bytes);
            if extent.last_offset >= next {
                follower
                    .append_assigned(batch)
                    .expect("a batch the follower takes");
                next = crate::Offset(extent.last_offset.0 + 1);
            }
            rest = after;
        }
        next
    });
}

/// The header of every batch of `log` from the segment holding its log start, each batch's CRC
/// checked. Panics on a log that cannot be read or a damaged batch: for tests only.
pub fn batch_headers_from_start(log: &crate::Log) -> Vec<crate::BatchHeader> {
    let mut out = Vec::new();
    read_from_start(log, |buf, mut offset| {
        let mut rest = &buf[..];
        while !rest.is_empty() {
            let extent = crate::batch::peek_extent(rest).expect("a whole batch");
            let (batch, next) = rest.split_at(extent.total_bytes);
            let header = crate::batch::check_stored(batch).expect("an intact batch");
            rest = next;
            if header.last_offset() >= offset {
                offset = crate::Offset(header.last_offset().0 + 1);
                out.push(header);
            }
        }
        offset
    });
    out
}
