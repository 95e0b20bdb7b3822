//! Fill jobs (pre-positioning): an operator hands the admin API a named list of URLs,
//! HLS playlists and DASH MPDs (`PUT /fill/manifests/{name}`), and the admin thread
//! fetches every object into the cache ahead of the viewers, under a rate cap, inside a
//! local-time window, yielding to client traffic, optionally pinning what it holds
//! (`Store::pin`: never evicted until the job is deleted).
//!
//! How an object is fetched: as a client would, with a GET over loopback to the server's
//! own first plain listener (`run`). So it takes exactly the client path: the route and
//! key rules, the per-key fill claim every worker shares (a client asking meanwhile
//! joins that fill, and a fill job asking for a key a client is filling joins the
//! client's), origin selection and health, the storing decision. There is no second
//! fetcher to keep in step with the first. An object already held (the store's index
//! says so, `Store::contains`) is counted `skipped_present` and never requested.
//!
//! Verification: an object counts as done when the answer is `200` with the whole body
//! (`Content-Length` bytes, or a complete chunked body) and the store then holds the
//! key. Anything else is a failure with its reason (`status 404`, `truncated`,
//! `not stored`, `connect`, ...), counted once, when the object gives up. Only a
//! failure that may go another way is tried again (`run::retryable`: a `5xx`, `408` or
//! `429`, a timeout, a connection that failed or was cut, a store that refused the
//! write for a passing reason or dropped it at once), up to `[fill] retries` times,
//! after a backoff (1 s, then doubling, at most `run::RETRY_MAX`) during which the
//! job's other objects go on; a `404`, a `410`, a response the cache may not store or
//! pins that leave no room fail at once.
//!
//! Ordering between jobs: higher `priority` first; objects start while fewer than
//! `[fill] concurrency` are in flight, the job's and the global token buckets have
//! credit, and no more than `[fill] yield_above` client fills are in flight (client
//! traffic outranks fill: fill jobs wait, clients never do).
//!
//! Jobs are kept in a JSON file (`state`) so a restart keeps them; see
//! docs/operations.md, "Pre-positioning content (fill jobs)".
//!
//! Not here: the HTTP side of the admin API (`admin::api` routes to [`Fills`]).

mod plan;
mod run;
mod state;

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::fillopts::FillOptions;
use crate::proxy::ProxyShared;

pub(crate) use plan::Window;

/// Largest job body accepted (a list of a few hundred thousand URLs).
pub(crate) const MAX_JOB_BODY: usize = 64 * 1024 * 1024;

/// Most objects one job may plan (playlist expansion included).
const MAX_ITEMS: usize = 1_000_000;

/// Longest job name.
const MAX_NAME: usize = 128;

/// What an operator submits (`PUT /fill/manifests/{name}`), as JSON. Two submissions
/// are the same job when these are equal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Spec {
    /// Objects: absolute `http://` URLs, or paths (then `host` is needed).
    pub urls: Vec<String>,
    /// HLS playlists (master or media) and DASH MPDs, expanded to every segment of
    /// every rendition.
    pub manifests: Vec<String>,
    /// Host that paths in `urls` and `manifests` are requested with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Higher runs first. Default 0.
    pub priority: i64,
    /// Keep the objects from eviction until the job is deleted.
    pub pinned: bool,
    /// Counts toward `/ready` (`[fill] ready_coverage`) until it finishes, and only
    /// before the node first answered ready.
    pub ready: bool,
    /// Local-time window; outside it the job waits and makes no requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowSpec>,
    /// This job's rate cap, body bytes per second; 0 = none (the global cap applies).
    pub rate_bytes_per_s: u64,
}

/// `"window": {"start": "HH:MM", "end": "HH:MM"}` (may wrap midnight).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WindowSpec {
    pub start: String,
    pub end: String,
}

/// A job's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum State {
    /// Accepted; no object started yet.
    Queued,
    /// Outside its window: no requests until it opens.
    WaitingWindow,
    /// Fetching.
    Running,
    /// Paused by the operator (objects in flight finish).
    Paused,
    /// Every object is held.
    Done,
    /// Finished, and some objects failed (those worth retrying after their retries).
    Failed,
    /// Cancelled by the operator.
    Cancelled,
}

impl State {
    pub(crate) const ALL: [State; 7] = [
        State::Queued,
        State::WaitingWindow,
        State::Running,
        State::Paused,
        State::Done,
        State::Failed,
        State::Cancelled,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::WaitingWindow => "waiting-window",
            State::Running => "running",
            State::Paused => "paused",
            State::Done => "done",
            State::Failed => "failed",
            State::Cancelled => "cancelled",
        }
    }

    fn finished(self) -> bool {
        matches!(self, State::Done | State::Failed | State::Cancelled)
    }
}

/// A job's counters (exact: each object is counted once, in one of done, skipped or
/// failed, when it settles).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Counters {
    /// Objects in the plan (URLs, playlists read, segments they list).
    pub planned: u64,
    /// Fetched and stored by this job.
    pub done: u64,
    /// Already held when their turn came: no request made.
    pub skipped_present: u64,
    /// Gave up (at once, or after retries when the failure was worth retrying).
    pub failed: u64,
    /// Failures by reason.
    pub failed_reasons: BTreeMap<String, u64>,
    /// Body bytes fetched.
    pub bytes: u64,
}

/// One object of a plan. Kept small (a million-object job holds a million): the host
/// is shared by the objects that name the same one, and the key is made again when
/// needed (`plan::key_of`), not kept.
#[derive(Debug, Clone)]
struct Item {
    /// `Host` sent.
    host: Arc<str>,
    /// Origin-form target sent (`/path?query`).
    target: Box<str>,
    /// Tries so far.
    tries: u32,
    /// A playlist to read and expand after it is fetched.
    playlist: bool,
    /// A playlist this job read before a restart: read again for the objects it lists
    /// that are not settled yet, which were counted then; itself not counted again.
    replay: bool,
}

impl Item {
    /// The object's key, and whether its route slices (held whole, or as slices from
    /// the first); an empty key when no route serves it any more.
    fn key(&self, px: &ProxyShared) -> (Vec<u8>, bool) {
        plan::key_of(px, &self.host, &self.target).unwrap_or_default()
    }

    /// Pin the object (whole, or every slice held); the keys pinned.
    fn pin(&self, px: &ProxyShared) -> Vec<Vec<u8>> {
        let (key, sliced) = self.key(px);
        if key.is_empty() {
            return Vec::new();
        }
        if px.store.pin(&key, true) {
            return vec![key];
        }
        let mut keys = Vec::new();
        if sliced {
            for n in 0.. {
                let k = linerate_http::cache::key::slice(&key, n);
                if !px.store.pin(&k, true) {
                    break;
                }
                keys.push(k);
            }
        }
        keys
    }

    /// Whether the object is sliced and the slice after those [`Item::pin`] pinned
    /// (`pinned`) is being written: a write is pinned only as it is published, so a
    /// pinned job waits for it (the last slices of an answer just read often wait for
    /// their disk's publisher).
    fn slice_pending(&self, px: &ProxyShared, pinned: &[Vec<u8>]) -> bool {
        let (key, sliced) = self.key(px);
        sliced
            && pinned.first().is_some_and(|k| *k != key)
            && px
                .store
                .contains(&linerate_http::cache::key::slice(&key, pinned.len() as u64))
    }

    /// Whether the store holds the object (whole, or its first slice), or is writing it.
    fn held(&self, px: &ProxyShared) -> bool {
        let (key, sliced) = self.key(px);
        !key.is_empty()
            && (px.store.contains(&key)
                || (sliced
                    && px
                        .store
                        .contains(&linerate_http::cache::key::slice(&key, 0))))
    }
}

/// A job and its progress.
struct Job {
    name: String,
    /// The spec without its URL lists (kept in its file, `state`: not in memory twice).
    spec: Spec,
    /// Digest of the whole spec as submitted: a submission with the same is unchanged.
    spec_digest: u64,
    /// URLs and manifests the spec lists.
    listed: usize,
    window: Option<Window>,
    /// Set by the operator (pause) or by the end of the plan.
    state: State,
    /// Objects not yet started, in order; a retry due goes to the front.
    todo: VecDeque<Item>,
    /// Objects waiting for their retry, by when it is due (and a sequence number, so
    /// two due at one instant are both kept): not in `todo`, so they hold up nothing.
    waiting: BTreeMap<(Instant, u64), Item>,
    /// Sequence for `waiting`'s keys.
    waiting_seq: u64,
    in_flight: usize,
    counters: Counters,
    /// Credit of the job's own rate cap.
    bucket: Bucket,
    /// Recent completions: (when, bytes, objects), for rate and ETA.
    recent: VecDeque<(Instant, u64, u64)>,
    /// Changes when the plan is replaced, so answers for an old plan are not counted.
    generation: u64,
    /// Some object has started (queued → running).
    started: bool,
    /// Objects fetched (for the average size a start is debited).
    fetched: u64,
    /// Keys this job pinned (unpinned when it is deleted or replaced, unless another
    /// job pinned them too).
    pinned_keys: BTreeSet<Vec<u8>>,
    /// Its progress log, appended to (`state`).
    log: Option<std::fs::File>,
    /// Keys settled before a restart, while a playlist read then is read again (its
    /// settled segments are not planned again); empty otherwise.
    settled: HashSet<Box<[u8]>>,
    /// When its first object started in this process (rate and ETA).
    first_start: Option<Instant>,
}

/// A token bucket over body bytes. An object is debited its expected size (the job's
/// average so far) when it starts, and the difference when it completes (its size is
/// known then), so starts are spread at the cap's pace and the balance may go
/// negative; nothing starts until it is positive again. Starts empty, so a cap holds
/// from the first second.
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    tokens: f64,
    at: Instant,
}

/// How many seconds of credit a bucket holds at most: a job idle for an hour does not
/// then burst at an hour's worth, and a pause of a second or two in the objects'
/// progress (a loaded machine) is caught up.
const BURST_SECONDS: f64 = 2.0;

impl Bucket {
    pub(crate) fn new(now: Instant) -> Bucket {
        Bucket {
            tokens: 0.0,
            at: now,
        }
    }

    /// Add the credit earned since the last call at `rate` bytes/s (0 = no cap).
    pub(crate) fn refill(&mut self, rate: u64, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        if rate == 0 {
            self.tokens = 0.0;
            return;
        }
        let cap = rate as f64 * BURST_SECONDS;
        self.tokens = (self.tokens + rate as f64 * dt).min(cap);
    }

    /// Whether an object may start under `rate` (0 = no cap).
    pub(crate) fn open(&self, rate: u64) -> bool {
        rate == 0 || self.tokens > 0.0
    }

    pub(crate) fn debit(&mut self, rate: u64, bytes: u64) {
        if rate > 0 {
            self.tokens -= bytes as f64;
        }
    }

    /// Settle an object debited `expected` at its start that came to `actual`.
    pub(crate) fn settle(&mut self, rate: u64, expected: u64, actual: u64) {
        if rate > 0 {
            self.tokens -= actual as f64 - expected as f64;
        }
    }
}

/// How a `PUT` went.
pub(crate) enum Submitted {
    /// A new job (201).
    Created(String),
    /// The same job again: nothing changed (200).
    Unchanged(String),
    /// Different content under a known name: the plan was replaced (200).
    Replaced(String),
}

/// Every job, owned by the admin thread.
pub(crate) struct Fills {
    px: Arc<ProxyShared>,
    /// The server's first plain listener: where objects are requested.
    server: Option<SocketAddr>,
    jobs: Mutex<BTreeMap<String, Job>>,
    global: Mutex<Bucket>,
    in_flight: AtomicUsize,
    generation: AtomicU64,
    state_file: Option<PathBuf>,
    /// Totals over every job since start (metrics).
    totals: Mutex<Counters>,
    /// `[fill] max_urls_per_job` (as of the last tick: reloadable).
    max_urls: AtomicUsize,
}

impl Fills {
    /// `server`: the loopback address objects are requested from (the first plain
    /// listener); without one, jobs are refused.
    pub(crate) fn new(
        px: Arc<ProxyShared>,
        server: Option<SocketAddr>,
        opts: &FillOptions,
    ) -> Fills {
        let state_file = opts.state_file.clone().or_else(|| {
            px.opts
                .store
                .disks
                .first()
                .map(|d| d.path.join(state::FILE_NAME))
        });
        let fills = Fills {
            px,
            server,
            jobs: Mutex::new(BTreeMap::new()),
            global: Mutex::new(Bucket::new(Instant::now())),
            in_flight: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            state_file,
            totals: Mutex::new(Counters::default()),
            max_urls: AtomicUsize::new(opts.max_urls_per_job),
        };
        fills.load();
        fills
    }

    fn next_generation(&self) -> u64 {
        self.generation.fetch_add(1, Relaxed) + 1
    }

    /// `PUT /fill/manifests/{name}` with `body`. `Err`: the status (400, or 413 for a
    /// job over `[fill] max_urls_per_job`) and the reason.
    pub(crate) fn submit(&self, name: &str, body: &[u8]) -> Result<Submitted, (u16, String)> {
        if self.server.is_none() {
            return Err((
                400,
                "fill jobs need a plain (non-TLS) listener in server.listen".into(),
            ));
        }
        check_name(name).map_err(|e| (400, e))?;
        let spec: Spec =
            serde_json::from_slice(body).map_err(|e| (400, format!("bad job: {e}")))?;
        let (window, todo) = self.validate(&spec, Some(self.max_urls.load(Relaxed)))?;
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(job) = jobs.get(name) {
            if job.spec_digest == digest(&spec) {
                return Ok(Submitted::Unchanged(name.to_owned()));
            }
        }
        let replaced = jobs.remove(name);
        let planned = todo.len() as u64;
        let mut job = self.new_job(name, spec, window, todo, State::Queued);
        // The spec is kept as submitted (it parsed, so it reads back the same).
        self.begin_files(&mut job, body, &state::record::planned(planned));
        jobs.insert(name.to_owned(), job);
        if let Some(old) = &replaced {
            // The new plan pins again what it still lists as it comes to it.
            self.unpin_unclaimed(&jobs, &old.pinned_keys);
        }
        drop(jobs);
        self.save();
        Ok(if replaced.is_some() {
            Submitted::Replaced(name.to_owned())
        } else {
            Submitted::Created(name.to_owned())
        })
    }

    fn new_job(
        &self,
        name: &str,
        mut spec: Spec,
        window: Option<Window>,
        todo: VecDeque<Item>,
        state: State,
    ) -> Job {
        let spec_digest = digest(&spec);
        let listed = spec.urls.len() + spec.manifests.len();
        spec.urls = Vec::new();
        spec.manifests = Vec::new();
        self.totals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .planned += todo.len() as u64;
        Job {
            name: name.to_owned(),
            window,
            state,
            counters: Counters {
                planned: todo.len() as u64,
                ..Counters::default()
            },
            todo,
            waiting: BTreeMap::new(),
            waiting_seq: 0,
            in_flight: 0,
            bucket: Bucket::new(Instant::now()),
            recent: VecDeque::new(),
            generation: self.next_generation(),
            started: false,
            fetched: 0,
            pinned_keys: BTreeSet::new(),
            spec,
            spec_digest,
            listed,
            log: None,
            settled: HashSet::new(),
            first_start: None,
        }
    }

    /// Check a job and build its first plan (URLs and playlists; segments are added
    /// when the playlists are read). `max`: `[fill] max_urls_per_job` for a new job
    /// (a saved one was accepted under the limit of its day). `Err`: status and reason.
    fn validate(
        &self,
        spec: &Spec,
        max: Option<usize>,
    ) -> Result<(Option<Window>, VecDeque<Item>), (u16, String)> {
        let bad = |e: String| (400, e);
        if spec.urls.is_empty() && spec.manifests.is_empty() {
            return Err(bad("a job needs \"urls\" or \"manifests\"".into()));
        }
        let listed = spec.urls.len() + spec.manifests.len();
        let max = max.unwrap_or(MAX_ITEMS).min(MAX_ITEMS);
        if listed > max {
            return Err((
                413,
                format!(
                    "the job lists {listed} objects, more than [fill] max_urls_per_job = {max}: split it into several jobs"
                ),
            ));
        }
        let window = match &spec.window {
            Some(w) => Some(Window::parse(&w.start, &w.end).map_err(bad)?),
            None => None,
        };
        let mut todo = VecDeque::with_capacity(listed);
        let mut host: Option<Arc<str>> = None;
        for (list, playlist) in [(&spec.urls, false), (&spec.manifests, true)] {
            for u in list {
                let mut item = plan::item(&self.px, spec.host.as_deref(), u).map_err(bad)?;
                item.playlist = playlist;
                // One copy of a host the objects share.
                match &host {
                    Some(h) if *h == item.host => item.host = Arc::clone(h),
                    _ => host = Some(Arc::clone(&item.host)),
                }
                todo.push_back(item);
            }
        }
        Ok((window, todo))
    }

    /// `POST /fill/jobs/{name}/{action}`. `Err((status, reason))`.
    pub(crate) fn act(&self, name: &str, action: &str) -> Result<(), (u16, String)> {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(job) = jobs.get_mut(name) else {
            return Err((404, format!("no job named {name:?}")));
        };
        match action {
            "pause" if !job.state.finished() => job.state = State::Paused,
            "resume" if job.state == State::Paused => job.state = State::Queued,
            "cancel" if !job.state.finished() => {
                job.state = State::Cancelled;
                self.compact(job);
            }
            "pause" | "resume" | "cancel" => {
                return Err((
                    409,
                    format!("cannot {action} a job that is {}", job.state.as_str()),
                ))
            }
            _ => return Err((404, format!("unknown action {action:?}"))),
        }
        drop(jobs);
        self.save();
        Ok(())
    }

    /// `DELETE /fill/jobs/{name}`: forget the job (objects in flight finish; what was
    /// fetched stays in the cache). `false` when there was none.
    pub(crate) fn delete(&self, name: &str) -> bool {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let removed = jobs.remove(name);
        if let Some(old) = &removed {
            self.unpin_unclaimed(&jobs, &old.pinned_keys);
            self.remove_files(name);
        }
        drop(jobs);
        if removed.is_some() {
            self.save();
        }
        removed.is_some()
    }

    /// Unpin `keys` except those another job in `jobs` pinned.
    fn unpin_unclaimed(&self, jobs: &BTreeMap<String, Job>, keys: &BTreeSet<Vec<u8>>) {
        let mut n = 0u64;
        for k in keys {
            if !jobs.values().any(|j| j.pinned_keys.contains(k)) && self.px.store.pin(k, false) {
                n += 1;
            }
        }
        if n > 0 {
            tracing::info!(objects = n, "fill: objects unpinned");
        }
    }

    /// One job as JSON, or every job (`name` = None).
    pub(crate) fn render(&self, name: Option<&str>) -> Option<String> {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match name {
            Some(n) => jobs.get(n).map(|j| view(j, now).to_string() + "\n"),
            None => {
                let all: Vec<serde_json::Value> = jobs.values().map(|j| view(j, now)).collect();
                Some(serde_json::json!({ "jobs": all }).to_string() + "\n")
            }
        }
    }

    /// Share of the objects of the `"ready": true` jobs not finished yet (queued,
    /// waiting for their window, running or paused) that are held (done or skipped as
    /// present); 1.0 when there are none. A finished job (done, failed or cancelled)
    /// no longer counts: what failed in it will not be fetched, and would otherwise
    /// hold readiness back until the job is deleted. A job whose playlists are not read
    /// yet has not planned their segments, so coverage can fall when they are.
    pub(crate) fn coverage(&self) -> f64 {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut planned, mut held) = (0u64, 0u64);
        for j in jobs
            .values()
            .filter(|j| j.spec.ready && !j.state.finished())
        {
            planned += j.counters.planned;
            held += j.counters.done + j.counters.skipped_present;
        }
        if planned == 0 {
            1.0
        } else {
            held as f64 / planned as f64
        }
    }

    /// Totals since start, and jobs by state (metrics).
    pub(crate) fn metrics(&self) -> (Counters, Vec<(State, u64)>) {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let by_state = State::ALL
            .iter()
            .map(|s| (*s, jobs.values().filter(|j| j.state == *s).count() as u64))
            .collect();
        (
            self.totals
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            by_state,
        )
    }
}

impl Fills {
    /// The fill metrics in Prometheus text format.
    pub(crate) fn prometheus(&self) -> String {
        use std::fmt::Write;
        let (t, by_state) = self.metrics();
        let mut out = String::new();
        for (name, help, v) in [
            ("planned", "Objects planned by fill jobs.", t.planned),
            ("done", "Objects fetched and stored by fill jobs.", t.done),
            (
                "skipped",
                "Objects fill jobs found already held (no request).",
                t.skipped_present,
            ),
            (
                "failed",
                "Objects fill jobs gave up on (after retries, when worth retrying).",
                t.failed,
            ),
            ("bytes", "Body bytes fetched by fill jobs.", t.bytes),
        ] {
            let _ = writeln!(out, "# HELP linerate_fill_{name}_total {help}");
            let _ = writeln!(out, "# TYPE linerate_fill_{name}_total counter");
            let _ = writeln!(out, "linerate_fill_{name}_total {v}");
        }
        let _ = writeln!(
            out,
            "# HELP linerate_fill_failed_by_reason_total Fill objects given up on, by reason."
        );
        let _ = writeln!(out, "# TYPE linerate_fill_failed_by_reason_total counter");
        for (reason, n) in &t.failed_reasons {
            let _ = writeln!(
                out,
                "linerate_fill_failed_by_reason_total{{reason=\"{}\"}} {n}",
                reason.replace(['"', '\\', '\n'], "_")
            );
        }
        let _ = writeln!(out, "# HELP linerate_fill_jobs Fill jobs by state.");
        let _ = writeln!(out, "# TYPE linerate_fill_jobs gauge");
        for (state, n) in by_state {
            let _ = writeln!(
                out,
                "linerate_fill_jobs{{state=\"{}\"}} {n}",
                state.as_str()
            );
        }
        let _ = writeln!(
            out,
            "# HELP linerate_fill_pinned_bytes Bytes of objects pinned (never evicted), all disks."
        );
        let _ = writeln!(out, "# TYPE linerate_fill_pinned_bytes gauge");
        let _ = writeln!(
            out,
            "linerate_fill_pinned_bytes {}",
            self.px.store.pinned_bytes()
        );
        let _ = writeln!(
            out,
            "# HELP linerate_fill_coverage Share of ready-counting fill objects held."
        );
        let _ = writeln!(out, "# TYPE linerate_fill_coverage gauge");
        let _ = writeln!(out, "linerate_fill_coverage {}", self.coverage());
        out
    }
}

/// Names are path segments: letters, digits, `-`, `_`, `.`.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "a job name is 1 to {MAX_NAME} of A-Z a-z 0-9 - _ ."
        ))
    }
}

/// Seconds over which rate and ETA are measured.
const RATE_SECONDS: f64 = 5.0;

/// Shortest span a rate is measured over: in a job's first second, bytes over the
/// milliseconds since its start would make an absurd rate.
const RATE_MIN_SECONDS: f64 = 1.0;

/// Digest of a spec as submitted (two submissions are the same job when equal),
/// hashed as it is serialised: no copy of a million URLs.
fn digest(spec: &Spec) -> u64 {
    struct Hashing(xxhash_rust::xxh3::Xxh3);
    impl std::io::Write for Hashing {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.update(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut h = Hashing(xxhash_rust::xxh3::Xxh3::new());
    let _ = serde_json::to_writer(&mut h, spec);
    h.0.digest()
}

/// Rate and ETA: over the last [`RATE_SECONDS`], or, in a job's first seconds, over the
/// time since its first object started in this process (at least
/// [`RATE_MIN_SECONDS`]), so they are right from the start instead of a fifth of the
/// truth in the first second. No ETA until an object has completed.
fn view(j: &Job, now: Instant) -> serde_json::Value {
    let (bytes, objects) = j
        .recent
        .iter()
        .filter(|(t, _, _)| now.saturating_duration_since(*t).as_secs_f64() <= RATE_SECONDS)
        .fold((0, 0), |(b, o), (_, bb, oo)| (b + bb, o + oo));
    let running = j.state == State::Running;
    let span = j.first_start.map_or(RATE_SECONDS, |t| {
        now.saturating_duration_since(t)
            .as_secs_f64()
            .clamp(RATE_MIN_SECONDS, RATE_SECONDS)
    });
    let rate = if running { bytes as f64 / span } else { 0.0 };
    let objects_per_s = objects as f64 / span;
    let c = &j.counters;
    let left = c
        .planned
        .saturating_sub(c.done + c.skipped_present + c.failed);
    let eta = (running && objects_per_s > 0.0).then(|| (left as f64 / objects_per_s).ceil());
    serde_json::json!({
        "name": j.name,
        "state": j.state.as_str(),
        "priority": j.spec.priority,
        "ready": j.spec.ready,
        "host": j.spec.host,
        "planned": c.planned,
        "done": c.done,
        "skipped_present": c.skipped_present,
        "failed": c.failed,
        "failed_reasons": c.failed_reasons,
        "bytes": c.bytes,
        "in_flight": j.in_flight,
        "retrying": j.waiting.len(),
        "rate_bytes_per_s": rate.round(),
        "eta_s": eta,
        "objects_listed": j.listed,
        "pinned": j.spec.pinned,
        "window": j.spec.window,
        "rate_cap_bytes_per_s": j.spec.rate_bytes_per_s,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bucket_holds_a_rate_from_the_start() {
        let t0 = Instant::now();
        let mut b = Bucket::new(t0);
        assert!(!b.open(1000), "starts empty");
        assert!(b.open(0), "no cap: always open");
        b.refill(1000, t0 + Duration::from_millis(100));
        assert!(b.open(1000));
        b.debit(1000, 500);
        assert!(!b.open(1000), "100 earned, 500 spent");
        b.refill(1000, t0 + Duration::from_millis(600));
        assert!(b.open(1000), "500 more earned");
        // Credit is capped at BURST_SECONDS of the rate.
        b.refill(1000, t0 + Duration::from_secs(3600));
        b.debit(1000, 2001);
        assert!(!b.open(1000));
        // An object debited 500 at its start that came to 100 gives 400 back.
        b.settle(1000, 500, 100);
        assert!(b.open(1000));
    }

    #[test]
    fn job_names() {
        assert!(check_name("news-2026.11_a").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a/b").is_err());
        assert!(check_name(&"a".repeat(MAX_NAME + 1)).is_err());
    }

    #[test]
    fn spec_rejects_unknown_fields() {
        assert!(serde_json::from_str::<Spec>(r#"{"urls":["/a"],"pri":1}"#).is_err());
        let s: Spec = serde_json::from_str(r#"{"urls":["/a"],"priority":3}"#).unwrap();
        assert_eq!(s.priority, 3);
        assert_eq!(s.rate_bytes_per_s, 0);
    }
}
