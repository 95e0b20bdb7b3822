//! Purges across a cluster (`[cluster]`): a purge on any node reaches every node.
//!
//! - The node that takes `POST /purge` on its admin API (the issuer) applies it, gives it
//!   a generation (unique per issuer: `max(last + 1, unix ms)`, so a node that lost its
//!   log still never reuses one), writes it to its purge log, and sends it to every
//!   other node of the membership in force (`POST /_linerate/purge?...` on the peer's
//!   data listener, signed like every peer request: `Linerate-Peer` with the cluster
//!   secret's MAC over the method and the target, which carries the whole purge).
//!   Each peer is tried [`ATTEMPTS`] times; the answer lists the nodes that applied it
//!   and those that have not (with why).
//! - Every node logs every purge it applied (its own and its peers'), bounded by
//!   [`LOG_MAX_ENTRIES`] and [`LOG_MAX_AGE`], in `purge-log.json` on the first disk.
//! - Catch-up: at start (before the listeners serve) and every [`SYNC_INTERVAL`] after,
//!   a node reads each peer's log (`GET /_linerate/purge-log?from=N`, signed) and applies
//!   every purge it has not applied. A node that was away longer than a peer's log
//!   reaches back (the peer's horizon: the age bound, or the newest entry it dropped for
//!   count) cannot know what it missed: it drops every object it holds (all were stored
//!   before it went away, so before the horizon), the safe answer for takedowns.
//!
//! Not here: what a purge removes (`ProxyShared::purge_url`, `purge_prefix`), the MAC
//! (`cluster::auth`), the admin API's parsing of `/purge` (`admin::api`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::admin::control::{Control, RunState};
use crate::cluster::{auth, Membership};
use crate::proxy::ProxyShared;

/// The data listener's path of a peer's purge (reserved when `[cluster]` is set).
pub(crate) const PEER_PURGE_PATH: &str = "/_linerate/purge";
/// The data listener's path of a node's purge log, read by its peers.
pub(crate) const PEER_LOG_PATH: &str = "/_linerate/purge-log";
/// What every reserved path starts with.
const RESERVED: &[u8] = b"/_linerate/";
/// Most purges a log keeps (the oldest go first). 10 000 entries are about 2 MB of
/// JSON, read whole by a peer that restarted.
pub(crate) const LOG_MAX_ENTRIES: usize = 10_000;
/// How long a purge stays in the log: a week covers a node down over a weekend.
pub(crate) const LOG_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Tries per peer for one purge (the first and two retries).
pub(crate) const ATTEMPTS: u32 = 3;
/// Pauses before the retries.
const RETRY_PAUSES: [Duration; 2] = [Duration::from_millis(200), Duration::from_millis(800)];
/// How long a soft purge waits for a write of its object in flight to be published.
const SOFT_WAIT: Duration = Duration::from_secs(5);
/// How often a node reads its peers' logs (catch-up after a partition).
pub(crate) const SYNC_INTERVAL: Duration = Duration::from_secs(5);
/// The log file, on the first disk.
const LOG_FILE: &str = "purge-log.json";
/// The time this node last ran, written every [`SYNC_INTERVAL`] (decimal Unix ms).
const ALIVE_FILE: &str = "purge-alive";
/// Largest answer read from a peer.
const MAX_PEER_ANSWER: usize = 16 * 1024 * 1024;

/// What a purge names.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    /// One URL (its variants and slices).
    Url,
    /// Every URL starting with the key.
    Prefix,
    /// Every object tagged with the key (a value of `[cache] tag_header`).
    Tag,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Url => "url",
            Kind::Prefix => "prefix",
            Kind::Tag => "tag",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        match s {
            "url" => Some(Kind::Url),
            "prefix" => Some(Kind::Prefix),
            "tag" => Some(Kind::Tag),
            _ => None,
        }
    }
}

/// One purge as logged and sent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The node whose admin API took it.
    pub(crate) issuer: String,
    /// Its generation, unique per issuer.
    pub(crate) generation: u64,
    /// When it was issued, Unix ms.
    pub(crate) at_ms: u64,
    pub(crate) kind: Kind,
    /// The normalised key (or key prefix), hex.
    pub(crate) key: String,
    /// Mark stale (revalidate on next use) instead of removing.
    #[serde(default)]
    pub(crate) soft: bool,
    /// Where it sits in this node's log (peers read from a position on).
    #[serde(default)]
    pub(crate) pos: u64,
}

impl Entry {
    /// The key's bytes (`None`: not hex, a corrupt or forged entry).
    fn key_bytes(&self) -> Option<Vec<u8>> {
        hex_decode(&self.key)
    }
}

/// The log file's content.
#[derive(Serialize, Deserialize, Default)]
struct Saved {
    /// The last generation this node issued.
    last_generation: u64,
    /// The position the next entry gets.
    next_pos: u64,
    /// Entries issued before this may have been dropped (Unix ms).
    dropped_before_ms: u64,
    entries: VecDeque<Entry>,
}

/// What a peer's log answer holds.
#[derive(Serialize, Deserialize)]
struct LogAnswer {
    /// Purges issued before this (Unix ms) may be missing from `entries`.
    horizon_ms: u64,
    /// The position to ask from next time.
    next: u64,
    entries: Vec<Entry>,
}

struct State {
    saved: Saved,
    /// (issuer, generation) of every entry in `saved.entries`.
    seen: HashSet<(String, u64)>,
    /// Per peer name: the position of its log to read from next (in memory: a restart
    /// reads every peer's log whole).
    read_from: HashMap<String, u64>,
    /// When this node last ran, as known at start (then now, after each sync).
    alive_ms: u64,
}

/// This node's purge log.
pub(crate) struct PurgeLog {
    dir: PathBuf,
    state: Mutex<State>,
}

fn now_ms() -> u64 {
    crate::proxy::now_ms()
}

impl PurgeLog {
    /// Load the log from `dir` (the first disk). A missing file is an empty log; an
    /// unreadable one too, said in the log (its purges are read again from the peers).
    pub(crate) fn open(dir: &Path) -> PurgeLog {
        let path = dir.join(LOG_FILE);
        let saved = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<Saved>(&bytes).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "purge log unreadable; starting an empty one (peers' logs are read again)");
                Saved::default()
            }),
            Err(_) => Saved::default(),
        };
        // No record of the last run (a node new to cluster purges): taken as current.
        let alive_ms = std::fs::read_to_string(dir.join(ALIVE_FILE))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(now_ms);
        let seen = saved
            .entries
            .iter()
            .map(|e| (e.issuer.clone(), e.generation))
            .collect();
        PurgeLog {
            dir: dir.to_path_buf(),
            state: Mutex::new(State {
                saved,
                seen,
                read_from: HashMap::new(),
                alive_ms,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new purge issued by this node (`issuer`), logged.
    pub(crate) fn issue(&self, issuer: &str, kind: Kind, key: &[u8], soft: bool) -> Entry {
        let mut st = self.lock();
        let generation = (st.saved.last_generation + 1).max(now_ms());
        st.saved.last_generation = generation;
        let e = Entry {
            issuer: issuer.to_string(),
            generation,
            at_ms: now_ms(),
            kind,
            key: hex_encode(key),
            soft,
            pos: 0,
        };
        self.append(&mut st, e.clone());
        self.save(&st.saved);
        e
    }

    /// Whether `e` is yet to be applied here: not logged, and not older than what this
    /// log may have dropped (a purge this node applied and forgot is not applied again).
    fn is_new(&self, e: &Entry) -> bool {
        let st = self.lock();
        !st.seen.contains(&(e.issuer.clone(), e.generation)) && e.at_ms >= horizon(&st.saved)
    }

    /// Log `e` (applied here), unless it is there already; written to disk when `save`
    /// (a catch-up of many entries writes once, at its end: [`PurgeLog::flush`]).
    fn record(&self, self_name: &str, e: Entry, save: bool) {
        let mut st = self.lock();
        if st.seen.contains(&(e.issuer.clone(), e.generation)) {
            return;
        }
        if e.issuer == self_name && e.generation > st.saved.last_generation {
            // Its own purge, from a peer's log: this node lost its log.
            st.saved.last_generation = e.generation;
        }
        self.append(&mut st, e);
        if save {
            self.save(&st.saved);
        }
    }

    /// Write the log now.
    fn flush(&self) {
        let st = self.lock();
        self.save(&st.saved);
    }

    /// Add `e` to the log in memory (bounded by age and count).
    fn append(&self, st: &mut State, mut e: Entry) {
        e.pos = st.saved.next_pos;
        st.saved.next_pos += 1;
        st.seen.insert((e.issuer.clone(), e.generation));
        st.saved.entries.push_back(e);
        // Bounded by age and count; what goes moves the horizon.
        let cutoff = now_ms().saturating_sub(LOG_MAX_AGE.as_millis() as u64);
        while let Some(first) = st.saved.entries.front() {
            if st.saved.entries.len() <= LOG_MAX_ENTRIES && first.at_ms >= cutoff {
                break;
            }
            if let Some(gone) = st.saved.entries.pop_front() {
                st.saved.dropped_before_ms = st.saved.dropped_before_ms.max(gone.at_ms + 1);
                st.seen.remove(&(gone.issuer, gone.generation));
            }
        }
    }

    /// Write the log (a temporary file renamed over it). A failure is logged: the purge
    /// was applied, and peers still hold it.
    fn save(&self, saved: &Saved) {
        let path = self.dir.join(LOG_FILE);
        let tmp = self.dir.join(format!("{LOG_FILE}.tmp"));
        let written = serde_json::to_vec(saved)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "purge log not written");
        }
    }

    /// The log from position `from` on, as a peer reads it (JSON).
    fn answer(&self, from: u64) -> String {
        let st = self.lock();
        let a = LogAnswer {
            horizon_ms: horizon(&st.saved),
            next: st.saved.next_pos,
            entries: st
                .saved
                .entries
                .iter()
                .filter(|e| e.pos >= from)
                .cloned()
                .collect(),
        };
        serde_json::to_string(&a).unwrap_or_default()
    }

    /// Note that this node runs now (its catch-up is current).
    fn touch_alive(&self) {
        let now = now_ms();
        self.lock().alive_ms = now;
        let _ = std::fs::write(self.dir.join(ALIVE_FILE), format!("{now}\n"));
    }
}

/// Purges issued before this may be missing from the log: the age bound, or the newest
/// entry dropped for count.
fn horizon(saved: &Saved) -> u64 {
    saved
        .dropped_before_ms
        .max(now_ms().saturating_sub(LOG_MAX_AGE.as_millis() as u64))
}

/// Apply `e` to this node's store. Blocking (journal writes). Returns the objects removed.
pub(crate) fn apply(px: &ProxyShared, e: &Entry) -> u64 {
    let Some(key) = e.key_bytes() else { return 0 };
    if e.soft {
        return match e.kind {
            Kind::Url => soft_url(px, &key),
            Kind::Tag => soft_tag(px, &key),
            // Refused where it is issued; a forged one does nothing.
            Kind::Prefix => 0,
        };
    }
    match e.kind {
        Kind::Url => px.purge_url(&key),
        Kind::Prefix => px.purge_prefix(&key),
        Kind::Tag => apply_tag(px, &key),
    }
}

/// Most (tag, key) pairs the tag index holds; past it, the index is rebuilt from the
/// store (pairs of evicted objects go).
const MAX_TAG_PAIRS: usize = 4_000_000;

/// The tag index: per tag (a value of `[cache] tag_header`), the keys stored with it.
/// In memory: noted when an object is written, rebuilt from the objects' stored fields
/// at start (one header read per object, in the background). Costs about the key's
/// and the tag's bytes plus ~100 bytes per (tag, key) pair. A key stays under its tags
/// after it is evicted until a purge of the tag (a no-op for it) or a rebuild.
pub(crate) struct Tags {
    /// The field name, lower case.
    field: Vec<u8>,
    map: Mutex<TagMap>,
    ready: std::sync::atomic::AtomicBool,
    /// Held by the one rebuild running.
    rebuilding: Mutex<()>,
    /// Pairs past which the index is rebuilt ([`MAX_TAG_PAIRS`], or twice the live
    /// pairs the last rebuild found).
    rebuild_above: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct TagMap {
    by_tag: HashMap<Vec<u8>, HashSet<Box<[u8]>>>,
    pairs: usize,
}

impl Tags {
    pub(crate) fn new(field: &str) -> Tags {
        Tags {
            field: field.to_ascii_lowercase().into_bytes(),
            map: Mutex::new(TagMap::default()),
            ready: std::sync::atomic::AtomicBool::new(false),
            rebuilding: Mutex::new(()),
            rebuild_above: std::sync::atomic::AtomicUsize::new(MAX_TAG_PAIRS),
        }
    }

    /// The tags of a stored response (its fields): each value of the field, split on
    /// spaces and tabs.
    pub(crate) fn of<'m>(&self, fields: &'m [(Vec<u8>, Vec<u8>)]) -> Vec<&'m [u8]> {
        fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(&self.field))
            .flat_map(|(_, v)| v.split(|b| *b == b' ' || *b == b'\t'))
            .filter(|t| !t.is_empty())
            .collect()
    }

    /// Note that `key` is stored with response fields `fields`.
    pub(crate) fn note(&self, key: &[u8], fields: &[(Vec<u8>, Vec<u8>)]) {
        let tags = self.of(fields);
        if tags.is_empty() {
            return;
        }
        let mut m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        for t in tags {
            if m.by_tag.entry(t.to_vec()).or_default().insert(key.into()) {
                m.pairs += 1;
            }
        }
        if m.pairs
            > self
                .rebuild_above
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            // Rebuilt by the purge thread (see `start`).
            self.ready
                .store(false, std::sync::atomic::Ordering::Release);
        }
    }

    /// Remove and return the keys under `tag`.
    fn take(&self, tag: &[u8]) -> Vec<Box<[u8]>> {
        let mut m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let keys: Vec<Box<[u8]>> = m.by_tag.remove(tag).into_iter().flatten().collect();
        m.pairs -= keys.len().min(m.pairs);
        keys
    }

    /// The keys under `tag` (left there).
    fn keys(&self, tag: &[u8]) -> Vec<Box<[u8]>> {
        let m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        m.by_tag.get(tag).into_iter().flatten().cloned().collect()
    }

    /// Whether the index covers the store (its rebuild at start is done).
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The index, rebuilt first unless it covers the store (at start, the purge
    /// thread's rebuild may not have run yet: a purge by tag waits for it, or runs it).
    pub(crate) fn ensure_ready(&self, store: &linerate_cache::Store) -> &Tags {
        let _one = self
            .rebuilding
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !self.is_ready() {
            self.rebuild(store);
        }
        self
    }

    /// Rebuild from the store: every stored object's fields, read once. Blocking; run
    /// through [`Tags::ensure_ready`].
    fn rebuild(&self, store: &linerate_cache::Store) {
        store.wait_loaded(Duration::from_secs(3600));
        let started = Instant::now();
        let keys = store.keys();
        let mut fresh = TagMap::default();
        for k in &keys {
            if let linerate_cache::Lookup::Hit(h) = store.peek(k) {
                for t in self.of(&h.meta.headers) {
                    if fresh
                        .by_tag
                        .entry(t.to_vec())
                        .or_default()
                        .insert(k.clone())
                    {
                        fresh.pairs += 1;
                    }
                }
            }
        }
        let mut m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        // Keys noted before that the store still holds (written while this ran, or
        // still being written) stay; the others (evicted, purged) go.
        for (t, ks) in std::mem::take(&mut m.by_tag) {
            for k in ks.into_iter().filter(|k| store.contains(k)) {
                if fresh.by_tag.entry(t.clone()).or_default().insert(k) {
                    fresh.pairs += 1;
                }
            }
        }
        *m = fresh;
        // Live pairs past the bound: the next rebuild waits until they double.
        self.rebuild_above.store(
            MAX_TAG_PAIRS.max(m.pairs.saturating_mul(2)),
            std::sync::atomic::Ordering::Relaxed,
        );
        tracing::info!(
            objects = keys.len(),
            tags = m.by_tag.len(),
            pairs = m.pairs,
            took_ms = started.elapsed().as_millis() as u64,
            "tag index rebuilt from the store"
        );
        self.ready.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Mark the stored object `key` stale: its exchange times are set to the epoch, so
/// its age is past every freshness lifetime and every stale-while-revalidate or
/// stale-if-error window, and the next request revalidates it with the origin
/// (`If-None-Match` / `If-Modified-Since` from its validators); a `304` makes it fresh
/// again with its body kept. A Vary stub is left alone (its variants are marked).
/// Blocking; costs a rewrite of the object (`Store::update_meta`). Whether it was
/// marked.
fn soft_one(px: &ProxyShared, key: &[u8]) -> bool {
    // A write of it that is not published yet (its body may be complete, waiting for
    // the disk's publisher) is waited for, up to [`SOFT_WAIT`]: marking it then is
    // what the purge asks.
    let until = Instant::now() + SOFT_WAIT;
    let h = loop {
        match px.store.peek(key) {
            linerate_cache::Lookup::Hit(h) => break h,
            _ if px.store.contains(key) && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => return false,
        }
    };
    if h.meta.header(crate::proxy::VARY_STUB).is_some() {
        return false;
    }
    let mut meta = (*h.meta).clone();
    meta.request_time_ms = 1;
    meta.response_time_ms = 1;
    px.store.update_meta(key, meta).unwrap_or(false)
}

/// Soft purge of a URL: the object, its variants and slices (found by walking the
/// index, like a prefix purge). Blocking. How many were marked.
pub(crate) fn soft_url(px: &ProxyShared, primary: &[u8]) -> u64 {
    let under = linerate_http::cache::key::descendants(primary);
    let mut n = u64::from(soft_one(px, primary));
    for k in px.store.keys().iter().filter(|k| k.starts_with(&under)) {
        n += u64::from(soft_one(px, k));
    }
    n
}

/// Soft purge of a tag: every object under it stays indexed under it. Blocking.
pub(crate) fn soft_tag(px: &ProxyShared, tag: &[u8]) -> u64 {
    let keys = px.tags.ensure_ready(&px.store).keys(tag);
    keys.iter().map(|k| u64::from(soft_one(px, k))).sum()
}

/// Apply a purge taken by this node's admin API to this node. Blocking. How many
/// objects were removed (or marked, `soft`).
pub(crate) fn apply_local(px: &ProxyShared, kind: Kind, key: &[u8], soft: bool) -> u64 {
    match (kind, soft) {
        (Kind::Url, false) => px.purge_url(key),
        (Kind::Prefix, _) => px.purge_prefix(key),
        (Kind::Tag, false) => apply_tag(px, key),
        (Kind::Url, true) => soft_url(px, key),
        (Kind::Tag, true) => soft_tag(px, key),
    }
}

/// Purge every object tagged `tag` on this node. Blocking.
pub(crate) fn apply_tag(px: &ProxyShared, tag: &[u8]) -> u64 {
    px.tags
        .ensure_ready(&px.store)
        .take(tag)
        .iter()
        .map(|k| px.purge_url(k))
        .sum()
}

/// Apply `e` unless this node has; log it. Blocking. `Some(removed)` when applied now.
fn apply_new(
    px: &ProxyShared,
    log: &PurgeLog,
    self_name: &str,
    e: Entry,
    save: bool,
) -> Option<u64> {
    if !log.is_new(&e) {
        return None;
    }
    let removed = apply(px, &e);
    log.record(self_name, e, save);
    Some(removed)
}

/// One peer's outcome of a purge fan-out.
pub(crate) struct Outcome {
    pub(crate) node: String,
    /// `Ok`: the objects it removed (or marked); `Err`: why it has not applied it
    /// (after every try).
    pub(crate) result: Result<u64, String>,
}

/// Send `e` to every other node of `m`, each tried up to [`ATTEMPTS`] times, in
/// parallel. Blocking: at most about `ATTEMPTS × (connect + first byte timeout)` plus
/// the pauses.
pub(crate) fn fan_out(m: &Membership, e: &Entry) -> Vec<Outcome> {
    let target = format!(
        "{PEER_PURGE_PATH}?issuer={}&generation={}&at={}&kind={}&key={}&soft={}",
        e.issuer,
        e.generation,
        e.at_ms,
        e.kind.as_str(),
        e.key,
        u8::from(e.soft)
    );
    let peers: Vec<_> = m
        .opts
        .peers
        .iter()
        .filter(|p| p.name != m.opts.self_name)
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = peers
            .iter()
            .map(|p| {
                let target = &target;
                s.spawn(move || {
                    let mut last = String::new();
                    for attempt in 0..ATTEMPTS {
                        if attempt > 0 {
                            std::thread::sleep(RETRY_PAUSES[(attempt as usize - 1).min(1)]);
                        }
                        match call(m, &p.name, p.address, "POST", target) {
                            Ok((200, body)) => {
                                // Only this answer is proof: a node of an older version
                                // relays the path to its origin, which may say 200 too.
                                let v = serde_json::from_slice::<serde_json::Value>(&body)
                                    .unwrap_or_default();
                                if v["applied"] == true {
                                    return Ok(v["removed"].as_u64().unwrap_or(0));
                                }
                                // Not retried: the same node answers the same way.
                                return Err(
                                    "answered 200 without applying it (a node without cluster purges?)"
                                        .to_string(),
                                );
                            }
                            Ok((status, body)) => {
                                last = format!(
                                    "answered {status}: {}",
                                    String::from_utf8_lossy(&body).trim()
                                );
                            }
                            Err(e) => last = e,
                        }
                    }
                    Err(last)
                })
            })
            .collect();
        peers
            .iter()
            .zip(handles)
            .map(|(p, h)| Outcome {
                node: p.name.clone(),
                result: h
                    .join()
                    .unwrap_or_else(|_| Err("sender panicked".to_string())),
            })
            .collect()
    })
}

/// One signed request to peer `name` at `address`; its status and body. Blocking.
fn call(
    m: &Membership,
    name: &str,
    address: std::net::SocketAddr,
    method: &str,
    target: &str,
) -> Result<(u16, Vec<u8>), String> {
    let host = address.to_string();
    let covered = auth::Covered::with_fields(
        method.as_bytes(),
        target.as_bytes(),
        Some(host.as_bytes()),
        &[],
    )
    .to(name);
    let signed = m.sign(&covered);
    let mut s = TcpStream::connect_timeout(&address, m.opts.connect_timeout)
        .map_err(|e| format!("connect: {e}"))?;
    let _ = s.set_read_timeout(Some(m.opts.first_byte_timeout));
    let _ = s.set_write_timeout(Some(m.opts.connect_timeout));
    let length = if method == "POST" {
        "Content-Length: 0\r\n"
    } else {
        ""
    };
    let req = format!(
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\n{}: {signed}\r\n{length}Connection: close\r\n\r\n",
        crate::clusteropts::HOP_HEADER
    );
    s.write_all(req.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > MAX_PEER_ANSWER {
                    return Err("answer too large".into());
                }
                if let Some(done) = complete(&buf) {
                    buf.truncate(done);
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    let head_end = find(&buf, b"\r\n\r\n").ok_or("no answer")?;
    let status = std::str::from_utf8(buf.get(9..12).unwrap_or(b""))
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("malformed answer")?;
    Ok((status, buf[head_end + 4..].to_vec()))
}

/// The length of a whole answer in `buf` (head and `Content-Length` body), once there.
fn complete(buf: &[u8]) -> Option<usize> {
    let end = find(buf, b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let len: usize = head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())
            .flatten()
    })?;
    (buf.len() >= end + len).then_some(end + len)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Read every peer's log and apply what this node has not. Blocking; peers in parallel.
fn sync_once(px: &ProxyShared, log: &PurgeLog) {
    let Some(cluster) = &px.cluster else { return };
    if px.store.is_lent() {
        // Handed to the next process of an upgrade, which keeps the log from now on.
        return;
    }
    let m = cluster.membership();
    let self_name = m.opts.self_name.clone();
    let peers: Vec<_> = m
        .opts
        .peers
        .iter()
        .filter(|p| p.name != self_name)
        .collect();
    let froms: Vec<u64> = {
        let st = log.lock();
        peers
            .iter()
            .map(|p| st.read_from.get(&p.name).copied().unwrap_or(0))
            .collect()
    };
    let answers: Vec<Result<(u16, Vec<u8>), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = peers
            .iter()
            .zip(&froms)
            .map(|(p, from)| {
                let m = &m;
                s.spawn(move || {
                    call(
                        m,
                        &p.name,
                        p.address,
                        "GET",
                        &format!("{PEER_LOG_PATH}?from={from}"),
                    )
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
            .collect()
    });
    let mut answered = false;
    for ((p, from), answer) in peers.iter().zip(froms).zip(answers) {
        let a = match answer {
            Ok((200, body)) => match serde_json::from_slice::<LogAnswer>(&body) {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(peer = %p.name, error = %e, "peer purge log unreadable");
                    continue;
                }
            },
            Ok((status, _)) => {
                tracing::debug!(peer = %p.name, status, "peer purge log refused");
                continue;
            }
            Err(e) => {
                tracing::debug!(peer = %p.name, error = %e, "peer purge log not read");
                continue;
            }
        };
        let alive = log.lock().alive_ms;
        if from == 0 && alive < a.horizon_ms {
            // Away longer than the peer's log reaches back: purges may be missing.
            let removed = px.purge_prefix(b"");
            tracing::warn!(
                peer = %p.name,
                away_since_ms = alive,
                horizon_ms = a.horizon_ms,
                removed,
                "this node was away longer than the peer's purge log reaches back: every cached object dropped"
            );
            log.lock().alive_ms = now_ms();
        }
        let mut applied = 0usize;
        for e in a.entries {
            if let Some(removed) = apply_new(px, log, &self_name, e.clone(), false) {
                applied += 1;
                tracing::info!(
                    peer = %p.name,
                    issuer = %e.issuer,
                    generation = e.generation,
                    kind = e.kind.as_str(),
                    removed,
                    "purge caught up from a peer's log"
                );
            }
        }
        // A log that went back (the peer lost it) is read whole next time.
        let next = if a.next < from { 0 } else { a.next };
        log.lock().read_from.insert(p.name.clone(), next);
        if applied > 0 {
            log.flush();
            tracing::info!(peer = %p.name, applied, "purge log caught up");
        }
        answered = true;
    }
    // Current only when a peer's log was read (or there is no peer): a node that
    // heard from none may be cut off, and must still compare its last run with the
    // horizon of the first log it reads.
    if answered || peers.is_empty() {
        log.touch_alive();
    }
}

/// Catch up from the peers once now (before the listeners serve), then every
/// [`SYNC_INTERVAL`] on a thread of its own until the server stops.
/// The thread also rebuilds the tag index (at start, and when it outgrew its bound).
pub(crate) fn start(px: Arc<ProxyShared>, control: Arc<Control>) -> std::io::Result<()> {
    let log = px.purges.clone();
    if let Some(log) = &log {
        sync_once(&px, log);
    }
    std::thread::Builder::new()
        .name("linerate-purge".into())
        .spawn(move || {
            let mut last = Instant::now();
            while control.run_state() != RunState::Stopping {
                if !px.tags.is_ready() {
                    px.tags.ensure_ready(&px.store);
                }
                std::thread::sleep(Duration::from_millis(100));
                if let Some(log) = log.as_ref().filter(|_| last.elapsed() >= SYNC_INTERVAL) {
                    sync_once(&px, log);
                    last = Instant::now();
                }
            }
        })
        .map(|_| ())
}

/// A request on the data listener for a reserved path (`/_linerate/...`, with
/// `[cluster]` only): a peer's purge, or a peer reading this node's log. `None`: not
/// one of these (the request goes on as any other).
pub(crate) async fn serve_peer(
    worker: &crate::context::Worker,
    px: &Arc<ProxyShared>,
    head: &linerate_http::RequestHead<'_>,
    from: Option<std::net::IpAddr>,
    persistence: linerate_http::Persistence,
) -> Option<crate::response::Response> {
    let (cluster, log) = (px.cluster.as_ref()?, px.purges.as_ref()?);
    if !head.target.starts_with(RESERVED) {
        return None;
    }
    let (path, query) = head.path_and_query()?;
    let query = std::str::from_utf8(query.strip_prefix(b"?").unwrap_or(query)).unwrap_or("");
    let answer = |status: u16, body: String| Some(json(worker, status, persistence, &body));
    let path = std::str::from_utf8(path).unwrap_or("");
    if path != PEER_PURGE_PATH && path != PEER_LOG_PATH {
        return answer(404, "{\"error\":\"no such peer path\"}\n".into());
    }
    if let Err(why) = cluster.is_peer_call(head, from) {
        tracing::warn!(
            from = %from.map_or_else(|| "-".to_string(), |a| a.to_string()),
            reason = why.as_str(),
            path,
            "peer purge call refused"
        );
        return answer(
            403,
            "{\"error\":\"peer calls need a valid Linerate-Peer field (signed with the cluster secret)\"}\n"
                .into(),
        );
    }
    let arg = |name: &str| {
        query.split('&').find_map(|p| {
            p.split_once('=')
                .filter(|(n, _)| *n == name)
                .map(|(_, v)| v)
        })
    };
    if path == PEER_LOG_PATH {
        if head.method_token != "GET" {
            return answer(405, "{\"error\":\"GET only\"}\n".into());
        }
        let from = arg("from").and_then(|v| v.parse().ok()).unwrap_or(0);
        return answer(200, log.answer(from));
    }
    if head.method_token != "POST" {
        return answer(405, "{\"error\":\"POST only\"}\n".into());
    }
    if px.store.is_lent() {
        return answer(
            503,
            "{\"error\":\"the store was handed to the next process of an upgrade\"}\n".into(),
        );
    }
    let entry = (|| {
        let e = Entry {
            issuer: arg("issuer")?.to_string(),
            generation: arg("generation")?.parse().ok()?,
            at_ms: arg("at")?.parse().ok()?,
            kind: Kind::parse(arg("kind")?)?,
            key: arg("key")?.to_string(),
            soft: match arg("soft") {
                None | Some("0") => false,
                Some("1") => true,
                Some(_) => return None,
            },
            pos: 0,
        };
        e.key_bytes().map(|_| e)
    })();
    let Some(e) = entry else {
        return answer(
            400,
            "{\"error\":\"a peer purge needs issuer, generation, at, kind (url or prefix) and key (hex)\"}\n".into(),
        );
    };
    let self_name = cluster.membership().opts.self_name.clone();
    let (shared, log) = (Arc::clone(px), Arc::clone(log));
    let issuer = e.issuer.clone();
    let generation = e.generation;
    let applied =
        tokio::task::spawn_blocking(move || apply_new(&shared, &log, &self_name, e, true))
            .await
            .ok()?;
    tracing::info!(
        %issuer,
        generation,
        removed = applied.unwrap_or(0),
        again = applied.is_none(),
        "purge from a peer applied"
    );
    answer(
        200,
        format!(
            "{{\"applied\":true,\"removed\":{}}}\n",
            applied.unwrap_or(0)
        ),
    )
}

/// A JSON answer on the data listener.
fn json(
    worker: &crate::context::Worker,
    status: u16,
    persistence: linerate_http::Persistence,
    body: &str,
) -> crate::response::Response {
    use linerate_http::{HeadWriter, Persistence, StatusCode};
    let status = match status {
        200 => StatusCode::Ok,
        400 => StatusCode::BadRequest,
        403 => StatusCode::Forbidden,
        404 => StatusCode::NotFound,
        405 => StatusCode::MethodNotAllowed,
        503 => StatusCode::ServiceUnavailable,
        n => StatusCode::Other(n),
    };
    let mut head = Vec::with_capacity(256 + body.len());
    let mut w = HeadWriter::new(&mut head, status);
    worker.date.with(|d| w.field("Date", d));
    w.field("Server", crate::response::SERVER);
    w.field("Content-Type", b"application/json");
    w.field("Cache-Control", b"no-store");
    w.field_u64("Content-Length", body.len() as u64);
    if matches!(persistence, Persistence::Close) {
        w.field("Connection", b"close");
    }
    w.finish();
    head.extend_from_slice(body.as_bytes());
    crate::response::Response {
        head,
        body: crate::response::Body::Empty,
        persistence,
        status,
        cache: crate::stats::CacheStatus::Local,
        refusal: None,
    }
}

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    /// Guards the log's bounds and idempotence: an entry is applied once, generations
    /// only grow, and the log survives a reopen.
    #[test]
    fn log_records_once_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let log = PurgeLog::open(dir.path());
        let a = log.issue("a", Kind::Url, b"http://h/x", false);
        let b = log.issue("a", Kind::Prefix, b"http://h/", false);
        assert!(b.generation > a.generation);
        assert!(!log.is_new(&a));
        let from_peer = Entry {
            issuer: "b".into(),
            generation: 7,
            at_ms: now_ms(),
            kind: Kind::Url,
            key: hex_encode(b"http://h/y"),
            soft: false,
            pos: 0,
        };
        assert!(log.is_new(&from_peer));
        log.record("a", from_peer.clone(), true);
        assert!(!log.is_new(&from_peer));
        let again = PurgeLog::open(dir.path());
        assert!(!again.is_new(&from_peer));
        let c = again.issue("a", Kind::Url, b"http://h/z", true);
        assert!(c.generation > b.generation);
        let ans: LogAnswer = serde_json::from_str(&again.answer(1)).unwrap();
        assert_eq!(ans.next, 4);
        assert_eq!(ans.entries.len(), 3);
        // Too old for the log: never applied again.
        let ancient = Entry {
            at_ms: 1,
            ..from_peer
        };
        assert!(!again.is_new(&Entry {
            generation: 99,
            ..ancient
        }));
        assert_eq!(
            hex_decode(&hex_encode(b"\x00\xffab")).unwrap(),
            b"\x00\xffab"
        );
        assert!(hex_decode("abc").is_none());
    }

    fn fields(v: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![
            (b"Content-Type".to_vec(), b"video/mp2t".to_vec()),
            (b"surrogate-KEY".to_vec(), v.as_bytes().to_vec()),
        ]
    }

    /// Guards the tag index: the field is found case-insensitively and split on runs
    /// of spaces and tabs; a purge takes a tag's keys once; a rebuild reads the stored
    /// objects' fields and drops keys the store no longer holds.
    #[test]
    fn tag_index_notes_takes_and_rebuilds() {
        let tags = Tags::new("Surrogate-Key");
        assert_eq!(
            tags.of(&fields(" a  b\tc ")),
            [&b"a"[..], &b"b"[..], &b"c"[..]]
        );
        tags.note(b"k1", &fields("a b"));
        tags.note(b"k2", &fields("b"));
        let mut b = tags.take(b"b");
        b.sort();
        assert_eq!(b, [b"k1".to_vec().into(), b"k2".to_vec().into()]);
        assert!(tags.take(b"b").is_empty());
        assert_eq!(tags.keys(b"a"), [Box::<[u8]>::from(&b"k1"[..])]);

        let dir = tempfile::tempdir().unwrap();
        let disk = linerate_cache::DiskConfig {
            name: "d0".into(),
            path: dir.path().join("d0"),
            max_bytes: 64 << 20,
        };
        let mut cfg = linerate_cache::StoreConfig::new(vec![disk]);
        cfg.durability = linerate_cache::Durability::NoSync;
        let store = linerate_cache::Store::open(cfg).unwrap();
        let meta = linerate_cache::ObjectMeta {
            status: 200,
            headers: fields("show"),
            ..Default::default()
        };
        let mut w = store.begin_write(b"stored", meta, Some(1)).unwrap();
        w.append(b"x").unwrap();
        w.finish().unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while !matches!(store.peek(b"stored"), linerate_cache::Lookup::Hit(_)) {
            assert!(Instant::now() < until, "never published");
            std::thread::sleep(Duration::from_millis(10));
        }
        let fresh = Tags::new("Surrogate-Key");
        fresh.note(b"evicted", &fields("show"));
        fresh.ensure_ready(&store);
        assert!(fresh.is_ready());
        assert_eq!(fresh.keys(b"show"), [Box::<[u8]>::from(&b"stored"[..])]);
    }
}
