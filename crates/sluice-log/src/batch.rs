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
pub(crate) const ATTR_COMPRESSION_MASK: i16 = 0x07;
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
    every_record_has_a_key: bool,
}

impl ValidatedBatch {
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// Whether every record has a (non-null) key, as a compacted topic requires.
    pub fn every_record_has_a_key(&self) -> bool {
        self.every_record_has_a_key
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
/// whole, CRC-correct, at most `max_batch_bytes`, not a control batch, its record count must
/// agree with its offsets and its records, and every record must be well formed (a compressed
/// batch is decompressed, within a bound, to check them).
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
    let body = &records[HEADER_BYTES..];
    let every_record_has_a_key = match header.compression() {
        0 => check_records(body, header.record_count)?,
        codec => {
            let body = crate::decompress::decompress(
                codec,
                body,
                crate::decompress::MAX_DECOMPRESSED_BYTES,
            )?;
            check_records(&body, header.record_count)?
        }
    };
    Ok(ValidatedBatch {
        bytes: records.to_vec(),
        header,
        every_record_has_a_key,
    })
}

/// Walks the (uncompressed) records of a batch as Kafka's broker does: each is a varint length
/// and a body whose offset delta is its index and whose key, value and headers fill it
/// exactly; together they must fill the batch. Returns whether every record has a key.
fn check_records(mut body: &[u8], record_count: i32) -> Result<bool, BatchError> {
    let mut every_record_has_a_key = true;
    for index in 0..i64::from(record_count) {
        let bad = |what: &str| BatchError::InvalidRecords(format!("record {index}: {what}"));
        let length = read_varint(&mut body).ok_or_else(|| bad("bad length"))?;
        let length = usize::try_from(length).map_err(|_| bad("negative length"))?;
        if length > body.len() || length == 0 {
            return Err(bad(&format!("length {length} exceeds the batch")));
        }
        let mut record = &body[1..length]; // after the attributes
        read_varint(&mut record).ok_or_else(|| bad("bad timestamp delta"))?;
        let offset_delta = read_varint(&mut record).ok_or_else(|| bad("bad offset delta"))?;
        if offset_delta != index {
            return Err(bad(&format!("offset delta {offset_delta}")));
        }
        let key = read_field(&mut record).ok_or_else(|| bad("bad key"))?;
        every_record_has_a_key &= key.is_some();
        read_field(&mut record).ok_or_else(|| bad("bad value"))?;
        let headers = read_varint(&mut record).ok_or_else(|| bad("bad header count"))?;
        if headers < 0 || headers > record.len() as i64 {
            return Err(bad(&format!("header count {headers}")));
        }
        for _ in 0..headers {
            read_field(&mut record)
                .flatten()
                .ok_or_else(|| bad("bad header key"))?;
            read_field(&mut record).ok_or_else(|| bad("bad header value"))?;
        }
        if !record.is_empty() {
            return Err(bad(&format!("{} bytes after its fields", record.len())));
        }
        body = &body[length..];
    }
    if !body.is_empty() {
        return Err(BatchError::InvalidRecords(format!(
            "{} bytes after the last of {record_count} records",
            body.len()
        )));
    }
    Ok(every_record_has_a_key)
}

/// Reads a varint length and that many bytes (length -1: null, `Some(None)`); `None` when the
/// bytes do not hold them.
fn read_field<'a>(buf: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    let length = read_varint(buf)?;
    if length == -1 {
        return Some(None);
    }
    let length = usize::try_from(length).ok()?;
    let field = buf.get(..length)?;
    *buf = &buf[length..];
    Some(Some(field))
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
    reseal(batch);
}

/// Recomputes a batch's CRC after a change to the bytes it covers.
pub(crate) fn reseal(batch: &mut [u8]) {
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

    /// `batch`'s header (count, codec, …) over another records section, length and CRC fixed.
    fn with_body(batch: &[u8], body: &[u8]) -> Vec<u8> {
        let mut bytes = [&batch[..HEADER_BYTES], body].concat();
        let length = (bytes.len() - LOG_OVERHEAD) as i32;
        bytes[8..12].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[CRC_START..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    #[test]
    fn compressed_records_are_checked_like_uncompressed_ones() {
        for codec in 1..=4 {
            let good = batch_bytes(0, 4, 1_000, 32, codec);
            assert!(validate_produce(&good, 1 << 20).is_ok());
            // A CRC-correct batch whose compressed records are garbage.
            let garbage = with_body(&good, b"these bytes are not compressed records");
            let err = validate_produce(&garbage, 1 << 20).unwrap_err();
            assert_eq!(
                err.kind(),
                crate::error::BatchErrorKind::Invalid,
                "{codec}: {err}"
            );
            // A count that disagrees with the compressed records.
            let mut miscounted = good.clone();
            miscounted[57..61].copy_from_slice(&3i32.to_be_bytes());
            miscounted[23..27].copy_from_slice(&2i32.to_be_bytes());
            let crc = crc32c::crc32c(&miscounted[CRC_START..]);
            miscounted[17..21].copy_from_slice(&crc.to_be_bytes());
            assert!(
                validate_produce(&miscounted, 1 << 20).is_err(),
                "codec {codec}"
            );
        }
    }

    #[test]
    fn a_record_whose_fields_overrun_it_is_refused() {
        let good = batch_bytes(0, 1, 1_000, 8, 0);
        let body = &good[HEADER_BYTES..];
        // length, attributes, timestamp delta, offset delta, then the key length: claim more.
        let mut bad = body.to_vec();
        let key_length_at = 4;
        assert_eq!(bad[key_length_at], 4, "key k0 has length 2, zig-zag 4");
        bad[key_length_at] = 40;
        assert!(matches!(
            validate_produce(&with_body(&good, &bad), 1 << 20),
            Err(BatchError::InvalidRecords(m)) if m.contains("key")
        ));
    }

    #[test]
    fn tells_whether_every_record_has_a_key() {
        use crate::testing::keyed_batch_bytes;
        let keyed = keyed_batch_bytes(&[("a", Some("1")), ("b", None)], 1_000);
        assert!(validate_produce(&keyed, 1 << 20)
            .unwrap()
            .every_record_has_a_key());
        for codec in 0..=4 {
            let bytes = batch_bytes(0, 3, 1_000, 8, codec);
            assert!(validate_produce(&bytes, 1 << 20)
                .unwrap()
                .every_record_has_a_key());
        }
        let mut keyless = batch_bytes(0, 1, 1_000, 8, 0);
        // Key "k0" (length 2) becomes null (-1, zig-zag 1) and the record two bytes shorter.
        let body = &keyless[HEADER_BYTES..];
        let mut record = vec![body[0] - 4, body[1], body[2], body[3], 1];
        record.extend_from_slice(&body[7..]);
        keyless = with_body(&keyless, &record);
        let v = validate_produce(&keyless, 1 << 20).unwrap();
        assert!(!v.every_record_has_a_key());
    }

    proptest::proptest! {
        #[test]
        fn any_compressed_body_is_refused_or_accepted_never_a_panic(
            codec in 1i16..=4,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
        ) {
            let good = batch_bytes(0, 2, 1_000, 8, codec);
            let _ = validate_produce(&with_body(&good, &body), 1 << 20);
        }
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
