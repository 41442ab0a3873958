//! Encoded responses waiting to be written, sent with one vectored write instead of being
//! copied into one buffer first (a fetch response can be megabytes; the copy cost a
//! replication leader 6% of its CPU).

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes};

/// A queue of frames read as one byte stream.
#[derive(Default)]
pub(crate) struct Frames {
    queue: VecDeque<Bytes>,
    remaining: usize,
}

impl Frames {
    pub(crate) fn push(&mut self, frame: Bytes) {
        if !frame.is_empty() {
            self.remaining += frame.len();
            self.queue.push_back(frame);
        }
    }
}

impl Buf for Frames {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.queue.front().map_or(&[], |frame| frame.as_ref())
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut filled = 0;
        for (slot, frame) in dst.iter_mut().zip(&self.queue) {
            *slot = IoSlice::new(frame);
            filled += 1;
        }
        filled
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(
            cnt <= self.remaining,
            "advanced past the end of the queued frames"
        );
        self.remaining -= cnt;
        while cnt > 0 {
            let Some(front) = self.queue.front_mut() else {
                break;
            };
            if cnt < front.len() {
                front.advance(cnt);
                break;
            }
            cnt -= front.len();
            self.queue.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_frames_in_order_across_partial_advances() {
        let mut frames = Frames::default();
        frames.push(Bytes::from_static(b"abc"));
        frames.push(Bytes::new());
        frames.push(Bytes::from_static(b"defg"));
        assert_eq!(frames.remaining(), 7);
        let mut slices = [IoSlice::new(&[]); 4];
        assert_eq!(frames.chunks_vectored(&mut slices), 2);
        frames.advance(2);
        assert_eq!(frames.chunk(), b"c");
        frames.advance(2);
        assert_eq!(frames.chunk(), b"efg");
        assert_eq!(frames.copy_to_bytes(3).as_ref(), b"efg");
        assert_eq!(frames.remaining(), 0);
        assert!(frames.chunk().is_empty());
    }
}
