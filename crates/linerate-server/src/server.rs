//! Start-up and stop: validate the root, bind every worker's listeners up front (so a
//! bad address fails before anything serves), start one pinned thread per worker and
//! the admin thread, wait for SIGTERM/SIGINT (handling SIGHUP reloads and SIGUSR1 log
//! reopens meanwhile), tell the workers, and join them.
//!
//! Not here: what a worker does with a connection (see `worker` and `conn`).

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;

use crate::admin::control::{Control, Reloader};
use crate::coldpool::ColdPool;
use crate::context::Shared;
use crate::options::{KtlsMode, Pinning, ServerOptions};
use crate::stats::WorkerStats;
use crate::tls::config::SharedTls;
use crate::worker::WorkerPlan;
use socket2::{Domain, Protocol, Socket, Type};

/// Why the server could not start or had to stop. Each names the side that failed.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The root directory is missing or not a directory.
    #[error("root {path}")]
    Root {
        /// The configured root.
        path: PathBuf,
        /// What opening it said.
        source: std::io::Error,
    },
    /// A listen address could not be bound.
    #[error("listen {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What bind/listen said.
        source: std::io::Error,
    },
    /// `tcp.congestion` or `tcp.max_pacing_rate` (or a `tcp.listeners` override) could
    /// not be set (an algorithm the kernel lacks gives "No such file or directory").
    #[error("tcp tuning on {addr} (congestion control / pacing): {source}")]
    TcpTuning {
        /// The listener.
        addr: SocketAddr,
        /// What setsockopt said.
        source: std::io::Error,
    },
    /// The TLS configuration (certificates, keys) could not be loaded.
    #[error("tls: {0}")]
    Tls(#[from] crate::tls::config::TlsConfigError),
    /// Cache mode could not start (store, origins, routes).
    #[error("cache mode: {0}")]
    Cache(String),
    /// Options that cannot work (zero workers, no address...).
    #[error("invalid options: {0}")]
    Invalid(&'static str),
    /// Creating a thread or runtime failed.
    #[error("runtime: {0}")]
    Runtime(std::io::Error),
}

/// What a started server reports before serving: the bound addresses (port 0 resolved).
#[derive(Debug, Clone)]
pub struct Started {
    /// One per configured listen address, in order.
    pub local_addrs: Vec<SocketAddr>,
    /// One per configured TLS listen address, in order.
    pub tls_addrs: Vec<SocketAddr>,
    /// Worker threads started.
    pub workers: usize,
    /// Where the admin API listens, if it is on.
    pub admin_addr: Option<SocketAddr>,
}

/// Run until SIGTERM or SIGINT, then stop gracefully. Calls `on_started` once every
/// listener is bound (the binary logs "listening on ..." there). SIGHUP is answered
/// with "no configuration file to reload"; see [`run_with_reload`].
pub fn run(options: ServerOptions, on_started: impl FnOnce(&Started)) -> Result<(), ServerError> {
    run_with_reload(options, None, on_started)
}

/// Like [`run`]; SIGHUP (or the admin API's reload) calls `reloader` for a new
/// configuration and applies what can change at run time (see `control`).
pub fn run_with_reload(
    options: ServerOptions,
    reloader: Option<Reloader>,
    on_started: impl FnOnce(&Started),
) -> Result<(), ServerError> {
    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServerError::Runtime)?;
    // Signal handlers must be installed before we announce readiness, or a SIGTERM sent
    // right after "listening" would kill us the default way.
    let stop = signals.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        Ok::<_, std::io::Error>((
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
            signal(SignalKind::hangup())?,
            signal(SignalKind::user_defined1())?,
        ))
    });
    let (mut term, mut int, mut hup, mut usr1) = stop.map_err(ServerError::Runtime)?;
    run_controlled(options, reloader, on_started, move |control: &Control| {
        signals.block_on(async {
            loop {
                tokio::select! {
                    _ = term.recv() => {
                        tracing::info!(signal = "SIGTERM", "stopping");
                        return;
                    }
                    _ = int.recv() => {
                        tracing::info!(signal = "SIGINT", "stopping");
                        return;
                    }
                    _ = hup.recv() => {
                        tracing::info!(signal = "SIGHUP", "reloading the configuration");
                        // Parsing a file is quick; doing it here keeps reloads serialised.
                        let _ = control.reload();
                    }
                    _ = usr1.recv() => {
                        tracing::info!(signal = "SIGUSR1", "reopening access logs");
                        control.reopen_logs();
                    }
                }
            }
        });
    })
}

/// Like [`run`], but stops when `wait_for_stop` returns (used by tests and embedders).
pub fn run_until(
    options: ServerOptions,
    on_started: impl FnOnce(&Started),
    wait_for_stop: impl FnOnce(),
) -> Result<(), ServerError> {
    run_controlled(options, None, on_started, |_: &Control| wait_for_stop())
}

fn run_controlled(
    mut options: ServerOptions,
    reloader: Option<Reloader>,
    on_started: impl FnOnce(&Started),
    wait_for_stop: impl FnOnce(&Control),
) -> Result<(), ServerError> {
    if options.workers == 0 {
        return Err(ServerError::Invalid("workers must be at least 1"));
    }
    let tls_listen = options
        .tls
        .as_ref()
        .map(|t| t.listen.clone())
        .unwrap_or_default();
    if options.listen.is_empty() && tls_listen.is_empty() {
        return Err(ServerError::Invalid(
            "at least one listen address is needed",
        ));
    }
    // Cache mode opens its store first (it creates the cache directories); the page-cache
    // probe then looks at the first cache disk instead of a library root.
    let cache = match &options.cache {
        Some(c) => Some(crate::proxy::ProxyShared::new(c.clone()).map_err(ServerError::Cache)?),
        None => None,
    };
    let root = match &options.cache {
        Some(c) => open_root(&c.store.disks[0].path)?,
        None => open_root(&options.root)?,
    };
    let nofile = match linerate_sys::limits::raise_nofile_limit() {
        Ok(n) => {
            tracing::debug!(nofile = n, "file descriptor limit");
            Some(n)
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not raise the file descriptor limit");
            None
        }
    };
    let probe = linerate_sys::pagecache::PageCacheProbe::detect(root.as_fd());
    let cold = ColdPool::start(options.cold_threads_per_disk).map_err(ServerError::Runtime)?;
    let tls = start_tls(&options)?;
    let (sockets, local_addrs) = bind_all(&options, &options.listen)?;
    let (mut tls_sockets, tls_addrs) = bind_all(&options, &tls_listen)?;
    let admin_listener = match options.admin.listen {
        Some(addr) => Some(
            crate::admin::api::bind(addr).map_err(|source| ServerError::Bind { addr, source })?,
        ),
        None => None,
    };
    let cpus = linerate_sys::cpu::allowed_cpus().unwrap_or_default();
    tracing::info!(
        workers = options.workers,
        page_cache_probe = probe.as_str(),
        root = %options.root.display(),
        "starting"
    );
    let control = Arc::new(Control::new(Arc::new(options.clone()), reloader));
    if let Some(t) = &tls {
        control.set_ktls(t.support.clone());
    }
    let stats: Vec<Arc<WorkerStats>> = (0..options.workers)
        .map(|_| Arc::new(WorkerStats::new()))
        .collect();
    // Cached open files may take at most a quarter of the descriptors: the connections
    // need the rest. Capped only here, after the control copy, so a reload compares
    // the configured value and does not report it as changed.
    if let Some(n) = nofile {
        let cap = usize::try_from(n / 4).unwrap_or(usize::MAX) / options.workers;
        if options.open_file_cache > cap {
            tracing::warn!(
                configured = options.open_file_cache,
                cap,
                "appliance.open_file_cache capped to a quarter of the descriptor limit per worker"
            );
            options.open_file_cache = cap;
        }
    }
    let shared = Arc::new(Shared::new(options, root, probe, cold, tls));

    let mut threads = Vec::new();
    for (index, listeners) in sockets.into_iter().enumerate() {
        let cpu = match shared.options.pin_workers {
            Pinning::Pinned if !cpus.is_empty() => Some(cpus[index % cpus.len()]),
            _ => None,
        };
        let plan = WorkerPlan {
            index,
            cpu,
            listeners,
            tls_listeners: std::mem::take(&mut tls_sockets[index]),
            shared: shared.clone(),
            cache: cache.clone(),
            control: control.clone(),
            stats: stats[index].clone(),
        };
        let handle = std::thread::Builder::new()
            .name(format!("linerate-w{index}"))
            .spawn(move || plan.run())
            .map_err(ServerError::Runtime)?;
        threads.push(handle);
    }
    let mut admin_addr = None;
    let mut admin_thread = None;
    if let Some(listener) = admin_listener {
        admin_addr = listener.local_addr().ok();
        let admin = crate::admin::api::Admin::new(
            control.clone(),
            stats,
            cache.clone(),
            local_addrs.first().copied(),
        );
        admin_thread = Some(
            std::thread::Builder::new()
                .name("linerate-admin".into())
                .spawn(move || admin.run(listener))
                .map_err(ServerError::Runtime)?,
        );
    }
    on_started(&Started {
        local_addrs,
        tls_addrs,
        workers: threads.len(),
        admin_addr,
    });
    wait_for_stop(&control);
    // Tell every worker; they stop accepting at once and drain within the grace period.
    control.stop();
    if let Some(t) = admin_thread {
        if t.join().is_err() {
            tracing::error!("the admin thread panicked");
        }
    }
    for t in threads {
        if t.join().is_err() {
            tracing::error!("a worker thread panicked");
        }
    }
    shared.cold.shutdown();
    tracing::info!("stopped");
    Ok(())
}

/// Probe kernel TLS, load the certificates and build the first TLS configuration.
/// `None` when no TLS listener is configured.
fn start_tls(options: &ServerOptions) -> Result<Option<SharedTls>, ServerError> {
    let Some(tls) = &options.tls else {
        return Ok(None);
    };
    if tls.listen.is_empty() {
        return Ok(None);
    }
    let support = match tls.ktls {
        KtlsMode::Auto => linerate_sys::ktls::probe(),
        KtlsMode::Off => linerate_sys::ktls::Support {
            absent_because: Some("turned off (tls.ktls = false)".into()),
            ..Default::default()
        },
    };
    let ciphers: Vec<String> = support
        .ciphers
        .iter()
        .map(|(v, c)| format!("{}/{}", v.as_str(), c.as_str()))
        .collect();
    match &support.absent_because {
        None => tracing::info!(
            ciphers = %ciphers.join(","),
            rekey = support.rekey,
            "kernel TLS available: records move to the kernel after the handshake"
        ),
        Some(why) => tracing::info!(
            reason = %why,
            "kernel TLS unavailable: TLS records are encrypted in user space"
        ),
    }
    let builder = Arc::new(crate::tls::config::TlsConfigBuilder::new(tls.clone())?);
    let config = builder.build()?;
    let (publish, configs) = tokio::sync::watch::channel(config);
    Ok(Some(SharedTls {
        support,
        mode: tls.ktls,
        handshake_timeout: tls.handshake_timeout,
        configs,
        publish,
        builder,
    }))
}

fn open_root(path: &PathBuf) -> Result<File, ServerError> {
    let root = File::open(path).map_err(|source| ServerError::Root {
        path: path.clone(),
        source,
    })?;
    let meta = root.metadata().map_err(|source| ServerError::Root {
        path: path.clone(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(ServerError::Root {
            path: path.clone(),
            source: std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
        });
    }
    Ok(root)
}

/// Bind `workers × addresses` sockets. The first worker's socket for an address with
/// port 0 picks the port; the others reuse it, so `SO_REUSEPORT` groups them.
fn bind_all(
    options: &ServerOptions,
    addrs: &[SocketAddr],
) -> Result<(Vec<Vec<std::net::TcpListener>>, Vec<SocketAddr>), ServerError> {
    let mut per_worker: Vec<Vec<std::net::TcpListener>> =
        (0..options.workers).map(|_| Vec::new()).collect();
    let mut local_addrs = Vec::new();
    for &configured in addrs {
        ensure_port_free(configured).map_err(|source| ServerError::Bind {
            addr: configured,
            source,
        })?;
        let mut addr = configured;
        let tuning = options.tcp.tuning_for(configured);
        for listeners in per_worker.iter_mut() {
            let l = bind_one(addr, options.backlog).map_err(|source| ServerError::Bind {
                addr: configured,
                source,
            })?;
            if addr.port() == 0 {
                addr = l.local_addr().map_err(|source| ServerError::Bind {
                    addr: configured,
                    source,
                })?;
            }
            tune_listener(&l, &tuning).map_err(|source| ServerError::TcpTuning {
                addr: configured,
                source,
            })?;
            listeners.push(l);
        }
        local_addrs.push(addr);
    }
    Ok((per_worker, local_addrs))
}

/// Fail with `EADDRINUSE` if another socket already listens on `addr`. Needed because
/// `SO_REUSEPORT` lets any process of the same user join our port group silently (seen
/// here: a stray nginx with `reuseport` got half of linerate's connections). A socket
/// without `SO_REUSEPORT` cannot bind a port that has a listener, so we try one first.
fn ensure_port_free(addr: SocketAddr) -> std::io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // SO_REUSEADDR: connections of a previous run in TIME_WAIT must not block a restart.
    probe.set_reuse_address(true)?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    probe.bind(&addr.into())
}

/// Congestion control and pacing cap on a listener; accepted sockets inherit both (the
/// kernel copies them into each child socket: see the test in `linerate_sys::tcp`), so
/// accepting costs no extra syscall.
fn tune_listener(
    sock: &std::net::TcpListener,
    tuning: &crate::operate::TcpTuning,
) -> std::io::Result<()> {
    if let Some(cc) = &tuning.congestion {
        linerate_sys::tcp::set_congestion(sock.as_fd(), cc)?;
    }
    if let Some(rate) = tuning.max_pacing_rate {
        linerate_sys::tcp::set_max_pacing_rate(sock.as_fd(), rate)?;
    }
    Ok(())
}

fn bind_one(addr: SocketAddr, backlog: u32) -> std::io::Result<std::net::TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(sock.into())
}
