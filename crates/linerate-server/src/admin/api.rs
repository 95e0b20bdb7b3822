//! The admin API, on its own address and its own thread (never a worker's): metrics,
//! health, a live stats document, the dashboard and its HLS player (with the hls.js it
//! loads, all embedded in the binary), and the token-protected commands
//! (drain, undrain, reload, reopen logs, purge, upgrade), and readiness (`/ready`). One request per connection, `Connection: close`; it is
//! scraped every few seconds, not served at line rate.
//!
//! Cache mode adds the fill jobs (`/fill/...`, see `crate::fill`) and `/ready` (fill
//! coverage); a fill job is the one request with a body (`Content-Length`, at most
//! `MAX_JOB_BODY`).
//!
//! Defined answers for bad input: a malformed or oversized head is `400`, a `Host` that
//! does not name this API `421` (see `host`: DNS rebinding), a command
//! without the right `Authorization: Bearer` token is `401` (and changes nothing), a
//! command when no token is configured is `403`, as is `POST /upgrade?binary=` unless
//! `admin.allow_upgrade_binary`; an unknown path `404` (as are `/metrics`
//! and `/stats.json` when `admin.metrics` is off), a wrong method
//! `405`, a reload whose file is invalid `422` (the old configuration keeps running); a
//! bad fill job `400` with the reason, a pause/resume/cancel its state forbids `409`, a
//! chunked body `411`, a body over the limit `413`. Refused calls (`401`, `403`, `421`)
//! are logged with the client's address, at most [`REFUSALS_LOGGED_PER_S`] a second.
//!
//! Not here: formatting the documents (`metrics`) or what drain and reload do (`control`).

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::admin::control::{Control, ReloadOutcome, RunState};
use crate::admin::host::host_allowed;
use crate::admin::metrics::{self, CacheFacts, Facts, HealthVerdict, Rates, Scrape};
use crate::fill::{Fills, Submitted, MAX_JOB_BODY};
use crate::logbudget::{Admit, LogBudget};
use crate::operate::Metrics;
use crate::purgelog::Kind;
use crate::stats::WorkerStats;

/// Largest admin request head. Admin requests are a line and a few fields.
const MAX_ADMIN_HEAD: usize = 8 * 1024;

/// Time a client gets to send its head (a stuck scraper cannot hold the thread's
/// attention: each connection is its own task, and this bounds it).
const ADMIN_HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// Refused admin calls logged per second at most; the others are counted and the count
/// logged with the next line, so a client hammering the API cannot fill the log.
const REFUSALS_LOGGED_PER_S: u32 = 10;

/// How often rates (throughput, requests/s, hit ratio) are computed.
const RATE_INTERVAL: Duration = Duration::from_secs(1);

/// The dashboard page, embedded in the binary.
const DASHBOARD: &str = include_str!("../../assets/dashboard.html");

/// The player page (linked from the dashboard), embedded in the binary. Its
/// `__LINERATE_LISTEN__` is replaced by the first plain listener's address.
const PLAYER: &str = include_str!("../../assets/player.html");

/// hls.js (vendored from npm; version, source and digest in
/// `assets/vendor/hls.js/README.md`), embedded so the player needs no network access
/// beyond this server.
const HLS_JS: &str = include_str!("../../assets/vendor/hls.js/hls.light.min.js");

/// The DASH player page (linked from the dashboard and the HLS player), embedded in the
/// binary; `__LINERATE_LISTEN__` as in [`PLAYER`].
const DASH_PLAYER: &str = include_str!("../../assets/dash-player.html");

/// dash.js (vendored from npm; version, source and digest in
/// `assets/vendor/dash.js/README.md`), embedded as hls.js is.
const DASH_JS: &str = include_str!("../../assets/vendor/dash.js/dash.mediaplayer.min.js");

/// `Cache-Control` of the embedded hls.js and dash.js: a year. The player pages ask for
/// them with the version in the query (`?v=1.7.4`), so a binary with a newer copy is a
/// new URL.
const ASSET_CACHE_CONTROL: &str = "public, max-age=31536000, immutable";

/// Bind the admin listener (at start-up, so a bad address fails before serving).
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// The admin thread's state.
pub(crate) struct Admin {
    control: Arc<Control>,
    stats: Vec<Arc<WorkerStats>>,
    rates: RefCell<Rates>,
    /// Cache mode (purges, and the disks and origins in metrics and health), when
    /// configured.
    cache: Option<Arc<crate::proxy::ProxyShared>>,
    /// The server's first plain listener (fill jobs request objects there).
    server: Option<SocketAddr>,
    /// Fill jobs (cache mode; made on the admin thread, which runs them).
    fills: Option<Arc<Fills>>,
    /// The bound on refusal log lines.
    refusals: RefCell<LogBudget>,
    /// `/ready` has answered 200 (or this process took over from one that served: an
    /// upgrade). From then on fill coverage no longer holds readiness back.
    been_ready: std::cell::Cell<bool>,
}

/// Totals at one sampling instant, for rates.
struct Mark {
    at: Instant,
    requests: u64,
    bytes: u64,
    worker_bytes: Vec<u64>,
    hits: u64,
    lookups: u64,
}

impl Admin {
    pub(crate) fn new(
        control: Arc<Control>,
        stats: Vec<Arc<WorkerStats>>,
        cache: Option<Arc<crate::proxy::ProxyShared>>,
        server: Option<SocketAddr>,
        upgraded: bool,
    ) -> Admin {
        Admin {
            control,
            stats,
            cache,
            server,
            fills: None,
            rates: RefCell::new(Rates::default()),
            refusals: RefCell::new(LogBudget::new(REFUSALS_LOGGED_PER_S)),
            been_ready: std::cell::Cell::new(upgraded),
        }
    }

    /// The thread body: serve until the server stops.
    pub(crate) fn run(mut self, listener: std::net::TcpListener) {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!(error = %e, "could not start the admin runtime");
                return;
            }
        };
        let local = tokio::task::LocalSet::new();
        let fill_opts = self.control.options().fill.clone();
        self.fills = self
            .cache
            .as_ref()
            .map(|px| Arc::new(Fills::new(Arc::clone(px), self.server, &fill_opts)));
        let admin = Rc::new(self);
        local.block_on(&rt, async move {
            let listener = match TcpListener::from_std(listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(error = %e, "admin listener registration failed");
                    return;
                }
            };
            let sampler = tokio::task::spawn_local(sample_rates(admin.clone()));
            let executor = admin.fills.clone().map(|f| {
                let control = admin.control.clone();
                tokio::task::spawn_local(f.run(move || {
                    let serving = control.run_state() == RunState::Serving;
                    (control.options().fill.clone(), serving)
                }))
            });
            let mut mode = admin.control.watch_run_state();
            let mut requests = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    // Stopping first: after an upgrade the listener is the next
                    // process's, and a connection accepted here would get a stopping
                    // server's answers.
                    biased;
                    r = mode.wait_for(|m| *m == RunState::Stopping) => {
                        let _ = r;
                        break;
                    }
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            requests.spawn_local(serve(admin.clone(), stream));
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "admin accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    // Reap finished requests so the set stays small.
                    Some(_) = requests.join_next(), if !requests.is_empty() => {}
                }
            }
            // Answers being written finish (the `POST /upgrade` that stopped this
            // process is one of them), bounded like a request head.
            let _ = tokio::time::timeout(ADMIN_HEAD_TIMEOUT, async {
                while requests.join_next().await.is_some() {}
            })
            .await;
            sampler.abort();
            if let Some(e) = executor {
                e.abort();
            }
        });
    }

    fn facts(&self) -> Facts {
        Facts {
            mode: self.control.run_state(),
            uptime_s: self.control.started.elapsed().as_secs_f64(),
            reloads: self.control.reload_counts(),
            ktls: self.control.ktls().cloned(),
            // Relaxed atomic loads per disk and per origin server; no index lock (so not
            // `Store::indexed_objects`, which locks every shard).
            cache: self.cache.as_ref().map(|c| CacheFacts {
                disks: c.store.stats(),
                origins: c.origins.iter().map(|o| o.snapshot()).collect(),
                prefetch: c.prefetch.counts(),
                open_files: c.store.open_files(),
                fill_writes: (
                    c.write_counts
                        .inline
                        .load(std::sync::atomic::Ordering::Relaxed),
                    c.write_counts
                        .pooled
                        .load(std::sync::atomic::Ordering::Relaxed),
                    c.write_counts
                        .slow
                        .load(std::sync::atomic::Ordering::Relaxed),
                ),
            }),
        }
    }

    fn mark(&self) -> Mark {
        let scrape = Scrape::take(&self.stats);
        let (hits, lookups) = scrape.total.hit_counts();
        Mark {
            at: Instant::now(),
            requests: scrape.total.requests_total(),
            bytes: scrape.total.sent_total(),
            worker_bytes: scrape.workers.iter().map(|w| w.sent_total()).collect(),
            hits,
            lookups,
        }
    }
}

async fn sample_rates(admin: Rc<Admin>) {
    let mut tick = tokio::time::interval(RATE_INTERVAL);
    let mut last = admin.mark();
    loop {
        tick.tick().await;
        let now = admin.mark();
        let secs = now.at.duration_since(last.at).as_secs_f64();
        if secs <= 0.0 {
            continue;
        }
        let per_s = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
        let lookups = now.lookups.saturating_sub(last.lookups);
        *admin.rates.borrow_mut() = Rates {
            requests_per_s: per_s(now.requests, last.requests),
            bytes_per_s: per_s(now.bytes, last.bytes),
            worker_bytes_per_s: now
                .worker_bytes
                .iter()
                .zip(last.worker_bytes.iter())
                .map(|(&a, &b)| per_s(a, b))
                .collect(),
            hit_ratio: (lookups > 0)
                .then(|| now.hits.saturating_sub(last.hits) as f64 / lookups as f64),
        };
        last = now;
    }
}

/// An admin response: status, content type, body.
struct Reply {
    status: u16,
    content_type: &'static str,
    body: String,
    extra: &'static str,
    /// `no-store` except for the embedded static assets.
    cache_control: &'static str,
    /// Why the call was refused (`401`, `403`, `421`), for the log line.
    refused: Option<&'static str>,
    /// Work that blocks (a purge: journal writes, the cluster fan-out): run on the
    /// blocking pool, its reply sent instead, so `/health` and `/metrics` keep
    /// answering meanwhile.
    later: Option<Box<dyn FnOnce() -> Reply + Send>>,
}

impl Reply {
    fn new(status: u16, content_type: &'static str, body: String) -> Reply {
        Reply {
            status,
            content_type,
            body,
            extra: "",
            cache_control: "no-store",
            refused: None,
            later: None,
        }
    }

    /// A refused call: logged (bounded) with the client's address and `why`.
    fn refusal(status: u16, why: &'static str, body: &str) -> Reply {
        let mut r = Reply::text(status, body);
        r.refused = Some(why);
        r
    }

    fn text(status: u16, body: &str) -> Reply {
        Reply::new(status, "text/plain; charset=utf-8", format!("{body}\n"))
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

async fn serve(admin: Rc<Admin>, mut stream: TcpStream) {
    let mut buf = Vec::with_capacity(1024);
    let deadline = tokio::time::Instant::now() + ADMIN_HEAD_TIMEOUT;
    // The address this connection came in on, for the `Host` check.
    let local = stream.local_addr().ok().map(|a| a.ip());
    let reply = loop {
        let head_done = match parse_and_route(&admin, &buf, local) {
            Parsed::Done(reply) => break reply,
            Parsed::NeedBody => true,
            Parsed::NeedHead => false,
        };
        if !head_done && buf.len() >= MAX_ADMIN_HEAD {
            break Reply::text(400, "request head too large");
        }
        let mut chunk = [0u8; 16 * 1024];
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => break Reply::text(408, "request head timeout"),
        }
    };
    if let Some(why) = reply.refused {
        log_refusal(&admin, stream.peer_addr().ok(), reply.status, why);
    }
    let reply = match reply.later {
        Some(job) => tokio::task::spawn_blocking(job)
            .await
            .unwrap_or_else(|_| Reply::text(500, "the command failed")),
        None => reply,
    };
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: {}\r\nConnection: close\r\n{}\r\n",
        reply.status,
        reason(reply.status),
        reply.content_type,
        reply.body.len(),
        reply.cache_control,
        reply.extra
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(reply.body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Log a refused call, within [`REFUSALS_LOGGED_PER_S`].
fn log_refusal(admin: &Admin, peer: Option<SocketAddr>, status: u16, why: &'static str) {
    let admit = admin.refusals.borrow_mut().admit(Instant::now());
    if let Admit::Log { suppressed } = admit {
        let peer = peer.map_or_else(|| "-".to_owned(), |p| p.to_string());
        tracing::warn!(%peer, status, reason = why, suppressed, "admin call refused");
    }
}

/// How far a request has arrived.
enum Parsed {
    /// The head is incomplete.
    NeedHead,
    /// The head is complete; its `Content-Length` body is not.
    NeedBody,
    Done(Reply),
}

/// The head goes through the same strict parser as client requests
/// (`linerate_http::request`). A body is read only when `Content-Length` announces one
/// (fill job submissions), up to [`MAX_JOB_BODY`].
fn parse_and_route(admin: &Admin, buf: &[u8], local: Option<IpAddr>) -> Parsed {
    let mut fields = linerate_http::request::FieldBuf::new();
    let (head, head_len) = match linerate_http::parse_request(buf, &mut fields) {
        Ok(linerate_http::ParseOutcome::Partial) => return Parsed::NeedHead,
        Err(e) => return Parsed::Done(Reply::text(e.status().code(), "malformed request")),
        Ok(linerate_http::ParseOutcome::Complete { head, head_len }) => (head, head_len),
    };
    // Before anything else, reads included: a page that rebound its own name to this
    // address must not read `/metrics`, `/stats.json` or `/fill/jobs` either.
    let options = admin.control.options();
    if !host_allowed(head.authority(), local, &options.admin.allowed_hosts) {
        return Parsed::Done(Reply::refusal(
            421,
            "host_not_allowed",
            "misdirected request: this admin API answers only to its own address, a loopback name or a name in admin.allowed_hosts",
        ));
    }
    let length = match head.field(b"content-length") {
        None => 0,
        Some(v) => match std::str::from_utf8(v)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
        {
            Some(n) => n,
            None => return Parsed::Done(Reply::text(400, "bad Content-Length")),
        },
    };
    if head.field(b"transfer-encoding").is_some() {
        return Parsed::Done(Reply::text(411, "send the body with Content-Length"));
    }
    if length > MAX_JOB_BODY {
        return Parsed::Done(Reply::text(413, "request body too large"));
    }
    if buf.len() < head_len + length {
        return Parsed::NeedBody;
    }
    let body = &buf[head_len..head_len + length];
    let Some((path, query)) = head.path_and_query() else {
        return Parsed::Done(Reply::text(400, "malformed request"));
    };
    // The parser's alphabet for targets is ASCII, so these never fail.
    let path = std::str::from_utf8(path).unwrap_or("/");
    let query = std::str::from_utf8(query.strip_prefix(b"?").unwrap_or(query)).unwrap_or("");
    Parsed::Done(route(
        admin,
        head.method_token,
        path,
        query,
        head.field(b"authorization"),
        body,
    ))
}

fn route(
    admin: &Admin,
    method: &str,
    path: &str,
    query: &str,
    authorization: Option<&[u8]>,
    body: &[u8],
) -> Reply {
    let read_only = matches!(method, "GET" | "HEAD");
    if path == "/fill" || path.starts_with("/fill/") {
        return fill_reply(admin, method, path, authorization, body);
    }
    let command = matches!(
        path,
        "/drain" | "/undrain" | "/reload" | "/reopen-logs" | "/purge" | "/upgrade"
    );
    if command {
        if method != "POST" {
            return method_not_allowed("POST");
        }
        if let Err(r) = check_token(admin, authorization) {
            return r;
        }
        if path == "/purge" {
            return purge_reply(admin, query);
        }
        if path == "/upgrade" {
            return upgrade_reply(admin, query);
        }
        return command_reply(admin, path);
    }
    let facts = admin.facts();
    // Restart-only, so the running options hold the start-up value.
    let metrics = admin.control.options().admin.metrics;
    let reply = match path {
        "/metrics" | "/stats.json" if metrics == Metrics::Off => {
            return Reply::text(404, "metrics are off (admin.metrics = false)")
        }
        "/metrics" => Reply::new(200, "text/plain; version=0.0.4; charset=utf-8", {
            let mut text = metrics::prometheus(&admin.stats, &facts);
            // The cluster's per-peer families (cache mode with [cluster]).
            if let Some(cluster) = admin.cache.as_ref().and_then(|c| c.cluster.as_ref()) {
                cluster.render(&mut text);
            }
            if let Some(f) = &admin.fills {
                text.push_str(&f.prometheus());
            }
            text
        }),
        "/ready" => {
            // Fill coverage counts only when the operator asked for it, and only until
            // this node first answered ready.
            let need = admin.control.options().fill.ready_coverage;
            let fill = (need > 0.0).then(|| crate::admin::ready::FillFacts {
                coverage: admin.fills.as_ref().map_or(1.0, |f| f.coverage()),
                need,
                waits: !admin.been_ready.get(),
            });
            let (status, body) = crate::admin::ready::reply(&crate::admin::ready::ReadyFacts {
                mode: facts.mode,
                disks: facts.cache.as_ref().map(|c| c.disks.as_slice()),
                store_lent: admin.cache.as_ref().is_some_and(|c| c.store.is_lent()),
                fill,
            });
            if status == 200 && !admin.been_ready.replace(true) && fill.is_some() {
                tracing::info!("first ready: fill coverage no longer holds readiness back");
            }
            Reply::new(status, "application/json", body)
        }
        // Liveness: 200 whenever the admin API answers (draining and dead disks
        // included: a restart fixes neither; `/ready` and `/health` report them).
        "/live" => Reply::new(200, "text/plain; charset=utf-8", "alive\n".to_owned()),
        "/health" => {
            // 503 while draining, or in cache mode when no store disk is in service; a
            // down origin does not fail it (see `HealthVerdict`).
            let status = HealthVerdict::of(&facts).status();
            let body = metrics::health(&admin.stats, &facts, &admin.rates.borrow(), metrics);
            Reply::new(status, "application/json", body)
        }
        "/stats.json" => Reply::new(
            200,
            "application/json",
            metrics::stats_json(&admin.stats, &facts, &admin.rates.borrow()),
        ),
        "/" | "/dashboard" => Reply::new(200, "text/html; charset=utf-8", DASHBOARD.to_owned()),
        "/player" => Reply::new(
            200,
            "text/html; charset=utf-8",
            player_page(PLAYER, &admin.control.options().listen),
        ),
        "/dash-player" => Reply::new(
            200,
            "text/html; charset=utf-8",
            player_page(DASH_PLAYER, &admin.control.options().listen),
        ),
        "/assets/hls.min.js" => {
            let mut r = Reply::new(200, "application/javascript", HLS_JS.to_owned());
            r.cache_control = ASSET_CACHE_CONTROL;
            r
        }
        "/assets/dash.min.js" => {
            let mut r = Reply::new(200, "application/javascript", DASH_JS.to_owned());
            r.cache_control = ASSET_CACHE_CONTROL;
            r
        }
        _ => return Reply::text(404, "not found"),
    };
    if !read_only {
        return method_not_allowed("GET, HEAD");
    }
    reply
}

/// A player page (`page`) with the first plain listener's address filled in (empty when there
/// is none, or when its port is 0: the configured address, not the bound one, is all the
/// admin thread knows). An unspecified host (`0.0.0.0`, `::`) stays as it is; the page
/// then uses the host name it was loaded from.
fn player_page(page: &str, listen: &[SocketAddr]) -> String {
    let addr = listen
        .first()
        .filter(|a| a.port() != 0)
        .map(|a| a.to_string())
        .unwrap_or_default();
    page.replace("__LINERATE_LISTEN__", &addr)
}

fn method_not_allowed(allow: &'static str) -> Reply {
    let mut r = Reply::text(405, "method not allowed");
    r.extra = match allow {
        "POST" => "Allow: POST\r\n",
        "PUT" => "Allow: PUT\r\n",
        "DELETE" => "Allow: GET, HEAD, DELETE\r\n",
        _ => "Allow: GET, HEAD\r\n",
    };
    r
}

/// Commands need `admin.token` configured (else 403) and sent (else 401).
fn check_token(admin: &Admin, authorization: Option<&[u8]>) -> Result<(), Reply> {
    let token = admin.control.options().admin.token.clone();
    if token.is_empty() {
        return Err(Reply::refusal(
            403,
            "commands_disabled",
            "commands are disabled: set admin.token in the configuration",
        ));
    }
    if !authorized(authorization, &token) {
        let mut r = Reply::refusal(401, "bad_token", "missing or wrong bearer token");
        r.extra = "WWW-Authenticate: Bearer realm=\"linerate\"\r\n";
        return Err(r);
    }
    Ok(())
}

/// `/fill/...`: `PUT /fill/manifests/{name}`, `GET /fill/jobs[/{name}]`,
/// `POST /fill/jobs/{name}/{pause|resume|cancel}`, `DELETE /fill/jobs/{name}`.
/// Reads are open like `/metrics`; changes need the token.
fn fill_reply(
    admin: &Admin,
    method: &str,
    path: &str,
    authorization: Option<&[u8]>,
    body: &[u8],
) -> Reply {
    let Some(fills) = &admin.fills else {
        return Reply::text(404, "fill jobs need cache mode");
    };
    let parts: Vec<&str> = path.trim_start_matches("/fill/").split('/').collect();
    let read = matches!(method, "GET" | "HEAD");
    if !read {
        if let Err(r) = check_token(admin, authorization) {
            return r;
        }
    }
    let json = |status, body: String| Reply::new(status, "application/json", body);
    match parts.as_slice() {
        ["manifests", name] => {
            if method != "PUT" {
                return method_not_allowed("PUT");
            }
            match fills.submit(name, body) {
                Ok(s) => {
                    let (status, name, outcome) = match s {
                        Submitted::Created(n) => (201, n, "created"),
                        Submitted::Unchanged(n) => (200, n, "unchanged"),
                        Submitted::Replaced(n) => (200, n, "replaced"),
                    };
                    tracing::info!(job = %name, outcome, "fill job submitted");
                    let job = fills.render(Some(&name)).unwrap_or_default();
                    json(
                        status,
                        format!("{{\"outcome\":\"{outcome}\",\"job\":{}}}\n", job.trim_end()),
                    )
                }
                Err((status, reason)) => Reply::text(status, &reason),
            }
        }
        ["jobs"] if read => json(200, fills.render(None).unwrap_or_default()),
        ["jobs"] => method_not_allowed("GET"),
        ["jobs", name] => match method {
            "GET" | "HEAD" => match fills.render(Some(name)) {
                Some(j) => json(200, j),
                None => Reply::text(404, "no such job"),
            },
            "DELETE" => {
                if fills.delete(name) {
                    tracing::info!(job = %name, "fill job deleted");
                    json(200, "{\"deleted\":true}\n".into())
                } else {
                    Reply::text(404, "no such job")
                }
            }
            _ => method_not_allowed("DELETE"),
        },
        ["jobs", name, action] => {
            if method != "POST" {
                return method_not_allowed("POST");
            }
            match fills.act(name, action) {
                Ok(()) => {
                    tracing::info!(job = %name, action, "fill job changed");
                    json(200, fills.render(Some(name)).unwrap_or_default())
                }
                Err((status, reason)) => Reply::text(status, &reason),
            }
        }
        _ => Reply::text(404, "not found"),
    }
}

/// `POST /purge?url=URL` removes one URL (its variants and slices too);
/// `POST /purge?prefix=URL` every URL starting with it. URLs are keys as cache mode
/// builds them: `http[s]://host/path[?query]`, host lower-case and without its port,
/// path normalised (`linerate_http::path::normalize_proxy_target`).
fn purge_reply(admin: &Admin, query: &str) -> Reply {
    let Some(cache) = &admin.cache else {
        return Reply::text(404, "not in cache mode");
    };
    let mut url = None;
    let mut prefix = None;
    let mut tag = None;
    let mut soft = false;
    let mut given = 0;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("url", v)) => url = Some(percent_decode(v)),
            Some(("prefix", v)) => prefix = Some(percent_decode(v)),
            Some(("tag", v)) => tag = Some(percent_decode(v)),
            Some(("soft", "1")) => {
                soft = true;
                continue;
            }
            Some(("soft", "0")) => continue,
            Some(("soft", _)) => return Reply::text(400, "soft= is 1 or 0"),
            _ => continue,
        }
        given += 1;
    }
    let bad = || {
        Reply::text(
            400,
            "give exactly one of url= or prefix= (a percent-encoded http:// or https:// URL) or tag= (one tag)",
        )
    };
    if given != 1 {
        return bad();
    }
    // The URL's path is normalised as a request's is (`ProxyShared::key_for_url`), so
    // the purge names the object every spelling of it was stored under; a URL the
    // normaliser refuses (`/../x`, `%2F`) names none, and is answered with why.
    let refused = |why: &str| Reply::text(400, &format!("bad purge URL: {why}"));
    let (kind, key) = match (url, prefix, tag) {
        (None, None, Some(Some(t))) => {
            // A tag is one token of the field: visible ASCII, no space.
            if t.is_empty() || t.len() > 1024 || !t.iter().all(|b| b.is_ascii_graphic()) {
                return Reply::text(
                    400,
                    "bad purge tag: 1-1024 visible ASCII characters, no spaces (one tag of the tag field)",
                );
            }
            (Kind::Tag, t)
        }
        (Some(Some(u)), None, None) => match cache.key_for_url(&u) {
            Ok(key) => (Kind::Url, key),
            Err(why) => return refused(why),
        },
        (None, Some(Some(p)), None) => match cache.key_for_url(&p) {
            Ok(key) => (Kind::Prefix, key),
            Err(why) => return refused(why),
        },
        _ => return bad(),
    };
    if soft && kind == Kind::Prefix {
        return Reply::text(
            400,
            "soft=1 takes url= or tag= (a soft purge rewrites each object it marks)",
        );
    }
    let cache = Arc::clone(cache);
    let mut r = Reply::text(500, "purge not run");
    r.later = Some(Box::new(move || purge_run(&cache, kind, &key, soft)));
    r
}

/// Apply a checked purge here and, in a cluster, send it to every peer. Blocking (the
/// admin's blocking pool).
fn purge_run(cache: &crate::proxy::ProxyShared, kind: Kind, key: &[u8], soft: bool) -> Reply {
    if cache.store.is_lent() {
        // Handed to the next process (an upgrade): it removes nothing here, and its
        // purge log is the next process's file now. Ask the process that serves.
        return Reply::new(
            503,
            "application/json",
            "{\"error\":\"this process handed its store to the next one (upgrade): purge through the new process\"}\n".to_string(),
        );
    }
    let removed = crate::purge::apply_local(cache, kind, key, soft);
    let kind_str = kind.as_str();
    let (Some(cluster), Some(log)) = (&cache.cluster, &cache.purges) else {
        tracing::info!(kind = kind_str, removed, "purge through the admin API");
        return Reply::new(
            200,
            "application/json",
            format!("{{\"purged\":{removed},\"by\":\"{kind_str}\",\"soft\":{soft}}}\n"),
        );
    };
    // In a cluster: logged with a generation (peers that miss it read it from the log
    // later), and sent to every other node now; the answer is the proof of who has it.
    let m = cluster.membership();
    let entry = log.issue(&m.opts.self_name, kind, key, soft);
    let outcomes = crate::purge::fan_out(&m, &entry);
    let mut applied = vec![json_string(&m.opts.self_name)];
    let mut counts = vec![format!("{}:{removed}", json_string(&m.opts.self_name))];
    let mut missing = Vec::new();
    for o in &outcomes {
        match &o.result {
            Ok(n) => {
                applied.push(json_string(&o.node));
                counts.push(format!("{}:{n}", json_string(&o.node)));
            }
            Err(why) => missing.push(format!(
                "{{\"node\":{},\"reason\":{}}}",
                json_string(&o.node),
                json_string(why)
            )),
        }
    }
    tracing::info!(
        kind = kind_str,
        removed,
        generation = entry.generation,
        applied = applied.len(),
        not_applied = missing.len(),
        "purge through the admin API, sent to the cluster"
    );
    // 202 when a node has not applied it yet (it will from the log when it is back).
    let status = if missing.is_empty() { 200 } else { 202 };
    Reply::new(
        status,
        "application/json",
        format!(
            "{{\"purged\":{removed},\"by\":\"{kind_str}\",\"soft\":{soft},\"issuer\":{},\"generation\":{},\"applied\":[{}],\"removed_by_node\":{{{}}},\"not_applied\":[{}]}}\n",
            json_string(&m.opts.self_name),
            entry.generation,
            applied.join(","),
            counts.join(","),
            missing.join(",")
        ),
    )
}

/// `POST /upgrade[?binary=PATH]`: start the next process (this binary as found on disk
/// now, or `PATH`) and hand over. Answers when the new process is ready (`200`, its pid;
/// this one then drains and exits) or has failed (`500` with the reason; this one keeps
/// serving). Blocks the admin thread meanwhile, bounded by the upgrade's timeouts.
fn upgrade_reply(admin: &Admin, query: &str) -> Reply {
    let mut binary = None;
    for pair in query.split('&') {
        if let Some(("binary", v)) = pair.split_once('=') {
            match percent_decode(v).and_then(|b| String::from_utf8(b).ok()) {
                Some(p) if !p.is_empty() => binary = Some(std::path::PathBuf::from(p)),
                _ => return Reply::text(400, "binary= must be a percent-encoded path"),
            }
        }
    }
    if binary.is_some() && !admin.control.options().admin.allow_upgrade_binary {
        return Reply::refusal(
            403,
            "upgrade_binary_off",
            "upgrade to another binary is off: set admin.allow_upgrade_binary = true to allow POST /upgrade?binary=",
        );
    }
    tracing::info!(binary = ?binary, "upgrade requested through the admin API");
    match admin.control.upgrade(binary) {
        Ok(pid) => Reply::new(
            200,
            "application/json",
            format!("{{\"upgraded\":true,\"pid\":{pid}}}\n"),
        ),
        Err(why) => Reply::new(
            500,
            "application/json",
            format!("{{\"upgraded\":false,\"reason\":{}}}\n", json_string(&why)),
        ),
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Decode `%XX` escapes (and `+` as space is *not* applied: URLs keep their `+`).
fn percent_decode(v: &str) -> Option<Vec<u8>> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let s = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(s, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

fn command_reply(admin: &Admin, path: &str) -> Reply {
    match path {
        "/drain" => {
            tracing::info!("drain requested through the admin API");
            admin.control.drain();
            Reply::new(
                200,
                "application/json",
                format!("{{\"mode\":\"{}\"}}\n", admin.control.run_state().as_str()),
            )
        }
        "/undrain" => match admin.control.undrain() {
            Ok(()) => {
                tracing::info!("undrain requested through the admin API: serving again");
                Reply::new(200, "application/json", "{\"mode\":\"serving\"}\n".into())
            }
            Err(why) => Reply::text(409, &why),
        },
        "/reopen-logs" => {
            admin.control.reopen_logs();
            Reply::new(200, "application/json", "{\"reopened\":true}\n".into())
        }
        _ => match admin.control.reload() {
            ReloadOutcome::Applied { needs_restart } => {
                let keys: Vec<String> = needs_restart.iter().map(|k| format!("\"{k}\"")).collect();
                Reply::new(
                    200,
                    "application/json",
                    format!(
                        "{{\"result\":\"applied\",\"needs_restart\":[{}]}}\n",
                        keys.join(",")
                    ),
                )
            }
            ReloadOutcome::Rejected(reason) => {
                Reply::text(422, &format!("reload rejected: {reason}"))
            }
        },
    }
}

/// `Authorization: Bearer TOKEN`, compared without an early exit so the time taken does
/// not reveal how much of a guess was right. The scheme is case-insensitive and followed
/// by one or more spaces (RFC 9110 §11.1, §11.4: `credentials = auth-scheme [ 1*SP ...`).
fn authorized(header: Option<&[u8]>, token: &str) -> bool {
    let Some(value) = header else { return false };
    let Some((scheme, given)) = value.split_at_checked(6) else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case(b"bearer") || given.first() != Some(&b' ') {
        return false;
    }
    let given = given.trim_ascii_start();
    let want = token.as_bytes();
    if given.len() != want.len() {
        return false;
    }
    given
        .iter()
        .zip(want.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn player_page_names_the_first_plain_listener() {
        let listen =
            |s: &[&str]| -> Vec<SocketAddr> { s.iter().map(|a| a.parse().unwrap()).collect() };
        assert!(
            player_page(PLAYER, &listen(&["127.0.0.1:8080", "[::1]:8081"]))
                .contains("content=\"127.0.0.1:8080\"")
        );
        assert!(player_page(PLAYER, &listen(&["[::]:80"])).contains("content=\"[::]:80\""));
        assert!(player_page(PLAYER, &listen(&["127.0.0.1:0"]))
            .contains("name=\"linerate-listen\" content=\"\""));
        assert!(!player_page(PLAYER, &[]).contains("__LINERATE_LISTEN__"));
        assert!(player_page(DASH_PLAYER, &listen(&["127.0.0.1:8080"]))
            .contains("content=\"127.0.0.1:8080\""));
    }

    #[test]
    fn bearer_token_check() {
        assert!(authorized(Some(b"Bearer s3cret"), "s3cret"));
        assert!(!authorized(Some(b"Bearer s3cre"), "s3cret"));
        // RFC 9110 §11.1: the scheme is case-insensitive.
        assert!(authorized(Some(b"bearer s3cret"), "s3cret"));
        assert!(authorized(Some(b"BEARER  s3cret"), "s3cret"));
        assert!(!authorized(Some(b"Bearers3cret"), "s3cret"));
        assert!(!authorized(Some(b"Basic s3cret"), "s3cret"));
        assert!(!authorized(Some(b"Bearer"), "s3cret"));
        assert!(!authorized(None, "s3cret"));
    }
}
