//! The load generator's event loop: one thread, nonblocking sockets on `mio`
//! (edge-triggered epoll), one state machine per connection, bodies discarded in the
//! kernel.
//!
//! Why this shape. The point of the generator is to cost the client less than the
//! server, so a single core of client can saturate a single core of server on loopback:
//! - bodies are skipped with `recv(MSG_TRUNC)`, which on TCP frees the queued bytes
//!   without copying them to user space (tcp(7); `tcp_recvmsg` skips the copy), so the
//!   client's cost per response is a few syscalls, independent of the body size. wrk
//!   copies every byte and saturates its own core at ~3 GB/s before nginx does;
//! - one thread with an event loop, because thousands of idle connections must be held
//!   (one thread per connection would not scale to 10,000) and because one pinned
//!   thread is what a benchmark script can reason about;
//! - `mio` rather than a tokio runtime: the loop is a plain state machine per socket and
//!   needs nothing but readiness events, so mio (the tokio project's thin epoll layer)
//!   gives that without a scheduler, wakers or futures in the measured path, and without
//!   `unsafe` here (STYLE.md #7).
//!
//! Each connection: send `GET` (keep-alive), read the head into a small buffer (body
//! bytes that arrive with it count toward the body), discard exactly `Content-Length`
//! bytes, check the status, record the latency, send the next request. It does not
//! pipeline, follow redirects, decode chunked bodies or speak TLS.

use std::collections::VecDeque;
use std::io::{self, Read as _, Write as _};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use socket2::SockRef;

use crate::args::Plan;
use crate::report::{ErrorCounts, ErrorKind, IdleReport, Report, Stats};
use crate::request::{Expect, RequestGen};
use crate::response::{parse_head, HeadParse, ResponseHead, MAX_HEAD_LEN};

/// Bytes asked of one `recv(MSG_TRUNC)`. Larger than any TCP receive queue the kernel
/// will build (net.ipv4.tcp_rmem max is 6 MiB by default, 32 MiB on tuned hosts), so
/// one call empties the queue. The buffer is allocated but never written (the kernel
/// does not copy with MSG_TRUNC), so it is address space, not resident memory.
const DISCARD_CHUNK: usize = 64 << 20;

/// Bytes read per `read` while looking for the end of a response head. Heads are
/// 150-400 bytes; reading 1 KiB gets the whole head in one call while copying at most
/// ~800 body bytes to user space (1 % of a 64 KiB response). Any value from 1 to
/// [`MAX_HEAD_LEN`] is correct; this one is cheap.
const HEAD_READ: usize = 1024;

/// Idle connections being opened at once. The server's listen backlog bounds how many
/// handshakes can wait for `accept` (nginx's default backlog is 511); staying below it
/// avoids dropped SYNs and their 1 s retransmission timer, which would make opening
/// 10,000 connections take minutes.
const IDLE_OPEN_BATCH: usize = 256;

/// Give up waiting for idle connections to open after this long and run the load with
/// those that did: a server that stops accepting is a result to report, not a hang.
const IDLE_OPEN_TIMEOUT: Duration = Duration::from_secs(60);

/// Delay before replacing a connection that failed, so a server that resets every
/// connection produces a count of errors instead of a busy loop.
const RECONNECT_DELAY: Duration = Duration::from_millis(10);

/// Longest `poll` wait: bounds how late a phase change (end of warm-up, end of run)
/// can be noticed when no socket is busy.
const MAX_POLL_WAIT: Duration = Duration::from_millis(50);

/// Readiness events taken per `poll` call.
const EVENTS_CAPACITY: usize = 1024;

/// If this many connects fail before any succeeds, the server is not there: stop with
/// its error instead of counting refusals for the whole duration.
const FAIL_FAST_CONNECT_ERRORS: u64 = 3;

/// Run a checked plan to completion. `emit` receives JSON event lines when the plan
/// asks for them.
pub fn run_plan(plan: &Plan, emit: &mut dyn FnMut(&str)) -> Result<Report> {
    let gen = RequestGen::new(
        plan.requests.clone(),
        &plan.host,
        plan.expect_status,
        plan.seed,
    )?;
    let gen = if plan.unique {
        gen.unique_queries()
    } else {
        gen
    };
    let gen = match plan.zipf {
        Some(s) => gen.zipf(s),
        None => gen,
    }
    .hot_count(plan.hot_count);
    let mut engine = Engine {
        plan,
        poll: Poll::new().context("creating the epoll instance")?,
        conns: Vec::new(),
        free: Vec::new(),
        reconnects_due: VecDeque::new(),
        idle_to_open: plan.idle_connections,
        idle_in_flight: 0,
        ctx: Ctx {
            gen,
            discard: Vec::with_capacity(DISCARD_CHUNK),
            measuring: false,
            stats: Stats::default(),
            setup_errors: ErrorCounts::default(),
            first_error: None,
            idle: IdleReport {
                requested: plan.idle_connections,
                ..Default::default()
            },
            ever_connected: false,
            connect_errors: 0,
        },
    };
    engine.run(emit)
}

/// Which job a connection has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Carries the measured workload; replaced when it fails.
    Active,
    /// Sends one request, then holds still until the end of the run.
    Idle,
}

/// Where a connection is in its request/response cycle.
#[derive(Debug, Clone, Copy)]
enum State {
    /// Nonblocking `connect` in progress.
    Connecting,
    /// Writing `request[sent..]`.
    Sending { sent: usize },
    /// Reading the response head into `head[..filled]`.
    Head { filled: usize },
    /// Discarding the body.
    Body { remaining: u64, head: ResponseHead },
    /// An idle connection after its one response: any readiness means the server closed
    /// it (or, wrongly, sent something).
    Holding,
}

struct Conn {
    stream: TcpStream,
    role: Role,
    state: State,
    /// Response head bytes; `MAX_HEAD_LEN` long while a response is expected, empty for
    /// a holding idle connection (10,000 of them would otherwise pin 160 MB).
    head: Box<[u8]>,
    /// The request being sent (capacity reused for every request).
    request: Vec<u8>,
    expect: Expect,
    started: Instant,
}

/// What `drive` decided.
enum Step {
    /// Nothing more to do until the next readiness event.
    Wait,
    /// Close the connection: the server asked for it (`Connection: close`) after a
    /// complete, counted response. Not an error.
    CloseClean,
    /// Close the connection because of an error.
    Fail(ErrorKind, String),
}

/// Everything `drive` may touch besides the connection itself.
struct Ctx {
    gen: RequestGen,
    /// Never initialised: only its spare capacity is lent to `recv(MSG_TRUNC)`.
    discard: Vec<u8>,
    measuring: bool,
    stats: Stats,
    setup_errors: ErrorCounts,
    first_error: Option<String>,
    idle: IdleReport,
    ever_connected: bool,
    connect_errors: u64,
}

impl Ctx {
    fn error(&mut self, role: Role, kind: ErrorKind, msg: String) {
        if kind == ErrorKind::Connect {
            self.connect_errors += 1;
        }
        if self.measuring && role == Role::Active {
            self.stats.errors.add(kind);
        } else {
            self.setup_errors.add(kind);
        }
        if self.first_error.is_none() {
            self.first_error = Some(format!("{}: {msg}", kind.as_str()));
        }
    }
}

/// Run phases, in order.
#[derive(Debug, Clone, Copy)]
enum Phase {
    OpeningIdle { since: Instant },
    Settling { until: Instant },
    Warmup { until: Instant },
    Measuring { since: Instant, until: Instant },
}

struct Engine<'p> {
    plan: &'p Plan,
    poll: Poll,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// When to open replacements for failed active connections.
    reconnects_due: VecDeque<Instant>,
    idle_to_open: usize,
    idle_in_flight: usize,
    ctx: Ctx,
}

impl Engine<'_> {
    fn run(&mut self, emit: &mut dyn FnMut(&str)) -> Result<Report> {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let start = Instant::now();
        let mut phase = if self.plan.idle_connections > 0 {
            self.top_up_idle();
            Phase::OpeningIdle { since: start }
        } else {
            self.open_active(self.plan.connections);
            Phase::Warmup {
                until: start + self.plan.warmup,
            }
        };
        let elapsed = loop {
            let now = Instant::now();
            // Phase changes.
            let deadline = match phase {
                Phase::OpeningIdle { since } => {
                    let idle = &self.ctx.idle;
                    if idle.established + idle.failed >= idle.requested
                        || now >= since + IDLE_OPEN_TIMEOUT
                    {
                        self.ctx.idle.open_time = now - since;
                        if self.plan.events {
                            emit(&format!(
                                "{{\"event\":\"idle_ready\",\"established\":{},\"failed\":{},\"open_s\":{:.3}}}",
                                self.ctx.idle.established,
                                self.ctx.idle.failed,
                                self.ctx.idle.open_time.as_secs_f64()
                            ));
                        }
                        phase = Phase::Settling {
                            until: now + self.plan.idle_settle,
                        };
                        continue;
                    }
                    since + IDLE_OPEN_TIMEOUT
                }
                Phase::Settling { until } => {
                    if now >= until {
                        self.open_active(self.plan.connections);
                        phase = Phase::Warmup {
                            until: now + self.plan.warmup,
                        };
                        continue;
                    }
                    until
                }
                Phase::Warmup { until } => {
                    if now >= until {
                        self.ctx.stats.clear();
                        self.ctx.measuring = true;
                        if self.plan.events {
                            emit("{\"event\":\"measure_start\"}");
                        }
                        phase = Phase::Measuring {
                            since: now,
                            until: now + self.plan.duration,
                        };
                        continue;
                    }
                    until
                }
                Phase::Measuring { since, until } => {
                    if now >= until {
                        self.ctx.measuring = false;
                        if self.plan.events {
                            emit("{\"event\":\"measure_end\"}");
                        }
                        break now - since;
                    }
                    until
                }
            };
            if !self.ctx.ever_connected && self.ctx.connect_errors >= FAIL_FAST_CONNECT_ERRORS {
                bail!(
                    "cannot connect to {}: {}",
                    self.plan.target,
                    self.ctx.first_error.as_deref().unwrap_or("unknown error")
                );
            }
            while self.reconnects_due.front().is_some_and(|&t| t <= now) {
                self.reconnects_due.pop_front();
                self.open(Role::Active);
            }
            let mut wake = deadline.min(now + MAX_POLL_WAIT);
            if let Some(&t) = self.reconnects_due.front() {
                wake = wake.min(t);
            }
            match self
                .poll
                .poll(&mut events, Some(wake.saturating_duration_since(now)))
            {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("epoll_wait"),
            }
            for ev in events.iter() {
                self.handle(ev.token().0);
            }
            self.top_up_idle();
        };

        let open_at_end = self
            .conns
            .iter()
            .flatten()
            .filter(|c| c.role == Role::Idle && matches!(c.state, State::Holding))
            .count();
        self.ctx.idle.open_at_end = open_at_end;
        Ok(Report {
            workload: self.plan.workload.as_str(),
            target: self.plan.target.to_string(),
            connections: self.plan.connections,
            elapsed,
            stats: std::mem::take(&mut self.ctx.stats),
            setup_errors: self.ctx.setup_errors.clone(),
            first_error: self.ctx.first_error.clone(),
            idle: (self.plan.idle_connections > 0).then(|| self.ctx.idle.clone()),
        })
    }

    fn open_active(&mut self, n: usize) {
        for _ in 0..n {
            self.open(Role::Active);
        }
    }

    /// Keep up to [`IDLE_OPEN_BATCH`] idle connections opening until all were tried.
    fn top_up_idle(&mut self) {
        while self.idle_to_open > 0 && self.idle_in_flight < IDLE_OPEN_BATCH {
            self.idle_to_open -= 1;
            self.idle_in_flight += 1;
            self.open(Role::Idle);
        }
    }

    /// Start a nonblocking connect. Failures are counted (and, for an active
    /// connection, retried after [`RECONNECT_DELAY`]).
    fn open(&mut self, role: Role) {
        let stream = match TcpStream::connect(self.plan.target) {
            Ok(s) => s,
            Err(e) => {
                let hint = if e.raw_os_error() == Some(libc::EMFILE) {
                    " (raise `ulimit -n`)"
                } else {
                    ""
                };
                self.ctx
                    .error(role, ErrorKind::Connect, format!("{e}{hint}"));
                self.after_close(role, false, true);
                return;
            }
        };
        let idx = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        let mut conn = Conn {
            stream,
            role,
            state: State::Connecting,
            head: vec![0u8; MAX_HEAD_LEN].into_boxed_slice(),
            request: Vec::with_capacity(128),
            expect: Expect {
                status: 200,
                body_len: None,
                hot: false,
            },
            started: Instant::now(),
        };
        // Edge-triggered; both directions, so connect completion and partial writes wake us.
        let registered = self.poll.registry().register(
            &mut conn.stream,
            Token(idx),
            Interest::READABLE | Interest::WRITABLE,
        );
        if let Err(e) = registered {
            self.ctx
                .error(role, ErrorKind::Connect, format!("epoll_ctl: {e}"));
            self.free.push(idx);
            self.after_close(role, false, true);
            return;
        }
        if let Some(slot) = self.conns.get_mut(idx) {
            *slot = Some(conn);
        }
    }

    fn handle(&mut self, idx: usize) {
        let Some(Some(conn)) = self.conns.get_mut(idx) else {
            return;
        };
        let was_holding = matches!(conn.state, State::Holding);
        let step = drive(conn, &mut self.ctx);
        let role = conn.role;
        // An idle connection that just got its one response: its opening is over.
        if role == Role::Idle && !was_holding && matches!(conn.state, State::Holding) {
            self.idle_in_flight = self.idle_in_flight.saturating_sub(1);
            self.ctx.idle.established += 1;
        }
        let holding = matches!(conn.state, State::Holding);
        match step {
            Step::Wait => {}
            Step::CloseClean => {
                self.close(idx);
                if self.ctx.measuring && role == Role::Active {
                    self.ctx.stats.reconnects += 1;
                }
                self.after_close(role, holding, false);
            }
            Step::Fail(kind, msg) => {
                self.close(idx);
                self.ctx.error(role, kind, msg);
                self.after_close(role, holding, true);
            }
        }
    }

    fn close(&mut self, idx: usize) {
        if let Some(slot) = self.conns.get_mut(idx) {
            if let Some(mut conn) = slot.take() {
                // Closing the fd removes it from epoll anyway; deregister keeps mio's
                // bookkeeping exact and cannot fail in a way we could act on.
                let _ = self.poll.registry().deregister(&mut conn.stream);
                self.free.push(idx);
            }
        }
    }

    /// Book-keeping after a connection is gone (or never opened).
    fn after_close(&mut self, role: Role, was_holding: bool, failed: bool) {
        match role {
            Role::Active => {
                let delay = if failed {
                    RECONNECT_DELAY
                } else {
                    Duration::ZERO
                };
                self.reconnects_due.push_back(Instant::now() + delay);
            }
            Role::Idle if was_holding => self.ctx.idle.closed_by_server += 1,
            Role::Idle => {
                self.idle_in_flight = self.idle_in_flight.saturating_sub(1);
                self.ctx.idle.failed += 1;
            }
        }
    }
}

/// Advance one connection as far as its socket allows (edge-triggered: until a call
/// would block, or the connection must close).
fn drive(conn: &mut Conn, ctx: &mut Ctx) -> Step {
    loop {
        match conn.state {
            State::Connecting => {
                // mio's documented way to learn a nonblocking connect's outcome: a pending
                // socket error, else peer_addr succeeds once connected.
                match conn.stream.take_error() {
                    Ok(None) => {}
                    Ok(Some(e)) | Err(e) => return Step::Fail(ErrorKind::Connect, e.to_string()),
                }
                match conn.stream.peer_addr() {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => return Step::Wait,
                    Err(e) => return Step::Fail(ErrorKind::Connect, e.to_string()),
                }
                ctx.ever_connected = true;
                // Requests are single writes; Nagle could only delay them.
                let _ = conn.stream.set_nodelay(true);
                conn.expect = match conn.role {
                    Role::Active => ctx.gen.next_request(&mut conn.request),
                    Role::Idle => ctx.gen.first_request(&mut conn.request),
                };
                conn.started = Instant::now();
                conn.state = State::Sending { sent: 0 };
            }
            State::Sending { sent } => {
                let Some(rest) = conn.request.get(sent..) else {
                    return Step::Fail(ErrorKind::Io, "request offset past its end".into());
                };
                match (&conn.stream).write(rest) {
                    Ok(0) => return Step::Fail(ErrorKind::Io, "write returned 0".into()),
                    Ok(n) if sent + n >= conn.request.len() => {
                        conn.state = State::Head { filled: 0 };
                        // No read until the next event: the response can only arrive
                        // after this write, and its arrival raises a new edge (epoll
                        // queues an event on every sk_data_ready). Trying now would be
                        // one EAGAIN syscall per request, ~20 % of the client's calls.
                        return Step::Wait;
                    }
                    Ok(n) => conn.state = State::Sending { sent: sent + n },
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Step::Fail(ErrorKind::Io, format!("write: {e}")),
                }
            }
            State::Head { filled } => {
                let end = (filled + HEAD_READ).min(conn.head.len());
                let Some(buf) = conn.head.get_mut(filled..end) else {
                    return Step::Fail(ErrorKind::Protocol, "head buffer missing".into());
                };
                match (&conn.stream).read(buf) {
                    Ok(0) if filled == 0 => {
                        return Step::Fail(
                            ErrorKind::Closed,
                            "server closed a keep-alive connection".into(),
                        )
                    }
                    Ok(0) => {
                        return Step::Fail(
                            ErrorKind::Truncated,
                            "connection closed inside a response head".into(),
                        )
                    }
                    Ok(n) => {
                        let filled = filled + n;
                        let bytes = conn.head.get(..filled).unwrap_or_default();
                        match parse_head(bytes) {
                            Ok(HeadParse::Partial) => conn.state = State::Head { filled },
                            Ok(HeadParse::Complete(head)) => {
                                let extra = (filled - head.head_len) as u64;
                                if extra > head.body_len {
                                    return Step::Fail(
                                        ErrorKind::Protocol,
                                        "bytes beyond Content-Length (nothing was pipelined)"
                                            .into(),
                                    );
                                }
                                if ctx.measuring {
                                    ctx.stats.body_bytes += extra;
                                }
                                conn.state = State::Body {
                                    remaining: head.body_len - extra,
                                    head,
                                };
                            }
                            Err(e) => return Step::Fail(ErrorKind::Protocol, e.to_string()),
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Step::Fail(ErrorKind::Io, format!("read: {e}")),
                }
            }
            State::Body { remaining: 0, head } => {
                if let Some(step) = complete(conn, ctx, head) {
                    return step;
                }
            }
            State::Body { remaining, head } => {
                let want = remaining.min(DISCARD_CHUNK as u64) as usize;
                let spare = ctx.discard.spare_capacity_mut();
                let len = want.min(spare.len());
                let Some(buf) = spare.get_mut(..len) else {
                    return Step::Fail(ErrorKind::Io, "discard buffer missing".into());
                };
                // MSG_TRUNC on TCP: the kernel drops up to `len` queued bytes without
                // copying them and returns how many it dropped (tcp(7)).
                match SockRef::from(&conn.stream).recv_with_flags(buf, libc::MSG_TRUNC) {
                    Ok(0) => {
                        return Step::Fail(
                            ErrorKind::Truncated,
                            "connection closed inside a body".into(),
                        )
                    }
                    Ok(n) => {
                        let n = (n as u64).min(remaining);
                        if ctx.measuring {
                            ctx.stats.body_bytes += n;
                        }
                        conn.state = State::Body {
                            remaining: remaining - n,
                            head,
                        };
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Step::Fail(ErrorKind::Io, format!("recv: {e}")),
                }
            }
            State::Holding => {
                let mut probe = [0u8; 64];
                match (&conn.stream).read(&mut probe) {
                    Ok(0) => {
                        return Step::Fail(
                            ErrorKind::Closed,
                            "server closed an idle connection".into(),
                        )
                    }
                    Ok(_) => {
                        return Step::Fail(
                            ErrorKind::Protocol,
                            "unsolicited bytes on an idle connection".into(),
                        )
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Step::Fail(ErrorKind::Io, format!("read: {e}")),
                }
            }
        }
    }
}

/// A response is complete: count it and start the next request (active), or start
/// holding (idle). `Some(step)` ends the connection.
fn complete(conn: &mut Conn, ctx: &mut Ctx, head: ResponseHead) -> Option<Step> {
    let now = Instant::now();
    let status_ok = head.status == conn.expect.status;
    let length_ok = conn.expect.body_len.is_none_or(|l| l == head.body_len);
    match conn.role {
        Role::Active if ctx.measuring => {
            ctx.stats.add_status(head.status);
            if status_ok && length_ok {
                ctx.stats.ok += 1;
                let ns = u64::try_from((now - conn.started).as_nanos()).unwrap_or(u64::MAX);
                ctx.stats.latency.record(ns);
                if conn.expect.hot {
                    ctx.stats.hot_latency.record(ns);
                }
            }
        }
        Role::Active => {}
        Role::Idle if head.persistence == crate::response::Persistence::Close => {}
        Role::Idle => {
            // The server accepted and answered: the connection is established even if
            // the status is wrong (which is still worth counting).
            conn.state = State::Holding;
            conn.head = Box::default();
            conn.request = Vec::new();
        }
    }
    if !status_ok {
        ctx.error(
            conn.role,
            ErrorKind::Status,
            format!(
                "status {} where {} was expected",
                head.status, conn.expect.status
            ),
        );
    } else if !length_ok {
        ctx.error(
            conn.role,
            ErrorKind::Length,
            format!(
                "{} body bytes where {:?} were expected",
                head.body_len, conn.expect.body_len
            ),
        );
    }
    if head.persistence == crate::response::Persistence::Close {
        return Some(match conn.role {
            Role::Active => Step::CloseClean,
            Role::Idle => Step::Fail(
                ErrorKind::Closed,
                "server refused keep-alive on an idle connection".into(),
            ),
        });
    }
    if conn.role == Role::Active {
        conn.expect = ctx.gen.next_request(&mut conn.request);
        conn.started = now;
        conn.state = State::Sending { sent: 0 };
    }
    None
}
