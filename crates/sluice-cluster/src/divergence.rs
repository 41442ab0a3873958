//! Where a follower's log diverges from its leader's (KIP-101, KIP-320, and the diverging epoch
//! of Fetch v12+ from KIP-595). Pure: the broker's fetch path and the simulation use the same
//! two rules.
//!
//! ```text
//!   follower: fetch(offset = its log end, last fetched epoch E)
//!   leader:   where did E end here?  ─▶ same epoch, at or past the offset: send records
//!                                    ─▶ otherwise: diverging (epoch, end)
//!   follower: truncate to min(end, where that epoch ends in its own log), fetch again
//! ```

use sluice_log::{LeaderEpoch, Offset};

/// The leader's check of a follower's position. `last_fetched_epoch` and `fetch_offset` come
/// from the fetch (a negative epoch: the follower has no epoch to say, nothing to check);
/// `epoch_end` is the leader's answer to "where did `last_fetched_epoch` end here" (`None` if
/// no epoch at or below it wrote here); `latest` gives the leader's log end and newest epoch
/// (asked only when the epoch is newer than any here, off the fetch path's common case).
/// Returns the epoch and end offset the follower must truncate to, or `None` when its log
/// matches the leader's up to its fetch offset.
pub fn diverging(
    last_fetched_epoch: i32,
    fetch_offset: Offset,
    epoch_end: Option<(LeaderEpoch, Offset)>,
    latest: impl FnOnce() -> (Offset, Option<LeaderEpoch>),
) -> Option<(LeaderEpoch, Offset)> {
    if last_fetched_epoch < 0 {
        return None;
    }
    match epoch_end {
        Some((epoch, end)) if epoch.0 != last_fetched_epoch || end < fetch_offset => {
            Some((epoch, end))
        }
        Some(_) => None,
        // Newer than any epoch that wrote here: none of the follower's records of that epoch
        // are here (this leader's own epoch began at its log end, and it has written nothing
        // in it yet). The follower goes back to where our newest epoch ends.
        None => {
            let (end, newest) = latest();
            Some((newest.unwrap_or(LeaderEpoch(last_fetched_epoch)), end))
        }
    }
}

/// The follower's side: the leader said its log diverged at `leader_end` of `epoch`; `ours`
/// is where that epoch ends in the follower's own log (`None`: no such epoch here). The
/// follower cuts its log to the returned offset.
pub fn truncation_point(leader_end: Offset, ours: Option<(LeaderEpoch, Offset)>) -> Offset {
    ours.map_or(leader_end, |(_, end)| leader_end.min(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_that_matches_fetches_on() {
        let end = Some((LeaderEpoch(3), Offset(10)));
        assert_eq!(diverging(3, Offset(10), end, || (Offset(12), None)), None);
        assert_eq!(diverging(-1, Offset(99), None, || (Offset(12), None)), None);
    }

    #[test]
    fn a_follower_past_the_end_of_its_epoch_here_truncates() {
        let end = Some((LeaderEpoch(3), Offset(10)));
        assert_eq!(
            diverging(3, Offset(11), end, || (Offset(12), Some(LeaderEpoch(4)))),
            Some((LeaderEpoch(3), Offset(10)))
        );
        // Its epoch never wrote here: the largest older one, to where it ended.
        let older = Some((LeaderEpoch(2), Offset(7)));
        assert_eq!(
            diverging(3, Offset(9), older, || (Offset(12), Some(LeaderEpoch(4)))),
            Some((LeaderEpoch(2), Offset(7)))
        );
        assert_eq!(
            diverging(5, Offset(9), None, || (Offset(12), Some(LeaderEpoch(4)))),
            Some((LeaderEpoch(4), Offset(12)))
        );
    }

    #[test]
    fn the_follower_cuts_at_the_lower_end() {
        assert_eq!(truncation_point(Offset(10), None), Offset(10));
        assert_eq!(
            truncation_point(Offset(10), Some((LeaderEpoch(2), Offset(8)))),
            Offset(8)
        );
        assert_eq!(
            truncation_point(Offset(10), Some((LeaderEpoch(2), Offset(14)))),
            Offset(10)
        );
    }
}
