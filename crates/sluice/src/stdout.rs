//! The CLI's standard output (and, with [`tell`], its standard error). A reader that goes away (`sluice consume ... | head`) ends a
//! command quietly, as it ends `cat`; a broken pipe anywhere else (a broker's connection that
//! closed under a request) stays an error with a non-zero exit status. Before, any broken
//! pipe in the error's chain was taken for the reader's, so a command whose broker went away
//! mid-request exited 0 without a word.

use std::io::{self, StdoutLock, Write};

/// What a write to standard output failed with when its reader had gone.
#[derive(Debug)]
pub struct ReaderGone;

impl std::fmt::Display for ReaderGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output's reader went away")
    }
}

impl std::error::Error for ReaderGone {}

/// Standard output, locked, marking a broken pipe as [`ReaderGone`].
pub struct Out(StdoutLock<'static>);

pub fn lock() -> Out {
    Out(io::stdout().lock())
}

fn mark(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        io::Error::new(io::ErrorKind::BrokenPipe, ReaderGone)
    } else {
        e
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(mark)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(mark)
    }
}

/// `println!` through [`lock`]: standard output's reader going away is an error for the caller
/// to return (and `main` to end quietly on), where `println!` would panic.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!($crate::stdout::lock(), $($arg)*)
    }};
}
pub(crate) use say;

/// `eprintln!` that does not panic: a message to standard error whose reader has gone
/// (`sluice ... 2>&1 | head`) has nowhere to go, so it is dropped, and the command goes on to
/// the exit status it would have had.
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}
pub(crate) use tell;

/// Whether `e` is standard output's reader going away (and nothing to report).
pub fn reader_gone(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .is_some_and(|inner| inner.is::<ReaderGone>())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_standard_outputs_broken_pipe_is_the_reader_gone() {
        let socket = anyhow::Error::new(io::Error::new(io::ErrorKind::BrokenPipe, "socket"))
            .context("sending to 127.0.0.1:9092");
        assert!(!reader_gone(&socket), "a broker's broken pipe is an error");
        let stdout = anyhow::Error::new(mark(io::Error::from(io::ErrorKind::BrokenPipe)))
            .context("printing records");
        assert!(reader_gone(&stdout));
        let other = mark(io::Error::from(io::ErrorKind::WriteZero));
        assert!(
            other.get_ref().is_none(),
            "other errors are left as they are"
        );
    }
}
