//! What every benchmark record carries: who sent it, its sequence number, and when it was due,
//! so that the consumer measures latency and finds lost or duplicated records.
//!
//! `b"SLB1" producer:u32 sequence:u64 due_ns:u64`, padded to the record size.

pub const HEADER_BYTES: usize = 24;
const MAGIC: &[u8; 4] = b"SLB1";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub producer: u32,
    pub sequence: u64,
    pub due_ns: u64,
}

/// Writes a stamp into the first [`HEADER_BYTES`] of `value` (which is at least that long).
pub fn write(value: &mut [u8], stamp: Stamp) {
    value[..4].copy_from_slice(MAGIC);
    value[4..8].copy_from_slice(&stamp.producer.to_be_bytes());
    value[8..16].copy_from_slice(&stamp.sequence.to_be_bytes());
    value[16..24].copy_from_slice(&stamp.due_ns.to_be_bytes());
}

/// Reads a stamp; `None` for records that are not ours.
pub fn read(value: &[u8]) -> Option<Stamp> {
    if value.len() < HEADER_BYTES || &value[..4] != MAGIC {
        return None;
    }
    Some(Stamp {
        producer: u32::from_be_bytes(value[4..8].try_into().ok()?),
        sequence: u64::from_be_bytes(value[8..16].try_into().ok()?),
        due_ns: u64::from_be_bytes(value[16..24].try_into().ok()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_ignores_foreign_records() {
        let mut v = vec![0u8; 128];
        let s = Stamp {
            producer: 3,
            sequence: 1 << 40,
            due_ns: 123_456_789,
        };
        write(&mut v, s);
        assert_eq!(read(&v), Some(s));
        assert_eq!(read(b"hello world, not a bench record"), None);
        assert_eq!(read(&v[..10]), None);
    }
}
