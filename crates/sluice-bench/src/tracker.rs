//! Which sequence numbers of each producer have arrived: finds lost and duplicated records.

#[derive(Debug, Default)]
pub struct Tracker {
    /// One bit per sequence number, per producer.
    seen: Vec<Vec<u64>>,
    pub received: u64,
    pub duplicates: u64,
    pub foreign: u64,
}

impl Tracker {
    pub fn new(producers: usize) -> Tracker {
        Tracker {
            seen: vec![Vec::new(); producers],
            ..Tracker::default()
        }
    }

    /// Notes one arrival; false if it was a duplicate.
    pub fn arrive(&mut self, producer: u32, sequence: u64) -> bool {
        let Some(bits) = self.seen.get_mut(producer as usize) else {
            self.foreign += 1;
            return false;
        };
        let word = (sequence / 64) as usize;
        if word >= bits.len() {
            bits.resize(word + 1, 0);
        }
        let mask = 1u64 << (sequence % 64);
        if bits[word] & mask != 0 {
            self.duplicates += 1;
            return false;
        }
        bits[word] |= mask;
        self.received += 1;
        true
    }

    /// Adds another consumer's arrivals; a record both saw counts as a duplicate.
    pub fn merge(&mut self, other: &Tracker) {
        if self.seen.len() < other.seen.len() {
            self.seen.resize(other.seen.len(), Vec::new());
        }
        let mut overlap = 0u64;
        for (mine, theirs) in self.seen.iter_mut().zip(&other.seen) {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                overlap += u64::from((*m & *t).count_ones());
                *m |= *t;
            }
        }
        self.received += other.received - overlap;
        self.duplicates += overlap;
        self.duplicates += other.duplicates;
        self.foreign += other.foreign;
    }

    fn has(&self, producer: usize, sequence: u64) -> bool {
        self.seen
            .get(producer)
            .and_then(|bits| bits.get((sequence / 64) as usize))
            .is_some_and(|w| w & (1 << (sequence % 64)) != 0)
    }

    /// Sequence numbers below `sent[p]` of producer `p` that never arrived, not counting
    /// those in `failed[p]` (ranges `(first, count)` whose produce was refused).
    pub fn missing(&self, sent: &[u64], failed: &[Vec<(u64, u64)>]) -> u64 {
        sent.iter()
            .enumerate()
            .map(|(p, &n)| {
                // Sorted by first sequence (ranges never overlap): one binary search each.
                let mut refused = failed.get(p).cloned().unwrap_or_default();
                refused.sort_unstable();
                let is_refused = |s: u64| {
                    let after = refused.partition_point(|(f, _)| *f <= s);
                    after > 0 && s < refused[after - 1].0 + refused[after - 1].1
                };
                (0..n)
                    .filter(|s| !self.has(p, *s) && !is_refused(*s))
                    .count() as u64
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_losses_and_duplicates() {
        let mut t = Tracker::new(2);
        for s in [0, 1, 2, 4, 4, 130] {
            t.arrive(0, s);
        }
        t.arrive(1, 0);
        t.arrive(7, 0);
        assert_eq!(t.received, 6);
        assert_eq!(t.duplicates, 1);
        assert_eq!(t.foreign, 1);
        assert_eq!(
            t.missing(&[5, 2], &[]),
            2,
            "producer 0 lost 3, producer 1 lost 1"
        );
        assert_eq!(t.missing(&[131, 1], &[]), 126);
        assert_eq!(
            t.missing(&[5, 2], &[vec![(3, 1)], vec![]]),
            1,
            "a refused record is not lost"
        );
        // Producer 0 has 0, 1, 2, 4 and 130 of 0..131; ranges in any order, ending at the
        // edges of the gaps or inside them.
        assert_eq!(
            t.missing(
                &[131, 1],
                &[vec![(100, 31), (3, 1), (5, 10), (20, 1)], vec![]]
            ),
            126 - 1 - 10 - 1 - 30,
        );
        assert_eq!(t.missing(&[131, 1], &[vec![(0, 131)], vec![]]), 0);
    }

    #[test]
    fn merging_consumers_finds_overlaps() {
        let mut a = Tracker::new(1);
        let mut b = Tracker::new(1);
        a.arrive(0, 1);
        a.arrive(0, 2);
        b.arrive(0, 2);
        b.arrive(0, 100);
        a.merge(&b);
        assert_eq!(a.duplicates, 1);
        assert_eq!(a.received, 3);
        assert_eq!(a.missing(&[101], &[]), 98);
    }
}
