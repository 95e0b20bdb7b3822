//! Cache mode: answer a request from the store, or fetch it from an origin once and
//! stream it to every client that asked meanwhile (see docs/request-flow.md).
//!
//! The flow for GET and HEAD: route (host + path prefix) → key → lookup (following a
//! `Vary` stub to the variant) → fresh hit: serve; stale: serve while revalidating,
//! or revalidate first; in flight: follow the writer; miss: claim the key (one fill per
//! key across all workers) and follow the fill. Responses that may not be stored are
//! relayed (and remembered for a while, so the next request goes straight through).
//! Other methods go to the origin uncached; unsafe ones invalidate the URL.
//!
//! Not here: the origin connection (`origin`), the fill itself (`fill`), the body's
//! pieces (`body`), slices (`slices`), the HTTP caching rules (`linerate_http::cache`).

pub(crate) mod body;
mod fill;
pub(crate) mod fills;
mod head;
pub(crate) mod slices;

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use linerate_cache::{Lookup, ObjectHandle, Store};
use linerate_http::cache::{Fwd, RequestCacheControl, Vary};
use linerate_http::{Persistence, RequestHead, StatusCode};

use crate::cacheopts::{CacheOptions, QueryKey, RouteOptions};
use crate::context::Worker;
use crate::origin::{Origin, OriginShared};
use crate::response::Response;
use crate::stats::CacheStatus;
use fills::{Claim, FillState, Fills, Outcome};

/// Separates a primary key from a variant's secondary key (`Vary`).
const VARIANT_SEP: &[u8] = b"\0v\0";
/// Separates a key from a slice number.
const SLICE_SEP: &[u8] = b"\0s\0";
/// Stored field marking a `Vary` stub: its value is the `Vary` names.
pub(crate) const VARY_STUB: &[u8] = b"x-linerate-vary";
/// How long a "may not be stored" verdict sends requests straight to the origin.
const HIT_FOR_PASS_MS: u64 = 30_000;
/// Lookups per request before giving up (a fill that ended but left nothing to find).
const MAX_ROUNDS: usize = 6;

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
    /// Default freshness (seconds) of a response without any, for this path.
    pub(crate) fn default_ttl(&self, path: &[u8]) -> u64 {
        let path = path.split(|&b| b == b'?').next().unwrap_or(path);
        linerate_http::mime::extension(path)
            .and_then(|e| self.ttl.get(&e.to_ascii_lowercase()))
            .copied()
            .unwrap_or(self.opts.default_ttl.as_secs())
    }
}

impl ProxyShared {
    /// Open the store and prepare the origins. Start-up only.
    pub(crate) fn new(opts: CacheOptions) -> Result<Arc<ProxyShared>, String> {
        opts.validate()?;
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
            writes,
            opts,
            store,
            fills: Arc::new(Fills::default()),
            origins,
            routes,
            passes: Mutex::new(HashMap::new()),
        }))
    }

    /// The first route matching `host` (port ignored) and `path`.
    fn route_for(&self, host: &[u8], path: &[u8]) -> Option<usize> {
        let host = host_without_port(host);
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

    /// Remember that `key`'s responses may not be stored, for a while.
    fn mark_pass(&self, key: &[u8]) {
        let mut p = self.passes.lock().unwrap_or_else(PoisonError::into_inner);
        if p.len() > 100_000 {
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
    /// Vary stub, its slices when its route slices (counted from a stored slice's
    /// length). Blocking (journal writes).
    pub(crate) fn invalidate(&self, key: &[u8], slice_bytes: u64) {
        if let Lookup::Hit(h) = self.store.lookup(key) {
            if h.meta.header(VARY_STUB).is_some() {
                let mut variants = key.to_vec();
                variants.extend_from_slice(VARIANT_SEP);
                self.store.purge_prefix(&variants);
            }
        }
        self.store.purge(key);
        if slice_bytes > 0 {
            if let Lookup::Hit(h) | Lookup::Filling(h) = self.store.lookup(&slice_key(key, 0)) {
                let total = h
                    .meta
                    .header(b"content-range")
                    .and_then(linerate_http::cache::parse_content_range)
                    .and_then(|cr| cr.complete)
                    .unwrap_or(0);
                for n in 0..total.div_ceil(slice_bytes).max(1) {
                    self.store.purge(&slice_key(key, n));
                }
            }
        }
        self.clear_pass(key);
    }

    /// Remove a URL: its object, its variants and slices. Blocking (journal writes).
    pub(crate) fn purge_url(&self, key: &[u8]) -> u64 {
        let mut n = u64::from(self.store.purge(key));
        let mut sub = key.to_vec();
        sub.push(0);
        n += self.store.purge_prefix(&sub);
        self.clear_pass(key);
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

/// The cache key of an absolute URL (`http[s]://Host[:port]/path[?query]`), as
/// requests build it: host lower-cased, port dropped. Anything else is used as given.
pub(crate) fn key_of_url(url: &[u8]) -> Vec<u8> {
    let (scheme, rest) = if let Some(r) = url.strip_prefix(b"http://") {
        (&b"http://"[..], r)
    } else if let Some(r) = url.strip_prefix(b"https://") {
        (&b"https://"[..], r)
    } else {
        return url.to_vec();
    };
    let split = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    let (host, path) = rest.split_at(split);
    let mut key = scheme.to_vec();
    key.extend(host_without_port(host).iter().map(u8::to_ascii_lowercase));
    key.extend_from_slice(path);
    key
}

/// Unix time in milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn host_without_port(host: &[u8]) -> &[u8] {
    if host.first() == Some(&b'[') {
        return match host.iter().position(|&b| b == b']') {
            Some(i) => &host[..=i],
            None => host,
        };
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(i) => &host[..i],
        None => host,
    }
}

/// The request as cache mode sees it.
pub(crate) struct Req<'a> {
    /// Cache mode's shared state.
    pub(crate) px: &'a ProxyShared,
    pub(crate) head: RequestHead<'a>,
    pub(crate) method: &'a str,
    /// Every request field, in order.
    pub(crate) fields: Vec<(&'a [u8], &'a [u8])>,
    /// Path and query as sent (origin-form).
    pub(crate) target: &'a [u8],
    pub(crate) route: usize,
    /// Primary cache key: scheme://host/path[?query].
    pub(crate) key: Vec<u8>,
    pub(crate) cc: RequestCacheControl,
    pub(crate) persistence: Persistence,
    pub(crate) head_only: bool,
}

impl<'a> Req<'a> {
    /// Every value of field `name` (lower-case).
    pub(crate) fn values(&self, name: &[u8]) -> Vec<&'a [u8]> {
        self.fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
            .collect()
    }

    /// The fields forwarded to the origin: end-to-end ones, minus those the cache
    /// decides itself (conditionals, ranges, cache directives) unless `all`.
    pub(crate) fn forwarded(&self, all: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
        let tokens = linerate_http::cache::connection_tokens(self.values(b"connection"));
        // Decided by the cache itself unless relaying (`all`).
        let own: &[&[u8]] = &[
            b"range",
            b"if-range",
            b"if-match",
            b"if-none-match",
            b"if-modified-since",
            b"if-unmodified-since",
            b"cache-control",
            b"pragma",
        ];
        self.fields
            .iter()
            .filter(|(n, _)| {
                let lower = n.to_ascii_lowercase();
                // Host is the origin's; the body's framing is the client's own.
                let framing: &[&[u8]] = &[b"host", b"content-length", b"expect"];
                !linerate_http::cache::is_hop_by_hop(&lower, &tokens)
                    && !framing.contains(&lower.as_slice())
                    && (all || !own.contains(&lower.as_slice()))
            })
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect()
    }
}

/// Cache-Status facts gathered while answering.
#[derive(Debug, Clone, Default)]
pub(crate) struct Status {
    pub(crate) fwd: Option<Fwd>,
    pub(crate) fwd_status: Option<u16>,
    pub(crate) stored: bool,
    pub(crate) collapsed: bool,
    pub(crate) detail: Option<&'static str>,
}

/// Answer one request in cache mode.
pub(crate) async fn respond(
    worker: &Rc<Worker>,
    pw: &Rc<ProxyWorker>,
    request: crate::response::Request<'_>,
) -> Response {
    let px = &pw.shared;
    let (body, secure) = (request.body, request.secure);
    let head = *request.head;
    let method = head.method_token;
    let fields: Vec<(&[u8], &[u8])> = head.fields().collect();
    let persistence = if worker.stopping() {
        Persistence::Close
    } else {
        head.persistence
    };
    let Some(target) = origin_form(head.target) else {
        return crate::response::error(worker, StatusCode::BadRequest, persistence);
    };
    let host = head.host.unwrap_or(b"");
    let (path, query) = match target.iter().position(|&b| b == b'?') {
        Some(i) => (&target[..i], &target[i..]),
        None => (target, &b""[..]),
    };
    let Some(route) = px.route_for(host, path) else {
        return crate::response::error(worker, StatusCode::NotFound, persistence);
    };
    let mut key = Vec::with_capacity(16 + host.len() + target.len());
    key.extend_from_slice(if secure { b"https://" } else { b"http://" });
    key.extend(host_without_port(host).iter().map(u8::to_ascii_lowercase));
    key.extend_from_slice(path);
    if px.routes[route].opts.query == QueryKey::Include {
        key.extend_from_slice(query);
    }
    let cc = if px.opts.honour_request_cache_control {
        let pragma = fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(b"pragma"))
            .map(|(_, v)| *v);
        RequestCacheControl::parse(
            fields
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(b"cache-control"))
                .map(|(_, v)| *v),
            pragma,
        )
    } else {
        RequestCacheControl::default()
    };
    let head_only = method == "HEAD";
    let req = Req {
        px,
        head,
        method,
        fields,
        target,
        route,
        key,
        cc,
        persistence,
        head_only,
    };
    match method {
        "GET" | "HEAD" => cached(worker, pw, &req).await,
        "CONNECT" => crate::response::error(worker, StatusCode::MethodNotAllowed, persistence),
        _ => {
            let unsafe_method = !matches!(method, "OPTIONS" | "TRACE");
            let response = relay(worker, pw, &req, &body, Status::default()).await;
            if unsafe_method && response.status.code() < 400 {
                // RFC 9111 §4.4: a non-error response to an unsafe method invalidates
                // the target URI. Blocking journal writes: off the event loop.
                let shared = Arc::clone(px);
                let key = req.key.clone();
                let sliced = px.routes[req.route].opts.slice_bytes;
                let purge = tokio::task::spawn_blocking(move || shared.invalidate(&key, sliced));
                let _ = purge.await;
            }
            response
        }
    }
}

/// The origin-form target (`/path?query`) of a request target; absolute-form is
/// reduced to its path. `None` for asterisk-form or garbage.
fn origin_form(target: &[u8]) -> Option<&[u8]> {
    if target.first() == Some(&b'/') {
        return Some(target);
    }
    let rest = target
        .strip_prefix(b"http://")
        .or_else(|| target.strip_prefix(b"https://"))?;
    let i = rest.iter().position(|&b| b == b'/')?;
    Some(&rest[i..])
}

/// GET and HEAD.
async fn cached(worker: &Rc<Worker>, pw: &Rc<ProxyWorker>, req: &Req<'_>) -> Response {
    let px = &pw.shared;
    let mut st = Status::default();
    // Set once this request has been forward (its own fill, or one it followed): what
    // that stored is the answer, however short its freshness.
    let mut forwarded = false;
    for _ in 0..MAX_ROUNDS {
        let (key, found) = lookup(px, req, forwarded);
        match found {
            Lookup::Hit(h) => {
                let fresh = head::freshness(px, req, &h.meta);
                if forwarded || fresh.usable_fresh(&req.cc) {
                    if st.fwd.is_none() {
                        return head::serve(worker, req, h, &fresh, st, CacheStatus::Hit);
                    }
                    return head::serve(worker, req, h, &fresh, st, CacheStatus::Miss);
                }
                if fresh.within_swr() && !req.cc.no_cache {
                    fill::revalidate_in_background(pw, req, &key, &h.meta);
                    st.detail = Some("stale-while-revalidate");
                    return head::serve(worker, req, h, &fresh, st, CacheStatus::Stale);
                }
                if req.cc.only_if_cached {
                    return head::error(
                        worker,
                        req,
                        StatusCode::GatewayTimeout,
                        st,
                        "only-if-cached",
                    );
                }
                // Revalidate now (one request for everyone asking meanwhile).
                st.fwd = Some(Fwd::Stale);
                match follow(pw, req, &key, Some(&h.meta), &mut st, forwarded).await {
                    Next::Lookup => {
                        forwarded = true;
                        continue;
                    }
                    Next::Revalidated => {
                        st.fwd_status = Some(304);
                        // The freshened copy (or, if the update failed, this one).
                        let (_, again) = lookup(px, req, false);
                        let h = match again {
                            Lookup::Hit(h2) => h2,
                            _ => h,
                        };
                        let fresh = head::freshness(px, req, &h.meta).revalidated();
                        return head::serve(worker, req, h, &fresh, st, CacheStatus::Hit);
                    }
                    Next::Relay(r) => return head::relayed(req, *r, st),
                    Next::Pass => return relay(worker, pw, req, &[], st).await,
                    Next::Failed {
                        status,
                        detail,
                        stale_ok,
                    } => {
                        if stale_ok && fresh.within_sie() {
                            st.detail = Some(detail);
                            return head::serve(worker, req, h, &fresh, st, CacheStatus::Stale);
                        }
                        return head::error(worker, req, status, st, detail);
                    }
                }
            }
            Lookup::Filling(h) => {
                if st.fwd.is_none() {
                    st.fwd = Some(Fwd::Miss);
                    st.collapsed = true;
                }
                let fresh = head::freshness(px, req, &h.meta);
                return head::serve(worker, req, h, &fresh, st, CacheStatus::Miss);
            }
            Lookup::Miss(_) => {
                if req.cc.only_if_cached {
                    return head::error(
                        worker,
                        req,
                        StatusCode::GatewayTimeout,
                        st,
                        "only-if-cached",
                    );
                }
                // RFC 9111 §5.2.1.5: nothing of this exchange may be stored.
                if req.cc.no_store {
                    st.fwd = Some(Fwd::Request);
                    st.detail = Some("request no-store");
                    return relay(worker, pw, req, &[], st).await;
                }
                if px.is_pass(&req.key) {
                    st.fwd = Some(Fwd::Bypass);
                    st.detail = Some("uncacheable");
                    return relay(worker, pw, req, &[], st).await;
                }
                if px.routes[req.route].opts.slice_bytes > 0 && key.len() == req.key.len() {
                    // Slices are looked up (and, where missing, fetched) one by one.
                    return slices::serve(worker, pw, req, st).await;
                }
                if st.fwd.is_none() {
                    st.fwd = Some(if key.len() > req.key.len() {
                        Fwd::VaryMiss
                    } else {
                        Fwd::UriMiss
                    });
                }
                match follow(pw, req, &key, None, &mut st, forwarded).await {
                    Next::Lookup | Next::Revalidated => {
                        forwarded = true;
                        continue;
                    }
                    Next::Relay(r) => return head::relayed(req, *r, st),
                    Next::Pass => return relay(worker, pw, req, &[], st).await,
                    Next::Failed { status, detail, .. } => {
                        return head::error(worker, req, status, st, detail)
                    }
                }
            }
        }
    }
    head::error(worker, req, StatusCode::BadGateway, st, "fill_lost")
}

/// Look the request up: the primary key, then (for a `Vary` stub) the variant.
/// Returns the key that was finally looked up.
/// `latest`: an object being written wins over a stored one (after this request's
/// fill, which may be replacing a stale copy).
pub(crate) fn lookup(px: &ProxyShared, req: &Req<'_>, latest: bool) -> (Vec<u8>, Lookup) {
    let find = |k: &[u8]| {
        if latest {
            px.store.lookup_latest(k)
        } else {
            px.store.lookup(k)
        }
    };
    let found = find(&req.key);
    if let Lookup::Hit(h) = &found {
        if let Some(names) = h.meta.header(VARY_STUB) {
            let key = variant_key(&req.key, names, req);
            let found = find(&key);
            return (key, found);
        }
    }
    (req.key.clone(), found)
}

/// The key of the variant of `primary` that `req` selects, for `Vary` names `names`.
pub(crate) fn variant_key(primary: &[u8], names: &[u8], req: &Req<'_>) -> Vec<u8> {
    let Vary::Names(names) = Vary::parse([names]) else {
        return primary.to_vec();
    };
    let mut key = primary.to_vec();
    key.extend_from_slice(VARIANT_SEP);
    key.extend_from_slice(&linerate_http::cache::vary_key(&names, |n| req.values(n)));
    key
}

/// The key of slice `n` of the object stored under `key`.
pub(crate) fn slice_key(key: &[u8], n: u64) -> Vec<u8> {
    let mut k = key.to_vec();
    k.extend_from_slice(SLICE_SEP);
    k.extend_from_slice(n.to_string().as_bytes());
    k
}

/// What following a fill gave.
pub(crate) enum Next {
    /// Look the key up again (stored, or being written).
    Lookup,
    /// The stale copy was confirmed (304) and freshened.
    Revalidated,
    /// Uncacheable; this client was the leader and gets the origin's response.
    Relay(Box<crate::origin::OriginResponse>),
    /// Uncacheable; fetch for this client alone.
    Pass,
    /// The origin failed.
    Failed {
        status: StatusCode,
        detail: &'static str,
        stale_ok: bool,
    },
}

/// Claim `key` (or join its claim) and wait for the fill's news. `stale`: the stored
/// copy's metadata, to revalidate it.
async fn follow(
    pw: &Rc<ProxyWorker>,
    req: &Req<'_>,
    key: &[u8],
    stale: Option<&linerate_cache::ObjectMeta>,
    st: &mut Status,
    after_writing: bool,
) -> Next {
    let px = &pw.shared;
    let (mut rx, handoff) = match px.fills.claim(key) {
        Claim::Leader(guard) => {
            let rx = guard.subscribe();
            let (tx, handoff) = tokio::sync::oneshot::channel();
            let job = fill::Job::new(px, req, guard, stale.cloned(), None);
            tokio::task::spawn_local(fill::run(pw.clone(), job, Some(tx)));
            (rx, Some(handoff))
        }
        Claim::Follower(mut rx) if after_writing => {
            // This request saw the key being written, then found nothing: that fill
            // failed. Wait for its claim to go, then claim afresh.
            fills::finished(&mut rx).await;
            return Next::Lookup;
        }
        Claim::Follower(rx) => {
            st.collapsed = true;
            (rx, None)
        }
    };
    match fills::settled(&mut rx).await {
        FillState::Pending => Next::Lookup,
        FillState::Writing => {
            st.stored = true;
            Next::Lookup
        }
        FillState::Done(Outcome::Stored) => {
            st.stored = true;
            Next::Lookup
        }
        FillState::Done(Outcome::Revalidated) => Next::Revalidated,
        FillState::Done(Outcome::Uncacheable) => {
            st.fwd = Some(Fwd::Bypass);
            st.detail = Some("uncacheable");
            match handoff.map(|mut h| h.try_recv()) {
                Some(Ok(r)) => Next::Relay(Box::new(r)),
                _ => Next::Pass,
            }
        }
        FillState::Done(Outcome::Failed {
            status,
            detail,
            stale_ok,
        }) => Next::Failed {
            status,
            detail,
            stale_ok,
        },
    }
}

/// Send the request to the origin and relay the answer, uncached.
async fn relay(
    worker: &Rc<Worker>,
    pw: &ProxyWorker,
    req: &Req<'_>,
    body: &[u8],
    mut st: Status,
) -> Response {
    let origin = &pw.origins[pw.shared.routes[req.route].origin];
    let fields = req.forwarded(true);
    let mut headers: Vec<(&[u8], &[u8])> = fields
        .iter()
        .map(|(n, v)| (n.as_slice(), v.as_slice()))
        .collect();
    headers.push((b"via", pw.shared.via.as_bytes()));
    let idempotent = matches!(
        req.method,
        "GET" | "HEAD" | "PUT" | "DELETE" | "OPTIONS" | "TRACE"
    );
    let sent = origin
        .send(&crate::origin::OriginRequest {
            method: req.method,
            target: req.target,
            headers: &headers,
            body,
            idempotent,
        })
        .await;
    if st.fwd.is_none() {
        st.fwd = Some(Fwd::Bypass);
    }
    match sent {
        Ok(r) => head::relayed(req, r, st),
        Err(e) => {
            let detail = e.as_str();
            head::error(worker, req, e.status(), st, detail)
        }
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
