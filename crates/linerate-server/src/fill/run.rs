//! The executor, on the admin thread's runtime: every tick it starts what may start
//! (priority, concurrency, rate caps, windows, client load), and each object is a GET
//! over loopback to the server's own listener (see the module comment of `fill`).

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::state::record;
use super::{plan, Fills, Item, State};
use crate::fillopts::FillOptions;

/// How often the executor looks for work.
const TICK: Duration = Duration::from_millis(10);

/// No progress on an object's connection for this long fails it (`timeout`).
const IDLE: Duration = Duration::from_secs(30);

/// Largest response head read.
const MAX_HEAD: usize = 64 * 1024;

/// How long a complete answer may take to show up in the store at all. The store lists
/// a write from its start (`Store::contains` counts writes in progress), so an object
/// not listed once its body was read was not admitted; the margin covers the fill's
/// first write racing the last body byte.
const STORED_WITHIN: Duration = Duration::from_millis(300);

/// How long a write in progress may take to finish so a pinned job can pin it.
const PUBLISHED_WITHIN: Duration = Duration::from_secs(10);

/// Largest playlist or MPD read.
const MAX_LISTING: usize = linerate_http::dash::MAX_MPD_BYTES;

/// Recent completions kept per job for its rate.
const RECENT: usize = 4096;

/// Wait before an object's first retry; each further retry waits twice the last.
const RETRY_FIRST: Duration = Duration::from_secs(1);

/// Longest wait before a retry (a large `[fill] retries` does not wait for hours).
const RETRY_MAX: Duration = Duration::from_secs(60);

/// What an object's fetch needs to know about its job.
struct Start {
    server: SocketAddr,
    name: String,
    /// The plan it belongs to (a replaced plan's answers are not counted).
    generation: u64,
    /// Held when it started (a playlist, read again): counted as skipped.
    present: bool,
    retries: u32,
    global_rate: u64,
    /// Pin the object once stored.
    pinned: bool,
    /// Bytes the buckets were debited at the start.
    expected: u64,
}

/// What one request got.
struct Fetched {
    bytes: u64,
    /// The body, for playlists.
    body: Option<Vec<u8>>,
    /// The answer's `Cache-Status` says `stored`: the server began writing it.
    stored: bool,
}

impl Fills {
    /// Run jobs until the thread stops; `opts` reads the `[fill]` options in effect (a
    /// reload changes rates and concurrency) and whether the server is serving: while
    /// it drains or stops its listeners are closed, so nothing new starts.
    pub(crate) async fn run(self: Arc<Self>, opts: impl Fn() -> (FillOptions, bool)) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            let (opts, serving) = opts();
            if serving {
                self.step(&opts);
            }
        }
    }

    fn step(self: &Arc<Self>, opts: &FillOptions) {
        let Some(server) = self.server else { return };
        self.max_urls.store(opts.max_urls_per_job, Relaxed);
        // Until the index is loaded, "held" cannot be told from "not held": starting
        // then would fetch again what the store already has.
        if !self.px.store.is_loaded() {
            return;
        }
        let now = Instant::now();
        self.global
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .refill(opts.rate_bytes_per_s, now);
        let mut finished = false;
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let mut order: Vec<(i64, String)> = jobs
            .values()
            .map(|j| (-j.spec.priority, j.name.clone()))
            .collect();
        order.sort();
        for (_, name) in order {
            let Some(job) = jobs.get_mut(&name) else {
                continue;
            };
            job.bucket.refill(job.spec.rate_bytes_per_s, now);
            if matches!(
                job.state,
                State::Paused | State::Done | State::Failed | State::Cancelled
            ) {
                continue;
            }
            if job.window.is_some_and(|w| !w.open_now()) {
                job.state = State::WaitingWindow;
                continue;
            }
            job.state = if job.started {
                State::Running
            } else {
                State::Queued
            };
            // Retries whose backoff is over go first.
            while let Some(entry) = job.waiting.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                job.todo.push_front(entry.remove());
            }
            loop {
                let Some(item) = job.todo.front() else {
                    if job.in_flight == 0 && job.waiting.is_empty() {
                        job.state = if job.counters.failed > 0 {
                            State::Failed
                        } else {
                            State::Done
                        };
                        tracing::info!(job = %job.name, state = job.state.as_str(), "fill job finished");
                        job.settled = Default::default();
                        self.compact(job);
                        finished = true;
                    }
                    break;
                };
                let present = item.held(&self.px);
                // A pinned job pins what is held; an object still being written cannot
                // be pinned yet, so it is requested (joining that write) and pinned then.
                let pinned_now = if present && job.spec.pinned && !item.playlist {
                    item.pin(&self.px)
                } else {
                    Vec::new()
                };
                if present && !item.playlist && (!job.spec.pinned || !pinned_now.is_empty()) {
                    // Held: counted, no request, no budget spent.
                    let mut rec = record::skipped(0, &item.key(&self.px).0);
                    for k in &pinned_now {
                        rec.push_str(&record::pinned(k));
                    }
                    self.record(job, &rec);
                    job.pinned_keys.extend(pinned_now);
                    job.todo.pop_front();
                    job.counters.skipped_present += 1;
                    self.totals
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .skipped_present += 1;
                    job.started = true;
                    job.state = State::Running;
                    continue;
                }
                if self.in_flight.load(Relaxed) >= opts.concurrency.max(1)
                    || !job.bucket.open(job.spec.rate_bytes_per_s)
                    || !self
                        .global
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .open(opts.rate_bytes_per_s)
                {
                    break;
                }
                // Under a cap, a job's first object goes alone: its size is what the
                // next starts are debited, and without it they would all start at once.
                let capped = job.spec.rate_bytes_per_s > 0 || opts.rate_bytes_per_s > 0;
                if capped && job.fetched == 0 && job.in_flight > 0 {
                    break;
                }
                // Client traffic outranks fill: with more client fills in flight than
                // `yield_above`, nothing new starts (ours are subtracted; each of ours
                // is at most one claim).
                let client_fills = self
                    .px
                    .fills
                    .in_progress()
                    .saturating_sub(self.in_flight.load(Relaxed));
                if client_fills > opts.yield_above {
                    break;
                }
                let Some(item) = job.todo.pop_front() else {
                    break;
                };
                job.in_flight += 1;
                job.started = true;
                job.first_start.get_or_insert(now);
                job.state = State::Running;
                self.in_flight.fetch_add(1, Relaxed);
                // Debited now at the job's average size, settled when it completes.
                let expected = job.counters.bytes.checked_div(job.fetched).unwrap_or(0);
                job.bucket.debit(job.spec.rate_bytes_per_s, expected);
                self.global
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .debit(opts.rate_bytes_per_s, expected);
                let start = Start {
                    server,
                    name: job.name.clone(),
                    generation: job.generation,
                    present,
                    retries: opts.retries,
                    global_rate: opts.rate_bytes_per_s,
                    pinned: job.spec.pinned,
                    expected,
                };
                tokio::task::spawn_local(Arc::clone(self).fetch(start, item));
            }
        }
        drop(jobs);
        if finished {
            self.save();
        }
    }

    /// Fetch one object and count how it went.
    async fn fetch(self: Arc<Self>, start: Start, mut item: Item) {
        let Start {
            server,
            name,
            generation,
            present,
            retries,
            global_rate,
            pinned,
            expected,
        } = start;
        // The store's refusals so far: one more by the time the answer is read (ours,
        // or a client's meanwhile) says a write may have been refused for room not yet
        // made or a publish backlog, which a later try can pass.
        let refusals = self.refusals();
        let key = item.key(&self.px).0;
        // Pinned at admission: the write this request causes (or joins) is indexed
        // pinned, never published unpinned for eviction to take before the check below
        // pins it. (A sliced object's slices are pinned by that check.)
        let intent = (pinned && !key.is_empty()).then_some(&key);
        if let Some(k) = intent {
            self.px.store.pin_on_write(k);
        }
        let mut result = get(server, &item.host, &item.target, item.playlist).await;
        let bytes = result.as_ref().map_or(0, |f| f.bytes);
        let stored = result.as_ref().is_ok_and(|f| f.stored);
        let mut pinned_keys = Vec::new();
        if result.is_ok() {
            // Verify: the store holds it now (an answer the cache would not store,
            // `no-store` or `private`, or could not store, is a failure of the job);
            // for a pinned job, it is pinned.
            let read_at = Instant::now();
            loop {
                let held = item.held(&self.px);
                let ok = if pinned && held {
                    pinned_keys = item.pin(&self.px);
                    !pinned_keys.is_empty() && !item.slice_pending(&self.px, &pinned_keys)
                } else {
                    held
                };
                if ok {
                    break;
                }
                let waited = read_at.elapsed();
                if waited >= PUBLISHED_WITHIN || (!held && waited >= STORED_WITHIN) {
                    tracing::debug!(target = %item.target, "fill: a 200 the store does not hold");
                    result = Err(if self.no_space(bytes) {
                        "no space".into()
                    } else if self.refusals() != refusals || self.px.store.is_lent() {
                        STORE_BUSY.into()
                    } else if stored {
                        DROPPED.into()
                    } else {
                        "not stored".into()
                    });
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        if let Some(k) = intent {
            self.px.store.pin_on_write_done(k);
        }
        self.in_flight.fetch_sub(1, Relaxed);
        self.global
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .settle(global_rate, expected, bytes);
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let mut totals = self.totals.lock().unwrap_or_else(PoisonError::into_inner);
        totals.bytes += bytes;
        if let (Some(k), Err(_)) = (intent, &result) {
            // This request asked for the key to be written pinned and then failed: a
            // write of it published pinned before it gave up (another client's, or the
            // one it caused, going on without it) is held by no job. Unpinned unless a
            // job pinned it; one published after is not pinned (`pin_on_write_done`).
            self.unpin_unclaimed(&jobs, &std::iter::once(k.clone()).collect());
        }
        let Some(job) = jobs.get_mut(&name).filter(|j| j.generation == generation) else {
            // The job was deleted or replaced meanwhile: what this answer pinned has
            // no job to unpin it later.
            let orphans = pinned_keys.into_iter().collect();
            self.unpin_unclaimed(&jobs, &orphans);
            return;
        };
        job.in_flight -= 1;
        job.bucket
            .settle(job.spec.rate_bytes_per_s, expected, bytes);
        job.counters.bytes += bytes;
        if bytes > 0 {
            job.fetched += 1;
        }
        job.recent.push_back((Instant::now(), bytes, 1));
        while job.recent.len() > RECENT {
            job.recent.pop_front();
        }
        let mut rec = String::new();
        for k in &pinned_keys {
            rec.push_str(&record::pinned(k));
        }
        job.pinned_keys.extend(pinned_keys);
        match result {
            Ok(f) => {
                // A playlist or MPD that cannot be read is this object's failure (it
                // was fetched, but the job cannot go on from it).
                let listing = f.body.as_deref().map(|b| plan::listing(b, &item));
                if let Some(Err(reason)) = &listing {
                    if item.replay {
                        // Counted when it was first read.
                        rec.push_str(&record::retried(bytes));
                    } else {
                        count_failure(job, &mut totals, reason);
                        rec.push_str(&record::failed(bytes, Some(&key), reason));
                    }
                    self.record(job, &rec);
                    return;
                }
                if item.replay {
                    rec.push_str(&record::retried(bytes));
                } else if present {
                    job.counters.skipped_present += 1;
                    totals.skipped_present += 1;
                    rec.push_str(&record::skipped(bytes, &key));
                } else {
                    job.counters.done += 1;
                    totals.done += 1;
                    rec.push_str(&record::done(bytes, &key));
                }
                let uris = listing.and_then(Result::ok).unwrap_or_default();
                // Room left under `[fill] max_urls_per_job` (segments past it are
                // counted failed, not planned).
                let over = job
                    .counters
                    .failed_reasons
                    .get(OVER_MAX)
                    .copied()
                    .unwrap_or(0);
                let max = self.max_urls.load(Relaxed) as u64;
                let mut room = max.saturating_sub(job.counters.planned - over);
                if !item.replay && !uris.is_empty() {
                    job.counters.planned += uris.len() as u64;
                    totals.planned += uris.len() as u64;
                    rec.push_str(&record::planned(uris.len() as u64));
                }
                for uri in uris {
                    match plan::child(&self.px, &item, &uri) {
                        Ok(mut child) => {
                            child.playlist = is_playlist(&child.target);
                            if item.replay {
                                // Planned (and counted) when first read: what settled
                                // since is not planned again; a playlist is read again.
                                if job.settled.contains(&child.key(&self.px).0[..]) {
                                    if !child.playlist {
                                        continue;
                                    }
                                    child.replay = true;
                                }
                            } else if room == 0 {
                                // With its key: settled, so a restart does not plan it.
                                count_failure(job, &mut totals, OVER_MAX);
                                let k = child.key(&self.px).0;
                                rec.push_str(&record::failed(0, Some(&k), OVER_MAX));
                                continue;
                            } else {
                                room -= 1;
                            }
                            job.todo.push_back(child);
                        }
                        Err(reason) if !item.replay => {
                            tracing::debug!(job = %name, %reason, "playlist entry not followed");
                            count_failure(job, &mut totals, "playlist entry not followed");
                            rec.push_str(&record::failed(0, None, "playlist entry not followed"));
                        }
                        Err(_) => {}
                    }
                }
            }
            Err(reason) => {
                item.tries += 1;
                if retryable(&reason) && item.tries <= retries && !job.state.finished() {
                    let due = Instant::now() + backoff(item.tries);
                    tracing::debug!(job = %name, target = %item.target, %reason, tries = item.tries, "fill object retried later");
                    job.waiting_seq += 1;
                    job.waiting.insert((due, job.waiting_seq), item);
                    rec.push_str(&record::retried(bytes));
                } else if item.replay {
                    // Counted when it was first read; its unsettled segments are lost.
                    tracing::debug!(job = %name, target = %item.target, %reason, "fill playlist not read again");
                    rec.push_str(&record::retried(bytes));
                } else {
                    tracing::debug!(job = %name, target = %item.target, %reason, "fill object failed");
                    count_failure(job, &mut totals, &reason);
                    rec.push_str(&record::failed(bytes, Some(&key), &reason));
                }
            }
        }
        self.record(job, &rec);
    }
}

/// The failure reason of a playlist's segment past `[fill] max_urls_per_job`.
const OVER_MAX: &str = "over max_urls_per_job";

impl Fills {
    /// Whether pinned objects leave no room for `bytes` more: what is pinned cannot be
    /// evicted, and the store admits a write only within its capacity, so no later try
    /// can store it while the pins stay. (`bytes` is the body alone, less than the
    /// object's charge, so an object that would fit is never called one that cannot.)
    fn no_space(&self, bytes: u64) -> bool {
        let capacity: u64 = self.px.store.stats().iter().map(|d| d.capacity_bytes).sum();
        self.px.store.pinned_bytes().saturating_add(bytes) > capacity
    }

    /// Writes the store has refused so far for want of room or for a publish backlog,
    /// all disks: passing conditions (eviction makes room, the backlog drains).
    fn refusals(&self) -> u64 {
        self.px
            .store
            .stats()
            .iter()
            .map(|d| d.admissions_refused + d.behind_refused)
            .sum()
    }
}

/// The reason of a 200 the store refused for a passing reason (see `Fills::refusals`;
/// or the store was lent to the next process of an upgrade).
const STORE_BUSY: &str = "store busy";

/// The reason of a 200 the server began storing (`Cache-Status: ...; stored`) that the
/// store no longer held when checked: evicted at once (a filesystem short of space
/// makes the store evict ahead of its watermarks), purged, or a write that failed at
/// its end.
const DROPPED: &str = "dropped";

/// Whether a failure may go another way on another try: the origin's or the server's
/// passing trouble (`5xx`; `408` and `429`, which ask for a later try), a timeout, a
/// connection that failed or was cut, a store busy, a stored answer dropped. Not:
/// `404`, `410` and every other status (the origin said what it has), a response the
/// cache may not store, pins that leave no room, a response that is not HTTP, a
/// playlist that cannot be read.
fn retryable(reason: &str) -> bool {
    if let Some(code) = reason.strip_prefix("status ") {
        return code
            .parse::<u16>()
            .is_ok_and(|c| (500..600).contains(&c) || c == 408 || c == 429);
    }
    matches!(
        reason,
        "timeout" | "connect" | "connection lost" | "truncated" | STORE_BUSY | DROPPED
    )
}

/// Wait before retry number `tries` (1 for the first): 1 s, 2 s, 4 s ... at most
/// [`RETRY_MAX`].
fn backoff(tries: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1u32 << tries.saturating_sub(1).min(16))
        .min(RETRY_MAX)
}

fn is_playlist(target: &str) -> bool {
    let path = target.split('?').next().unwrap_or("");
    linerate_http::hls::is_playlist_path(path.as_bytes())
}

fn count_failure(job: &mut super::Job, totals: &mut super::Counters, reason: &str) {
    job.counters.failed += 1;
    *job.counters
        .failed_reasons
        .entry(reason.to_owned())
        .or_insert(0) += 1;
    totals.failed += 1;
    *totals.failed_reasons.entry(reason.to_owned()).or_insert(0) += 1;
}

/// GET `target` from the server at `server` with `Host: host`, reading the whole body
/// (kept when `keep`). `Err`: the failure's reason.
async fn get(server: SocketAddr, host: &str, target: &str, keep: bool) -> Result<Fetched, String> {
    let mut s = match tokio::time::timeout(IDLE, TcpStream::connect(server)).await {
        Ok(Ok(s)) => s,
        Ok(Err(_)) => return Err("connect".into()),
        Err(_) => return Err("timeout".into()),
    };
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: linerate-fill\r\nConnection: close\r\n\r\n"
    );
    s.write_all(request.as_bytes())
        .await
        .map_err(|_| "connection lost".to_owned())?;
    let mut buf = Vec::with_capacity(16 * 1024);
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err("bad response".into());
        }
        if read_some(&mut s, &mut buf).await? == 0 {
            return Err("truncated".into());
        }
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| "bad response".to_owned())?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| "bad response".to_owned())?;
    let mut length = None;
    let mut chunked = false;
    let mut stored = false;
    for l in lines {
        if let Some((n, v)) = l.split_once(':') {
            if n.eq_ignore_ascii_case("cache-status") {
                // RFC 9211: `stored` is a parameter of a cache's member.
                stored |= v.split([';', ',']).any(|p| p.trim() == "stored");
            } else if n.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse::<u64>().ok();
            } else if n.eq_ignore_ascii_case("transfer-encoding") {
                chunked = v.to_ascii_lowercase().contains("chunked");
            }
        }
    }
    if status != 200 {
        return Err(format!("status {status}"));
    }
    let mut rest = buf.split_off(head_end);
    if chunked {
        let (bytes, body) = read_chunked(&mut s, rest, keep).await?;
        return Ok(Fetched {
            bytes,
            body: keep.then_some(body),
            stored,
        });
    }
    let Some(length) = length else {
        return Err("unframed".into());
    };
    let mut body = if keep { rest.clone() } else { Vec::new() };
    let mut got = rest.len() as u64;
    let mut chunk = vec![0u8; 64 * 1024];
    while got < length {
        let n = match tokio::time::timeout(IDLE, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Err("truncated".into()),
            Ok(Ok(n)) => n,
            Err(_) => return Err("timeout".into()),
        };
        got += n as u64;
        if keep {
            if body.len() + n > MAX_LISTING {
                return Err("manifest too large".into());
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    rest.clear();
    if got != length {
        return Err("bad response".into());
    }
    Ok(Fetched {
        bytes: got,
        body: keep.then_some(body),
        stored,
    })
}

async fn read_some(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<usize, String> {
    buf.reserve(16 * 1024);
    match tokio::time::timeout(IDLE, s.read_buf(buf)).await {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(_)) => Err("truncated".into()),
        Err(_) => Err("timeout".into()),
    }
}

/// A chunked body (RFC 9112 §7.1), read to its last chunk; trailers are skipped.
async fn read_chunked(
    s: &mut TcpStream,
    mut buf: Vec<u8>,
    keep: bool,
) -> Result<(u64, Vec<u8>), String> {
    let mut body = Vec::new();
    let mut bytes = 0u64;
    let mut at = 0;
    loop {
        // A size line.
        let line_end = loop {
            if let Some(i) = buf[at..].windows(2).position(|w| w == b"\r\n") {
                break at + i;
            }
            if buf.len() - at > 1024 {
                return Err("bad response".into());
            }
            if read_some(s, &mut buf).await? == 0 {
                return Err("truncated".into());
            }
        };
        let line =
            std::str::from_utf8(&buf[at..line_end]).map_err(|_| "bad response".to_owned())?;
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| "bad response".to_owned())?;
        at = line_end + 2;
        if size == 0 {
            return Ok((bytes, body));
        }
        while buf.len() < at + size + 2 {
            if read_some(s, &mut buf).await? == 0 {
                return Err("truncated".into());
            }
        }
        bytes += size as u64;
        if keep {
            if body.len() + size > MAX_LISTING {
                return Err("manifest too large".into());
            }
            body.extend_from_slice(&buf[at..at + size]);
        }
        at += size + 2;
        if at > 1 << 20 {
            buf.drain(..at);
            at = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_passing_failures_are_retried() {
        for r in [
            "status 500",
            "status 502",
            "status 503",
            "status 504",
            "status 408",
            "status 429",
            "timeout",
            "connect",
            "connection lost",
            "truncated",
            STORE_BUSY,
            DROPPED,
        ] {
            assert!(retryable(r), "{r}");
        }
        for r in [
            "status 404",
            "status 410",
            "status 403",
            "status 301",
            "status 206",
            "no space",
            "not stored",
            "bad response",
            "unframed",
            "manifest too large",
        ] {
            assert!(!retryable(r), "{r}");
        }
    }

    #[test]
    fn backoff_doubles_and_is_bounded() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(7), RETRY_MAX);
        assert_eq!(backoff(u32::MAX), RETRY_MAX);
    }
}
