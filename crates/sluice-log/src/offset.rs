//! Typed positions in a partition's log (STYLE.md §4): an offset is not a byte count and a
//! leader epoch is not an offset, so each gets its own type.

use std::fmt;

/// The offset of a record in a partition: the n-th record ever appended, starting at 0.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Offset(pub i64);

impl Offset {
    pub const ZERO: Offset = Offset(0);

    pub fn value(self) -> i64 {
        self.0
    }

    /// The offset `n` records later.
    pub fn plus(self, n: i64) -> Offset {
        Offset(self.0 + n)
    }

    /// Distance from `base`, as stored in a segment's index (relative offsets fit in 32 bits
    /// because a segment is rolled before it would span more than `u32::MAX` offsets).
    pub fn relative_to(self, base: Offset) -> Option<u32> {
        u32::try_from(self.0.checked_sub(base.0)?).ok()
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The epoch of the partition leader that appended a batch (KIP-101); stamped into every
/// stored batch so that replication can find where a follower's log diverges.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaderEpoch(pub i32);

impl fmt::Display for LeaderEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
