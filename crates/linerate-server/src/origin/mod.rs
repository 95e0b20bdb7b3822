//! The origin client of cache mode: HTTP/1.1 over TCP or TLS to an origin's servers,
//! with per-worker connection pools, per-phase timeouts, retries and shared health.
//!
//! It is our own small client on `linerate_http::upstream` (httparse) rather than hyper,
//! because a cache must detect a body longer than its `Content-Length`, own every framing
//! error, head limit and per-phase timeout, and get raw body bytes to append to the store.
//!
//! Pieces, in request order: [`OriginShared`] (built once per origin at start-up: TLS
//! configuration, server health) → [`Origin::send`] (per worker: pick a server, take a
//! pooled or new connection, retry) → `response::exchange` (write the request, read the
//! head) → [`OriginResponse::read`] (the body, framing checked to the byte).
//!
//! Retry rules (RFC 9110 §9.2.2: only idempotent requests are retried automatically):
//! - a request that fails before any response byte on a *pooled* connection (the origin
//!   closed it as we sent) is sent once more on a fresh connection to the same server;
//!   a non-idempotent one only if the failure came while writing it;
//! - an idempotent request that fails before any response byte moves on to the next
//!   server, at most once per server.
//!
//! Health: a failure to reach a server (connect refused or timed out, TLS, no first byte
//! in time, a head that stalls) counts against it; `down_after` in a row mark it down
//! for `down_for`; a head resets the count. An origin that answers by closing or
//! resetting the connection is reachable, not dead, and is not counted: it may do so on
//! purpose, for one URL. Down servers are skipped while another server is up; an origin
//! whose servers are all down is still tried (the one due back soonest first), and an
//! origin with one server is never marked down at all (as in nginx: "If there is only a
//! single server in a group, max_fails ... are ignored"): skipping the only server
//! would turn a few failed requests into every request failing for `down_for`.
//!
//! Not here: what to ask (the proxy builds the request), caching decisions, and the
//! wire format of heads and chunks (`linerate_http::upstream`).

mod conn;
mod error;
mod request;
mod response;
mod shared;
#[cfg(test)]
mod tests;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use conn::{Conn, ServerPool};
// The snapshot types and labels are for the metrics, which are wired in later.
#[allow(unused_imports)]
pub(crate) use error::{OriginError, ERROR_KINDS};
pub(crate) use request::{wire_target, OriginRequest};
pub(crate) use response::{recycle_head_buffer, InterimSink, OriginResponse};
#[allow(unused_imports)]
pub(crate) use shared::{OriginShared, OriginSnapshot, ServerSnapshot, ServerState};

/// One worker's client for one origin: its idle-connection pools (one per server) and
/// its round-robin cursor. Not `Send`: it lives on its worker's thread.
pub(crate) struct Origin {
    shared: Arc<OriginShared>,
    pools: Vec<Rc<ServerPool>>,
    cursor: Cell<usize>,
}

/// Where in an attempt a failure happened: it decides blame and retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for one of this worker's connection slots: our own limit, not the
    /// origin's fault, so no health penalty.
    Slot,
    /// TCP connect or TLS handshake.
    Connect,
    /// Writing the request.
    Write,
    /// Waiting for or reading the head.
    Head,
}

/// A failed attempt and where it failed.
#[derive(Debug)]
struct Failure {
    error: OriginError,
    phase: Phase,
}

impl Failure {
    fn new(error: OriginError, phase: Phase) -> Failure {
        Failure { error, phase }
    }
}

/// A connection for one attempt.
enum Acquired {
    /// Taken from the pool: it may have been closed by the origin in the meantime.
    Pooled(Conn),
    /// Just connected.
    Fresh(Conn),
}

/// Whether an attempt may use a pooled connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reuse {
    Allowed,
    FreshOnly,
}

impl Origin {
    /// A client for `shared`'s origin, with empty pools.
    pub(crate) fn new(shared: Arc<OriginShared>) -> Origin {
        let pools = shared
            .opts
            .servers
            .iter()
            .map(|_| Rc::new(ServerPool::new()))
            .collect();
        Origin {
            shared,
            pools,
            cursor: Cell::new(0),
        }
    }

    /// Send `req` and read the response head, choosing the server round robin among
    /// those not marked down, with the retries described in the module docs.
    pub(crate) async fn send(
        &self,
        req: &OriginRequest<'_>,
    ) -> Result<OriginResponse, OriginError> {
        let n = self.pools.len();
        if n == 0 {
            // `OriginShared::new` refuses an origin without servers; no panic if not.
            return Err(OriginError::AllDown);
        }
        let start = self.cursor.get() % n;
        self.cursor.set((start + 1) % n);
        let mut order: Vec<usize> = (0..n)
            .map(|i| (start + i) % n)
            .filter(|&s| !self.shared.is_down(s))
            .collect();
        if order.is_empty() {
            // Every server is down: try the one due back first rather than fail without
            // trying (a cache can still serve stale content if this fails too).
            order.push(self.shared.soonest_up());
        }
        let mut last = None;
        for server in order {
            match self.attempt(server, req).await {
                Ok(response) => return Ok(response),
                Err(e) => {
                    let next = req.idempotent && e.nothing_received();
                    tracing::debug!(
                        origin = %self.shared.opts.name,
                        server = %self.shared.opts.servers[server].authority(),
                        error = %e,
                        next_server = next,
                        "origin request failed"
                    );
                    last = Some(e);
                    if !next {
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or(OriginError::AllDown))
    }

    /// One server: a pooled connection if there is a quiet one, else a new one; one
    /// more try on a fresh connection if the pooled one turns out dead.
    async fn attempt(
        &self,
        server: usize,
        req: &OriginRequest<'_>,
    ) -> Result<OriginResponse, OriginError> {
        let shared = &self.shared;
        let opts = &shared.opts;
        let wire = req.encode(&opts.servers[server].base_path, shared.host_header(server));
        shared.count_request(server);
        let acquired = self.acquire(server, Reuse::Allowed).await;
        let result = match acquired {
            Err(f) => Err(f),
            Ok(Acquired::Fresh(conn)) => {
                response::exchange(shared, server, conn, &wire, req.is_head(), req.interim).await
            }
            Ok(Acquired::Pooled(conn)) => {
                shared.count_reused(server);
                match response::exchange(shared, server, conn, &wire, req.is_head(), req.interim)
                    .await
                {
                    Err(f)
                        if f.error.nothing_received()
                            && (req.idempotent || f.phase == Phase::Write) =>
                    {
                        tracing::debug!(
                            origin = %opts.name,
                            server = %opts.servers[server].authority(),
                            error = %f.error,
                            "pooled origin connection was dead; retrying on a new one"
                        );
                        match self.acquire(server, Reuse::FreshOnly).await {
                            Ok(Acquired::Fresh(conn) | Acquired::Pooled(conn)) => {
                                response::exchange(
                                    shared,
                                    server,
                                    conn,
                                    &wire,
                                    req.is_head(),
                                    req.interim,
                                )
                                .await
                            }
                            Err(f) => Err(f),
                        }
                    }
                    other => other,
                }
            }
        };
        match result {
            Ok(response) => {
                shared.record_success(server);
                Ok(response)
            }
            Err(f) => {
                shared.count_error(server, &f.error);
                if f.phase != Phase::Slot && f.error.is_unreachable() {
                    shared.record_failure(server, &f.error);
                }
                Err(f.error)
            }
        }
    }

    /// A connection to `server`: a quiet pooled one (unless `FreshOnly`), else a new
    /// one if this worker holds fewer than `max_connections`, else wait (up to
    /// `connect_timeout`) for one to come back or close.
    async fn acquire(&self, server: usize, reuse: Reuse) -> Result<Acquired, Failure> {
        let pool = &self.pools[server];
        let opts = &self.shared.opts;
        let deadline = Instant::now() + opts.connect_timeout;
        loop {
            if reuse == Reuse::Allowed {
                if let Some(conn) = pool.take_idle().await {
                    return Ok(Acquired::Pooled(conn));
                }
            }
            if let Some(slot) = pool.try_reserve(opts.max_connections) {
                return Conn::connect(&self.shared, server, slot, deadline)
                    .await
                    .map(Acquired::Fresh)
                    .map_err(|e| Failure::new(e, Phase::Connect));
            }
            // At the cap. A fresh connection may take the slot of an idle one.
            if reuse == Reuse::FreshOnly && pool.evict_oldest() {
                continue;
            }
            if !pool.wait_change(deadline).await {
                return Err(Failure::new(OriginError::ConnectTimeout, Phase::Slot));
            }
        }
    }

    /// This worker's pool for `server` (tests look at its counts).
    #[cfg(test)]
    fn pool(&self, server: usize) -> &ServerPool {
        &self.pools[server]
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
