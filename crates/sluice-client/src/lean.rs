//! Allocation-light record batches for load generation: encode values into an uncompressed
//! RecordBatch v2, and walk the values of a fetched batch without building record structs.
//! Compressed batches go through the `kafka-protocol` codec instead (see `records`).

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::ClientError;

fn put_varint(buf: &mut BytesMut, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn varint_len(value: i64) -> usize {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn get_varint(buf: &[u8], at: &mut usize) -> Option<i64> {
    let mut raw = 0u64;
    for i in 0..10 {
        let b = *buf.get(*at)?;
        *at += 1;
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

/// Encodes `values` (no keys, no headers) as one uncompressed batch stamped `timestamp_ms`.
pub fn encode_values(values: &[&[u8]], timestamp_ms: i64) -> Bytes {
    let mut body = BytesMut::with_capacity(values.iter().map(|v| v.len() + 12).sum::<usize>() + 61);
    body.put_bytes(0, 61);
    for (i, value) in values.iter().enumerate() {
        let len = 1
            + varint_len(0)
            + varint_len(i as i64)
            + varint_len(-1)
            + varint_len(value.len() as i64)
            + value.len()
            + varint_len(0);
        put_varint(&mut body, len as i64);
        body.put_u8(0); // attributes
        put_varint(&mut body, 0); // timestamp delta
        put_varint(&mut body, i as i64); // offset delta
        put_varint(&mut body, -1); // null key
        put_varint(&mut body, value.len() as i64);
        body.put_slice(value);
        put_varint(&mut body, 0); // no headers
    }
    let total = body.len();
    let count = values.len() as i32;
    let mut h = &mut body[..61];
    h.put_i64(0); // base offset
    h.put_i32((total - 12) as i32); // batch length
    h.put_i32(-1); // partition leader epoch
    h.put_i8(2); // magic
    h.put_u32(0); // crc, below
    h.put_i16(0); // attributes: uncompressed, CreateTime
    h.put_i32(count - 1); // last offset delta
    h.put_i64(timestamp_ms);
    h.put_i64(timestamp_ms);
    h.put_i64(-1); // producer id
    h.put_i16(-1); // producer epoch
    h.put_i32(-1); // base sequence
    h.put_i32(count);
    let crc = crc32c::crc32c(&body[21..]);
    body[17..21].copy_from_slice(&crc.to_be_bytes());
    body.freeze()
}

/// Calls `f(offset, value)` for every record of every whole batch in `bytes` at or after
/// `from_offset`; returns one past the last offset seen (or `from_offset`).
pub fn for_each_value(
    bytes: &Bytes,
    from_offset: i64,
    mut f: impl FnMut(i64, &[u8]),
) -> Result<i64, ClientError> {
    let bad = |what: &str| ClientError::Protocol(format!("malformed record batch: {what}"));
    let mut next = from_offset;
    let mut at = 0usize;
    while bytes.len() >= at + 61 {
        let base = i64::from_be_bytes(bytes[at..at + 8].try_into().map_err(|_| bad("header"))?);
        let length = i32::from_be_bytes(
            bytes[at + 8..at + 12]
                .try_into()
                .map_err(|_| bad("header"))?,
        );
        let total = 12 + usize::try_from(length).map_err(|_| bad("length"))?;
        if bytes.len() < at + total {
            break; // a partial batch at the end of a fetch
        }
        let attributes = i16::from_be_bytes([bytes[at + 21], bytes[at + 22]]);
        let last_delta = i32::from_be_bytes(
            bytes[at + 23..at + 27]
                .try_into()
                .map_err(|_| bad("header"))?,
        );
        let control = attributes & 0x20 != 0;
        if !control {
            if attributes & 0x07 == 0 {
                let body = &bytes[at + 61..at + total];
                let mut p = 0usize;
                while p < body.len() {
                    let len = get_varint(body, &mut p).ok_or_else(|| bad("record length"))?;
                    let end = p + usize::try_from(len).map_err(|_| bad("record length"))?;
                    p += 1; // attributes
                    get_varint(body, &mut p).ok_or_else(|| bad("timestamp"))?;
                    let delta = get_varint(body, &mut p).ok_or_else(|| bad("offset delta"))?;
                    let key_len = get_varint(body, &mut p).ok_or_else(|| bad("key"))?;
                    if key_len > 0 {
                        p += key_len as usize;
                    }
                    let value_len = get_varint(body, &mut p).ok_or_else(|| bad("value"))?;
                    let value = if value_len >= 0 {
                        body.get(p..p + value_len as usize)
                            .ok_or_else(|| bad("value bytes"))?
                    } else {
                        &[][..]
                    };
                    if base + delta >= from_offset {
                        f(base + delta, value);
                    }
                    p = end;
                }
            } else {
                for r in crate::records::decode_batches(&bytes.slice(at..at + total))? {
                    if r.offset >= from_offset {
                        f(r.offset, r.value.as_deref().unwrap_or_default());
                    }
                }
            }
        }
        next = next.max(base.saturating_add(i64::from(last_delta)).saturating_add(1));
        at += total;
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lean_batches_decode_with_the_reference_codec_and_back() {
        let values: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 10 + i as usize * 3]).collect();
        let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let batch = encode_values(&refs, 1234);
        let reference = crate::records::decode_batches(&batch).unwrap();
        assert_eq!(reference.len(), 50);
        for (r, v) in reference.iter().zip(&values) {
            assert_eq!(r.value.as_deref(), Some(v.as_slice()));
            assert_eq!(r.timestamp_ms, 1234);
            assert!(r.key.is_none());
        }
        let mut seen = Vec::new();
        let next = for_each_value(&batch, 10, |o, v| seen.push((o, v.to_vec()))).unwrap();
        assert_eq!(next, 50);
        assert_eq!(seen.len(), 40);
        assert_eq!(seen[0], (10, values[10].clone()));
    }

    #[test]
    fn compressed_batches_are_walked_too() {
        let records: Vec<crate::OutRecord> = (0..5)
            .map(|i| crate::OutRecord {
                value: Some(Bytes::from(vec![i as u8; 30])),
                ..Default::default()
            })
            .collect();
        let batch =
            crate::records::encode_batch(&records, kafka_protocol::records::Compression::Lz4)
                .unwrap();
        let mut n = 0;
        for_each_value(&batch, 0, |_, v| {
            assert_eq!(v.len(), 30);
            n += 1;
        })
        .unwrap();
        assert_eq!(n, 5);
    }
}
