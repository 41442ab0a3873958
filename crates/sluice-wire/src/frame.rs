//! Kafka's framing: every request and response is a 4-byte big-endian size and that many bytes.

use bytes::{Buf, Bytes, BytesMut};

/// Why a frame cannot be read; the connection is closed after any of them.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame of {size} bytes exceeds socket.request.max.bytes {max}")]
    TooLarge { size: usize, max: usize },
    #[error("frame size {0} is negative")]
    Negative(i32),
}

/// Takes the next whole frame's payload off the front of `buf`, if it has arrived.
/// The size is checked as soon as its 4 bytes are in, before the payload is buffered.
pub fn next_frame(buf: &mut BytesMut, max_frame_bytes: usize) -> Result<Option<Bytes>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let size = usize::try_from(size).map_err(|_| FrameError::Negative(size))?;
    if size > max_frame_bytes {
        return Err(FrameError::TooLarge {
            size,
            max: max_frame_bytes,
        });
    }
    if buf.len() < 4 + size {
        buf.reserve(4 + size - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(size).freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_frames_and_waits_for_partial_ones() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0, 0, 0, 3, b'a', b'b', b'c', 0, 0, 0, 2, b'x']);
        assert_eq!(
            next_frame(&mut buf, 10).unwrap().unwrap(),
            Bytes::from_static(b"abc")
        );
        assert_eq!(next_frame(&mut buf, 10).unwrap(), None);
        buf.extend_from_slice(b"y");
        assert_eq!(
            next_frame(&mut buf, 10).unwrap().unwrap(),
            Bytes::from_static(b"xy")
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn rejects_oversized_and_negative_sizes_before_buffering() {
        let mut buf = BytesMut::from(&[0, 0, 0, 11][..]);
        assert_eq!(
            next_frame(&mut buf, 10),
            Err(FrameError::TooLarge { size: 11, max: 10 })
        );
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
        assert_eq!(next_frame(&mut buf, 10), Err(FrameError::Negative(-1)));
    }
}
