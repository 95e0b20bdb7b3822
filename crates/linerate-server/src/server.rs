//! Start-up and stop: validate the root, bind every worker's listeners up front (so a
//! bad address fails before anything serves) or take over the ones inherited from the
//! previous process of an upgrade or from systemd, start one pinned thread per worker
//! and the admin thread, tell systemd (`READY=1`), wait for SIGTERM/SIGINT (handling
//! SIGHUP reloads, SIGUSR1 log reopens and SIGUSR2 upgrades meanwhile), tell the
//! workers, and join them.
//!
//! Not here: what a worker does with a connection (see `worker` and `conn`), or the
//! upgrade's protocol (`upgrade`).

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;

use crate::admin::control::{Control, Reloader, RunState};
use crate::coldpool::ColdPool;
use crate::context::Shared;
use crate::listeners::{ConfiguredListener, Handover, Inherited, ListenerKind};
use crate::notify::{Notifier, SystemdSockets};
use crate::options::{KtlsMode, Pinning, ServerOptions};
use crate::stats::WorkerStats;
use crate::tls::config::SharedTls;
use crate::upgrade::{Successor, Upgrader};
use crate::worker::WorkerPlan;
use socket2::{Domain, Protocol, Socket, Type};

/// How long the new process of an upgrade waits for its store's index to load before it
/// says ready (a million objects load in about a second, docs/benchmarks.md); under the
/// old process's 30 s step timeout with margin.
const INDEX_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

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
    /// The admin API's address could not be bound (said as such: a clash on it reads
    /// like one on a data port otherwise).
    #[error("admin API listen {addr} (admin.listen, or serve --admin ADDR; \"off\" turns the admin API off)")]
    AdminBind {
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
    /// Started by an upgrade, and the hand-over from the old process failed.
    #[error("upgrade: {0}")]
    Upgrade(String),
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
    run_upgradable(
        options,
        reloader,
        None,
        SystemdSockets::default(),
        on_started,
    )
}

/// Like [`run_with_reload`], for a process that may have been started by an upgrade
/// (`successor`: see [`Successor::from_env`]): it serves on the sockets it received and
/// opens the store only once the old process has lent it. SIGUSR2 (or the admin API's
/// `POST /upgrade`) starts the next process the same way. `systemd`: the listening
/// sockets systemd passed ([`SystemdSockets::take`], at the start of `main`), used
/// instead of binding their addresses.
pub fn run_upgradable(
    options: ServerOptions,
    reloader: Option<Reloader>,
    successor: Option<&Successor>,
    systemd: SystemdSockets,
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
            signal(SignalKind::user_defined2())?,
        ))
    });
    let (mut term, mut int, mut hup, mut usr1, mut usr2) = stop.map_err(ServerError::Runtime)?;
    let notifier = Notifier::from_env().map(Arc::new);
    let stopping = notifier.clone();
    let start = Start {
        successor,
        systemd,
        notifier,
        upgradable: true,
    };
    run_controlled(
        options,
        reloader,
        start,
        on_started,
        move |control: &Control| {
            let stopping = || {
                if let Some(n) = &stopping {
                    n.send("STOPPING=1\nSTATUS=stopping");
                }
            };
            signals.block_on(async {
                let mut run_state = control.watch_run_state();
                loop {
                    tokio::select! {
                        _ = term.recv() => {
                            tracing::info!(signal = "SIGTERM", "stopping");
                            stopping();
                            return;
                        }
                        _ = int.recv() => {
                            tracing::info!(signal = "SIGINT", "stopping");
                            stopping();
                            return;
                        }
                        // An upgrade that succeeded (from the admin API's thread, or below).
                        _ = run_state.wait_for(|s| *s == RunState::Stopping) => return,
                        _ = usr2.recv() => {
                            tracing::info!(signal = "SIGUSR2", "upgrading");
                            // The outcome is logged by the upgrade itself; on success the
                            // run state is now Stopping and the branch above returns.
                            let _ = control.upgrade(None);
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
        },
    )
}

/// Like [`run`], but stops when `wait_for_stop` returns (used by tests and embedders).
pub fn run_until(
    options: ServerOptions,
    on_started: impl FnOnce(&Started),
    wait_for_stop: impl FnOnce(),
) -> Result<(), ServerError> {
    let start = Start {
        successor: None,
        systemd: SystemdSockets::default(),
        notifier: None,
        upgradable: false,
    };
    run_controlled(options, None, start, on_started, |_: &Control| {
        wait_for_stop()
    })
}

/// How this process came to be and whom it tells.
struct Start<'a> {
    /// Started by an upgrade: the old process's channel.
    successor: Option<&'a Successor>,
    /// Sockets systemd passed (none when started by an upgrade: the variables were
    /// removed for the child).
    systemd: SystemdSockets,
    /// systemd's notification socket, when run as a `Type=notify` service.
    notifier: Option<Arc<Notifier>>,
    /// Whether SIGUSR2 / `POST /upgrade` may start a next process (not for servers
    /// embedded with [`run_until`], which have no command line to start again).
    upgradable: bool,
}

fn run_controlled(
    mut options: ServerOptions,
    reloader: Option<Reloader>,
    start: Start<'_>,
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
    // An appliance's library is checked before anything is bound (a missing root is
    // the likelier mistake, and the one to report).
    let appliance_root = match &options.cache {
        None => Some(open_root(&options.root)?),
        Some(_) => None,
    };
    // Sockets next (inherited ones are taken, the rest bound), so that an address in
    // use fails before the previous process of an upgrade lends its store.
    let (mut inherited, from_systemd) = match start.successor {
        Some(s) => (s.take_listeners(), false),
        None => {
            let i = Inherited::from_named(start.systemd.0);
            let any = !i.is_empty();
            (i, any)
        }
    };
    let tls = start_tls(&options)?;
    let mut handover = Handover::default();
    let (sockets, local_addrs) = bind_all(
        &options,
        &options.listen,
        ListenerKind::Http,
        &mut inherited,
        &mut handover,
    )?;
    let (mut tls_sockets, tls_addrs) = bind_all(
        &options,
        &tls_listen,
        ListenerKind::Https,
        &mut inherited,
        &mut handover,
    )?;
    let admin_listener = match options.admin.listen {
        Some(addr) => Some(bind_admin(addr, &mut inherited, &mut handover)?),
        None => None,
    };
    inherited.close_unclaimed();
    // The store's lease: from the old process of an upgrade (it stops writing first;
    // an appliance gets no locks but the same step, so the old one knows this one's
    // configuration is valid), or taken here.
    let lease = match start.successor {
        Some(s) => Some(s.lease().map_err(ServerError::Upgrade)?),
        None => None,
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
    // Cache mode opens its store before the root (it creates the cache directories);
    // the page-cache probe then looks at the first cache disk instead of a library root.
    let cache = match &options.cache {
        Some(c) => {
            let lock = match lease {
                Some(files) => Some(
                    linerate_cache::StoreLock::adopt(&c.store, files)
                        .map_err(|e| ServerError::Upgrade(format!("store lease: {e}")))?,
                ),
                None => None,
            };
            // Files the store keeps open for hits may take at most a quarter of the
            // descriptors, as the appliance's open-file cache (capped on a copy, so a
            // reload compares the configured value).
            let mut c = c.clone();
            if let Some(n) = nofile {
                let cap = usize::try_from(n / 4).unwrap_or(usize::MAX);
                if c.store.open_files > cap {
                    tracing::warn!(
                        configured = c.store.open_files,
                        cap,
                        "cache.open_files capped to a quarter of the descriptor limit"
                    );
                    c.store.open_files = cap;
                }
            }
            Some(
                crate::proxy::ProxyShared::new(c, lock, options.cluster.clone(), options.workers)
                    .map_err(ServerError::Cache)?,
            )
        }
        None => None,
    };
    let root = match (appliance_root, &options.cache) {
        (Some(root), _) => root,
        (None, Some(c)) => open_root(&c.store.disks[0].path)?,
        (None, None) => open_root(&options.root)?,
    };
    let probe = linerate_sys::pagecache::PageCacheProbe::detect(root.as_fd());
    let cold = ColdPool::start(options.cold_threads_per_disk).map_err(ServerError::Runtime)?;
    let cpus = linerate_sys::cpu::allowed_cpus().unwrap_or_default();
    match &options.cache {
        None => tracing::info!(
            workers = options.workers,
            page_cache_probe = probe.as_str(),
            mode = "appliance",
            root = %options.root.display(),
            "starting"
        ),
        // Cache mode serves no root: what it fronts is its origins and routes.
        Some(c) => tracing::info!(
            workers = options.workers,
            page_cache_probe = probe.as_str(),
            mode = "cache",
            origins = %describe_origins(c),
            routes = %describe_routes(c),
            disks = %describe_disks(c),
            "starting"
        ),
    }
    let control = Arc::new(Control::new(Arc::new(options.clone()), reloader));
    let handover = Arc::new(handover);
    let closing = handover.clone();
    control.on_stop_accepting(Box::new(move || closing.close()));
    if start.upgradable {
        match std::env::current_exe() {
            Ok(exe) => {
                let upgrader = Upgrader::new(
                    exe,
                    handover.clone(),
                    cache.clone(),
                    Arc::downgrade(&control),
                    start.notifier.clone(),
                );
                control.set_upgrader(Box::new(move |binary| upgrader.upgrade(binary)));
            }
            Err(e) => tracing::warn!(error = %e, "cannot find this binary; upgrades disabled"),
        }
    }
    if let Some(t) = &tls {
        control.set_ktls(t.support.clone());
    }
    if let Some(cluster) = cache.as_ref().and_then(|c| c.cluster.clone()) {
        crate::cluster::keeper(cluster, control.clone()).map_err(ServerError::Runtime)?;
    }
    if let Some(px) = &cache {
        // Purges this node missed while it was away, before it serves.
        crate::purge::start(px.clone(), control.clone()).map_err(ServerError::Runtime)?;
    }
    let stats: Vec<Arc<WorkerStats>> = (0..options.workers)
        .map(|_| Arc::new(WorkerStats::new()))
        .collect();
    // Cached open files may take at most a quarter of the descriptors: the connections
    // need the rest. Capped only here, after the control copy, so a reload compares
    // the configured value and does not report it as changed.
    if let Some(n) = nofile {
        let cap = usize::try_from(n / 4).unwrap_or(usize::MAX) / options.workers;
        // Cache mode opens no library files (the store keeps its own, `cache.open_files`),
        // so there the appliance key is capped without a word about it.
        if options.open_file_cache > cap && options.cache.is_some() {
            options.open_file_cache = cap;
        } else if options.open_file_cache > cap {
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
            start.successor.is_some(),
        );
        admin_thread = Some(
            std::thread::Builder::new()
                .name("linerate-admin".into())
                .spawn(move || admin.run(listener))
                .map_err(ServerError::Runtime)?,
        );
    }
    let status = format!(
        "serving on {}",
        local_addrs
            .iter()
            .chain(&tls_addrs)
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    // systemd keeps copies of the listeners (FileDescriptorStoreMax=), so a restart gets
    // them back in LISTEN_FDS with their queues instead of binding anew. It ignores
    // descriptors it already holds (after an upgrade, all but new addresses).
    if let (Some(n), false) = (&start.notifier, from_systemd) {
        for kind in [ListenerKind::Http, ListenerKind::Https, ListenerKind::Admin] {
            let copies = handover.copies_of(kind).unwrap_or_default();
            let fds: Vec<_> = copies.iter().map(|f| f.as_fd()).collect();
            if !fds.is_empty() {
                n.send_with_fds(&format!("FDSTORE=1\nFDNAME={}", kind.as_str()), &fds);
            }
        }
    }
    match (start.successor, &start.notifier) {
        // The old process tells systemd the new main pid once it has our READY.
        (Some(s), n) => {
            // Ready once the store's index is loaded (lookups before that open files by
            // name and are slower), so `/ready` on this process never says
            // `index_loading` to a probe after an upgrade; the old process serves
            // meanwhile. Bounded well inside the old process's step timeout.
            if let Some(c) = &cache {
                if !c.store.wait_loaded(INDEX_WAIT) {
                    tracing::warn!(
                        waited_s = INDEX_WAIT.as_secs(),
                        "store index still loading; taking over anyway"
                    );
                }
            }
            s.ready();
            if let Some(n) = n {
                n.send(&format!("STATUS={status}"));
            }
        }
        (None, Some(n)) => n.send(&format!("READY=1\nSTATUS={status}")),
        (None, None) => {}
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
///
/// Sockets inherited for an address (upgrade, systemd) are used instead: every one of
/// them is given to a worker (round robin), so a connection queued on any of them is
/// accepted whatever the new worker count; workers left without one bind a new socket
/// into the same `SO_REUSEPORT` group. Each socket is also kept in `handover`.
fn bind_all(
    options: &ServerOptions,
    addrs: &[SocketAddr],
    kind: ListenerKind,
    inherited: &mut Inherited,
    handover: &mut Handover,
) -> Result<(Vec<Vec<ConfiguredListener>>, Vec<SocketAddr>), ServerError> {
    let mut per_worker: Vec<Vec<ConfiguredListener>> =
        (0..options.workers).map(|_| Vec::new()).collect();
    let mut local_addrs = Vec::new();
    for &configured in addrs {
        let bind_err = |source| ServerError::Bind {
            addr: configured,
            source,
        };
        let tuning = options.tcp.tuning_for(configured);
        let taken = inherited.take(kind, configured);
        if taken.is_empty() {
            ensure_port_free(configured).map_err(bind_err)?;
        } else {
            tracing::info!(kind = kind.as_str(), addr = %configured, sockets = taken.len(), "using inherited listeners");
        }
        let mut addr = configured;
        // A worker left without an inherited socket binds one into the group; if that
        // fails (a socket systemd created without SO_REUSEPORT), it accepts on a copy
        // of an inherited one instead.
        let mut spare: Vec<std::net::TcpListener> = Vec::new();
        for l in taken.iter() {
            spare.push(l.try_clone().map_err(bind_err)?);
        }
        let mut got: Vec<Vec<std::net::TcpListener>> =
            (0..options.workers).map(|_| Vec::new()).collect();
        for (i, l) in taken.into_iter().enumerate() {
            got[i % options.workers].push(l);
        }
        for (listeners, mine) in per_worker.iter_mut().zip(got) {
            let mine = if mine.is_empty() {
                match bind_one(addr, options.backlog) {
                    Ok(l) => vec![l],
                    Err(e) => match spare.pop() {
                        Some(copy) => {
                            tracing::info!(addr = %configured, error = %e, "sharing an inherited listener between workers");
                            vec![copy]
                        }
                        None => return Err(bind_err(e)),
                    },
                }
            } else {
                mine
            };
            for l in mine {
                if addr.port() == 0 {
                    addr = l.local_addr().map_err(bind_err)?;
                }
                tune_listener(&l, &tuning).map_err(|source| ServerError::TcpTuning {
                    addr: configured,
                    source,
                })?;
                handover.keep(kind, &l).map_err(bind_err)?;
                listeners.push((l, configured));
            }
        }
        local_addrs.push(addr);
    }
    Ok((per_worker, local_addrs))
}

/// Cache mode's origins for the start-up log: `name=url,url; name=url`.
fn describe_origins(c: &crate::cacheopts::CacheOptions) -> String {
    let one = |o: &crate::cacheopts::OriginOptions| {
        let urls: Vec<String> = o.servers.iter().map(|s| s.url()).collect();
        format!("{}={}", o.name, urls.join(","))
    };
    c.origins.iter().map(one).collect::<Vec<_>>().join("; ")
}

/// Cache mode's routes for the start-up log, in the order they are tried:
/// `host/prefix->origin` (`*` for any host).
fn describe_routes(c: &crate::cacheopts::CacheOptions) -> String {
    let one = |r: &crate::cacheopts::RouteOptions| {
        format!(
            "{}{}->{}",
            r.host.as_deref().unwrap_or("*"),
            r.path_prefix,
            r.origin
        )
    };
    c.routes.iter().map(one).collect::<Vec<_>>().join("; ")
}

/// Cache mode's disks for the start-up log: `name=path`.
fn describe_disks(c: &crate::cacheopts::CacheOptions) -> String {
    let one = |d: &linerate_cache::DiskConfig| format!("{}={}", d.name, d.path.display());
    c.store.disks.iter().map(one).collect::<Vec<_>>().join("; ")
}

/// The admin listener: inherited, or bound; kept in `handover` either way.
fn bind_admin(
    addr: SocketAddr,
    inherited: &mut Inherited,
    handover: &mut Handover,
) -> Result<std::net::TcpListener, ServerError> {
    let bind_err = |source| ServerError::AdminBind { addr, source };
    let mut taken = inherited.take(ListenerKind::Admin, addr);
    let l = match taken.pop() {
        Some(l) => l,
        None => crate::admin::api::bind(addr).map_err(bind_err)?,
    };
    // More than one admin socket for one address is not something we pass; close extras.
    drop(taken);
    handover.keep(ListenerKind::Admin, &l).map_err(bind_err)?;
    Ok(l)
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
