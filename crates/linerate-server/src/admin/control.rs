//! Run-time control of a running server, from outside the request path: the serving
//! mode (serving → draining → stopping), configuration reload, and log reopening. The
//! main thread (signals) and the admin thread (HTTP) drive it; each worker watches the
//! channels and copies what changed into worker-local state, so a request never reads
//! anything another thread writes.
//!
//! Not here: parsing configuration (the binary's reloader does) or what a worker does
//! when told to drain (see `worker`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use tokio::sync::watch;

use crate::options::ServerOptions;

/// Reads and validates the configuration again (the binary's parser). `Err` carries the
/// reason, which is logged; the running configuration then stays.
pub type Reloader = Box<dyn FnMut() -> Result<ServerOptions, String> + Send>;

/// Starts the next process and hands over (the server's `upgrade`): `Ok(pid)` of the new
/// process, which serves; `Err(why)`, this one keeps serving. The argument is another
/// binary to start instead of the one this process was started from.
pub(crate) type Upgrade =
    Box<dyn Fn(Option<std::path::PathBuf>) -> Result<u32, String> + Send + Sync>;

/// What the server is doing, as `/health` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Accepting and serving.
    Serving,
    /// Not accepting (a new connection is closed at once); in-flight responses finish;
    /// `/health` fails so the load balancer takes the box out. Ends with a stop, or
    /// with an undrain (serving again).
    Draining,
    /// Stopping (SIGTERM/SIGINT): like draining, then the process exits.
    Stopping,
}

impl RunState {
    /// Label for `/health`, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Serving => "serving",
            RunState::Draining => "draining",
            RunState::Stopping => "stopping",
        }
    }
}

/// Outcome of a reload request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The new configuration is in effect. Keys that need a restart and changed are
    /// listed (they keep their running values).
    Applied {
        /// Keys whose change was ignored until a restart.
        needs_restart: Vec<&'static str>,
    },
    /// Rejected; the old configuration keeps running.
    Rejected(String),
}

/// Shared by the main thread, the admin thread and (read-only, through the watch
/// receivers) the workers.
pub(crate) struct Control {
    mode: watch::Sender<RunState>,
    options: watch::Sender<Arc<ServerOptions>>,
    reopen: watch::Sender<u64>,
    reloader: Mutex<Option<Reloader>>,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
    /// When the server started (for uptime).
    pub(crate) started: Instant,
    /// What the start-up probe found kernel TLS accepts (set once, when TLS is on).
    ktls: OnceLock<linerate_sys::ktls::Support>,
    /// The upgrade (set once at start-up by the server; absent in embedders' servers).
    upgrader: OnceLock<Upgrade>,
    /// This process handed over to the next one (set before the stop it causes).
    handed_over: std::sync::atomic::AtomicBool,
    /// Called once when this process stops accepting (drain or stop): the server closes
    /// the copies of the listening sockets it keeps for an upgrade.
    stop_accepting: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Control {
    pub(crate) fn new(options: Arc<ServerOptions>, reloader: Option<Reloader>) -> Control {
        Control {
            mode: watch::channel(RunState::Serving).0,
            options: watch::channel(options).0,
            reopen: watch::channel(0).0,
            reloader: Mutex::new(reloader),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
            started: Instant::now(),
            ktls: OnceLock::new(),
            upgrader: OnceLock::new(),
            handed_over: std::sync::atomic::AtomicBool::new(false),
            stop_accepting: OnceLock::new(),
        }
    }

    /// Install what to do when this process stops accepting (once, at start-up).
    pub(crate) fn on_stop_accepting(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.stop_accepting.set(f);
    }

    fn stopped_accepting(&self) {
        if let Some(f) = self.stop_accepting.get() {
            f();
        }
    }

    /// Stop because the next process of an upgrade serves now (see `upgrade`).
    pub(crate) fn stop_handed_over(&self) {
        self.handed_over
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.stop();
    }

    /// Whether the stop is a hand-over (workers then let idle connections linger).
    pub(crate) fn handed_over(&self) -> bool {
        self.handed_over.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Install the upgrade (once, at start-up).
    pub(crate) fn set_upgrader(&self, upgrade: Upgrade) {
        let _ = self.upgrader.set(upgrade);
    }

    /// Start the next process and hand over (SIGUSR2, `POST /upgrade`). Blocks until the
    /// new process is ready or has failed (bounded by the upgrade's step timeouts).
    pub(crate) fn upgrade(&self, binary: Option<std::path::PathBuf>) -> Result<u32, String> {
        if self.run_state() != RunState::Serving {
            return Err(format!(
                "cannot upgrade while {}",
                self.run_state().as_str()
            ));
        }
        match self.upgrader.get() {
            Some(u) => u(binary),
            None => Err("this server cannot upgrade (started without the upgrade path)".into()),
        }
    }

    /// Record the kernel-TLS probe result (once, at start-up) for `/metrics`.
    pub(crate) fn set_ktls(&self, support: linerate_sys::ktls::Support) {
        let _ = self.ktls.set(support);
    }

    /// The kernel-TLS probe result, when TLS listeners are configured.
    pub(crate) fn ktls(&self) -> Option<&linerate_sys::ktls::Support> {
        self.ktls.get()
    }

    /// The current mode.
    pub(crate) fn run_state(&self) -> RunState {
        *self.mode.borrow()
    }

    /// Watch the mode (workers).
    pub(crate) fn watch_run_state(&self) -> watch::Receiver<RunState> {
        self.mode.subscribe()
    }

    /// Watch the reloadable options (workers, admin).
    pub(crate) fn watch_options(&self) -> watch::Receiver<Arc<ServerOptions>> {
        self.options.subscribe()
    }

    /// Watch the log-reopen generation (workers).
    pub(crate) fn watch_reopen(&self) -> watch::Receiver<u64> {
        self.reopen.subscribe()
    }

    /// The options in effect.
    pub(crate) fn options(&self) -> Arc<ServerOptions> {
        self.options.borrow().clone()
    }

    /// Begin draining (no effect once draining or stopping). The listening sockets stay
    /// open (new connections are closed as they are accepted), so an undrain can serve
    /// again.
    pub(crate) fn drain(&self) {
        self.mode.send_if_modified(|m| {
            if *m == RunState::Serving {
                *m = RunState::Draining;
                true
            } else {
                false
            }
        });
    }

    /// Serve again after a drain: `Ok` once serving (also when not draining), `Err`
    /// with the reason while stopping.
    pub(crate) fn undrain(&self) -> Result<(), String> {
        self.mode.send_if_modified(|m| {
            if *m == RunState::Draining {
                *m = RunState::Serving;
                true
            } else {
                false
            }
        });
        match self.run_state() {
            RunState::Serving => Ok(()),
            s => Err(format!("cannot undrain while {}", s.as_str())),
        }
    }

    /// Begin stopping.
    pub(crate) fn stop(&self) {
        self.mode.send_replace(RunState::Stopping);
        self.stopped_accepting();
    }

    /// Ask every worker to reopen its access-log file (SIGUSR1).
    pub(crate) fn reopen_logs(&self) {
        self.reopen.send_modify(|g| *g += 1);
    }

    /// Successful and rejected reloads so far.
    pub(crate) fn reload_counts(&self) -> (u64, u64) {
        (
            self.reloads_ok.load(Relaxed),
            self.reloads_failed.load(Relaxed),
        )
    }

    /// Read the configuration again; apply what can change at run time.
    pub(crate) fn reload(&self) -> ReloadOutcome {
        let mut guard = match self.reloader.lock() {
            Ok(g) => g,
            // A reloader that panicked once is still callable; its state is a parser.
            Err(poisoned) => poisoned.into_inner(),
        };
        let result = match guard.as_mut() {
            Some(reload) => reload(),
            None => Err("this server was started without a configuration file".into()),
        };
        drop(guard);
        let outcome = match result {
            Ok(new) => {
                let old = self.options();
                let (merged, needs_restart) = merge_reloadable(&old, new);
                self.options.send_replace(Arc::new(merged));
                ReloadOutcome::Applied { needs_restart }
            }
            Err(reason) => ReloadOutcome::Rejected(reason),
        };
        match &outcome {
            ReloadOutcome::Applied { needs_restart } => {
                self.reloads_ok.fetch_add(1, Relaxed);
                for key in needs_restart {
                    tracing::warn!(key, "changed, but needs a restart; the running value stays");
                }
                tracing::info!("configuration reloaded");
            }
            ReloadOutcome::Rejected(reason) => {
                self.reloads_failed.fetch_add(1, Relaxed);
                tracing::error!(%reason, "reload rejected; the old configuration keeps running");
            }
        }
        outcome
    }
}

/// The new options with every restart-only key set back to its running value, and the
/// names of those that differed. Restart-only: what is fixed when threads, sockets and
/// pools are created at start-up.
fn merge_reloadable(
    old: &ServerOptions,
    mut new: ServerOptions,
) -> (ServerOptions, Vec<&'static str>) {
    let mut ignored = Vec::new();
    macro_rules! keep {
        ($($field:ident).+, $name:literal) => {
            if new.$($field).+ != old.$($field).+ {
                ignored.push($name);
                new.$($field).+ = old.$($field).+.clone();
            }
        };
    }
    keep!(listen, "server.listen");
    keep!(workers, "server.workers");
    keep!(pin_workers, "server.pin_workers");
    keep!(
        max_connections_per_worker,
        "server.max_connections_per_worker"
    );
    keep!(backlog, "server.backlog");
    keep!(cold_threads_per_disk, "server.cold_threads_per_disk");
    keep!(root, "appliance.root");
    // Each worker builds its open-file cache once, at start.
    keep!(open_file_cache, "appliance.open_file_cache");
    keep!(open_file_cache_valid, "appliance.open_file_cache_valid_ms");
    keep!(open_file_cache_watch, "appliance.open_file_cache_watch");
    keep!(admin.listen, "admin.listen");
    keep!(admin.metrics, "admin.metrics");
    // Set on the listener sockets, which stay open across a reload.
    keep!(tcp.congestion, "tcp.congestion");
    keep!(tcp.max_pacing_rate, "tcp.max_pacing_rate");
    keep!(tcp.listeners, "tcp.listeners");
    keep!(timeouts.shutdown_grace, "timeouts.shutdown_grace_ms");
    // Read once, when the admin thread loads the jobs.
    keep!(fill.state_file, "fill.state_file");
    // Cache mode's store, origin pools and routes are built once at start-up (the store
    // owns its disks; each worker's pools are its own). Compared by their printed form:
    // the option types carry durations and paths, all of which print exactly.
    if format!("{:?}", new.cache) != format!("{:?}", old.cache) {
        ignored.push("cache/origin/route");
        new.cache = old.cache.clone();
    }
    // TLS listeners, the handshake timeout and the kTLS switch are fixed at start-up;
    // certificates and the unknown-SNI policy reload (see `tls_accept::follow_config`).
    match (&old.tls, &mut new.tls) {
        (Some(o), Some(n)) => {
            macro_rules! keep_tls {
                ($field:ident, $name:literal) => {
                    if n.$field != o.$field {
                        ignored.push($name);
                        n.$field = o.$field.clone();
                    }
                };
            }
            keep_tls!(listen, "tls.listen");
            keep_tls!(handshake_timeout, "tls.handshake_timeout_ms");
            keep_tls!(ktls, "tls.ktls");
        }
        (None, None) => {}
        // TLS listeners appeared or disappeared: the old ones keep serving (with the
        // certificates they started with, when the new file has none).
        (o, n) => {
            ignored.push("tls.listen");
            *n = o.clone();
        }
    }
    (new, ignored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_only_keys_keep_running_values() {
        let old = ServerOptions::new("/a".into());
        let mut new = ServerOptions::new("/b".into());
        new.workers = old.workers + 1;
        new.max_discarded_body = 7;
        new.admin.metrics = crate::operate::Metrics::Off;
        new.tcp.listeners.push(crate::operate::ListenerTcp {
            listen: ([127, 0, 0, 1], 8443).into(),
            tuning: crate::operate::TcpTuning::default(),
            http2: None,
        });
        new.tcp.info_sample = 0.5;
        let (merged, ignored) = merge_reloadable(&old, new);
        assert_eq!(merged.root, old.root);
        assert_eq!(merged.workers, old.workers);
        assert_eq!(merged.max_discarded_body, 7);
        assert_eq!(merged.admin.metrics, crate::operate::Metrics::On);
        assert!(merged.tcp.listeners.is_empty());
        assert_eq!(merged.tcp.info_sample, 0.5);
        assert_eq!(
            ignored,
            vec![
                "server.workers",
                "appliance.root",
                "admin.metrics",
                "tcp.listeners"
            ]
        );
    }

    #[test]
    fn drain_then_stop() {
        let c = Control::new(Arc::new(ServerOptions::new("/".into())), None);
        assert_eq!(c.run_state(), RunState::Serving);
        c.drain();
        assert_eq!(c.run_state(), RunState::Draining);
        c.stop();
        c.drain();
        assert_eq!(c.run_state(), RunState::Stopping);
        assert!(matches!(c.reload(), ReloadOutcome::Rejected(_)));
        assert_eq!(c.reload_counts(), (0, 1));
    }
}
