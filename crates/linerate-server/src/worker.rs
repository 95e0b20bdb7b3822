//! One worker: a pinned thread running a single-threaded tokio runtime that accepts on
//! its own listeners and serves every connection it accepted to the end. Nothing here
//! is written by another worker: the connection count, the date cache and the boundary
//! counter are plain `Cell`s. Read-only start-up state ([`Shared`]) is behind one `Arc`
//! that is cloned once per worker, never per request.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use linerate_sys::pagecache::PageCacheProbe;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use crate::clock::DateCache;
use crate::coldpool::ColdPool;
use crate::options::ServerOptions;
use crate::park::Parking;

/// After `accept` fails with EMFILE/ENFILE/ENOMEM, wait this long before accepting
/// again, rather than spinning on a listener that stays readable (nginx waits too).
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Free read buffers kept per worker. Enough for every connection that is mid-request
/// at once on one core under load; idle connections hold none.
const POOLED_BUFFERS: usize = 1024;

/// A buffer that grew past this (a large pipelined burst) is freed rather than pooled.
const POOLED_BUFFER_MAX: usize = 16 * 1024;

/// Read-only state built at start-up and shared by all workers.
pub(crate) struct Shared {
    pub(crate) options: ServerOptions,
    pub(crate) root: File,
    pub(crate) probe: PageCacheProbe,
    pub(crate) cold: ColdPool,
    /// Lower-case extension → `Cache-Control` value.
    pub(crate) cache_control: HashMap<Vec<u8>, String>,
}

impl Shared {
    pub(crate) fn new(
        options: ServerOptions,
        root: File,
        probe: PageCacheProbe,
        cold: ColdPool,
    ) -> Self {
        let cache_control = options
            .cache_control
            .iter()
            .map(|(ext, v)| (ext.to_ascii_lowercase().into_bytes(), v.clone()))
            .collect();
        Shared {
            options,
            root,
            probe,
            cold,
            cache_control,
        }
    }
}

/// Per-worker state, owned by that worker's thread.
pub(crate) struct Worker {
    pub(crate) shared: Arc<Shared>,
    pub(crate) date: DateCache,
    open: Cell<usize>,
    boundary_seq: Cell<u64>,
    pub(crate) index: usize,
    /// Set once when a graceful stop begins. Worker-local on purpose: reading the
    /// cross-thread `watch` channel per request would take its shared read lock.
    stopping: Cell<bool>,
    /// Wakes this worker's idle connections when `stopping` is set.
    stop_notify: Notify,
    drained: Notify,
    buffers: RefCell<Vec<Vec<u8>>>,
    /// Idle connections parked outside the runtime.
    pub(crate) parking: Parking,
}

impl Worker {
    /// Account for a connection that closed (from a task or from parking).
    pub(crate) fn connection_closed(&self) {
        self.open.set(self.open.get() - 1);
        if self.open.get() == 0 {
            self.drained.notify_one();
        }
    }

    /// An empty read buffer from the pool (or a new one).
    pub(crate) fn take_buffer(&self) -> Vec<u8> {
        self.buffers.borrow_mut().pop().unwrap_or_default()
    }

    /// Return a buffer to the pool; its contents are dropped.
    pub(crate) fn give_buffer(&self, mut buf: Vec<u8>) {
        if buf.capacity() == 0 || buf.capacity() > POOLED_BUFFER_MAX {
            return;
        }
        let mut pool = self.buffers.borrow_mut();
        if pool.len() < POOLED_BUFFERS {
            buf.clear();
            pool.push(buf);
        }
    }

    /// A fresh multipart boundary, unique within this worker's lifetime.
    pub(crate) fn next_boundary(&self) -> String {
        let n = self.boundary_seq.get().wrapping_add(1);
        self.boundary_seq.set(n);
        format!("linerate-{:x}-{:x}", self.index, n)
    }

    /// Whether a graceful stop has begun.
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.get()
    }

    /// Resolves once a graceful stop has begun (immediately if it already has).
    pub(crate) async fn stopped(&self) {
        let notified = self.stop_notify.notified();
        if self.stopping.get() {
            return;
        }
        notified.await;
    }
}

/// Everything a worker thread needs to start.
pub(crate) struct WorkerPlan {
    pub(crate) index: usize,
    pub(crate) cpu: Option<usize>,
    pub(crate) listeners: Vec<std::net::TcpListener>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) stop: watch::Receiver<bool>,
}

impl WorkerPlan {
    /// The worker thread's body.
    pub(crate) fn run(self) {
        if let Some(cpu) = self.cpu {
            if let Err(e) = linerate_sys::cpu::pin_current_thread(cpu) {
                tracing::warn!(worker = self.index, cpu, error = %e, "could not pin worker");
            }
        }
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!(worker = self.index, error = %e, "could not start worker runtime");
                return;
            }
        };
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, self.serve());
    }

    async fn serve(self) {
        let parking = match Parking::new() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(worker = self.index, error = %e, "could not create the parking set");
                return;
            }
        };
        let worker = Rc::new(Worker {
            shared: self.shared,
            date: DateCache::new(),
            open: Cell::new(0),
            boundary_seq: Cell::new(0),
            index: self.index,
            stopping: Cell::new(false),
            stop_notify: Notify::new(),
            drained: Notify::new(),
            buffers: RefCell::new(Vec::new()),
            parking,
        });
        let parking_task = tokio::task::spawn_local(crate::park::watch(worker.clone()));
        let mut accepting = Vec::new();
        for l in self.listeners {
            match TcpListener::from_std(l) {
                Ok(l) => accepting.push(tokio::task::spawn_local(accept_loop(worker.clone(), l))),
                Err(e) => {
                    tracing::error!(worker = worker.index, error = %e, "listener registration failed")
                }
            }
        }
        let mut stop = self.stop;
        let _ = stop.wait_for(|s| *s).await;
        worker.stopping.set(true);
        worker.stop_notify.notify_waiters();
        // Stop accepting: dropping the listeners closes this worker's sockets.
        for a in &accepting {
            a.abort();
        }
        let grace = worker.shared.options.timeouts.shutdown_grace;
        let deadline = tokio::time::Instant::now() + grace;
        while worker.open.get() > 0 && tokio::time::Instant::now() < deadline {
            let _ =
                tokio::time::timeout(crate::server::DRAIN_POLL, worker.drained.notified()).await;
        }
        parking_task.abort();
        if worker.open.get() > 0 {
            tracing::warn!(
                worker = worker.index,
                open = worker.open.get(),
                "grace period over, closing"
            );
        }
    }
}

async fn accept_loop(worker: Rc<Worker>, listener: TcpListener) {
    loop {
        let (stream, _peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                if is_connection_error(&e) {
                    continue;
                }
                tracing::warn!(worker = worker.index, error = %e, "accept failed; backing off");
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        if worker.open.get() >= worker.shared.options.max_connections_per_worker {
            // Refused promptly: closed now rather than queued. The client sees a reset/EOF
            // and can retry another server.
            tracing::debug!(worker = worker.index, "connection limit reached; refusing");
            drop(stream);
            continue;
        }
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY failed");
        }
        worker.open.set(worker.open.get() + 1);
        spawn_connection(&worker, stream, true);
    }
}

/// Run a connection (new, or resumed from parking) as a task of this worker. The
/// connection is already counted in `open`; it is uncounted when it closes, not when it
/// parks.
pub(crate) fn spawn_connection(worker: &Rc<Worker>, stream: tokio::net::TcpStream, first: bool) {
    let w = worker.clone();
    tokio::task::spawn_local(async move {
        if crate::conn::serve(&w, stream, first).await == crate::conn::Outcome::Closed {
            w.connection_closed();
        }
    });
}

/// Errors about one incoming connection (it died before we accepted it): not the
/// listener's fault, accept again at once.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED) | Some(libc::ECONNRESET) | Some(libc::EPROTO) | Some(libc::EPERM)
    )
}
