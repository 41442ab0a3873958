//! An fsync handed out by the log so that the caller can run it off the append path.
//!
//! Group commit falls out of the shape: while one job runs, appends keep landing in the page
//! cache; the next job covers all of them with one fsync per file.

use std::fs::File;
use std::io;
use std::sync::Arc;

use crate::offset::Offset;

#[derive(Debug)]
pub struct FlushJob {
    pub(crate) files: Vec<Arc<File>>,
    /// Everything below this offset is durable once the job succeeds.
    pub(crate) upto: Offset,
    /// Segments before this base were fully written and are synced by this job.
    pub(crate) recovery_point: Offset,
    /// The log's truncation count when the job was handed out: a log cut back and written
    /// again while the fsync ran holds new bytes below `upto` that this job did not cover.
    pub(crate) truncations: u64,
}

impl FlushJob {
    pub fn upto(&self) -> Offset {
        self.upto
    }

    /// Runs the fsyncs (`fdatasync`); blocking.
    pub fn run(&self) -> io::Result<()> {
        for file in &self.files {
            file.sync_data()?;
        }
        Ok(())
    }
}
