//! The Kafka RecordBatch v2 header: the unit the log stores, byte for byte.
//!
//! Layout (KIP-98, "Message Format"; the CRC is CRC-32C over `attributes..end`):
//! ```text
//!  0 baseOffset int64        27 baseTimestamp int64
//!  8 batchLength int32       35 maxTimestamp int64
//! 12 partitionLeaderEpoch    43 producerId int64
//! 16 magic int8 (= 2)        51 producerEpoch int16
//! 17 crc uint32              53 baseSequence int32
//! 21 attributes int16        57 recordCount int32
//! 23 lastOffsetDelta int32   61 records...
//! ```
//! The produce path validates a batch here, then patches only `baseOffset` and
//! `partitionLeaderEpoch` (outside the CRC) — or, for LogAppendTime topics, the timestamp type
//! and `maxTimestamp`, recomputing the CRC. Records are never re-encoded.

use crate::error::BatchError;
use crate::offset::{LeaderEpoch, Offset};

/// Bytes of the fixed batch header before the first record.
pub const HEADER_BYTES: usize = 61;
/// Bytes before `batchLength` counts: the base offset and the length itself.
pub const LOG_OVERHEAD: usize = 12;
/// Bytes needed to know a batch's offset range: up to and including `lastOffsetDelta`.
pub const OFFSET_RANGE_BYTES: usize = 27;
/// The only record format Sluice stores.
pub const MAGIC_V2: i8 = 2;

const CRC_START: usize = 21;
const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_LOG_APPEND_TIME: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// The decoded fixed header of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: Offset,
    pub batch_length: i32,
    pub partition_leader_epoch: LeaderEpoch,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

fn i16_at(buf: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([buf[at], buf[at + 1]])
}
fn i32_at(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}
fn i64_at(buf: &[u8], at: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    i64::from_be_bytes(b)
}

/// The base offset, total size and last offset of the batch starting at `buf[0]`, read from
/// its first [`OFFSET_RANGE_BYTES`]; `None` if `buf` is shorter than that or the length is
/// impossible. Cheap enough to walk a segment with.
pub fn peek_extent(buf: &[u8]) -> Option<BatchExtent> {
    if buf.len() < OFFSET_RANGE_BYTES {
        return None;
    }
    let batch_length = i32_at(buf, 8);
    let min_length = (HEADER_BYTES - LOG_OVERHEAD) as i32;
    if batch_length < min_length {
        return None;
    }
    let base_offset = Offset(i64_at(buf, 0));
    let last_offset_delta = i32_at(buf, 23);
    if last_offset_delta < 0 {
        return None;
    }
    Some(BatchExtent {
        base_offset,
        last_offset: base_offset.plus(i64::from(last_offset_delta)),
        total_bytes: LOG_OVERHEAD + batch_length as usize,
    })
}

/// Where one batch sits: its offsets and its size in bytes, header included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchExtent {
    pub base_offset: Offset,
    pub last_offset: Offset,
    pub total_bytes: usize,
}

impl BatchHeader {
    /// Decodes the fixed header; checks nothing but that the bytes are there.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        if buf.len() < HEADER_BYTES {
            return Err(BatchError::Truncated {
                needed: HEADER_BYTES,
                available: buf.len(),
            });
        }
        Ok(BatchHeader {
            base_offset: Offset(i64_at(buf, 0)),
            batch_length: i32_at(buf, 8),
            partition_leader_epoch: LeaderEpoch(i32_at(buf, 12)),
            magic: buf[16] as i8,
            crc: u32::from_be_bytes([buf[17], buf[18], buf[19], buf[20]]),
            attributes: i16_at(buf, 21),
            last_offset_delta: i32_at(buf, 23),
            base_timestamp: i64_at(buf, 27),
            max_timestamp: i64_at(buf, 35),
            producer_id: i64_at(buf, 43),
            producer_epoch: i16_at(buf, 51),
            base_sequence: i32_at(buf, 53),
            record_count: i32_at(buf, 57),
        })
    }

    /// Size of the whole batch in bytes, header included.
    pub fn total_bytes(&self) -> usize {
        LOG_OVERHEAD + self.batch_length.max(0) as usize
    }

    pub fn last_offset(&self) -> Offset {
        self.base_offset.plus(i64::from(self.last_offset_delta))
    }

    /// The compression codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn compression(&self) -> i16 {
        self.attributes & ATTR_COMPRESSION_MASK
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_LOG_APPEND_TIME != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }
}

/// Checks the stored CRC-32C of a complete batch.
pub fn crc_matches(batch: &[u8], header: &BatchHeader) -> bool {
    batch.len() >= HEADER_BYTES && crc32c::crc32c(&batch[CRC_START..]) == header.crc
}

/// Full structural check of one stored or incoming batch occupying exactly `batch`:
/// magic, length, CRC and offset-delta consistency.
pub fn check_stored(batch: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(batch)?;
    if header.magic != MAGIC_V2 {
        return Err(BatchError::UnsupportedMagic(header.magic));
    }
    if header.total_bytes() != batch.len()
        || header.batch_length < (HEADER_BYTES - LOG_OVERHEAD) as i32
    {
        return Err(BatchError::BadLength {
            declared: header.batch_length,
            available: batch.len(),
        });
    }
    if !crc_matches(batch, &header) {
        return Err(BatchError::CrcMismatch {
            stored: header.crc,
            computed: crc32c::crc32c(&batch[CRC_START..]),
        });
    }
    if header.last_offset_delta < 0 {
        return Err(BatchError::InvalidRecords(format!(
            "negative lastOffsetDelta {}",
            header.last_offset_delta
        )));
    }
    Ok(header)
}

/// A produce request's batch for one partition, checked and ready to append.
#[derive(Debug)]
pub struct ValidatedBatch {
    pub(crate) bytes: Vec<u8>,
    pub(crate) header: BatchHeader,
}

impl ValidatedBatch {
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    pub fn record_count(&self) -> i64 {
        i64::from(self.header.record_count)
    }

    pub fn total_bytes(&self) -> usize {
        self.bytes.len()
    }
}

/// Validates the records of one partition of a Produce request before anything is written.
/// As in Kafka, a v3+ Produce carries exactly one batch per partition; it must be magic v2,
/// whole, CRC-correct, at most `max_batch_bytes`, not a control batch, and its record count
/// must agree with its offsets (and, uncompressed, with its records).
pub fn validate_produce(
    records: &[u8],
    max_batch_bytes: usize,
) -> Result<ValidatedBatch, BatchError> {
    if records.is_empty() {
        return Err(BatchError::InvalidRecords(
            "no record batch in the request".into(),
        ));
    }
    if records.len() < LOG_OVERHEAD {
        return Err(BatchError::Truncated {
            needed: LOG_OVERHEAD,
            available: records.len(),
        });
    }
    let declared = i32_at(records, 8);
    if declared < (HEADER_BYTES - LOG_OVERHEAD) as i32 {
        return Err(BatchError::BadLength {
            declared,
            available: records.len(),
        });
    }
    let total = LOG_OVERHEAD + declared as usize;
    if total > max_batch_bytes {
        return Err(BatchError::TooLarge {
            bytes: total,
            max: max_batch_bytes,
        });
    }
    if total > records.len() {
        return Err(BatchError::BadLength {
            declared,
            available: records.len(),
        });
    }
    if total < records.len() {
        return Err(BatchError::InvalidRecords(
            "a produce request carries exactly one record batch per partition".into(),
        ));
    }
    // Magic is checked before the CRC: an old-format message set has no CRC-32C.
    if records[16] as i8 != MAGIC_V2 {
        return Err(BatchError::UnsupportedMagic(records[16] as i8));
    }
    let header = check_stored(records)?;
    if header.is_control() {
        return Err(BatchError::InvalidRecords(
            "clients may not write control batches".into(),
        ));
    }
    if header.record_count <= 0 {
        return Err(BatchError::InvalidRecords(format!(
            "record count {} in a batch",
            header.record_count
        )));
    }
    if i64::from(header.last_offset_delta) != i64::from(header.record_count) - 1 {
        return Err(BatchError::InvalidRecords(format!(
            "lastOffsetDelta {} does not match record count {}",
            header.last_offset_delta, header.record_count
        )));
    }
    match header.compression() {
        0 => check_uncompressed_records(&records[HEADER_BYTES..], header.record_count)?,
        1..=4 => {}
        other => {
            return Err(BatchError::InvalidRecords(format!(
                "unknown compression codec {other}"
            )))
        }
    }
    Ok(ValidatedBatch {
        bytes: records.to_vec(),
        header,
    })
}

/// Walks the records of an uncompressed batch: each is a varint length and a body whose
/// offset delta is its index; together they must fill the batch exactly.
fn check_uncompressed_records(mut body: &[u8], record_count: i32) -> Result<(), BatchError> {
    for index in 0..i64::from(record_count) {
        let length = read_varint(&mut body)
            .ok_or_else(|| BatchError::InvalidRecords(format!("record {index}: bad length")))?;
        let length = usize::try_from(length)
            .map_err(|_| BatchError::InvalidRecords(format!("record {index}: negative length")))?;
        if length > body.len() || length == 0 {
            return Err(BatchError::InvalidRecords(format!(
                "record {index}: length {length} exceeds the batch"
            )));
        }
        let mut record = &body[..length];
        record = &record[1..]; // attributes
        read_varint(&mut record).ok_or_else(|| {
            BatchError::InvalidRecords(format!("record {index}: bad timestamp delta"))
        })?;
        let offset_delta = read_varint(&mut record).ok_or_else(|| {
            BatchError::InvalidRecords(format!("record {index}: bad offset delta"))
        })?;
        if offset_delta != index {
            return Err(BatchError::InvalidRecords(format!(
                "record {index} has offset delta {offset_delta}"
            )));
        }
        body = &body[length..];
    }
    if !body.is_empty() {
        return Err(BatchError::InvalidRecords(format!(
            "{} bytes after the last of {record_count} records",
            body.len()
        )));
    }
    Ok(())
}

/// Reads one zig-zag varint (as Kafka records use) and advances `buf` past it.
fn read_varint(buf: &mut &[u8]) -> Option<i64> {
    let mut raw: u64 = 0;
    for (i, byte) in buf.iter().enumerate().take(10) {
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

/// Stamps the offsets and leader epoch of a batch being appended (fields outside the CRC).
pub(crate) fn patch_base_offset(batch: &mut [u8], base_offset: Offset, epoch: LeaderEpoch) {
    batch[0..8].copy_from_slice(&base_offset.0.to_be_bytes());
    batch[12..16].copy_from_slice(&epoch.0.to_be_bytes());
}

/// Marks a batch as LogAppendTime with the broker's time and recomputes its CRC, as Kafka
/// does for topics with `message.timestamp.type=LogAppendTime`.
pub(crate) fn stamp_log_append_time(batch: &mut [u8], now_ms: i64) {
    let attributes = i16_at(batch, 21) | ATTR_LOG_APPEND_TIME;
    batch[21..23].copy_from_slice(&attributes.to_be_bytes());
    batch[35..43].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c(&batch[CRC_START..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::batch_bytes;

    #[test]
    fn parses_what_the_kafka_encoder_writes() {
        let bytes = batch_bytes(7, 3, 1_000, 10, 0);
        let header = check_stored(&bytes).unwrap();
        assert_eq!(header.base_offset, Offset(7));
        assert_eq!(header.record_count, 3);
        assert_eq!(header.last_offset(), Offset(9));
        assert_eq!(header.total_bytes(), bytes.len());
        let extent = peek_extent(&bytes).unwrap();
        assert_eq!(extent.last_offset, Offset(9));
        assert_eq!(extent.total_bytes, bytes.len());
    }

    #[test]
    fn validates_every_codec() {
        for codec in 0..=4 {
            let bytes = batch_bytes(0, 5, 1_000, 64, codec);
            let v = validate_produce(&bytes, 1 << 20).unwrap();
            assert_eq!(v.record_count(), 5, "codec {codec}");
            assert_eq!(v.header().compression(), codec);
        }
    }

    #[test]
    fn rejects_a_flipped_bit_anywhere_under_the_crc() {
        let bytes = batch_bytes(0, 4, 1_000, 16, 0);
        for at in CRC_START..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x01;
            assert!(
                validate_produce(&bad, 1 << 20).is_err(),
                "flip at {at} accepted"
            );
        }
    }

    #[test]
    fn rejects_oversized_truncated_and_wrong_magic() {
        let bytes = batch_bytes(0, 4, 1_000, 100, 0);
        assert!(matches!(
            validate_produce(&bytes, 100),
            Err(BatchError::TooLarge { .. })
        ));
        assert!(matches!(
            validate_produce(&bytes[..bytes.len() - 1], 1 << 20),
            Err(BatchError::BadLength { .. })
        ));
        let mut old = bytes.clone();
        old[16] = 1;
        assert!(matches!(
            validate_produce(&old, 1 << 20),
            Err(BatchError::UnsupportedMagic(1))
        ));
        assert!(validate_produce(&[], 1 << 20).is_err());
        let two = [bytes.clone(), bytes.clone()].concat();
        assert!(matches!(
            validate_produce(&two, 1 << 20),
            Err(BatchError::InvalidRecords(_))
        ));
    }

    #[test]
    fn rejects_a_record_count_that_disagrees_with_the_records() {
        let mut bytes = batch_bytes(0, 4, 1_000, 8, 0);
        // Claim 5 records (and a matching lastOffsetDelta) over 4 real ones; fix the CRC.
        bytes[57..61].copy_from_slice(&5i32.to_be_bytes());
        bytes[23..27].copy_from_slice(&4i32.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[CRC_START..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            validate_produce(&bytes, 1 << 20),
            Err(BatchError::InvalidRecords(_))
        ));
    }

    #[test]
    fn log_append_time_keeps_the_crc_valid() {
        let mut bytes = batch_bytes(0, 2, 1_000, 8, 0);
        stamp_log_append_time(&mut bytes, 99_999);
        let header = check_stored(&bytes).unwrap();
        assert!(header.is_log_append_time());
        assert_eq!(header.max_timestamp, 99_999);
    }

    #[test]
    fn varints_round_trip_known_values() {
        for (bytes, value) in [
            (&[0x00][..], 0i64),
            (&[0x01][..], -1),
            (&[0x02][..], 1),
            (&[0xac, 0x02][..], 150),
        ] {
            let mut b = bytes;
            assert_eq!(read_varint(&mut b), Some(value));
            assert!(b.is_empty());
        }
        let mut unterminated: &[u8] = &[0x80, 0x80];
        assert_eq!(read_varint(&mut unterminated), None);
    }
}
