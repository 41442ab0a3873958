//! Bounded decompression of a produced batch's records, so that the broker can check them as
//! Kafka does. The codecs' own crates do the work; the bound is ours: a small batch that
//! claims or inflates to more than [`MAX_DECOMPRESSED_BYTES`] is refused before it is held in
//! memory (a "zip bomb" must not take the broker down).

use std::io::Read;

use crate::error::BatchError;

/// The most bytes one batch's records may decompress to. Kafka has no such bound; 64 MiB is
/// far above what a client's batch holds (librdkafka and the Java client cap a batch's
/// uncompressed size near `batch.size`/`message.max.bytes`, 1 MB by default).
pub const MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

/// The xerial framing the Java client puts around snappy (librdkafka reads it and may write
/// raw snappy instead).
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_BYTES: usize = 16;

/// Decompresses `compressed` (codec id 1 gzip, 2 snappy, 3 lz4, 4 zstd) into at most `limit`
/// bytes.
pub fn decompress(codec: i16, compressed: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
    let invalid = |what: &str, e: &dyn std::fmt::Display| {
        BatchError::InvalidRecords(format!("{what} records do not decompress: {e}"))
    };
    match codec {
        1 => read_bounded(flate2::read::MultiGzDecoder::new(compressed), limit, "gzip"),
        2 => snappy(compressed, limit),
        3 => {
            let decoder = lz4::Decoder::new(compressed).map_err(|e| invalid("lz4", &e))?;
            read_bounded(decoder, limit, "lz4")
        }
        4 => {
            let decoder =
                zstd::stream::read::Decoder::new(compressed).map_err(|e| invalid("zstd", &e))?;
            read_bounded(decoder, limit, "zstd")
        }
        other => Err(BatchError::InvalidRecords(format!(
            "unknown compression codec {other}"
        ))),
    }
}

fn too_big(codec: &str, limit: usize) -> BatchError {
    BatchError::InvalidRecords(format!(
        "{codec} records decompress to more than {limit} bytes"
    ))
}

fn read_bounded(reader: impl Read, limit: usize, codec: &str) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(cap).read_to_end(&mut out).map_err(|e| {
        BatchError::InvalidRecords(format!("{codec} records do not decompress: {e}"))
    })?;
    if out.len() > limit {
        return Err(too_big(codec, limit));
    }
    Ok(out)
}

fn snappy(compressed: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
    if !compressed.starts_with(XERIAL_MAGIC) {
        return snappy_block(compressed, limit, Vec::new());
    }
    let mut blocks = compressed.get(XERIAL_HEADER_BYTES..).ok_or_else(|| {
        BatchError::InvalidRecords("snappy records: truncated xerial header".into())
    })?;
    let mut out = Vec::new();
    while !blocks.is_empty() {
        let (length, rest) = blocks
            .split_first_chunk::<4>()
            .ok_or_else(|| BatchError::InvalidRecords("snappy records: truncated block".into()))?;
        let length = u32::from_be_bytes(*length) as usize;
        let block = rest
            .get(..length)
            .ok_or_else(|| BatchError::InvalidRecords("snappy records: truncated block".into()))?;
        out = snappy_block(block, limit, out)?;
        blocks = &rest[length..];
    }
    Ok(out)
}

/// Appends one raw snappy block to `out`, checking its declared size before allocating.
fn snappy_block(block: &[u8], limit: usize, mut out: Vec<u8>) -> Result<Vec<u8>, BatchError> {
    let invalid = |e: snap::Error| {
        BatchError::InvalidRecords(format!("snappy records do not decompress: {e}"))
    };
    let length = snap::raw::decompress_len(block).map_err(invalid)?;
    let start = out.len();
    if start.saturating_add(length) > limit {
        return Err(too_big("snappy", limit));
    }
    out.resize(start + length, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(invalid)?;
    out.truncate(start + written);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const TEXT: &[u8] = b"the same few words, again and again; the same few words, again and again";

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    fn lz4(bytes: &[u8]) -> Vec<u8> {
        let mut e = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
        e.write_all(bytes).unwrap();
        let (out, result) = e.finish();
        result.unwrap();
        out
    }

    fn xerial(bytes: &[u8]) -> Vec<u8> {
        let mut out = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        for chunk in bytes.chunks(10) {
            let block = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
            out.extend_from_slice(&(block.len() as u32).to_be_bytes());
            out.extend_from_slice(&block);
        }
        out
    }

    #[test]
    fn every_codec_round_trips() {
        let raw_snappy = snap::raw::Encoder::new().compress_vec(TEXT).unwrap();
        let zstd = zstd::encode_all(TEXT, 3).unwrap();
        for (codec, bytes) in [
            (1, gzip(TEXT)),
            (2, raw_snappy),
            (2, xerial(TEXT)),
            (3, lz4(TEXT)),
            (4, zstd),
        ] {
            assert_eq!(decompress(codec, &bytes, 1 << 20).unwrap(), TEXT, "{codec}");
        }
    }

    #[test]
    fn garbage_and_bombs_are_refused_without_inflating_them() {
        for codec in 1..=4 {
            let err = decompress(codec, b"not compressed at all", 1 << 20).unwrap_err();
            assert!(err.to_string().contains("decompress"), "{codec}: {err}");
        }
        assert!(decompress(5, b"x", 10).is_err());
        let zeros = vec![0u8; 8 << 20];
        let limit = 1 << 20;
        let bombs = [
            (1, gzip(&zeros)),
            (3, lz4(&zeros)),
            (4, zstd::encode_all(&zeros[..], 3).unwrap()),
            (2, snap::raw::Encoder::new().compress_vec(&zeros).unwrap()),
        ];
        for (codec, bomb) in bombs {
            assert!(bomb.len() < limit / 2, "{codec}: a small input");
            let err = decompress(codec, &bomb, limit).unwrap_err();
            assert!(err.to_string().contains("more than"), "{codec}: {err}");
        }
        // A raw snappy block that only claims a huge size is refused before allocating.
        let mut claim = Vec::new();
        let mut n: u32 = u32::MAX;
        while n >= 0x80 {
            claim.push((n as u8) | 0x80);
            n >>= 7;
        }
        claim.push(n as u8);
        claim.extend_from_slice(b"tiny");
        assert!(decompress(2, &claim, limit)
            .unwrap_err()
            .to_string()
            .contains("more than"));
    }
}
