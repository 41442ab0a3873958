//! Transaction markers (control batches, KIP-98): a batch with the control and transactional
//! attributes holding one record whose key is `[version i16][type i16]` (0 = abort,
//! 1 = commit) and whose value is `[version i16][coordinator epoch i32]`. Written by the
//! broker only, at the end of a transaction, on every partition the transaction touched.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::error::BatchError;

/// What a marker says about the producer's open transaction on this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Abort,
    Commit,
}

/// A marker as a batch (offset 0; the log assigns the real one).
pub fn marker_batch(
    marker: Marker,
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    timestamp_ms: i64,
) -> Result<Vec<u8>, BatchError> {
    let kind: i16 = match marker {
        Marker::Abort => 0,
        Marker::Commit => 1,
    };
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&kind.to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let record = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: timestamp_ms,
        key: Some(Bytes::from(key)),
        value: Some(Bytes::from(value)),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        std::slice::from_ref(&record),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| BatchError::InvalidRecords(format!("encoding a transaction marker: {e:#}")))?;
    Ok(buf.to_vec())
}

/// The marker a stored control batch carries; `None` for any other batch or an unknown type.
pub fn marker_of(batch: &[u8]) -> Option<Marker> {
    let mut buf = Bytes::copy_from_slice(batch);
    let set = RecordBatchDecoder::decode(&mut buf).ok()?;
    let record = set.records.first().filter(|r| r.control)?;
    let key = record.key.as_ref()?;
    match key.get(2..4)? {
        [0, 0] => Some(Marker::Abort),
        [0, 1] => Some(Marker::Commit),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchHeader;

    #[test]
    fn markers_round_trip() {
        for marker in [Marker::Abort, Marker::Commit] {
            let batch = marker_batch(marker, 42, 3, 7, 1_000).unwrap();
            let header = BatchHeader::parse(&batch).unwrap();
            assert!(header.is_control() && header.is_transactional());
            assert_eq!((header.producer_id, header.producer_epoch), (42, 3));
            assert_eq!(header.base_sequence, -1);
            assert_eq!(header.record_count, 1);
            assert_eq!(marker_of(&batch), Some(marker));
        }
    }
}
