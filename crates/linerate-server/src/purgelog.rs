//! The purge log and the tag index: what a node keeps about purges (the purges it
//! applied, which its peers read to catch up; the keys stored under each tag), with no
//! I/O beyond its own file and the store. Below `proxy` (whose shared state holds
//! them); the fan-out, the catch-up and the peers' calls, which use `proxy`, are in
//! `purge`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub(crate) const PEER_PURGE_PATH: &str = "/_linerate/purge";
/// The data listener's path of a node's purge log, read by its peers.
pub(crate) const PEER_LOG_PATH: &str = "/_linerate/purge-log";
/// What every reserved path starts with.
pub(crate) const RESERVED: &[u8] = b"/_linerate/";
/// Most purges a log keeps (the oldest go first). 10 000 entries are about 2 MB of
/// JSON, read whole by a peer that restarted.
pub(crate) const LOG_MAX_ENTRIES: usize = 10_000;
/// How long a purge stays in the log: a week covers a node down over a weekend.
pub(crate) const LOG_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Tries per peer for one purge (the first and two retries).
pub(crate) const ATTEMPTS: u32 = 3;
/// Pauses before the retries.
pub(crate) const RETRY_PAUSES: [Duration; 2] =
    [Duration::from_millis(200), Duration::from_millis(800)];
/// How long a soft purge waits for a write of its object in flight to be published.
pub(crate) const SOFT_WAIT: Duration = Duration::from_secs(5);
/// How often a node reads its peers' logs (catch-up after a partition).
pub(crate) const SYNC_INTERVAL: Duration = Duration::from_secs(5);
/// The log file, on the first disk.
const LOG_FILE: &str = "purge-log.json";
/// The time this node last ran, written every [`SYNC_INTERVAL`] (decimal Unix ms).
const ALIVE_FILE: &str = "purge-alive";
/// Largest answer read from a peer.
pub(crate) const MAX_PEER_ANSWER: usize = 16 * 1024 * 1024;

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

    pub(crate) fn parse(s: &str) -> Option<Kind> {
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
    pub(crate) fn key_bytes(&self) -> Option<Vec<u8>> {
        hex_decode(&self.key)
    }
}

/// The log file's content.
#[derive(Serialize, Deserialize, Default)]
pub(crate) struct Saved {
    /// The last generation this node issued.
    pub(crate) last_generation: u64,
    /// The position the next entry gets.
    pub(crate) next_pos: u64,
    /// Entries issued before this may have been dropped (Unix ms).
    pub(crate) dropped_before_ms: u64,
    pub(crate) entries: VecDeque<Entry>,
}

/// What a peer's log answer holds.
#[derive(Serialize, Deserialize)]
pub(crate) struct LogAnswer {
    /// Purges issued before this (Unix ms) may be missing from `entries`.
    pub(crate) horizon_ms: u64,
    /// The position to ask from next time.
    pub(crate) next: u64,
    pub(crate) entries: Vec<Entry>,
}

pub(crate) struct State {
    pub(crate) saved: Saved,
    /// (issuer, generation) of every entry in `saved.entries`.
    pub(crate) seen: HashSet<(String, u64)>,
    /// Per peer name: the position of its log to read from next (in memory: a restart
    /// reads every peer's log whole).
    pub(crate) read_from: HashMap<String, u64>,
    /// When this node last ran, as known at start (then now, after each sync).
    pub(crate) alive_ms: u64,
}

/// This node's purge log.
pub(crate) struct PurgeLog {
    dir: PathBuf,
    state: Mutex<State>,
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
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

    /// Whether `e` is yet to be applied here: not logged. One older than what this log
    /// may have dropped is applied (again, perhaps): a purge is idempotent, and the
    /// answer "applied" is a takedown's proof, so it is never given for a purge that
    /// was skipped.
    pub(crate) fn is_new(&self, e: &Entry) -> bool {
        let st = self.lock();
        !st.seen.contains(&(e.issuer.clone(), e.generation))
    }

    /// Log `e` (applied here), unless it is there already; written to disk when `save`
    /// (a catch-up of many entries writes once, at its end: [`PurgeLog::flush`]).
    pub(crate) fn record(&self, self_name: &str, e: Entry, save: bool) {
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
    pub(crate) fn flush(&self) {
        let st = self.lock();
        self.save(&st.saved);
    }

    /// Add `e` to the log in memory (bounded by age and count).
    pub(crate) fn append(&self, st: &mut State, mut e: Entry) {
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
    pub(crate) fn save(&self, saved: &Saved) {
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
    pub(crate) fn answer(&self, from: u64) -> String {
        let st = self.lock();
        let entries: Vec<Entry> = st
            .saved
            .entries
            .iter()
            .filter(|e| e.pos >= from)
            .take(ANSWER_MAX_ENTRIES)
            .cloned()
            .collect();
        // A page: the reader asks again from after its last entry (next sync).
        let next = match entries.last() {
            Some(last) if entries.len() == ANSWER_MAX_ENTRIES => last.pos + 1,
            _ => st.saved.next_pos,
        };
        let a = LogAnswer {
            horizon_ms: horizon(&st.saved),
            next,
            entries,
        };
        drop(st);
        serde_json::to_string(&a).unwrap_or_default()
    }

    /// Note that this node runs now (its catch-up is current).
    pub(crate) fn touch_alive(&self) {
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
/// Entries of the log one answer to a peer carries (a page; the peer reads on from
/// its last one at its next sync): with keys up to 8 KiB (16 KiB hex-encoded), about
/// 8 MiB, under the [`MAX_PEER_ANSWER`] a peer reads.
pub(crate) const ANSWER_MAX_ENTRIES: usize = 500;

/// Tags of one object the index takes (the first ones of its tag field); Fastly
/// documents a similar per-object limit for `Surrogate-Key`.
pub(crate) const MAX_TAGS_PER_OBJECT: usize = 64;
/// Longest tag indexed (bytes), as long as a tag `POST /purge?tag=` accepts.
pub(crate) const MAX_TAG_LEN: usize = 1024;

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
    /// At most [`MAX_TAGS_PER_OBJECT`] tags of at most [`MAX_TAG_LEN`] bytes (longer
    /// ones are not indexed): an origin's field cannot make one object cost the index
    /// more than about 64 copies of its key.
    pub(crate) fn of<'m>(&self, fields: &'m [(Vec<u8>, Vec<u8>)]) -> Vec<&'m [u8]> {
        fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(&self.field))
            .flat_map(|(_, v)| v.split(|b| *b == b' ' || *b == b'\t'))
            .filter(|t| !t.is_empty() && t.len() <= MAX_TAG_LEN)
            .take(MAX_TAGS_PER_OBJECT)
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
    pub(crate) fn take(&self, tag: &[u8]) -> Vec<Box<[u8]>> {
        let mut m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let keys: Vec<Box<[u8]>> = m.by_tag.remove(tag).into_iter().flatten().collect();
        m.pairs -= keys.len().min(m.pairs);
        keys
    }

    /// The keys under `tag` (left there).
    pub(crate) fn keys(&self, tag: &[u8]) -> Vec<Box<[u8]>> {
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
    pub(crate) fn rebuild(&self, store: &linerate_cache::Store) {
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

pub(crate) fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the tag index's bound per object: an origin's tag field yields at most
    /// [`MAX_TAGS_PER_OBJECT`] tags, none longer than [`MAX_TAG_LEN`].
    #[test]
    fn an_objects_tags_are_bounded() {
        let tags = Tags::new("Surrogate-Key");
        let many: Vec<u8> = (0..1000)
            .map(|i| format!("t{i}"))
            .collect::<Vec<_>>()
            .join(" ")
            .into_bytes();
        let long = vec![b'x'; MAX_TAG_LEN + 1];
        let fields = vec![(
            b"surrogate-key".to_vec(),
            [&long[..], b" ", &many[..]].concat(),
        )];
        let got = tags.of(&fields);
        assert_eq!(got.len(), MAX_TAGS_PER_OBJECT);
        assert_eq!(got[0], b"t0", "the over-long tag is skipped");
        assert!(got.iter().all(|t| t.len() <= MAX_TAG_LEN));
    }
}
