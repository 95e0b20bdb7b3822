//! The purge log and the tag index: what a node keeps about purges (the purges it
//! applied, which its peers read to catch up; the keys stored under each tag), with no
//! I/O beyond its own file and the store. Below `proxy` (whose shared state holds
//! them); the fan-out, the catch-up and the peers' calls, which use `proxy`, are in
//! `purge`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
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

/// Keys by tag.
type ByTag = HashMap<Vec<u8>, HashSet<Box<[u8]>>>;

#[derive(Default)]
struct TagMap {
    /// The pairs noted (since the rebuild running began, while one runs).
    by_tag: ByTag,
    /// While a rebuild runs, the pairs noted before it began: it checks them against
    /// the store without the lock (a lookup each, millions on a large cache), while
    /// purges by tag still find them here.
    before: Option<Arc<ByTag>>,
    /// While a rebuild runs, the tags taken (purged) since it began: their pairs in
    /// `before` are gone.
    taken: HashSet<Vec<u8>>,
    /// Pairs held, both maps (about: a pair in both counts twice until the rebuild).
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
        let mut keys = m.by_tag.remove(tag).unwrap_or_default();
        let mut removed = keys.len();
        if let Some(before) = m.before.clone() {
            if m.taken.insert(tag.to_vec()) {
                if let Some(old) = before.get(tag) {
                    removed += old.len();
                    keys.extend(old.iter().cloned());
                }
            }
        }
        m.pairs -= removed.min(m.pairs);
        keys.into_iter().collect()
    }

    /// The keys under `tag` (left there).
    pub(crate) fn keys(&self, tag: &[u8]) -> Vec<Box<[u8]>> {
        let m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let mut keys: HashSet<&Box<[u8]>> = m.by_tag.get(tag).into_iter().flatten().collect();
        if !m.taken.contains(tag) {
            keys.extend(m.before.iter().filter_map(|b| b.get(tag)).flatten());
        }
        keys.into_iter().cloned().collect()
    }

    /// Whether the index covers the store (its rebuild at start is done).
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The index, rebuilt first unless it covers the store (at start, the purge
    /// thread's rebuild may not have run yet: a purge by tag waits for it, or runs it).
    pub(crate) fn ensure_ready(&self, store: &impl Stored) -> &Tags {
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
    /// through [`Tags::ensure_ready`]. The store is read without the index's lock
    /// (workers note the tags of what they store meanwhile, purges by tag take them);
    /// the lock is held to set the pairs noted so far aside, and at the end to merge
    /// in what was noted and taken meanwhile.
    fn rebuild(&self, store: &impl Stored) {
        store.wait_loaded();
        let started = Instant::now();
        let before = {
            let mut m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            let before = Arc::new(std::mem::take(&mut m.by_tag));
            m.before = Some(Arc::clone(&before));
            m.taken.clear();
            before
        };
        let keys = store.keys();
        let mut fresh = ByTag::default();
        let mut pairs = 0;
        let mut add = |fresh: &mut ByTag, t: &[u8], k: &[u8]| {
            if fresh.entry(t.to_vec()).or_default().insert(k.into()) {
                pairs += 1;
            }
        };
        for k in &keys {
            if let Some(meta) = store.meta(k) {
                for t in self.of(&meta.headers) {
                    add(&mut fresh, t, k);
                }
            }
        }
        // Keys noted before that the store still holds (still being written when it
        // was listed, or written since) stay; the others (evicted, purged) go.
        for (t, ks) in before.iter() {
            for k in ks.iter().filter(|k| store.contains(k)) {
                add(&mut fresh, t, k);
            }
        }
        let mut m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        // A tag taken meanwhile: its pairs from before were purged (one stored again
        // since was noted again, below); an object the store held with it that was
        // never noted (stored before this process started) stays.
        for t in std::mem::take(&mut m.taken) {
            if let (Some(ks), Some(old)) = (fresh.get_mut(&t), before.get(&t)) {
                let n = ks.len();
                ks.retain(|k| !old.contains(k));
                pairs -= n - ks.len();
                if ks.is_empty() {
                    fresh.remove(&t);
                }
            }
        }
        // Noted meanwhile (a purge by tag since took its tag's out of here).
        for (t, ks) in std::mem::take(&mut m.by_tag) {
            let into = fresh.entry(t).or_default();
            for k in ks {
                if into.insert(k) {
                    pairs += 1;
                }
            }
        }
        m.by_tag = fresh;
        m.pairs = pairs;
        m.before = None;
        // Live pairs past the bound: the next rebuild waits until they double. Both
        // set under the lock, so a note past the new bound is not overwritten.
        self.rebuild_above.store(
            MAX_TAG_PAIRS.max(pairs.saturating_mul(2)),
            std::sync::atomic::Ordering::Relaxed,
        );
        self.ready.store(true, std::sync::atomic::Ordering::Release);
        let tags = m.by_tag.len();
        drop(m);
        // The pairs from before are freed here, without the lock.
        drop(before);
        tracing::info!(
            objects = keys.len(),
            tags,
            pairs,
            took_ms = started.elapsed().as_millis() as u64,
            "tag index rebuilt from the store"
        );
    }
}

/// What a rebuild of the tag index reads of the store: the store itself (a test's
/// stand-in watches the rebuild between its reads).
pub(crate) trait Stored {
    /// Return once the store's index is loaded (the keys it lists are all of them).
    fn wait_loaded(&self);
    /// Every stored key.
    fn keys(&self) -> Vec<Box<[u8]>>;
    /// The stored object's metadata; `None` when it is not stored (any more).
    fn meta(&self, key: &[u8]) -> Option<std::sync::Arc<linerate_cache::ObjectMeta>>;
    /// Whether the store holds `key` or is writing it.
    fn contains(&self, key: &[u8]) -> bool;
}

impl Stored for linerate_cache::Store {
    fn wait_loaded(&self) {
        linerate_cache::Store::wait_loaded(self, Duration::from_secs(3600));
    }

    fn keys(&self) -> Vec<Box<[u8]>> {
        linerate_cache::Store::keys(self)
    }

    fn meta(&self, key: &[u8]) -> Option<std::sync::Arc<linerate_cache::ObjectMeta>> {
        match self.peek(key) {
            linerate_cache::Lookup::Hit(h) => Some(h.meta),
            _ => None,
        }
    }

    fn contains(&self, key: &[u8]) -> bool {
        linerate_cache::Store::contains(self, key)
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
#[allow(clippy::unwrap_used, reason = "tests")]
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

    fn fields(v: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![(b"surrogate-key".to_vec(), v.as_bytes().to_vec())]
    }

    fn sorted(mut keys: Vec<Box<[u8]>>) -> Vec<String> {
        keys.sort();
        keys.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    /// A store of one object ("stored", tagged `show gone`) that checks, at each read
    /// a rebuild makes of it, that the tag index is not locked meanwhile; at the first,
    /// a worker stores tagged objects and a purge by tag runs.
    struct Probe<'a> {
        tags: &'a Tags,
        purged: Mutex<HashSet<Vec<u8>>>,
        reads: std::sync::atomic::AtomicUsize,
    }

    impl Probe<'_> {
        fn read(&self, what: &str) {
            assert!(
                self.tags.map.try_lock().is_ok(),
                "the tag index is locked while the rebuild reads the store ({what})"
            );
            if self
                .reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                > 0
            {
                return;
            }
            // A worker stores an object tagged `show new` (`note` does not wait for the
            // rebuild: it would never return here if it did).
            std::thread::scope(|s| {
                s.spawn(|| self.tags.note(b"noted-during", &fields("show new")));
            });
            // A purge of `gone` finds the pair noted before the rebuild began...
            let taken = self.tags.take(b"gone");
            assert_eq!(sorted(taken), ["purged-during"]);
            self.purged
                .lock()
                .unwrap()
                .insert(b"purged-during".to_vec());
            // ... and an object stored under `gone` after it stays under it.
            std::thread::scope(|s| {
                s.spawn(|| self.tags.note(b"gone-again", &fields("gone")));
            });
        }
    }

    impl Stored for Probe<'_> {
        fn wait_loaded(&self) {}

        fn keys(&self) -> Vec<Box<[u8]>> {
            self.read("keys");
            vec![b"stored".to_vec().into()]
        }

        fn meta(&self, key: &[u8]) -> Option<std::sync::Arc<linerate_cache::ObjectMeta>> {
            self.read("meta");
            (key == b"stored").then(|| {
                std::sync::Arc::new(linerate_cache::ObjectMeta {
                    status: 200,
                    headers: fields("show gone"),
                    ..Default::default()
                })
            })
        }

        fn contains(&self, key: &[u8]) -> bool {
            self.read("contains");
            match key {
                b"evicted" => false,
                k => !self.purged.lock().unwrap().contains(k),
            }
        }
    }

    /// Guards the tag index's rebuild (review finding): it read the store while it held
    /// the index's lock (a lookup per pair noted before it, under the lock), so every
    /// worker storing a tagged object waited for it on a large cache. Each read of the
    /// store is made with the index unlocked, and what happens meanwhile is kept: the
    /// pairs noted during the rebuild stay, a purge by tag during it finds the pairs
    /// noted before it, and the purged pairs do not come back.
    #[test]
    fn a_rebuild_reads_the_store_with_the_index_unlocked() {
        let tags = Tags::new("Surrogate-Key");
        tags.note(b"writing", &fields("show"));
        tags.note(b"evicted", &fields("show"));
        tags.note(b"purged-during", &fields("gone"));
        let store = Probe {
            tags: &tags,
            purged: Mutex::default(),
            reads: Default::default(),
        };
        tags.ensure_ready(&store);
        assert!(tags.is_ready());
        assert!(store.reads.load(std::sync::atomic::Ordering::Relaxed) > 1);
        assert_eq!(
            sorted(tags.keys(b"show")),
            ["noted-during", "stored", "writing"]
        );
        assert_eq!(sorted(tags.keys(b"new")), ["noted-during"]);
        assert_eq!(sorted(tags.keys(b"gone")), ["gone-again", "stored"]);
        assert_eq!(tags.map.lock().unwrap().pairs, 6);
    }
}
