//! The records of the bank workload, in a fixed binary layout (33 bytes, big-endian):
//! `tag u8 | id u64 | from u32 | to u32 | amount i64 | sent_us i64`.
//!
//! Commands (topic `<prefix>.commands`): `Transfer` (keyed by the source account: debit it)
//! and `Credit` (keyed by the destination: the saga's second step). Events (`<prefix>.events`,
//! the record of truth): `Debited`, `Refused` (the source could not pay), `Credited`.
//! `sent_us` is when the load generator sent the transfer (microseconds since the epoch),
//! carried to the final credit for the end-to-end latency.

use crate::error::BankError;

pub const RECORD_LEN: usize = 33;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tag {
    Transfer = 1,
    Credit = 2,
    Debited = 3,
    Refused = 4,
    Credited = 5,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub tag: Tag,
    pub id: u64,
    pub from: u32,
    pub to: u32,
    pub amount: i64,
    pub sent_us: i64,
}

impl Record {
    pub fn with_tag(self, tag: Tag) -> Record {
        Record { tag, ..self }
    }

    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut out = [0u8; RECORD_LEN];
        out[0] = self.tag as u8;
        out[1..9].copy_from_slice(&self.id.to_be_bytes());
        out[9..13].copy_from_slice(&self.from.to_be_bytes());
        out[13..17].copy_from_slice(&self.to.to_be_bytes());
        out[17..25].copy_from_slice(&self.amount.to_be_bytes());
        out[25..33].copy_from_slice(&self.sent_us.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Record, BankError> {
        let b: &[u8; RECORD_LEN] = bytes
            .try_into()
            .map_err(|_| BankError::RecordLength(bytes.len()))?;
        let tag = match b[0] {
            1 => Tag::Transfer,
            2 => Tag::Credit,
            3 => Tag::Debited,
            4 => Tag::Refused,
            5 => Tag::Credited,
            other => return Err(BankError::RecordTag(other)),
        };
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            x
        };
        let u32_at = |i: usize| {
            let mut x = [0u8; 4];
            x.copy_from_slice(&b[i..i + 4]);
            x
        };
        Ok(Record {
            tag,
            id: u64::from_be_bytes(u64_at(1)),
            from: u32::from_be_bytes(u32_at(9)),
            to: u32::from_be_bytes(u32_at(13)),
            amount: i64::from_be_bytes(u64_at(17)),
            sent_us: i64::from_be_bytes(u64_at(25)),
        })
    }
}

/// An account's key in every topic.
pub fn account_key(account: u32) -> [u8; 4] {
    account.to_be_bytes()
}

pub fn decode_account(key: &[u8]) -> Result<u32, BankError> {
    let k: [u8; 4] = key
        .try_into()
        .map_err(|_| BankError::AccountKey(key.len()))?;
    Ok(u32::from_be_bytes(k))
}

pub fn decode_balance(value: &[u8]) -> Result<i64, BankError> {
    let v: [u8; 8] = value
        .try_into()
        .map_err(|_| BankError::BalanceLength(value.len()))?;
    Ok(i64::from_be_bytes(v))
}

/// The partition of every topic that holds `account` (all three topics have the same count).
pub fn partition_of(account: u32, partitions: i32) -> i32 {
    (account % partitions.max(1) as u32) as i32
}

/// The workload's topic names under a prefix.
#[derive(Debug, Clone)]
pub struct Topics {
    pub commands: String,
    pub events: String,
    pub balances: String,
}

impl Topics {
    pub fn new(prefix: &str) -> Topics {
        Topics {
            commands: format!("{prefix}.commands"),
            events: format!("{prefix}.events"),
            balances: format!("{prefix}.balances"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn records_round_trip_and_bad_ones_are_refused() {
        let r = Record {
            tag: Tag::Credit,
            id: u64::MAX - 3,
            from: 7,
            to: 9_999,
            amount: -5,
            sent_us: 1_700_000_000_000_000,
        };
        assert_eq!(Record::decode(&r.encode()).unwrap(), r);
        assert!(matches!(
            Record::decode(&[1, 2]),
            Err(BankError::RecordLength(2))
        ));
        let mut bad = r.encode();
        bad[0] = 77;
        assert!(matches!(
            Record::decode(&bad),
            Err(BankError::RecordTag(77))
        ));
        assert_eq!(decode_account(&account_key(42)).unwrap(), 42);
        assert!(decode_balance(&[0; 3]).is_err());
    }
}
