//! Blocking threads that bring cold file ranges into the page cache, so the event loop
//! never waits for a disk (DESIGN.md: "a disk read inside the event loop stalls every
//! connection on that core"; nginx solves the same with `aio threads`).
//!
//! A pool thread `pread`s the range into a thread-local scratch buffer, which faults the
//! pages into the page cache; the worker then sends them inline with sendfile. The one
//! copy happens only on a cold read, where the disk is far slower than memory. Warming
//! instead of running `sendfile` in the pool keeps the socket out of the pool entirely:
//! a connection that dies while its job runs cannot have its fd reused under the job.
//!
//! One pool per disk (appliance mode has one root, so one pool today; the store will
//! add one per cache directory). Jobs queue on a channel; a semaphore bounds how many
//! wait, so a burst of cold misses applies back-pressure to the connections asking
//! instead of growing a queue without bound.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, Semaphore};

/// Jobs queued per disk before callers wait for a slot.
const QUEUE_SLOTS_PER_THREAD: usize = 64;

/// Scratch buffer per pool thread: one warm job reads at most this much per `pread`.
const SCRATCH_BYTES: usize = 256 * 1024;

struct Job {
    file: File,
    offset: u64,
    len: u64,
    done: oneshot::Sender<io::Result<()>>,
}

/// A per-disk pool of blocking threads.
pub(crate) struct ColdPool {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    slots: Arc<Semaphore>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl ColdPool {
    /// Start `threads` threads.
    pub(crate) fn start(threads: usize) -> io::Result<ColdPool> {
        let threads = threads.max(1);
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut handles = Vec::new();
        for i in 0..threads {
            let rx = rx.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("linerate-cold{i}"))
                    .spawn(move || pool_thread(&rx))?,
            );
        }
        Ok(ColdPool {
            tx: Mutex::new(Some(tx)),
            slots: Arc::new(Semaphore::new(threads * QUEUE_SLOTS_PER_THREAD)),
            threads: Mutex::new(handles),
        })
    }

    /// Read `file[offset .. offset+len)` into the page cache on a pool thread. `file` is
    /// the pool's own descriptor (a dup), so the caller may go away meanwhile.
    pub(crate) async fn warm(&self, file: File, offset: u64, len: u64) -> io::Result<()> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| io::Error::other("cold pool stopped"))?;
        let (done, result) = oneshot::channel();
        {
            let tx = self
                .tx
                .lock()
                .map_err(|_| io::Error::other("cold pool poisoned"))?;
            let Some(tx) = tx.as_ref() else {
                return Err(io::Error::other("cold pool stopped"));
            };
            tx.send(Job {
                file,
                offset,
                len,
                done,
            })
            .map_err(|_| io::Error::other("cold pool stopped"))?;
        }
        result
            .await
            .map_err(|_| io::Error::other("cold pool thread died"))?
    }

    /// Stop accepting jobs and join the threads (after the workers have stopped).
    pub(crate) fn shutdown(&self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        self.slots.close();
        if let Ok(mut threads) = self.threads.lock() {
            for t in threads.drain(..) {
                let _ = t.join();
            }
        }
    }
}

fn pool_thread(rx: &Mutex<mpsc::Receiver<Job>>) {
    let mut scratch = vec![0u8; SCRATCH_BYTES];
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let result = warm_range(&job.file, job.offset, job.len, &mut scratch);
        let _ = job.done.send(result);
    }
}

/// Read the range, stopping early at end of file (a truncated file is the sender's
/// business: sendfile will report it).
fn warm_range(file: &File, mut offset: u64, len: u64, scratch: &mut [u8]) -> io::Result<()> {
    let end = offset.saturating_add(len);
    while offset < end {
        let want = usize::try_from(end - offset)
            .unwrap_or(usize::MAX)
            .min(scratch.len());
        match file.read_at(&mut scratch[..want], offset) {
            Ok(0) => return Ok(()),
            Ok(n) => offset += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
