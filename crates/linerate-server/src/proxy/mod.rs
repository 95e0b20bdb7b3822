//! Cache mode: answer a request from the store, or fetch it from an origin once and
//! stream it to every client that asked meanwhile (see docs/request-flow.md).
//!
//! The pipeline, one stage per module:
//! - here: start-up state ([`ProxyShared`], routes, hit-for-pass memory, invalidation
//!   and purges) and [`respond`], which routes and keys a request once
//!   ([`request::CacheRequest`]) and sends GET/HEAD to `flow`, everything else to the
//!   origin uncached ([`relay`]);
//! - `flow`: GET and HEAD: look up (through a `Vary` stub to the variant), decide with
//!   `linerate_http::cache::decide`, serve, revalidate or fill;
//! - `fills`: one fill per key across all workers, and the [`fills::Phase`] every
//!   follower reads;
//! - `fill`: one fill's I/O: the origin request, the storing decision
//!   (`linerate_http::cache::admit`), the store write;
//! - `slices`: large objects in fixed-size slices fetched with `Range`;
//! - `head` and `body`: the response head and body a client gets.
//!
//! Every caching rule lives in `linerate_http::cache` (pure, unit- and property-tested);
//! this module does I/O with its answers.

pub(crate) mod body;
mod fill;
pub(crate) mod fills;
mod flow;
mod head;
mod request;
pub(crate) mod slices;

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use linerate_cache::{Lookup, ObjectHandle, Store};
use linerate_http::cache::key::{self, Scheme};
use linerate_http::cache::{Fwd, Heuristic, RequestCacheControl, Settings};
use linerate_http::forward::Purpose;
use linerate_http::{Method, Persistence, StatusCode, TargetForm};

use crate::cacheopts::{CacheOptions, QueryKey, RouteOptions};
use crate::context::Worker;
use crate::origin::{Origin, OriginRequest, OriginShared};
use crate::response::{Interim, Response};
use fills::Fills;
use request::{CacheRequest, Trace};

/// Stored field marking a `Vary` stub at a URL's primary key: its value is the `Vary`
/// names, and the variants live under `key::variant(primary, secondary key)`.
pub(crate) const VARY_STUB: &[u8] = b"x-linerate-vary";
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

/// Append threads: enough for a few disks' worth of concurrent fills.
const WRITE_THREADS: usize = 4;

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

/// Start-up state of cache mode, shared by all workers.
pub(crate) struct ProxyShared {
    /// Where fill appends run.
    pub(crate) writes: WritePool,
    /// Our `Via` entry, `1.1 <cache_name>` (built once, not per response).
    pub(crate) via: String,
    pub(crate) opts: CacheOptions,
    pub(crate) store: Store,
    pub(crate) fills: Arc<Fills>,
    pub(crate) origins: Vec<Arc<OriginShared>>,
    routes: Vec<Route>,
    /// The targeted cache-control fields obeyed, lower-case, in order.
    targets: Vec<Vec<u8>>,
    /// Keys whose last response could not be stored, until when (Unix ms).
    passes: Mutex<HashMap<Box<[u8]>, u64>>,
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
    pub(crate) fn new(opts: CacheOptions) -> Result<Arc<ProxyShared>, String> {
        let store = Store::open(opts.store.clone()).map_err(|e| format!("cache store: {e}"))?;
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
        let writes = WritePool::start(WRITE_THREADS).map_err(|e| format!("fill threads: {e}"))?;
        Ok(Arc::new(ProxyShared {
            via: format!("1.1 {}", opts.cache_name),
            targets: opts
                .targeted_fields
                .iter()
                .map(|f| f.to_ascii_lowercase().into_bytes())
                .collect(),
            writes,
            opts,
            store,
            fills: Arc::new(Fills::default()),
            origins,
            routes,
            passes: Mutex::new(HashMap::new()),
        }))
    }

    /// The first route matching `host` (as keyed: lower-case, no port) and `path`.
    fn route_for(&self, host: &[u8], path: &[u8]) -> Option<usize> {
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

    /// The primary key of `scheme://host/path?query` as a request for it is keyed (the
    /// route's query rule applied), with its route; `None` when no route serves it.
    fn key_for(
        &self,
        scheme: Scheme,
        host: &[u8],
        path: &[u8],
        query: &[u8],
    ) -> Option<(Vec<u8>, usize)> {
        let route = self.route_for(host, path)?;
        let query = match self.routes[route].opts.query {
            QueryKey::Include => query,
            QueryKey::Ignore => b"",
        };
        Some((key::primary(scheme, host, path, query), route))
    }

    /// The key of a `Location`-style URI reference (`/path?q` or an absolute URL) when
    /// it names a resource on `req`'s host (RFC 9111 §4.4 invalidates only those: "a
    /// cache MUST NOT invalidate a URI ... if the host part is different").
    fn same_host_key(&self, req: &CacheRequest<'_>, value: &[u8]) -> Option<(Vec<u8>, usize)> {
        if value.starts_with(b"/") && !value.starts_with(b"//") {
            let (path, query) = match value.iter().position(|&b| b == b'?') {
                Some(i) => value.split_at(i),
                None => (value, &b""[..]),
            };
            return self.key_for(req.scheme, &req.host, path, query);
        }
        let u = key::split_url(value)?;
        let host = key::host_of(u.authority);
        if host != req.host {
            return None;
        }
        self.key_for(u.scheme, &host, u.path, u.query)
    }

    /// The primary key of an absolute URL, as requests for it are keyed (for purges).
    pub(crate) fn key_for_url(&self, url: &[u8]) -> Option<Vec<u8>> {
        let u = key::split_url(url)?;
        let host = key::host_of(u.authority);
        let keyed = self
            .key_for(u.scheme, &host, u.path, u.query)
            .map(|(k, _)| k);
        Some(keyed.unwrap_or_else(|| key::primary(u.scheme, &host, u.path, u.query)))
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
    fn mark_pass(&self, key: &[u8]) {
        let mut p = self.passes.lock().unwrap_or_else(PoisonError::into_inner);
        if p.len() >= MAX_PASSES {
            p.clear();
        }
        p.insert(key.into(), now_ms() + HIT_FOR_PASS_MS);
    }

    fn is_pass(&self, key: &[u8]) -> bool {
        let p = self.passes.lock().unwrap_or_else(PoisonError::into_inner);
        p.get(key).is_some_and(|&until| until > now_ms())
    }

    fn clear_pass(&self, key: &[u8]) {
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

    /// Remove a URL: its object, its variants and slices. Blocking (journal writes).
    pub(crate) fn purge_url(&self, primary: &[u8]) -> u64 {
        let mut n = u64::from(self.store.purge(primary));
        n += self.store.purge_prefix(&key::descendants(primary));
        self.clear_pass(primary);
        n
    }
}

/// One worker's side of cache mode: its origin clients (connection pools).
pub(crate) struct ProxyWorker {
    pub(crate) shared: Arc<ProxyShared>,
    pub(crate) origins: Vec<Origin>,
}

impl ProxyWorker {
    pub(crate) fn new(shared: Arc<ProxyShared>) -> ProxyWorker {
        let origins = shared
            .origins
            .iter()
            .map(|o| Origin::new(o.clone()))
            .collect();
        ProxyWorker { shared, origins }
    }
}

/// Unix time in milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Answer one request in cache mode.
pub(crate) async fn respond(
    worker: &Rc<Worker>,
    pw: &Rc<ProxyWorker>,
    request: crate::response::Request<'_>,
) -> Response {
    let px = &pw.shared;
    let crate::response::Request {
        head,
        body,
        peer,
        secure,
        mut interim,
    } = request;
    let persistence = if worker.stopping() {
        Persistence::Close
    } else {
        head.persistence
    };
    if head.method == Method::Connect {
        return crate::response::error(worker, StatusCode::MethodNotAllowed, persistence);
    }
    let Some((path, query)) = head.path_and_query() else {
        // `OPTIONS *` asks about the server, which this cache does not relay.
        debug_assert!(head.form == TargetForm::Asterisk);
        return crate::response::error(worker, StatusCode::BadRequest, persistence);
    };
    // RFC 9112 §3.2: an HTTP/1.0 request may lack Host; it is keyed under an empty host.
    let host = key::host_of(head.authority().unwrap_or(b""));
    let Some(route) = px.route_for(&host, path) else {
        return crate::response::error(worker, StatusCode::NotFound, persistence);
    };
    let scheme = if secure { Scheme::Https } else { Scheme::Http };
    let key_query = match px.routes[route].opts.query {
        QueryKey::Include => query,
        QueryKey::Ignore => b"",
    };
    let cc = if px.opts.honour_request_cache_control {
        RequestCacheControl::parse(head.values(b"cache-control"), head.field(b"pragma"))
    } else {
        RequestCacheControl::default()
    };
    let req = CacheRequest {
        px,
        head,
        route,
        key: key::primary(scheme, &host, path, key_query),
        target: [path, query].concat(),
        host,
        scheme,
        peer,
        cc,
        persistence,
        head_only: head.method == Method::Head,
    };
    match head.method {
        Method::Get | Method::Head => flow::get(worker, pw, &req, &mut interim).await,
        _ => {
            let sent = send(pw, &req, &body, &mut interim).await;
            let mut trace = Trace::default();
            trace.forward(Fwd::Bypass);
            let response = match sent {
                Ok(r) => {
                    // RFC 9111 §4.4: a non-error response to an unsafe method (one not
                    // known to be safe) invalidates the target URI, and MAY invalidate
                    // the URIs in Location and Content-Location when they have the same
                    // host. Blocking journal writes: off the event loop.
                    if !head.method.is_safe() && r.head.status < 400 {
                        invalidate_after(px, &req, &r.head.headers).await;
                    }
                    head::relayed(worker, &req, r, trace, head::Shape::AsIs)
                }
                Err(e) => head::error(worker, &req, e.status(), trace, e.as_str()),
            };
            response
        }
    }
}

/// Invalidate the target of an unsafe request and its same-host `Location` and
/// `Content-Location` (RFC 9111 §4.4).
async fn invalidate_after(
    px: &Arc<ProxyShared>,
    req: &CacheRequest<'_>,
    response_fields: &[(Vec<u8>, Vec<u8>)],
) {
    let mut keys = vec![(req.key.clone(), req.route)];
    for (name, value) in response_fields {
        let named = name.eq_ignore_ascii_case(b"location")
            || name.eq_ignore_ascii_case(b"content-location");
        if let Some(k) = named.then(|| px.same_host_key(req, value)).flatten() {
            keys.push(k);
        }
    }
    let shared = Arc::clone(px);
    let keys: Vec<(Vec<u8>, u64)> = keys
        .into_iter()
        .map(|(k, r)| (k, px.routes[r].opts.slice_bytes))
        .collect();
    let purge = tokio::task::spawn_blocking(move || {
        for (k, slice_bytes) in keys {
            shared.invalidate(&k, slice_bytes);
        }
    });
    let _ = purge.await;
}

/// Send the client's own request to the origin (an uncached relay), forwarding interim
/// responses to the client as they arrive.
async fn send(
    pw: &ProxyWorker,
    req: &CacheRequest<'_>,
    body: &[u8],
    interim: &mut Interim<'_>,
) -> Result<crate::origin::OriginResponse, crate::origin::OriginError> {
    let origin = &pw.origins[pw.shared.routes[req.route].origin];
    let fields = req.forwarded(Purpose::Relay);
    let headers: Vec<(&[u8], &[u8])> = fields.iter().map(|(n, v)| (&**n, &**v)).collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let request = OriginRequest {
        method: req.head.method_token,
        target: &req.target,
        headers: &headers,
        body,
        idempotent: req.head.method.is_idempotent(),
        interim: interim.enabled().then_some(&tx),
    };
    interim.forward_while(origin.send(&request), &mut rx).await
}

/// Relay the client's own request, uncached, and answer with what the origin says.
async fn relay(
    worker: &Rc<Worker>,
    pw: &ProxyWorker,
    req: &CacheRequest<'_>,
    interim: &mut Interim<'_>,
    mut trace: Trace,
) -> Response {
    trace.forward(Fwd::Bypass);
    match send(pw, req, &[], interim).await {
        Ok(r) => head::relayed(worker, req, r, trace, head::Shape::AsIs),
        Err(e) => head::error(worker, req, e.status(), trace, e.as_str()),
    }
}

/// The handle's body length when known: complete, or announced by the fill.
pub(crate) fn known_len(h: &ObjectHandle) -> Option<u64> {
    h.body_len().or_else(|| {
        h.meta
            .header(b"content-length")
            .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok())
    })
}
