//! Following a writer: the progress of an object being written, published by the
//! writer on a `tokio::sync::watch` channel and awaited by readers, so a reader sleeps
//! until bytes arrive instead of polling on a timer.
//!
//! This file knows nothing about files; the reader sends bytes itself (sendfile from
//! the handle's file) once [`BodyProgress::wait_for`] says they are there.

use tokio::sync::watch;

/// Why a writer stopped without publishing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFailure {
    /// A disk write, sync or rename failed.
    Disk,
    /// The disk is full and eviction could not make room in time.
    NoSpace,
    /// The writer was dropped or aborted (origin failed, client went away).
    Aborted,
    /// More or fewer bytes than announced, or above the object size limit.
    LengthMismatch,
}

impl WriteFailure {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteFailure::Disk => "disk",
            WriteFailure::NoSpace => "no_space",
            WriteFailure::Aborted => "aborted",
            WriteFailure::LengthMismatch => "length_mismatch",
        }
    }
}

/// State of a body being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// `written` body bytes are in the file (readable with sendfile/pread).
    Writing {
        /// Body bytes written so far.
        written: u64,
    },
    /// Published: the body is complete at `len` bytes.
    Complete {
        /// Final body length.
        len: u64,
    },
    /// The writer failed; the object will never complete.
    Failed {
        /// Body bytes that had been written.
        written: u64,
        /// Why.
        reason: WriteFailure,
    },
}

impl Progress {
    /// Short stable name for logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Progress::Writing { .. } => "writing",
            Progress::Complete { .. } => "complete",
            Progress::Failed { .. } => "failed",
        }
    }
}

/// What [`BodyProgress::wait_for`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readable {
    /// Body bytes `[offset, up_to)` can be read now; more may follow.
    UpTo(u64),
    /// The object is complete and `offset >= len`: nothing more to read.
    End {
        /// Final body length.
        len: u64,
    },
}

/// The writer failed before the requested bytes were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("object writer failed after {written} bytes: {}", reason.as_str())]
pub struct WriterFailed {
    /// Body bytes written before the failure.
    pub written: u64,
    /// Why the writer failed.
    pub reason: WriteFailure,
}

/// A reader's view of a writer's progress.
#[derive(Debug, Clone)]
pub struct BodyProgress {
    rx: watch::Receiver<Progress>,
}

impl BodyProgress {
    pub(crate) fn new(rx: watch::Receiver<Progress>) -> BodyProgress {
        BodyProgress { rx }
    }

    /// Latest progress, without waiting.
    pub fn current(&self) -> Progress {
        *self.rx.borrow()
    }

    /// Wait until body byte `offset` is written (→ `UpTo(n)` with `n > offset`), the
    /// object completed with `len <= offset` (→ `End`), or the writer failed. Bytes
    /// already written before a failure are still reported as readable; the failure is
    /// returned once the reader asks beyond them. Cost: no timers; the task is woken by
    /// the writer's next append.
    pub async fn wait_for(&mut self, offset: u64) -> Result<Readable, WriterFailed> {
        let ready = |p: &Progress| match *p {
            Progress::Writing { written } => written > offset,
            Progress::Complete { .. } | Progress::Failed { .. } => true,
        };
        let waited = self.rx.wait_for(ready).await.map(|p| *p).ok();
        // The writer's Drop always sends a terminal state first; a closed channel
        // without one is still a failure, never a hang.
        let p = match waited {
            Some(p) => p,
            None => match *self.rx.borrow() {
                Progress::Writing { written } => Progress::Failed {
                    written,
                    reason: WriteFailure::Aborted,
                },
                p => p,
            },
        };
        match p {
            Progress::Writing { written } => Ok(Readable::UpTo(written)),
            Progress::Complete { len } if offset < len => Ok(Readable::UpTo(len)),
            Progress::Complete { len } => Ok(Readable::End { len }),
            Progress::Failed { written, .. } if offset < written => Ok(Readable::UpTo(written)),
            Progress::Failed { written, reason } => Err(WriterFailed { written, reason }),
        }
    }
}
