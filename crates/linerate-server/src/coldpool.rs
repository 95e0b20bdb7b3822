//! Blocking threads that do what could wait for a disk, so the event loop never does
//! (DESIGN.md: "a disk read inside the event loop stalls every connection on that
//! core"; nginx solves the same with `aio threads`).
//!
//! Two kinds of job:
//! - **send** (plain and kTLS connections): the pool thread itself sends a window that
//!   is not in the page cache to the socket, as nginx's `aio threads` does. It splices
//!   the window from the file into a pipe of its own (1 MiB: one large read into large
//!   folios) and from the pipe to the socket (`linerate_sys::pipe` says why not
//!   `sendfile`, or `sendfile` after `POSIX_FADV_WILLNEED`, the fallback when no pipe
//!   could be made). The socket is non-blocking, so the call sends what the socket
//!   buffer takes and returns; only the file side can wait, and it waits here. When the
//!   socket fills first, the rest of the window is brought in before the job ends
//!   (zero-copy, into `/dev/null`), so the worker can send it inline once the socket
//!   drains.
//! - **warm** (user-space TLS, which reads into its own buffer): the range is read into
//!   the page cache, the worker then reads it.
//!
//! A send job gets its own duplicates of the socket and the file descriptors (`dup`),
//! never the connection's: the connection's task can be dropped at any await (its
//! client gone, a stop), which closes its descriptor, and a number closed there can be
//! reused at once by a new connection. With its own descriptors, the pool thread writes
//! to the socket it was given or to nothing: a socket whose connection is gone stays
//! open only until the job ends (one `sendfile`, which ends at `EAGAIN` or an error),
//! then closes with the job's copy. Keeping the connection alive until the job is done
//! instead would need every await on the send path to be uncancellable. The duplicate
//! costs one `fcntl` per cold window, next to a disk read.
//!
//! One pool per disk (appliance mode has one root, so one pool today; the store will
//! add one per cache directory). Jobs queue on a channel; a semaphore bounds how many
//! wait, so a burst of cold misses applies back-pressure to the connections asking
//! instead of growing a queue without bound.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use linerate_sys::pagecache::{self, Advice};
use linerate_sys::pipe::Pipe;
use tokio::sync::{oneshot, Semaphore};

/// Jobs queued per disk before callers wait for a slot.
const QUEUE_SLOTS_PER_THREAD: usize = 64;

/// Scratch buffer per pool thread: one warm job reads at most this much per `pread`.
const SCRATCH_BYTES: usize = 256 * 1024;

/// Size asked for each pool thread's pipe (and each worker's, `transfer`): one splice
/// from a cold file asks the read path for this much at once (see `linerate_sys::pipe`).
pub(crate) const PIPE_BYTES: usize = 1024 * 1024;

/// Most bytes asked of one `sendfile` call in a send job.
const SEND_CHUNK: usize = 2 * 1024 * 1024;

/// A window to send from a pool thread.
pub(crate) struct SendJob {
    /// The job's own duplicate of the connection's socket.
    pub(crate) sock: OwnedFd,
    /// The job's own duplicate of the file.
    pub(crate) file: File,
    /// First byte of the window.
    pub(crate) offset: u64,
    /// Bytes in the window.
    pub(crate) len: u64,
    /// Bytes after the window that the same response will send next (read ahead).
    pub(crate) ahead: u64,
}

/// How a send job ended.
#[derive(Debug)]
pub(crate) enum SendEnd {
    /// The whole window was sent.
    Complete,
    /// The socket buffer filled first (`EAGAIN`); the rest of the window is now in
    /// the page cache.
    WouldBlock,
    /// The file ended before the window did (truncated while being sent).
    Eof,
    /// `sendfile` failed.
    Failed(io::Error),
}

/// What a send job did.
#[derive(Debug)]
pub(crate) struct Sent {
    /// Bytes handed to the socket.
    pub(crate) bytes: u64,
    /// Why it stopped.
    pub(crate) end: SendEnd,
}

enum Job {
    Warm {
        file: File,
        offset: u64,
        len: u64,
        done: oneshot::Sender<io::Result<()>>,
    },
    Send {
        job: SendJob,
        done: oneshot::Sender<Sent>,
    },
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

    /// Queue a job once a slot is free (the slot is held until the job's answer).
    async fn submit<T>(&self, job: impl FnOnce(oneshot::Sender<T>) -> Job) -> io::Result<T> {
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
            tx.send(job(done))
                .map_err(|_| io::Error::other("cold pool stopped"))?;
        }
        result
            .await
            .map_err(|_| io::Error::other("cold pool thread died"))
    }

    /// Read `file[offset .. offset+len)` into the page cache on a pool thread. `file` is
    /// the pool's own descriptor (a dup), so the caller may go away meanwhile.
    pub(crate) async fn warm(&self, file: File, offset: u64, len: u64) -> io::Result<()> {
        self.submit(|done| Job::Warm {
            file,
            offset,
            len,
            done,
        })
        .await?
    }

    /// Send a window on a pool thread (see the module docs). An `Err` means the pool
    /// could not take the job (stopped); a failed `sendfile` is [`SendEnd::Failed`].
    pub(crate) async fn send(&self, job: SendJob) -> io::Result<Sent> {
        self.submit(|done| Job::Send { job, done }).await
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
    // Where warming reads go when the file side is all that matters: `/dev/null`
    // takes spliced pages without copying them. Without it, a read into `scratch`.
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .ok();
    // Cold windows are read through a pipe of this thread's own (see `send_piped`);
    // without one (or after a failure left it unusable), with readahead advice and
    // `sendfile`.
    let mut pipe = Pipe::new(PIPE_BYTES).ok();
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        match job {
            Job::Warm {
                file,
                offset,
                len,
                done,
            } => {
                let result = warm_range(&file, offset, len, &mut scratch);
                let _ = done.send(result);
            }
            Job::Send { job, done } => {
                let sent = match (pipe.as_ref(), null.as_ref()) {
                    (Some(p), Some(n)) => {
                        let (sent, usable) = send_piped(&job, p, n);
                        if !usable {
                            pipe = None;
                        }
                        sent
                    }
                    _ => send_window(&job, null.as_ref(), &mut scratch),
                };
                // Close the job's descriptors before answering: a test (or an operator)
                // that sees the response end must not find them still open.
                drop(job);
                let _ = done.send(sent);
            }
        }
    }
}

/// The send job: read ahead, sendfile what the socket takes, warm what is left.
fn send_window(job: &SendJob, null: Option<&File>, scratch: &mut [u8]) -> Sent {
    let end = job.offset.saturating_add(job.len);
    // One large read for the window, and the next one started behind it. Advice only:
    // an error here changes nothing the sendfile below would not report.
    let _ = pagecache::fadvise(job.file.as_fd(), job.offset, job.len, Advice::WillNeed);
    if job.ahead > 0 {
        let _ = pagecache::fadvise(job.file.as_fd(), end, job.ahead, Advice::WillNeed);
    }
    let mut offset = job.offset;
    let mut bytes = 0u64;
    while offset < end {
        let count = usize::try_from(end - offset)
            .unwrap_or(SEND_CHUNK)
            .min(SEND_CHUNK);
        match linerate_sys::net::sendfile(job.sock.as_fd(), job.file.as_fd(), &mut offset, count) {
            Ok(0) => {
                return Sent {
                    bytes,
                    end: SendEnd::Eof,
                }
            }
            Ok(n) => bytes += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // The worker sends the rest inline once the socket drains: make sure
                // it is in memory by then (a failure shows up in that send).
                let _ = match null {
                    Some(null) => warm_into(null, &job.file, offset, end - offset),
                    None => warm_range(&job.file, offset, end - offset, scratch),
                };
                return Sent {
                    bytes,
                    end: SendEnd::WouldBlock,
                };
            }
            Err(e) => {
                return Sent {
                    bytes,
                    end: SendEnd::Failed(e),
                }
            }
        }
    }
    Sent {
        bytes,
        end: SendEnd::Complete,
    }
}

/// The send job through the thread's pipe: each step splices up to the pipe's
/// capacity from the file (one large read into large folios, where `sendfile` would
/// read 64 KiB at a time), then from the pipe to the socket. When the socket fills,
/// what the pipe holds is dropped (it is in the page cache now) and the rest of the
/// window is read the same way, so the worker can send it inline once the socket
/// drains. No advice for the next window: the kernel's own readahead, whose state the
/// job's duplicate descriptor shares with the connection's, reads on behind a
/// sequential reader. Returns whether the pipe is still usable (empty).
fn send_piped(job: &SendJob, pipe: &Pipe, null: &File) -> (Sent, bool) {
    let end = job.offset.saturating_add(job.len);
    let mut read_to = job.offset;
    let mut bytes = 0u64;
    while read_to < end {
        let want = usize::try_from(end - read_to)
            .unwrap_or(usize::MAX)
            .min(pipe.capacity());
        let got = match pipe.fill(job.file.as_fd(), &mut read_to, want) {
            Ok(0) => {
                return (
                    Sent {
                        bytes,
                        end: SendEnd::Eof,
                    },
                    true,
                )
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return (
                    Sent {
                        bytes,
                        end: SendEnd::Failed(e),
                    },
                    true,
                )
            }
        };
        let mut left = got;
        while left > 0 {
            let e = match pipe.drain(job.sock.as_fd(), left) {
                Ok(0) => io::Error::other("splice to the socket moved nothing"),
                Ok(n) => {
                    left -= n;
                    bytes += n as u64;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => e,
            };
            if !pipe.discard(null.as_fd(), left) {
                return (
                    Sent {
                        bytes,
                        end: SendEnd::Failed(e),
                    },
                    false,
                );
            }
            if e.kind() == io::ErrorKind::WouldBlock {
                // The worker sends the rest inline once the socket drains: make sure
                // it is in memory by then (a failure shows up in that send).
                let usable = warm_piped(pipe, null, &job.file, read_to, end - read_to);
                return (
                    Sent {
                        bytes,
                        end: SendEnd::WouldBlock,
                    },
                    usable,
                );
            }
            return (
                Sent {
                    bytes,
                    end: SendEnd::Failed(e),
                },
                true,
            );
        }
    }
    (
        Sent {
            bytes,
            end: SendEnd::Complete,
        },
        true,
    )
}

/// Read `file[offset .. offset+len)` into the page cache through `pipe` (dropping the
/// pages into `null`). Stops at end of file or an error (the sender will meet it);
/// false if the pipe could not be emptied.
fn warm_piped(pipe: &Pipe, null: &File, file: &File, mut offset: u64, len: u64) -> bool {
    let end = offset.saturating_add(len);
    while offset < end {
        let want = usize::try_from(end - offset)
            .unwrap_or(usize::MAX)
            .min(pipe.capacity());
        match pipe.fill(file.as_fd(), &mut offset, want) {
            Ok(0) => return true,
            Ok(n) => {
                if !pipe.discard(null.as_fd(), n) {
                    return false;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
    true
}

/// Bring `file[offset .. offset+len)` into the page cache by splicing it into `null`
/// (`/dev/null`): the pages are read, referenced and dropped, never copied.
fn warm_into(null: &File, file: &File, mut offset: u64, len: u64) -> io::Result<()> {
    let end = offset.saturating_add(len);
    while offset < end {
        let count = usize::try_from(end - offset)
            .unwrap_or(SEND_CHUNK)
            .min(SEND_CHUNK);
        match linerate_sys::net::sendfile(null.as_fd(), file.as_fd(), &mut offset, count) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test setup on temp files and loopback")]
mod tests {
    use super::*;
    use linerate_sys::pagecache::{PageCacheProbe, Residency};
    use std::io::{Read, Write};

    /// A file of `len` patterned bytes on a real disk (under target/: /tmp may be tmpfs,
    /// where pages cannot be dropped), synced and dropped from the page cache.
    fn cold_file(len: usize) -> (File, Vec<u8>) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
        std::fs::create_dir_all(&dir).unwrap();
        // One name per call: tests run in parallel threads of one process.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!(
            "linerate-coldpool-{}-{n}-{len}",
            std::process::id()
        ));
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
        let mut f = File::create(&path).unwrap();
        f.write_all(&bytes).unwrap();
        f.sync_all().unwrap();
        let f = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        pagecache::fadvise(f.as_fd(), 0, 0, Advice::DontNeed).unwrap();
        let probe = PageCacheProbe::detect(f.as_fd());
        assert_eq!(probe.residency(f.as_fd(), 0, len as u64), Residency::Cold);
        (f, bytes)
    }

    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (server, client)
    }

    fn job(sock: &std::net::TcpStream, file: &File, offset: u64, len: u64) -> SendJob {
        SendJob {
            sock: sock.as_fd().try_clone_to_owned().unwrap(),
            file: file.try_clone().unwrap(),
            offset,
            len,
            ahead: 0,
        }
    }

    #[test]
    fn a_cold_window_is_sent_whole_by_the_pool() {
        // Guards the send job: a window not in the page cache goes to the socket from
        // the pool thread, every byte in order.
        let (file, bytes) = cold_file(1 << 20);
        let (server, mut client) = pair();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; 1 << 20];
            client.read_exact(&mut got).unwrap();
            got
        });
        let pool = ColdPool::start(1).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut offset = 0u64;
        while offset < 1 << 20 {
            let sent = rt
                .block_on(pool.send(job(&server, &file, offset, (1 << 20) - offset)))
                .unwrap();
            offset += sent.bytes;
            match sent.end {
                SendEnd::Complete => {}
                SendEnd::WouldBlock => std::thread::sleep(std::time::Duration::from_millis(5)),
                other => panic!("{other:?}"),
            }
        }
        assert!(reader.join().unwrap() == bytes, "bytes differ");
        pool.shutdown();
    }

    #[test]
    fn a_full_socket_ends_the_job_with_the_rest_of_the_window_resident() {
        // Guards the EAGAIN end of the fallback (readahead advice and `sendfile`): the
        // pool never waits for the client, and what it could not send is in the page
        // cache when the worker comes back for it.
        let mut scratch = vec![0u8; SCRATCH_BYTES];
        let null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        full_socket_case(&mut |j| send_window(j, Some(&null), &mut scratch));
    }

    #[test]
    fn a_full_socket_ends_the_piped_job_with_the_rest_of_the_window_resident() {
        // The same through the thread's pipe (the path taken when the pipe could be
        // made): the pipe is left empty and usable after every job.
        let pipe = Pipe::new(PIPE_BYTES).unwrap();
        let null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        full_socket_case(&mut |j| {
            let (sent, usable) = send_piped(j, &pipe, &null);
            assert!(usable, "{sent:?}");
            sent
        });
    }

    /// A 32 MiB cold window sent to a client that reads nothing at first: the job ends
    /// at `EAGAIN` with the rest resident, then (the client reading) the rest goes out
    /// byte-exact through more jobs.
    fn full_socket_case(send: &mut dyn FnMut(&SendJob) -> Sent) {
        let len = 32usize << 20;
        let (file, bytes) = cold_file(len);
        let (server, mut client) = pair();
        let sent = send(&job(&server, &file, 0, len as u64));
        assert!(matches!(sent.end, SendEnd::WouldBlock), "{sent:?}");
        assert!(sent.bytes > 0 && sent.bytes < len as u64, "{sent:?}");
        let probe = PageCacheProbe::detect(file.as_fd());
        assert_eq!(
            probe.residency(file.as_fd(), sent.bytes, len as u64 - sent.bytes),
            Residency::Resident
        );
        // The rest, once the client reads: exactly the file.
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; len];
            client.read_exact(&mut got).unwrap();
            got
        });
        let mut offset = sent.bytes;
        while offset < len as u64 {
            let more = send(&job(&server, &file, offset, len as u64 - offset));
            offset += more.bytes;
            if !matches!(more.end, SendEnd::Complete | SendEnd::WouldBlock) {
                panic!("{more:?}");
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(reader.join().unwrap() == bytes, "bytes differ");
    }
}
