//! One worker's context: the per-worker state every part of the request path reads or
//! writes, owned by that worker's thread. Nothing here is written by another worker: the
//! connection count, the date cache and the boundary counter are plain `Cell`s.
//! Read-only start-up state ([`Shared`]) is behind one `Arc` that is cloned once per
//! worker, never per request. Reloadable options ([`Live`]) are rebuilt by each worker
//! from the control channel into a worker-local `Rc`; statistics go to this worker's own
//! [`WorkerStats`], which only the admin thread reads. The TLS server configuration
//! (certificates) is copied into the worker the same way, by its
//! `tls::accept::follow_config` task; handshakes read only that copy.
//!
//! Not here: what answers a request (the handler, `handler::Mode`), or the thread,
//! runtime and accept loops that own this context (`worker`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::rc::Rc;
use std::sync::Arc;

use linerate_sys::pagecache::PageCacheProbe;
use linerate_sys::pipe::Pipe;
use rustls::ServerConfig;
use tokio::sync::Notify;

use crate::accesslog::AccessLog;
use crate::clock::DateCache;
use crate::coldpool::ColdPool;
use crate::openfiles::{Hot, OpenFileCache, StoredHot};
use crate::operate::Metrics;
use crate::options::ServerOptions;
use crate::park::Parking;
use crate::stats::{CloseReason, WorkerStats};
use crate::tls::config::SharedTls;

/// Free read buffers kept per worker. Enough for every connection that is mid-request
/// at once on one core under load; idle connections hold none.
const POOLED_BUFFERS: usize = 1024;

/// A buffer that grew past this (a large pipelined burst) is freed rather than pooled.
const POOLED_BUFFER_MAX: usize = 16 * 1024;

/// Free user-space TLS chunk pairs kept per worker (each 2 × `TLS_CHUNK`, 512 KiB):
/// enough for the responses one core has in flight at once under load; past it they
/// are freed, so an idle worker keeps at most 32 MiB.
const POOLED_TLS_CHUNKS: usize = 64;

/// Read-only state built at start-up and shared by all workers.
pub(crate) struct Shared {
    pub(crate) options: ServerOptions,
    pub(crate) root: File,
    pub(crate) probe: PageCacheProbe,
    pub(crate) cold: ColdPool,
    /// HTTPS, when configured.
    pub(crate) tls: Option<SharedTls>,
}

impl Shared {
    pub(crate) fn new(
        options: ServerOptions,
        root: File,
        probe: PageCacheProbe,
        cold: ColdPool,
        tls: Option<SharedTls>,
    ) -> Self {
        Shared {
            options,
            root,
            probe,
            cold,
            tls,
        }
    }
}

/// The options a reload can change, as this worker uses them. Rebuilt (once per worker)
/// when the configuration is reloaded; requests hold an `Rc` of it while they run, so
/// a reload never changes an answer half-way.
pub(crate) struct Live {
    /// The options in effect (restart-only keys keep their start-up values).
    pub(crate) options: Arc<ServerOptions>,
    /// Lower-case extension → `Cache-Control` value.
    pub(crate) cache_control: HashMap<Vec<u8>, String>,
}

impl Live {
    pub(crate) fn new(options: Arc<ServerOptions>) -> Live {
        let cache_control = options
            .cache_control
            .iter()
            .map(|(ext, v)| (ext.to_ascii_lowercase().into_bytes(), v.clone()))
            .collect();
        Live {
            options,
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
    /// Set when the stop is a hand-over to the next process (upgrade): until then an
    /// idle keep-alive connection waits for one more request instead of closing.
    linger_until: Cell<Option<tokio::time::Instant>>,
    /// Wakes this worker's idle connections when `stopping` is set.
    stop_notify: Notify,
    drained: Notify,
    buffers: RefCell<Vec<Vec<u8>>>,
    /// Idle connections parked outside the runtime.
    pub(crate) parking: Parking,
    /// This worker's statistics (only this thread writes them).
    pub(crate) stats: Arc<WorkerStats>,
    /// `admin.metrics`, copied at start (restart-only), so the per-request check reads
    /// a field of this worker and nothing another thread can write.
    metrics: Metrics,
    live: RefCell<Rc<Live>>,
    /// Counts reloads this worker applied (options or TLS configuration): a
    /// long-lived connection compares it to see whether to read its settings again.
    reloads: Cell<u64>,
    /// Woken at each reload (see [`Worker::reloaded`]).
    reload_notify: Notify,
    /// This worker's access log.
    pub(crate) log: RefCell<AccessLog>,
    /// xorshift state for choosing the connections whose TCP_INFO is sampled.
    tcp_rng: Cell<u64>,
    /// Appliance mode's open files (see `openfiles`).
    pub(crate) open_file_cache: OpenFileCache,
    /// This worker's copy of the TLS server configuration (see the module docs).
    pub(crate) tls_config: RefCell<Option<Arc<ServerConfig>>>,
    /// Free (plaintext, ciphertext) chunk pairs for user-space TLS sends.
    tls_chunks: RefCell<Vec<(Vec<u8>, Vec<u8>)>>,
    /// The pipe this worker's inline sends of file bytes go through (`transfer`).
    send_pipe: RefCell<SendPipe>,
    /// Residency proofs of the store's files this worker sent from (cache mode).
    stored_hot: StoredHot,
}

/// A worker's pipe for inline file sends, made at its first use.
enum SendPipe {
    Untried,
    /// The pipe, and `/dev/null` for what the socket does not take.
    Ready(Pipe, File),
    /// It could not be made: `sendfile` instead.
    Unavailable,
}

impl Worker {
    /// A worker's context, before its first connection. Inside the worker's runtime (the
    /// parking set registers with it).
    pub(crate) fn new(
        index: usize,
        shared: Arc<Shared>,
        stats: Arc<WorkerStats>,
        options: Arc<ServerOptions>,
    ) -> std::io::Result<Worker> {
        let parking = Parking::new(stats.clone())?;
        let log = AccessLog::new(
            options.access_log.clone(),
            0x9E37_79B9 ^ index as u64,
            &stats,
        );
        let tls_config = shared.tls.as_ref().map(|t| t.configs.borrow().clone());
        let open_file_cache = OpenFileCache::new(
            shared.options.open_file_cache,
            shared.options.open_file_cache_valid,
        );
        Ok(Worker {
            open_file_cache,
            tls_config: RefCell::new(tls_config),
            tls_chunks: RefCell::new(Vec::new()),
            send_pipe: RefCell::new(SendPipe::Untried),
            stored_hot: StoredHot::default(),
            live: RefCell::new(Rc::new(Live::new(options))),
            reloads: Cell::new(0),
            reload_notify: Notify::new(),
            log: RefCell::new(log),
            metrics: shared.options.admin.metrics,
            stats,
            tcp_rng: Cell::new(0x2545_F491_4F6C_DD1D ^ (index as u64 + 1)),
            shared,
            date: DateCache::new(),
            open: Cell::new(0),
            boundary_seq: Cell::new(0),
            index,
            stopping: Cell::new(false),
            linger_until: Cell::new(None),
            stop_notify: Notify::new(),
            drained: Notify::new(),
            buffers: RefCell::new(Vec::new()),
            parking,
        })
    }

    /// Run `send` with this worker's send pipe and `/dev/null` (see
    /// [`Pipe::send_file`]); `None` when it has none (it could not be made: the
    /// caller uses `sendfile`). A pipe that broke is dropped and made again next time.
    pub(crate) fn with_send_pipe<R>(
        &self,
        send: impl FnOnce(&Pipe, BorrowedFd<'_>) -> R,
    ) -> Option<R> {
        let mut state = self.send_pipe.borrow_mut();
        if matches!(*state, SendPipe::Untried) {
            *state = match (
                Pipe::new(crate::coldpool::PIPE_BYTES),
                File::options().write(true).open("/dev/null"),
            ) {
                (Ok(pipe), Ok(null)) => SendPipe::Ready(pipe, null),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(worker = self.index, error = %e, "no pipe for inline sends; using sendfile");
                    SendPipe::Unavailable
                }
            };
        }
        let SendPipe::Ready(pipe, null) = &*state else {
            return None;
        };
        let out = send(pipe, null.as_fd());
        if pipe.broken() {
            *state = SendPipe::Untried;
        }
        Some(out)
    }

    /// The residency proof of a store file (cache mode) for this worker: the same one
    /// for every response sent from the same open file (see [`StoredHot`]).
    pub(crate) fn stored_hot(&self, file: &Arc<File>) -> Rc<Hot> {
        self.stored_hot.get(file)
    }

    /// Connections open now (tasks and parked).
    pub(crate) fn open_connections(&self) -> usize {
        self.open.get()
    }

    /// Account for a connection just accepted.
    pub(crate) fn connection_opened(&self) {
        self.open.set(self.open.get() + 1);
        self.stats.accepted();
    }

    /// Begin a graceful stop: new requests close their connections, idle ones wake.
    /// `linger_until`: a hand-over to the next process; idle keep-alive connections
    /// then wait until that instant for one more request (answered with
    /// `Connection: close`) rather than close at once, because a client may be sending
    /// that request right now and would see the connection close under it.
    pub(crate) fn begin_stop(&self, linger_until: Option<tokio::time::Instant>) {
        self.linger_until.set(linger_until);
        self.stopping.set(true);
        self.stop_notify.notify_waiters();
    }

    /// An undrain: serving again (`stopping` cleared).
    pub(crate) fn end_stop(&self) {
        self.linger_until.set(None);
        self.stopping.set(false);
    }

    /// See [`Worker::begin_stop`].
    pub(crate) fn linger_until(&self) -> Option<tokio::time::Instant> {
        self.linger_until.get()
    }

    /// Resolves when the last open connection closes (or spuriously; callers re-check
    /// [`Worker::open_connections`]).
    pub(crate) async fn drained(&self) {
        self.drained.notified().await;
    }

    /// Apply reloaded options: requests that start from now on see them.
    pub(crate) fn set_live(&self, live: Live) {
        self.live.replace(Rc::new(live));
        self.reloads.set(self.reloads.get() + 1);
        self.reload_notify.notify_waiters();
    }

    /// Apply a reloaded TLS configuration: handshakes that start from now on use it.
    pub(crate) fn set_tls_config(&self, config: Arc<ServerConfig>) {
        *self.tls_config.borrow_mut() = Some(config);
        self.reloads.set(self.reloads.get() + 1);
        self.reload_notify.notify_waiters();
    }

    /// How many reloads this worker has applied (see the field).
    pub(crate) fn reloads(&self) -> u64 {
        self.reloads.get()
    }

    /// Resolves at the next reload this worker applies (options or TLS configuration).
    pub(crate) async fn reloaded(&self) {
        self.reload_notify.notified().await;
    }

    /// Account for a connection that closed (from a task or from parking).
    pub(crate) fn connection_closed(&self, why: CloseReason) {
        self.stats.closed(why);
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

    /// The TLS configuration new handshakes use.
    pub(crate) fn tls_config(&self) -> Option<Arc<ServerConfig>> {
        self.tls_config.borrow().clone()
    }

    /// A (plaintext, ciphertext) chunk pair for a user-space TLS send, empty.
    pub(crate) fn take_tls_chunks(&self) -> (Vec<u8>, Vec<u8>) {
        use crate::tls::TLS_CHUNK;
        self.tls_chunks.borrow_mut().pop().unwrap_or_else(|| {
            // Ciphertext: the plaintext plus a few dozen bytes per 16 KiB record.
            (
                Vec::with_capacity(TLS_CHUNK),
                Vec::with_capacity(TLS_CHUNK + TLS_CHUNK / 256),
            )
        })
    }

    /// Return a chunk pair to the pool.
    pub(crate) fn give_tls_chunks(&self, mut plain: Vec<u8>, mut out: Vec<u8>) {
        let mut pool = self.tls_chunks.borrow_mut();
        if pool.len() < POOLED_TLS_CHUNKS {
            plain.clear();
            out.clear();
            pool.push((plain, out));
        }
    }

    /// A fresh multipart boundary, unique within this worker's lifetime.
    pub(crate) fn next_boundary(&self) -> String {
        let n = self.boundary_seq.get().wrapping_add(1);
        self.boundary_seq.set(n);
        format!("linerate-{:x}-{:x}", self.index, n)
    }

    /// The statistics per-request counts go to, or `None` when `admin.metrics` is off
    /// (connection counts always go to [`Worker::stats`]).
    #[inline]
    pub(crate) fn request_stats(&self) -> Option<&WorkerStats> {
        match self.metrics {
            Metrics::On => Some(&self.stats),
            Metrics::Off => None,
        }
    }

    /// The reloadable options in effect now.
    pub(crate) fn live(&self) -> Rc<Live> {
        self.live.borrow().clone()
    }

    /// Whether a new connection's TCP_INFO should be sampled (share `info_sample`).
    pub(crate) fn sample_tcp(&self) -> bool {
        let share = self.live.borrow().options.tcp.info_sample;
        if share >= 1.0 {
            return true;
        }
        if share <= 0.0 {
            return false;
        }
        let mut x = self.tcp_rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.tcp_rng.set(x);
        (x >> 11) as f64 / (1u64 << 53) as f64 <= share
    }

    /// Whether a graceful stop (or a drain) has begun.
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
