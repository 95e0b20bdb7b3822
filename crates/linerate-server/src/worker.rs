//! One worker: a pinned thread running a single-threaded tokio runtime that accepts on
//! its own listeners and serves every connection it accepted to the end, in its
//! [`Mode`]. The worker's per-thread state is its context (`context::Worker`); this file
//! owns the thread, the runtime, the accept loops, the parking task and the housekeeping
//! task (reloads, log reopening and flushing).
//!
//! Not here: what a connection does (`conn`) or what answers a request (`handler`).

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::admin::control::{Control, RunState};
use crate::context::{Live, Shared, Worker};
use crate::handler::Mode;
use crate::stats::{CloseReason, WorkerStats};
use crate::transport::Transport;

/// How long a stopping worker waits between checks that its connections have drained,
/// when no connection has closed to wake it. Only used while stopping.
const DRAIN_POLL: Duration = Duration::from_millis(50);

/// How long, after a hand-over to the next process (upgrade), an idle keep-alive
/// connection of this one waits for one more request before closing. A client that is
/// sending a request as the old process stops gets its answer (with
/// `Connection: close`) instead of a closed connection; a client that stays idle this
/// long is closed. Long enough for any client in the middle of a request/response loop,
/// short enough that old processes do not pile up.
const HANDOVER_LINGER: Duration = Duration::from_secs(1);

/// After `accept` fails with EMFILE/ENFILE/ENOMEM, wait this long before accepting
/// again, rather than spinning on a listener that stays readable (nginx waits too).
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Everything a worker thread needs to start.
pub(crate) struct WorkerPlan {
    pub(crate) index: usize,
    pub(crate) cpu: Option<usize>,
    pub(crate) listeners: Vec<crate::listeners::ConfiguredListener>,
    /// Listeners whose connections begin with a TLS handshake.
    pub(crate) tls_listeners: Vec<crate::listeners::ConfiguredListener>,
    pub(crate) shared: Arc<Shared>,
    /// Cache mode's shared state, when the server runs in cache mode.
    pub(crate) cache: Option<Arc<crate::proxy::ProxyShared>>,
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
        let options = self.control.options();
        let worker = match Worker::new(self.index, self.shared, self.stats, options) {
            Ok(w) => Rc::new(w),
            Err(e) => {
                tracing::error!(worker = self.index, error = %e, "could not create the parking set");
                return;
            }
        };
        let mode = Rc::new(match self.cache {
            Some(c) => Mode::Cache(Rc::new(crate::proxy::ProxyWorker::new(c))),
            None => Mode::Appliance,
        });
        let mut parking_task = tokio::task::spawn_local(watch_parked(worker.clone(), mode.clone()));
        let housekeeping =
            tokio::task::spawn_local(housekeeping(worker.clone(), self.control.clone()));
        let watch_task = (matches!(*mode, Mode::Appliance)
            && worker.shared.options.open_file_cache_watch)
            .then(|| {
                let w = worker.clone();
                tokio::task::spawn_local(async move {
                    let workers = w.shared.options.workers;
                    w.open_file_cache
                        .watch(std::os::fd::AsFd::as_fd(&w.shared.root), workers)
                        .await;
                })
            });
        let tls_task = worker.shared.tls.as_ref().map(|_| {
            tokio::task::spawn_local(crate::tls::accept::follow_config(
                worker.clone(),
                self.control.clone(),
            ))
        });
        let mut listeners = Vec::new();
        let plain = self.listeners.into_iter().map(|l| (l, Security::Plain));
        let tls = self.tls_listeners.into_iter().map(|l| (l, Security::Tls));
        for ((l, configured), security) in plain.chain(tls) {
            match TcpListener::from_std(l) {
                Ok(l) => listeners.push((Rc::new(l), security, configured)),
                Err(e) => {
                    tracing::error!(worker = worker.index, error = %e, "listener registration failed")
                }
            }
        }
        let mut run_state = self.control.watch_run_state();
        let mut accepting: Vec<tokio::task::JoinHandle<()>>;
        loop {
            accepting = listeners
                .iter()
                .map(|(l, security, configured)| {
                    tokio::task::spawn_local(accept_loop(
                        worker.clone(),
                        mode.clone(),
                        Rc::clone(l),
                        *security,
                        *configured,
                    ))
                })
                .collect();
            let _ = run_state.wait_for(|m| *m != RunState::Serving).await;
            if self.control.run_state() != RunState::Draining {
                break;
            }
            // Draining: connections finish (each closes after its response, idle ones
            // at once), a new connection is closed as soon as it is accepted, and the
            // listening sockets stay open so an undrain can serve again.
            tracing::debug!(worker = worker.index, "draining");
            worker.begin_stop(None);
            for a in accepting.drain(..) {
                a.abort();
            }
            let refusing: Vec<_> = listeners
                .iter()
                .map(|(l, _, _)| tokio::task::spawn_local(refuse_loop(Rc::clone(l))))
                .collect();
            let _ = run_state.wait_for(|m| *m != RunState::Draining).await;
            for r in refusing {
                r.abort();
            }
            if self.control.run_state() != RunState::Serving {
                break;
            }
            tracing::debug!(worker = worker.index, "undrained: accepting again");
            worker.end_stop();
            // The drain closed the parked connections and ended their watcher: a new
            // one for the connections that park from now on.
            parking_task.abort();
            parking_task = tokio::task::spawn_local(watch_parked(worker.clone(), mode.clone()));
        }
        tracing::debug!(
            worker = worker.index,
            mode = self.control.run_state().as_str(),
            "no longer accepting"
        );
        let linger = self
            .control
            .handed_over()
            .then(|| tokio::time::Instant::now() + HANDOVER_LINGER);
        worker.begin_stop(linger);
        // Stop accepting: dropping the listeners closes this worker's sockets.
        for a in &accepting {
            a.abort();
        }
        drop(listeners);
        let grace = worker.shared.options.timeouts.shutdown_grace;
        let deadline = tokio::time::Instant::now() + grace;
        while worker.open_connections() > 0 && tokio::time::Instant::now() < deadline {
            let _ = tokio::time::timeout(DRAIN_POLL, worker.drained()).await;
        }
        parking_task.abort();
        housekeeping.abort();
        if let Some(t) = watch_task {
            t.abort();
        }
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
        if worker.open_connections() > 0 {
            tracing::warn!(
                worker = worker.index,
                open = worker.open_connections(),
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

/// While draining: accept and close at once, so a new connection is refused promptly
/// (the client reads EOF) while the socket stays open for an undrain.
async fn refuse_loop(listener: Rc<TcpListener>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => drop(stream),
            Err(_) => tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await,
        }
    }
}

async fn accept_loop(
    worker: Rc<Worker>,
    mode: Rc<Mode>,
    listener: Rc<TcpListener>,
    security: Security,
    configured: std::net::SocketAddr,
) {
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
        if worker.open_connections() >= worker.shared.options.max_connections_per_worker {
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
        worker.connection_opened();
        match security {
            Security::Plain => {
                // h2c on this listener: its `[tcp.listeners]` entry, else `[server]`
                // (read per connection: both reload).
                let gate = crate::http2::Gate::Plain(configured);
                let h2c = gate.open(&worker).then_some(gate);
                spawn_connection(&worker, &mode, stream, true, h2c)
            }
            Security::Tls => spawn_tls_connection(&worker, &mode, stream),
        }
    }
}

/// Handshake, then serve, a TLS connection as a task of this worker. A failed
/// handshake is counted in the worker statistics and closes as a bad request.
fn spawn_tls_connection(worker: &Rc<Worker>, mode: &Rc<Mode>, stream: tokio::net::TcpStream) {
    let w = worker.clone();
    let mode = mode.clone();
    tokio::task::spawn_local(async move {
        // Boxed: rustls's handshake state makes the handshake future ~18 KiB, and an
        // accept loop's task should not carry that inline; the connection's future
        // is boxed for the same reason.
        let why = match Box::pin(crate::tls::accept::accept(&w, stream)).await {
            Some((io, early, true)) => {
                Box::pin(crate::http2::serve(
                    &w,
                    &mode,
                    io,
                    early,
                    crate::http2::Gate::Tls,
                ))
                .await
            }
            Some((io, early, false)) => {
                match Box::pin(crate::conn::serve(&w, &mode, io, true, None, early)).await {
                    crate::conn::Outcome::Closed(why) => why,
                    // TLS connections never park (see `transport`).
                    crate::conn::Outcome::Parked => CloseReason::Idle,
                }
            }
            None => CloseReason::BadRequest,
        };
        w.connection_closed(why);
    });
}

/// Run a connection (new, or resumed from parking) as a task of this worker. The
/// connection is already counted in `open`; it is uncounted when it closes, not when it
/// parks.
fn spawn_connection(
    worker: &Rc<Worker>,
    mode: &Rc<Mode>,
    stream: tokio::net::TcpStream,
    first: bool,
    h2c: Option<crate::http2::Gate>,
) {
    let w = worker.clone();
    let mode = mode.clone();
    tokio::task::spawn_local(async move {
        let io = Transport::Plain(stream);
        let outcome = crate::conn::serve(&w, &mode, io, first, h2c, Vec::new()).await;
        if let crate::conn::Outcome::Closed(why) = outcome {
            w.connection_closed(why);
        }
    });
}

/// The worker's parking task: resumes parked connections that became readable as new
/// connection tasks, and closes the ones whose keep-alive ran out, or all of them when a
/// graceful stop begins (see `park`).
async fn watch_parked(worker: Rc<Worker>, mode: Rc<Mode>) {
    crate::park::watch(
        &worker.parking,
        worker.stopped(),
        |stream| spawn_connection(&worker, &mode, stream, false, None),
        |why| worker.connection_closed(why),
    )
    .await;
}

/// The worker's background duties: apply reloaded options, reopen the access log on
/// SIGUSR1, and write the log buffer at least every `flush_every`.
async fn housekeeping(worker: Rc<Worker>, control: Arc<Control>) {
    let mut options = control.watch_options();
    let mut reopen = control.watch_reopen();
    let every = |w: &Worker| w.live().options.access_log.flush_every;
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
                worker.set_live(Live::new(new));
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
