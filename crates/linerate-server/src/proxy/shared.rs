//! Cache mode's state: what every worker shares from start-up ([`ProxyShared`]: the
//! store, the origins, the routes with their settings, the fill claims, the memory of
//! uncacheable URLs, invalidation and purges) and each worker's own part
//! ([`ProxyWorker`]: its origin connection pools).
//!
//! Not here: answering requests (`flow`, `relay`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use linerate_cache::{Lookup, ObjectHandle, ObjectMeta, Store};
use linerate_http::cache::key::{self, Scheme};
use linerate_http::cache::{Freshness, Heuristic, Settings};
use linerate_http::path::{self, PathError, ProxyTarget};

use super::ahead;
use super::fills::Fills;
use crate::cacheopts::{CacheOptions, QueryKey, RouteOptions};
use crate::origin::{Origin, OriginShared};

/// Stored field marking a `Vary` stub at a URL's primary key: its value is the `Vary`
/// names, and the variants live under `key::variant(primary, secondary key)`.
pub(crate) const VARY_STUB: &[u8] = b"x-linerate-vary";

/// Stored field holding the `Cache-Status` member of the peer (the key's owner) that
/// served this node's fill: replayed only on the responses that went forward with that
/// fill (`head::set_apart_peer_status`), never on this node's later hits.
pub(crate) const PEER_STATUS: &[u8] = b"x-linerate-peer-status";

/// Whether `name` is one of the cache's own markers in stored fields (`x-linerate-*`:
/// [`VARY_STUB`], [`PEER_STATUS`]). An origin's or a peer's fields of such a name are
/// never stored: an origin could otherwise make a response look like a Vary stub, or
/// add a `Cache-Status` member to it.
pub(crate) fn is_internal_field(name: &[u8]) -> bool {
    name.get(..11)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"x-linerate-"))
}
/// How long a "may not be stored" verdict about a URL sends its requests straight to
/// the origin (hit-for-pass): they are not queued behind one fill each.
const HIT_FOR_PASS_MS: u64 = 30_000;
/// Most URLs remembered as uncacheable; past it the memory starts over (it is a
/// shortcut, never a correctness matter).
const MAX_PASSES: usize = 100_000;

/// Threads that append fill bytes to the store: a `pwrite` into the page cache can
/// block (dirty-page throttling, a slow disk), so it never runs on a worker's event
/// loop. Started at start-up from the main thread, so unlike the runtime's blocking
/// pool (spawned lazily from a pinned worker) they are not pinned to a worker's core.
pub(crate) struct WritePool {
    tx: Mutex<std::sync::mpsc::Sender<Box<dyn FnOnce() + Send>>>,
}

/// Fill threads per worker, and at least: every large body's writes run there
/// ([`large_body`]), page-cache copies that the workers' cores did before, so they
/// scale with the workers; two per worker so that threads waiting for a journal commit
/// leave others to copy.
const WRITE_THREADS_PER_WORKER: usize = 2;
const MIN_WRITE_THREADS: usize = 4;

impl WritePool {
    fn start(threads: usize) -> std::io::Result<WritePool> {
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("linerate-fill{i}"))
                .spawn(move || loop {
                    // One job at a time per thread; the lock is held only to receive.
                    let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                })?;
        }
        Ok(WritePool { tx: Mutex::new(tx) })
    }

    /// Run `f` on a pool thread; `None` if the pool is gone or `f` panicked.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Box<dyn FnOnce() + Send> = Box::new(move || {
            let _ = tx.send(f());
        });
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job)
            .ok()?;
        rx.await.ok()
    }
}

/// Where a fill's disk writes ran, all workers together.
#[derive(Debug, Default)]
pub(crate) struct DiskWriteCounts {
    /// Writes (creates and appends) done on the worker itself.
    pub(crate) inline: AtomicU64,
    /// Writes handed to the fill threads (the worker's own had become slow).
    pub(crate) pooled: AtomicU64,
    /// Times a worker's writes went to the fill threads for a while ([`POOL_FOR`],
    /// doubling while it recurs) because its own took too long ([`DiskWrites`]).
    pub(crate) slow: AtomicU64,
}

/// A fill write on the worker taking longer than this waited for something (the
/// disk, the filesystem journal, memory reclaim); a page-cache write of 64 KiB takes
/// about 20 µs.
const SLOW_WRITE: Duration = Duration::from_millis(1);
/// The window over which a worker's slow writes are summed.
const WRITE_WINDOW: Duration = Duration::from_millis(100);
/// More time than this in slow fill writes within one window (half the loop), or in
/// one write, sends the worker's writes to the fill threads. Quick writes never count:
/// at thousands of misses a second they are a large share of the loop's time, and its
/// work as nginx's. Half, not less: the fill threads cost a hand-off per write, which
/// at 64 KiB misses was a sixth of the core (measured: always on the worker against a
/// fifth of the loop as the bound, 18 % more misses a second and a quarter lower p99,
/// six alternating pairs), and the group commit's journal writes make creates and
/// writes wait a few milliseconds now and then (up to 16 ms in a 100 ms window, about
/// 7 % of the loop overall): a burst like that must not buy a second of hand-offs.
const WRITE_BUDGET: Duration = Duration::from_millis(50);
/// How long a worker sends its writes to the fill threads after going over budget the
/// first time. A lone episode (a commit the worker waited 50 ms for: 3 of 9 rounds of
/// 5 s 64 KiB miss runs had one, and those rounds, with a second of hand-offs after
/// it, made 4-10 % fewer misses than their run's other rounds) then costs a quarter
/// second of them; a disk that stays slow sends the writes away again, for twice as
/// long each time (up to [`POOL_FOR_MAX`]), so a lasting problem costs the worker its
/// 50 ms of waits once per [`POOL_FOR_MAX`] at most.
const POOL_FOR: Duration = Duration::from_millis(250);
/// The longest a worker's writes go to the fill threads in one go.
const POOL_FOR_MAX: Duration = Duration::from_secs(8);
/// Going over budget again within this of the last hand-off period's end doubles the
/// next one; later, it starts again from [`POOL_FOR`].
const POOL_STREAK_GAP: Duration = Duration::from_secs(1);
/// A body declared longer than this (more than one 256 KiB read from the origin) is
/// created and written on the fill threads, whatever the worker's recent writes: a
/// fill's create waits for the inode and directory blocks a journal commit is writing
/// (the group commit keeps one running), and those waits, not the copies, left the
/// worker's core 12-15 % idle on 2 MiB misses (off-CPU trace: `__ext4_new_inode` ->
/// `do_get_write_access`). The fill threads take the waits; the hand-off (about 11 µs
/// each way and back, measured as the cost of pooling 64 KiB misses) is one per 256 KiB
/// chunk, a few per cent of such a fill, where a 64 KiB object's create and one write
/// would pay it twice for about 9 µs of waiting: small bodies stay on the worker.
/// Measured: 2 MiB misses +10 % median req/s (four alternating pairs), the core busy
/// 0.96 of the time where it was 0.87 (docs/benchmarks.md, "Large bodies written on the
/// fill threads").
const POOL_BODY_OVER: u64 = 256 * 1024;

/// Whether a fill of a body declared `expected` bytes long (`None`: not declared) makes
/// and writes its file on the fill threads whatever the worker's recent writes
/// ([`POOL_BODY_OVER`]).
pub(crate) fn large_body(expected: Option<u64>) -> bool {
    expected.is_some_and(|n| n > POOL_BODY_OVER)
}

/// Whether this worker writes a small body's fill data itself or hands it to the fill
/// threads (a large body's always go there: [`large_body`]).
///
/// A fill's writes go to the page cache: nginx does them on its event loop and so does
/// linerate for small bodies, while they are quick (a hand-off per chunk cost about 17 futex and 7
/// eventfd system calls per 64 KiB miss). The buffered-write `RWF_NOWAIT` that would
/// say "this would block" is not supported by ext4 (EOPNOTSUPP here, kernel 6.18), so
/// the worker times its writes instead: an occasional slow one (a journal commit the
/// create waited for) is what nginx pays too, but writes slower than [`SLOW_WRITE`]
/// adding up to more than [`WRITE_BUDGET`] in [`WRITE_WINDOW`] (the disk's writeback
/// throttling writers, memory reclaim) send its writes to the fill threads for
/// [`POOL_FOR`], doubling while it recurs, counted. A disk that cannot keep up
/// at all is the store's business: it refuses new objects while its publish backlog is
/// over its bound (`behind`).
#[derive(Debug, Default)]
pub(crate) struct DiskWrites {
    /// The end of the hand-off period in progress; cleared by the first write after
    /// it, so that outside one a write reads no clock.
    pool_until: std::cell::Cell<Option<Instant>>,
    /// The last hand-off period (kept after it ends): when it ends and how long it is.
    last_pool: std::cell::Cell<Option<(Instant, Duration)>>,
    /// Start of the current window and the write time summed in it.
    window: std::cell::Cell<Option<(Instant, Duration)>>,
}

impl DiskWrites {
    /// Whether the next write runs on the worker.
    pub(crate) fn inline(&self) -> bool {
        match self.pool_until.get() {
            Some(t) if Instant::now() < t => false,
            Some(_) => {
                self.pool_until.set(None);
                true
            }
            None => true,
        }
    }

    /// Record a write on the worker that took `took`.
    pub(crate) fn took(&self, took: Duration, counts: &DiskWriteCounts) {
        counts.inline.fetch_add(1, Ordering::Relaxed);
        if took <= SLOW_WRITE {
            return;
        }
        let now = Instant::now();
        let spent = match self.window.get() {
            Some((start, spent)) if now.duration_since(start) < WRITE_WINDOW => spent + took,
            _ => {
                self.window.set(Some((now, Duration::ZERO)));
                took
            }
        };
        if spent > WRITE_BUDGET {
            counts.slow.fetch_add(1, Ordering::Relaxed);
            let pool_for = match self.last_pool.get() {
                Some((end, len)) if now < end + POOL_STREAK_GAP => (len * 2).min(POOL_FOR_MAX),
                _ => POOL_FOR,
            };
            self.last_pool.set(Some((now + pool_for, pool_for)));
            self.pool_until.set(Some(now + pool_for));
            self.window.set(None);
            tracing::debug!(
                spent_us = spent.as_micros() as u64,
                pool_ms = pool_for.as_millis() as u64,
                "fill writes slow on the worker; on the fill threads for a while"
            );
        } else if let Some((start, _)) = self.window.get() {
            self.window.set(Some((start, spent)));
        }
    }
}

/// Start-up state of cache mode, shared by all workers.
pub(crate) struct ProxyShared {
    /// Where fill appends run when a worker's own writes were slow.
    pub(crate) writes: WritePool,
    /// Where fill writes ran.
    pub(crate) write_counts: DiskWriteCounts,
    /// Our `Via` entry, `1.1 <cache_name>` (built once, not per response).
    pub(crate) via: String,
    pub(crate) opts: CacheOptions,
    pub(crate) store: Store,
    pub(crate) fills: Arc<Fills>,
    pub(crate) origins: Vec<Arc<OriginShared>>,
    pub(crate) routes: Vec<Route>,
    /// The targeted cache-control fields obeyed, lower-case, in order.
    targets: Vec<Vec<u8>>,
    /// Segment prefetch's memory and counters (`prefetch`).
    pub(crate) prefetch: ahead::Memory,
    /// Keys whose last response could not be stored, until when (Unix ms).
    passes: Mutex<HashMap<Box<[u8]>, u64>>,
    /// The cluster this node is part of (`[cluster]`); `None`: a lone node.
    pub(crate) cluster: Option<Arc<crate::cluster::Cluster>>,
    /// The purges this node applied, which its peers read (`[cluster]` only).
    pub(crate) purges: Option<Arc<crate::purgelog::PurgeLog>>,
    /// Stored keys by tag (`[cache] tag_header`), for purges by tag.
    pub(crate) tags: crate::purgelog::Tags,
}

/// A route with its origin resolved and its TTL table indexed.
pub(crate) struct Route {
    pub(crate) opts: RouteOptions,
    pub(crate) origin: usize,
    ttl: HashMap<Vec<u8>, u64>,
}

impl Route {
    /// The operator's freshness (seconds) for a response to `path` that carries none:
    /// the extension table, else the route's default; `None` under the standard profile.
    fn default_ttl(&self, path: &[u8]) -> Option<u64> {
        let path = path.split(|&b| b == b'?').next().unwrap_or(path);
        linerate_http::mime::extension(path)
            .and_then(|e| self.ttl.get(&e.to_ascii_lowercase()))
            .copied()
            .or(self.opts.default_ttl.map(|d| d.as_secs()))
    }
}

impl ProxyShared {
    /// Open the store and prepare the origins. Start-up only; the options were checked
    /// when they were built.
    /// `lock`: the store's writer lease when it was handed over by the previous process
    /// of an upgrade; `None` takes it here.
    pub(crate) fn new(
        opts: CacheOptions,
        lock: Option<linerate_cache::StoreLock>,
        cluster: Option<crate::clusteropts::CheckedCluster>,
        workers: usize,
    ) -> Result<Arc<ProxyShared>, String> {
        let cluster = cluster.map(crate::cluster::Cluster::new).transpose()?;
        let store = match lock {
            Some(lock) => Store::open_locked(opts.store.clone(), lock),
            None => Store::open(opts.store.clone()),
        }
        .map_err(|e| format!("cache store: {e}"))?;
        let origins = opts
            .origins
            .iter()
            .map(|o| OriginShared::new(o.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let routes = opts
            .routes
            .iter()
            .map(|r| Route {
                origin: opts
                    .origins
                    .iter()
                    .position(|o| o.name == r.origin)
                    .unwrap_or(0),
                ttl: r
                    .ttl_by_extension
                    .iter()
                    .map(|(e, d)| (e.to_ascii_lowercase().into_bytes(), d.as_secs()))
                    .collect(),
                opts: r.clone(),
            })
            .collect();
        let threads = workers
            .saturating_mul(WRITE_THREADS_PER_WORKER)
            .max(MIN_WRITE_THREADS);
        let writes = WritePool::start(threads).map_err(|e| format!("fill threads: {e}"))?;
        let tags = crate::purgelog::Tags::new(&opts.tag_header);
        let purges = cluster.as_ref().and_then(|_| {
            let dir = &opts.store.disks.first()?.path;
            Some(Arc::new(crate::purgelog::PurgeLog::open(dir)))
        });
        Ok(Arc::new(ProxyShared {
            via: format!("1.1 {}", opts.cache_name),
            targets: opts
                .targeted_fields
                .iter()
                .map(|f| f.to_ascii_lowercase().into_bytes())
                .collect(),
            writes,
            write_counts: DiskWriteCounts::default(),
            prefetch: ahead::Memory::new(
                origins.len(),
                opts.routes
                    .iter()
                    .map(|r| {
                        (
                            r.prefetch_segments > 0 || r.slice_readahead > 0,
                            r.host.clone().unwrap_or_else(|| "*".to_owned()),
                            r.path_prefix.clone(),
                        )
                    })
                    .collect(),
            ),
            opts,
            store,
            fills: Arc::new(Fills::default()),
            origins,
            routes,
            passes: Mutex::new(HashMap::new()),
            purges,
            tags,
            cluster,
        }))
    }

    /// The first route matching `host` (as keyed: lower-case, no port) and `path`, a
    /// normalised path ([`ProxyTarget::path`]): a route's `path_prefix` is compared
    /// with the path the origin will receive, never with the client's spelling of it.
    pub(crate) fn route_for(&self, host: &[u8], path: &[u8]) -> Option<usize> {
        self.routes.iter().position(|r| {
            let host_ok = match &r.opts.host {
                None => true,
                Some(h) => {
                    let h = h.as_bytes();
                    match h.strip_prefix(b"*") {
                        Some(suffix) => {
                            host.len() > suffix.len()
                                && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
                        }
                        None => host.eq_ignore_ascii_case(h),
                    }
                }
            };
            host_ok && path.starts_with(r.opts.path_prefix.as_bytes())
        })
    }

    /// The primary key of `scheme://host` + `target` on `route`: the route's
    /// `key_host` in place of `host` when it has one (every name of the route's site
    /// is one object), the normalised path, and the query as the route keys it
    /// (`key::query`). Every request, purge, fill job and prefetch on a route is keyed
    /// here.
    pub(crate) fn key_on(
        &self,
        route: usize,
        scheme: Scheme,
        host: &[u8],
        target: &ProxyTarget,
    ) -> Vec<u8> {
        let opts = &self.routes[route].opts;
        let keep = matches!(opts.query, QueryKey::Include);
        key::primary(
            scheme,
            opts.key_host.as_deref().map_or(host, str::as_bytes),
            target.path(),
            &key::query(target.query(), keep),
        )
    }

    /// The primary key of `scheme://host` + `target` as a client request for it is
    /// keyed, with its route; `None` when no route serves it.
    pub(crate) fn key_for(
        &self,
        scheme: Scheme,
        host: &[u8],
        target: &ProxyTarget,
    ) -> Option<(Vec<u8>, usize)> {
        let route = self.route_for(host, target.path())?;
        Some((self.key_on(route, scheme, host, target), route))
    }

    /// The key of a `Location`-style URI reference (`/path?q` or an absolute URL) when
    /// it names a resource on the host `host` (as keyed) that a request on `scheme`
    /// came for (RFC 9111 §4.4 invalidates only those: "a cache MUST NOT invalidate a
    /// URI ... if the host part is different"). Normalised as a request for it would be;
    /// a reference the normaliser refuses names nothing stored.
    pub(crate) fn same_host_key(
        &self,
        scheme: Scheme,
        host: &[u8],
        value: &[u8],
    ) -> Option<(Vec<u8>, usize)> {
        let scheme = if value.starts_with(b"/") && !value.starts_with(b"//") {
            scheme
        } else {
            let u = key::split_url(value)?;
            if key::host_of(u.authority) != host {
                return None;
            }
            u.scheme
        };
        let target = path::normalize_proxy_target(value).ok()?;
        self.key_for(scheme, host, &target)
    }

    /// The primary key of an absolute URL, as requests for it are keyed (for purges):
    /// its path normalised as a request's is, so a purge of `/obj/./1` removes what
    /// `/obj/%2E/1` stored. `Err`: why the URL cannot name a key (for a 400).
    pub(crate) fn key_for_url(&self, url: &[u8]) -> Result<Vec<u8>, &'static str> {
        let u = key::split_url(url).ok_or("not an http:// or https:// URL")?;
        let target = path::normalize_proxy_target(url).map_err(PathError::as_str)?;
        let host = key::host_of(u.authority);
        Ok(match self.key_for(u.scheme, &host, &target) {
            Some((k, _)) => k,
            None => key::primary(u.scheme, &host, target.path(), target.query()),
        })
    }

    /// The freshness of a stored response of `target` on `route`, now.
    pub(crate) fn freshness(&self, route: usize, target: &[u8], meta: &ObjectMeta) -> Freshness {
        let response = linerate_http::cache::policy::Response {
            status: meta.status,
            fields: &meta.headers,
            request_time_ms: meta.request_time_ms,
            response_time_ms: meta.response_time_ms,
        };
        let terms = meta.terms(&self.targets);
        Freshness::of_terms(&response, &terms, &self.settings(route, target), now_ms())
    }

    /// What RFC 9111 leaves to this cache, for a response to `path` on `route`.
    pub(crate) fn settings(&self, route: usize, path: &[u8]) -> Settings<'_> {
        let r = &self.routes[route];
        Settings {
            targets: &self.targets,
            heuristic: Heuristic {
                fraction: self.opts.heuristic_fraction,
                max_secs: self.opts.heuristic_max.as_secs(),
            },
            default_ttl: r.default_ttl(path),
            stale_while_revalidate: r.opts.stale_while_revalidate.as_secs(),
            stale_if_error: r.opts.stale_if_error.as_secs(),
        }
    }

    /// Remember that `key`'s responses may not be stored, for a while.
    pub(crate) fn mark_pass(&self, key: &[u8]) {
        let mut p = self.passes.lock().unwrap_or_else(PoisonError::into_inner);
        if p.len() >= MAX_PASSES {
            p.clear();
        }
        p.insert(key.into(), now_ms() + HIT_FOR_PASS_MS);
    }

    pub(crate) fn is_pass(&self, key: &[u8]) -> bool {
        let p = self.passes.lock().unwrap_or_else(PoisonError::into_inner);
        p.get(key).is_some_and(|&until| until > now_ms())
    }

    pub(crate) fn clear_pass(&self, key: &[u8]) {
        let mut p = self.passes.lock().unwrap_or_else(PoisonError::into_inner);
        p.remove(key);
    }

    /// Invalidate a URL after an unsafe method (RFC 9111 §4.4): exact removals only (an
    /// index scan per POST would not scale): the object, its variants when it has a
    /// Vary stub (and theirs slices), its slices when its route slices (counted from a
    /// stored slice's length). Blocking (journal writes).
    pub(crate) fn invalidate(&self, primary: &[u8], slice_bytes: u64) {
        if let Lookup::Hit(h) = self.store.lookup(primary) {
            if h.meta.header(VARY_STUB).is_some() {
                let mut variants = primary.to_vec();
                variants.extend_from_slice(key::VARIANT_SEP);
                self.store.purge_prefix(&variants);
            }
        }
        self.store.purge(primary);
        if slice_bytes > 0 {
            if let Lookup::Hit(h) | Lookup::Filling(h) = self.store.lookup(&key::slice(primary, 0))
            {
                let total = h
                    .meta
                    .header(b"content-range")
                    .and_then(linerate_http::cache::parse_content_range)
                    .and_then(|cr| cr.complete)
                    .unwrap_or(0);
                for n in 0..total.div_ceil(slice_bytes).max(1) {
                    self.store.purge(&key::slice(primary, n));
                }
            }
        }
        self.clear_pass(primary);
    }

    /// Remove every URL whose key starts with `prefix`, and forget that any of them was
    /// uncacheable. Blocking (journal writes).
    pub(crate) fn purge_prefix(&self, prefix: &[u8]) -> u64 {
        let n = self.store.purge_prefix(prefix);
        let mut p = self.passes.lock().unwrap_or_else(PoisonError::into_inner);
        p.retain(|k, _| !k.starts_with(prefix));
        n
    }

    /// Drop every slice stored under `base` (the object changed at the origin). Purges
    /// write the journal: off the event loop.
    pub(crate) async fn drop_slices(self: &Arc<Self>, base: &[u8]) {
        tracing::info!(key = %String::from_utf8_lossy(base), "object changed at the origin; dropping its slices");
        let mut prefix = base.to_vec();
        prefix.extend_from_slice(key::SLICE_SEP);
        let px = Arc::clone(self);
        let _ = tokio::task::spawn_blocking(move || px.store.purge_prefix(&prefix)).await;
    }

    /// Remove a URL: its object, its variants and slices. Blocking (journal writes).
    pub(crate) fn purge_url(&self, primary: &[u8]) -> u64 {
        let mut n = u64::from(self.store.purge(primary));
        n += self.store.purge_prefix(&key::descendants(primary));
        self.clear_pass(primary);
        n
    }
}

/// One worker's side of cache mode: its origin clients (connection pools), and its
/// clients to the cluster's peers.
pub(crate) struct ProxyWorker {
    pub(crate) shared: Arc<ProxyShared>,
    /// Whether this worker's fill writes run here or on the fill threads.
    pub(crate) disk_writes: DiskWrites,
    pub(crate) origins: Vec<Origin>,
    pub(crate) peers: crate::cluster::PeerClients,
    /// Prefetch decisions waiting for a playlist read on this worker (`prefetch`'s
    /// `played_later`), bounded by its `MAX_DEFERRED`.
    pub(crate) deferred: std::cell::Cell<usize>,
}

impl ProxyWorker {
    pub(crate) fn new(shared: Arc<ProxyShared>) -> ProxyWorker {
        let origins = shared
            .origins
            .iter()
            .map(|o| Origin::new(o.clone()))
            .collect();
        ProxyWorker {
            shared,
            disk_writes: DiskWrites::default(),
            origins,
            peers: crate::cluster::PeerClients::default(),
            deferred: std::cell::Cell::new(0),
        }
    }
}

/// Unix time in milliseconds.
/// Look `key` up (`latest`: [`Store::lookup_latest`]) without the event loop waiting
/// for the disk: answered in place unless the object's file must be opened and its
/// header is not in the page cache; then the lookup (open, header read) runs on a
/// blocking thread while the worker serves other connections. (Seen before: on a
/// library larger than memory, 2-5 ms `pread`s of object headers inside the worker,
/// `perf trace`, docs/benchmarks.md "Cache hits that open a file".)
pub(crate) async fn lookup(px: &Arc<ProxyShared>, key: &[u8], latest: bool) -> Lookup {
    let now = if latest {
        px.store.lookup_latest_nowait(key)
    } else {
        px.store.lookup_nowait(key)
    };
    if let Some(found) = now {
        return found;
    }
    let p = Arc::clone(px);
    let k = key.to_vec();
    let found = tokio::task::spawn_blocking(move || {
        if latest {
            p.store.lookup_latest(&k)
        } else {
            p.store.lookup(&k)
        }
    })
    .await;
    // A panic there (a bug) is a miss here, as a failed read would be.
    found.unwrap_or(Lookup::Miss(linerate_cache::MissReason::DiskError))
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The handle's body length when known: complete, or announced by the fill.
pub(crate) fn known_len(h: &ObjectHandle) -> Option<u64> {
    h.body_len().or_else(|| {
        h.meta
            .header(b"content-length")
            .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Guards the bound on the fill threads' use: quick writes never count, slow ones
    /// send the writes away only once they add up to more than half of the window (or
    /// one alone does), and then for [`POOL_FOR`].
    #[test]
    fn writes_go_to_the_fill_threads_only_after_half_a_window_of_slow_ones() {
        let counts = DiskWriteCounts::default();
        let w = DiskWrites::default();
        for _ in 0..1000 {
            w.took(SLOW_WRITE, &counts);
        }
        assert!(w.inline(), "writes of at most SLOW_WRITE never count");
        // Bursts of journal waits, as the group commit makes: 45 ms of 5 ms writes in
        // one window stays on the worker.
        for _ in 0..9 {
            w.took(5 * MS, &counts);
        }
        assert!(w.inline());
        assert_eq!(counts.slow.load(Ordering::Relaxed), 0);
        w.took(6 * MS, &counts);
        assert!(!w.inline(), "51 ms of slow writes in one window");
        assert_eq!(counts.slow.load(Ordering::Relaxed), 1);
        assert_eq!(counts.inline.load(Ordering::Relaxed), 1010);

        let w = DiskWrites::default();
        w.took(WRITE_BUDGET + MS, &counts);
        assert!(!w.inline(), "one write over the budget");
        // Back on the worker once POOL_FOR has passed.
        w.pool_until.set(Some(Instant::now()));
        assert!(w.inline());
    }

    /// How long the writes stay away: POOL_FOR after a lone episode, twice as long for
    /// each that follows within POOL_STREAK_GAP of the last period's end (up to
    /// POOL_FOR_MAX), and POOL_FOR again after a quiet gap.
    #[test]
    fn slow_writes_that_recur_keep_the_writes_away_longer() {
        let counts = DiskWriteCounts::default();
        let w = DiskWrites::default();
        // The length of the period the next episode starts, ended at once (as if it
        // had run its course) so that the writes come back to the worker.
        let episode = |w: &DiskWrites| {
            w.took(WRITE_BUDGET + MS, &counts);
            assert!(!w.inline());
            let (_, len) = w.last_pool.get().expect("a period");
            let until = w.pool_until.get().expect("pooled");
            let now = Instant::now();
            assert!(
                until > now && until <= now + len,
                "pooled for the period's length"
            );
            w.pool_until.set(Some(now));
            w.last_pool.set(Some((now, len)));
            assert!(w.inline());
            len
        };
        assert_eq!(episode(&w), POOL_FOR, "a lone episode");
        assert_eq!(
            episode(&w),
            2 * POOL_FOR,
            "again right after the last period"
        );
        assert_eq!(episode(&w), 4 * POOL_FOR);
        let mut len = Duration::ZERO;
        for _ in 0..10 {
            len = episode(&w);
        }
        assert_eq!(len, POOL_FOR_MAX, "capped");
        // A quiet gap since the last period ended: a new episode starts short again.
        let (end, len) = w.last_pool.get().expect("a period");
        w.last_pool.set(Some((end - POOL_STREAK_GAP - MS, len)));
        assert_eq!(episode(&w), POOL_FOR, "after a quiet gap");
        assert_eq!(counts.slow.load(Ordering::Relaxed), 14);
    }

    /// Guards which bodies go to the fill threads from their first write: those of
    /// more than one origin read, never an undeclared or a small one.
    #[test]
    fn only_bodies_of_several_reads_go_to_the_fill_threads_at_once() {
        assert!(!large_body(None));
        assert!(!large_body(Some(0)));
        assert!(!large_body(Some(64 * 1024)));
        assert!(!large_body(Some(POOL_BODY_OVER)));
        assert!(large_body(Some(POOL_BODY_OVER + 1)));
        assert!(large_body(Some(1 << 20)));
    }
}
