//! Start-up and stop: validate the root, bind every worker's listeners up front (so a
//! bad address fails before anything serves), start one pinned thread per worker, wait
//! for SIGTERM/SIGINT, tell the workers, and join them.
//!
//! Not here: what a worker does with a connection (see `worker` and `conn`).

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::watch;

use crate::coldpool::ColdPool;
use crate::options::{Pinning, ServerOptions};
use crate::worker::{Shared, WorkerPlan};

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
    /// Worker threads started.
    pub workers: usize,
}

/// Run until SIGTERM or SIGINT, then stop gracefully. Calls `on_started` once every
/// listener is bound (the binary logs "listening on ..." there).
pub fn run(options: ServerOptions, on_started: impl FnOnce(&Started)) -> Result<(), ServerError> {
    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServerError::Runtime)?;
    // Signal handlers must be installed before we announce readiness, or a SIGTERM sent
    // right after "listening" would kill us the default way.
    let stop = signals.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        match (term, int) {
            (Ok(t), Ok(i)) => Ok((t, i)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    });
    let (mut term, mut int) = stop.map_err(ServerError::Runtime)?;
    run_until(options, on_started, move || {
        signals.block_on(async {
            tokio::select! {
                _ = term.recv() => tracing::info!(signal = "SIGTERM", "stopping"),
                _ = int.recv() => tracing::info!(signal = "SIGINT", "stopping"),
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
    if options.workers == 0 {
        return Err(ServerError::Invalid("workers must be at least 1"));
    }
    if options.listen.is_empty() {
        return Err(ServerError::Invalid(
            "at least one listen address is needed",
        ));
    }
    let root = open_root(&options.root)?;
    match linerate_sys::limits::raise_nofile_limit() {
        Ok(n) => tracing::debug!(nofile = n, "file descriptor limit"),
        Err(e) => tracing::warn!(error = %e, "could not raise the file descriptor limit"),
    }
    let probe = linerate_sys::pagecache::PageCacheProbe::detect(root.as_fd());
    let cold = ColdPool::start(options.cold_threads_per_disk).map_err(ServerError::Runtime)?;
    let (sockets, local_addrs) = bind_all(&options)?;
    let cpus = linerate_sys::cpu::allowed_cpus().unwrap_or_default();
    tracing::info!(
        workers = options.workers,
        page_cache_probe = probe.as_str(),
        root = %options.root.display(),
        "starting"
    );
    let shared = Arc::new(Shared::new(options, root, probe, cold));
    let (stop_tx, stop_rx) = watch::channel(false);

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
            shared: shared.clone(),
            stop: stop_rx.clone(),
        };
        let handle = std::thread::Builder::new()
            .name(format!("linerate-w{index}"))
            .spawn(move || plan.run())
            .map_err(ServerError::Runtime)?;
        threads.push(handle);
    }
    on_started(&Started {
        local_addrs,
        workers: threads.len(),
    });
    wait_for_stop();
    // Tell every worker; they stop accepting at once and drain within the grace period.
    let _ = stop_tx.send(true);
    for t in threads {
        if t.join().is_err() {
            tracing::error!("a worker thread panicked");
        }
    }
    shared.cold.shutdown();
    tracing::info!("stopped");
    Ok(())
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
) -> Result<(Vec<Vec<std::net::TcpListener>>, Vec<SocketAddr>), ServerError> {
    let mut per_worker: Vec<Vec<std::net::TcpListener>> =
        (0..options.workers).map(|_| Vec::new()).collect();
    let mut local_addrs = Vec::new();
    for &configured in &options.listen {
        ensure_port_free(configured).map_err(|source| ServerError::Bind {
            addr: configured,
            source,
        })?;
        let mut addr = configured;
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

/// How long a stopping worker waits between checks that its connections have drained,
/// when no connection has closed to wake it. Only used while stopping.
pub(crate) const DRAIN_POLL: Duration = Duration::from_millis(50);
