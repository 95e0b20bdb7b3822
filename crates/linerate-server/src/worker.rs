//! One worker: a pinned thread running a single-threaded tokio runtime that accepts on
//! its own listeners and serves every connection it accepted to the end. Nothing here
//! is written by another worker: the connection count, the date cache and the boundary
//! counter are plain `Cell`s. Read-only start-up state ([`Shared`]) is behind one `Arc`
//! that is cloned once per worker, never per request. Reloadable options ([`Live`]) are
//! rebuilt by each worker from the control channel into a worker-local `Rc`; statistics
//! go to this worker's own [`WorkerStats`], which only the admin thread reads. The TLS
//! server configuration (certificates) is copied into the worker the same way, by its
//! `tls_accept::follow_config` task; handshakes read only that copy.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use linerate_sys::pagecache::PageCacheProbe;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::accesslog::AccessLog;
use crate::clock::DateCache;
use crate::coldpool::ColdPool;
use crate::control::{Control, Mode};
use crate::operate::Metrics;
use crate::options::ServerOptions;
use crate::park::Parking;
use crate::stats::{CloseReason, WorkerStats};
use crate::tls_accept::SharedTls;
use crate::transport::Transport;

/// After `accept` fails with EMFILE/ENFILE/ENOMEM, wait this long before accepting
/// again, rather than spinning on a listener that stays readable (nginx waits too).
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

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
    /// Cache mode, when configured.
    pub(crate) cache: Option<Arc<crate::proxy::ProxyShared>>,
}

impl Shared {
    pub(crate) fn new(
        options: ServerOptions,
        root: File,
        probe: PageCacheProbe,
        cold: ColdPool,
        tls: Option<SharedTls>,
        cache: Option<Arc<crate::proxy::ProxyShared>>,
    ) -> Self {
        Shared {
            options,
            root,
            probe,
            cold,
            tls,
            cache,
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
    fn new(options: Arc<ServerOptions>) -> Live {
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
    /// This worker's access log.
    pub(crate) log: RefCell<AccessLog>,
    /// xorshift state for choosing the connections whose TCP_INFO is sampled.
    tcp_rng: Cell<u64>,
    /// This worker's copy of the TLS server configuration (see the module docs).
    pub(crate) tls_config: RefCell<Option<Arc<ServerConfig>>>,
    /// Free (plaintext, ciphertext) chunk pairs for user-space TLS sends.
    tls_chunks: RefCell<Vec<(Vec<u8>, Vec<u8>)>>,
    /// Cache mode: this worker's origin clients.
    pub(crate) proxy: Option<crate::proxy::ProxyWorker>,
}

impl Worker {
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
        use crate::tls_send::TLS_CHUNK;
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

/// Everything a worker thread needs to start.
pub(crate) struct WorkerPlan {
    pub(crate) index: usize,
    pub(crate) cpu: Option<usize>,
    pub(crate) listeners: Vec<std::net::TcpListener>,
    /// Listeners whose connections begin with a TLS handshake.
    pub(crate) tls_listeners: Vec<std::net::TcpListener>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) control: Arc<Control>,
    pub(crate) stats: Arc<WorkerStats>,
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
        let parking = match Parking::new(self.stats.clone()) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(worker = self.index, error = %e, "could not create the parking set");
                return;
            }
        };
        let options = self.control.options();
        let log = AccessLog::new(
            options.access_log.clone(),
            0x9E37_79B9 ^ self.index as u64,
            &self.stats,
        );
        let tls_config = self.shared.tls.as_ref().map(|t| t.configs.borrow().clone());
        let proxy = self
            .shared
            .cache
            .as_ref()
            .map(|c| crate::proxy::ProxyWorker::new(c.clone()));
        let worker = Rc::new(Worker {
            proxy,
            tls_config: RefCell::new(tls_config),
            tls_chunks: RefCell::new(Vec::new()),
            live: RefCell::new(Rc::new(Live::new(options))),
            log: RefCell::new(log),
            stats: self.stats,
            metrics: self.shared.options.admin.metrics,
            tcp_rng: Cell::new(0x2545_F491_4F6C_DD1D ^ (self.index as u64 + 1)),
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
        let housekeeping =
            tokio::task::spawn_local(housekeeping(worker.clone(), self.control.clone()));
        let tls_task = worker.shared.tls.as_ref().map(|_| {
            tokio::task::spawn_local(crate::tls_accept::follow_config(
                worker.clone(),
                self.control.clone(),
            ))
        });
        let mut accepting = Vec::new();
        let plain = self.listeners.into_iter().map(|l| (l, Security::Plain));
        let tls = self.tls_listeners.into_iter().map(|l| (l, Security::Tls));
        for (l, security) in plain.chain(tls) {
            match TcpListener::from_std(l) {
                Ok(l) => accepting.push(tokio::task::spawn_local(accept_loop(
                    worker.clone(),
                    l,
                    security,
                ))),
                Err(e) => {
                    tracing::error!(worker = worker.index, error = %e, "listener registration failed")
                }
            }
        }
        let mut mode = self.control.watch_mode();
        let _ = mode.wait_for(|m| *m != Mode::Serving).await;
        tracing::debug!(
            worker = worker.index,
            mode = self.control.mode().as_str(),
            "no longer accepting"
        );
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
        housekeeping.abort();
        if let Some(t) = tls_task {
            t.abort();
            let s = worker.stats.snapshot();
            let counts: Vec<String> = crate::stats::TlsOutcome::ALL
                .iter()
                .zip(s.tls.iter())
                .map(|(o, n)| format!("{}={n}", o.as_str()))
                .collect();
            tracing::info!(
                worker = worker.index,
                handshakes = %counts.join(" "),
                resumed = s.tls_resumed,
                "TLS connections"
            );
        }
        worker.log.borrow_mut().flush(&worker.stats);
        if worker.open.get() > 0 {
            tracing::warn!(
                worker = worker.index,
                open = worker.open.get(),
                "grace period over, closing"
            );
        }
    }
}

/// Whether a listener's connections begin with a TLS handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Security {
    Plain,
    Tls,
}

async fn accept_loop(worker: Rc<Worker>, listener: TcpListener, security: Security) {
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
            worker.stats.refused();
            drop(stream);
            continue;
        }
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY failed");
        }
        worker.open.set(worker.open.get() + 1);
        worker.stats.accepted();
        match security {
            Security::Plain => spawn_connection(&worker, stream, true),
            Security::Tls => spawn_tls_connection(&worker, stream),
        }
    }
}

/// Handshake, then serve, a TLS connection as a task of this worker. A failed
/// handshake is counted in the worker statistics and closes as a bad request.
fn spawn_tls_connection(worker: &Rc<Worker>, stream: tokio::net::TcpStream) {
    let w = worker.clone();
    tokio::task::spawn_local(async move {
        // Boxed: rustls's handshake state makes the handshake future ~18 KiB, and an
        // accept loop's task should not carry that inline; the connection's future
        // is boxed for the same reason.
        let why = match Box::pin(crate::tls_accept::accept(&w, stream)).await {
            Some((io, early)) => match Box::pin(crate::conn::serve(&w, io, true, early)).await {
                crate::conn::Outcome::Closed(why) => why,
                // TLS connections never park (see `transport`).
                crate::conn::Outcome::Parked => CloseReason::Idle,
            },
            None => CloseReason::BadRequest,
        };
        w.connection_closed(why);
    });
}

/// Run a connection (new, or resumed from parking) as a task of this worker. The
/// connection is already counted in `open`; it is uncounted when it closes, not when it
/// parks.
pub(crate) fn spawn_connection(worker: &Rc<Worker>, stream: tokio::net::TcpStream, first: bool) {
    let w = worker.clone();
    tokio::task::spawn_local(async move {
        let io = Transport::Plain(stream);
        let outcome = crate::conn::serve(&w, io, first, Vec::new()).await;
        if let crate::conn::Outcome::Closed(why) = outcome {
            w.connection_closed(why);
        }
    });
}

/// The worker's background duties: apply reloaded options, reopen the access log on
/// SIGUSR1, and write the log buffer at least every `flush_every`.
async fn housekeeping(worker: Rc<Worker>, control: Arc<Control>) {
    let mut options = control.watch_options();
    let mut reopen = control.watch_reopen();
    let every = |w: &Worker| w.live.borrow().options.access_log.flush_every;
    let mut flush = tokio::time::interval(every(&worker));
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            r = options.changed() => {
                if r.is_err() {
                    return;
                }
                let new = options.borrow_and_update().clone();
                worker.log.borrow_mut().reconfigure(&new.access_log, &worker.stats);
                let period = new.access_log.flush_every;
                worker.live.replace(Rc::new(Live::new(new)));
                flush = tokio::time::interval(period);
                flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            }
            r = reopen.changed() => {
                if r.is_err() {
                    return;
                }
                reopen.borrow_and_update();
                worker.log.borrow_mut().reopen(&worker.stats);
            }
            _ = flush.tick() => worker.log.borrow_mut().flush(&worker.stats),
        }
    }
}

/// Errors about one incoming connection (it died before we accepted it): not the
/// listener's fault, accept again at once.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED) | Some(libc::ECONNRESET) | Some(libc::EPROTO) | Some(libc::EPERM)
    )
}
