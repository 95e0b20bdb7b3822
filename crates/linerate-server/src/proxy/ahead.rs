//! What segment prefetch remembers, shared by every worker and bounded: which segments
//! follow a segment (read from the media playlists served), the byte ranges a file is
//! played in (byte-range playlists, DASH `SegmentBase` indexes), which playlist copies were
//! read already, where each client's last range of a segment ended (so a range that
//! continues it counts as played), which prefetched objects no client has asked for
//! yet, the prefetch fills in flight per origin, the playlist reads in flight (so a
//! segment answered while one runs can wait for what it tells), and the counters
//! `/metrics` shows.
//!
//! Rendition switches (issue 23 part 4): each sequence (a media playlist, one DASH
//! representation) may belong to a group of alternatives (the variant streams of a
//! master playlist read, the `EXT-X-MEDIA` renditions of one `TYPE` there, the
//! representations of one DASH AdaptationSet). A viewer (a client address, or a CMCD
//! `sid` when the player sends one) plays one sequence of a group at a time: each
//! segment it plays takes a ticket (`play`), and the prefetch queue that play started
//! stops when the viewer's ticket for the group moves on (`still`): dropped when the
//! viewer went to another sequence of the group (a switch), taken over when it played
//! on in the same one.
//!
//! Every memory here is a shortcut, never a correctness matter: past its bound the
//! oldest half is forgotten (two generations: a lookup moves an entry to the current
//! one, so what is in use stays), and a forgotten entry only means a prefetch not made
//! or a use not counted.
//!
//! Not here: reading playlists and starting fills (`prefetch`).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use linerate_http::hls::SubRange;

/// Segments remembered (each with the few that follow it), per generation.
const MAX_SEGMENTS: usize = 8192;
/// Playlist copies remembered as read, per generation.
const MAX_PLAYLISTS: usize = 4096;
/// Ranges of files played in byte ranges remembered, per generation (a file weighs
/// its ranges: a long single-file playlist is a few thousand).
const MAX_RANGED: usize = 1 << 17;
/// Viewers remembered (a viewer and a group → the sequence it plays), per generation;
/// a forgotten one only makes its next play not count as a switch.
const MAX_VIEWERS: usize = 8192;
/// Sequences whose group of alternatives is known, per generation; a forgotten one
/// only makes it a group of its own (no switch seen).
const MAX_GROUPS: usize = 8192;
/// Prefetched objects remembered until used (past it the oldest counts as wasted).
const MAX_UNUSED: usize = 16384;
/// Ranges remembered (client and segment → where the last one sent ended), per
/// generation: one per client reading a segment in ranges now, a few thousand at once
/// on a busy edge; a forgotten one only makes a continuing range not count.
const MAX_RANGES: usize = 8192;

/// A prefetched object no client asked for within this is counted as wasted (and a
/// later request for it is not counted as a use). Prefetch runs k segments ahead of a
/// player, so a use comes within k segment durations (seconds); a minute covers a
/// paused or slow player without hiding real waste for long.
pub(crate) const WASTED_AFTER: Duration = Duration::from_secs(60);

/// A map by key that forgets its older half past `cap` per generation: `cap` entries,
/// or with a weight per value (`weigh`), `cap` of their weight.
struct TwoGen<V> {
    cap: usize,
    /// The weight of a value (1 for a map bounded by entries).
    weigh: fn(&V) -> usize,
    /// The weight inserted into the current generation.
    weight: usize,
    current: HashMap<Box<[u8]>, V>,
    old: HashMap<Box<[u8]>, V>,
}

impl<V: Clone> TwoGen<V> {
    fn new(cap: usize) -> Self {
        Self::weighed(cap, |_| 1)
    }

    fn weighed(cap: usize, weigh: fn(&V) -> usize) -> Self {
        TwoGen {
            cap,
            weigh,
            weight: 0,
            current: HashMap::new(),
            old: HashMap::new(),
        }
    }

    fn insert(&mut self, k: &[u8], v: V) {
        let w = (self.weigh)(&v);
        if self.weight.saturating_add(w) > self.cap && !self.current.contains_key(k) {
            self.old = std::mem::take(&mut self.current);
            self.weight = 0;
        }
        self.weight = self.weight.saturating_add(w);
        self.current.insert(k.into(), v);
    }

    /// The value of `k`, moved to the current generation.
    fn get(&mut self, k: &[u8]) -> Option<V> {
        if let Some(v) = self.current.get(k) {
            return Some(v.clone());
        }
        let v = self.old.remove(k)?;
        self.insert(k, v.clone());
        Some(v)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.current.len() + self.old.len()
    }
}

/// A segment to prefetch: its target as sent to the origin, its primary key, its route,
/// and its byte range when it is a range of a file (`#EXT-X-BYTERANGE`, a DASH
/// subsegment).
#[derive(Debug)]
pub(crate) struct Target {
    /// Path and query (origin-form).
    pub(crate) target: Box<[u8]>,
    /// Primary key.
    pub(crate) key: Box<[u8]>,
    /// Index of the route serving it.
    pub(crate) route: usize,
    /// The range of the file it is, if it is one.
    pub(crate) range: Option<SubRange>,
}

/// The segments after one segment, nearest first.
pub(crate) type Next = Arc<[Arc<Target>]>;

/// What follows a segment: the sequence it is in (a media playlist's key; an MPD's key
/// and the representation's number) and the segments after it.
#[derive(Debug, Clone)]
pub(crate) struct Follow {
    /// The sequence.
    pub(crate) seq: Arc<[u8]>,
    /// The segments after it, nearest first.
    pub(crate) next: Next,
}

/// Where a viewer's prefetch queue stands (see [`Memory::still`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Still {
    /// The viewer's last play in the group is the one that started the queue.
    Current,
    /// The viewer played on in the same sequence (or was forgotten): a newer queue
    /// covers what is left.
    Superseded,
    /// The viewer plays another sequence of the group now: what is left is dropped.
    Switched,
}

/// The sequence a viewer plays in a group, and the ticket of its last play.
#[derive(Debug, Clone)]
struct Playing {
    seq: Arc<[u8]>,
    ticket: u64,
}

/// A file played in byte ranges, as prefetch knows it.
#[derive(Debug)]
pub(crate) enum Ranged {
    /// Its ranges: `items` is the sequence they are in (playlist order; `None` for an
    /// item prefetch may not fetch), `ranges` this file's ranges in that sequence,
    /// sorted by offset: first byte, one past the last, index in `items`.
    Known {
        /// The sequence (see [`Follow::seq`]).
        seq: Arc<[u8]>,
        items: Arc<[Option<Arc<Target>>]>,
        ranges: Vec<(u64, u64, usize)>,
    },
    /// A DASH `SegmentBase` file whose index (`sidx`, bytes `first..=last`) is not read
    /// yet; `reading` is set by whoever reads it.
    Index {
        /// The sequence (see [`Follow::seq`]).
        seq: Arc<[u8]>,
        file: Arc<Target>,
        first: u64,
        last: u64,
        reading: AtomicBool,
    },
}

impl Ranged {
    /// `Known` for the ranges of `items` (the sequence `seq`) that are ranges of the
    /// file keyed `key`.
    pub(crate) fn known(key: &[u8], seq: Arc<[u8]>, items: Arc<[Option<Arc<Target>>]>) -> Ranged {
        let mut ranges: Vec<(u64, u64, usize)> = items
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let t = t.as_ref()?;
                let r = t.range.filter(|_| &*t.key == key)?;
                Some((r.offset, r.end(), i))
            })
            .collect();
        ranges.sort_unstable();
        Ranged::Known { seq, items, ranges }
    }

    /// What it weighs in the memory (`MAX_RANGED`): its own ranges (the sequence they
    /// are in is one allocation shared by the files of a playlist, at most a playlist's
    /// or an MPD's worth).
    fn weight(&self) -> usize {
        match self {
            Ranged::Known { ranges, .. } => 1 + ranges.len(),
            Ranged::Index { .. } => 1,
        }
    }

    /// The index in the sequence of the range holding byte `at`, and that range.
    pub(crate) fn at(&self, at: u64) -> Option<(usize, u64, u64)> {
        let Ranged::Known { ranges, .. } = self else {
            return None;
        };
        let i = ranges.partition_point(|r| r.0 <= at).checked_sub(1)?;
        let (start, end, item) = ranges[i];
        (at < end).then_some((item, start, end))
    }
}

/// Prefetch counters, summed over all workers (one set, shared).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Prefetch fills started.
    pub(crate) issued: u64,
    /// Prefetched objects a client then asked for (served from the store, or joined
    /// while the prefetch was running).
    pub(crate) used: u64,
    /// Prefetched objects no client asked for within [`WASTED_AFTER`] (or forgotten
    /// unused past the memory's bound). `issued - used - wasted` are still pending.
    pub(crate) wasted: u64,
    /// Prefetches not started because the origin's prefetch budget was full.
    pub(crate) skipped: u64,
    /// Media playlists read.
    pub(crate) playlists: u64,
    /// Viewers seen moving to another sequence of a group of alternatives.
    pub(crate) switches: u64,
    /// Queued prefetches not issued because their viewer switched to another sequence.
    pub(crate) dropped_switch: u64,
    /// Per route that prefetches (`prefetch_segments` or `slice_readahead`), in
    /// configuration order.
    pub(crate) routes: Vec<RouteCounts>,
}

/// One route's prefetches: used / issued is how much of what it fetches ahead is read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RouteCounts {
    /// The route's number in configuration order (from 0).
    pub(crate) route: usize,
    /// Its `host` (`*`: any).
    pub(crate) host: String,
    /// Its `path_prefix`.
    pub(crate) path_prefix: String,
    /// Prefetch fills it started.
    pub(crate) issued: u64,
    /// Of those, the ones a client then read.
    pub(crate) used: u64,
}

/// Prefetch's memory; see the module comment.
pub(crate) struct Memory {
    next: Mutex<TwoGen<Follow>>,
    groups: Mutex<TwoGen<Arc<[u8]>>>,
    viewers: Mutex<TwoGen<Playing>>,
    tickets: AtomicU64,
    switches: AtomicU64,
    dropped_switch: AtomicU64,
    /// Per route: whether it prefetches, its host and prefix, issued, used.
    routes: Vec<(bool, String, String, AtomicU64, AtomicU64)>,
    ranged: Mutex<TwoGen<Arc<Ranged>>>,
    read: Mutex<TwoGen<u64>>,
    ranges: Mutex<TwoGen<u64>>,
    unused: Mutex<Unused>,
    in_flight: Vec<AtomicU32>,
    issued: AtomicU64,
    used: AtomicU64,
    wasted: AtomicU64,
    skipped: AtomicU64,
    playlists: AtomicU64,
    /// Playlist reads in flight (`prefetch::read_playlist`): the next read's number,
    /// and the numbers of those started and not ended.
    reads: Mutex<(u64, BTreeSet<u64>)>,
    /// Woken each time one of them ends.
    read_ended: tokio::sync::Notify,
}

impl Memory {
    /// For `origins` origins and `routes` routes: for each, whether it prefetches, its
    /// host (`*`: any) and its path prefix.
    pub(crate) fn new(origins: usize, routes: Vec<(bool, String, String)>) -> Memory {
        Memory {
            next: Mutex::new(TwoGen::new(MAX_SEGMENTS)),
            groups: Mutex::new(TwoGen::new(MAX_GROUPS)),
            viewers: Mutex::new(TwoGen::new(MAX_VIEWERS)),
            tickets: AtomicU64::new(0),
            switches: AtomicU64::new(0),
            dropped_switch: AtomicU64::new(0),
            routes: routes
                .into_iter()
                .map(|(on, host, prefix)| (on, host, prefix, AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
            ranged: Mutex::new(TwoGen::weighed(MAX_RANGED, |r| r.weight())),
            read: Mutex::new(TwoGen::new(MAX_PLAYLISTS)),
            ranges: Mutex::new(TwoGen::new(MAX_RANGES)),
            unused: Mutex::new(Unused::default()),
            in_flight: (0..origins).map(|_| AtomicU32::new(0)).collect(),
            issued: AtomicU64::new(0),
            used: AtomicU64::new(0),
            wasted: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            playlists: AtomicU64::new(0),
            reads: Mutex::new((0, BTreeSet::new())),
            read_ended: tokio::sync::Notify::new(),
        }
    }

    /// Remember the sequence of the segment keyed `key` and the segments after it.
    pub(crate) fn set_next(&self, key: &[u8], follow: Follow) {
        lock(&self.next).insert(key, follow);
    }

    /// The sequence of the segment keyed `key` and the segments after it, if a
    /// playlist said.
    pub(crate) fn next(&self, key: &[u8]) -> Option<Follow> {
        lock(&self.next).get(key)
    }

    /// Remember that the sequence `seq` is one of the alternatives `group`.
    pub(crate) fn set_group(&self, seq: &[u8], group: Arc<[u8]>) {
        lock(&self.groups).insert(seq, group);
    }

    /// The group of alternatives the sequence `seq` is in, if a master playlist or an
    /// MPD said.
    pub(crate) fn group(&self, seq: &[u8]) -> Option<Arc<[u8]>> {
        lock(&self.groups).get(seq)
    }

    /// `viewer` (a client and a group) played a segment of `seq`: its ticket, which
    /// every queue started before stops at ([`Memory::still`]). Moving from another
    /// sequence counts a switch.
    pub(crate) fn play(&self, viewer: &[u8], seq: &Arc<[u8]>) -> u64 {
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed) + 1;
        let mut viewers = lock(&self.viewers);
        if viewers.get(viewer).is_some_and(|p| p.seq != *seq) {
            self.switches.fetch_add(1, Ordering::Relaxed);
        }
        viewers.insert(
            viewer,
            Playing {
                seq: Arc::clone(seq),
                ticket,
            },
        );
        ticket
    }

    /// Whether the queue `viewer`'s play of `seq` with `ticket` started goes on.
    pub(crate) fn still(&self, viewer: &[u8], seq: &[u8], ticket: u64) -> Still {
        match lock(&self.viewers).get(viewer) {
            Some(p) if p.ticket == ticket => Still::Current,
            Some(p) if *p.seq != *seq => Still::Switched,
            _ => Still::Superseded,
        }
    }

    /// `n` queued prefetches were dropped: their viewer switched.
    pub(crate) fn dropped_on_switch(&self, n: u64) {
        self.dropped_switch.fetch_add(n, Ordering::Relaxed);
    }

    /// Remember the ranges the file keyed `key` is played in.
    pub(crate) fn set_ranged(&self, key: &[u8], ranged: Ranged) {
        lock(&self.ranged).insert(key, Arc::new(ranged));
    }

    /// The ranges the file keyed `key` is played in, if a playlist or MPD said.
    pub(crate) fn ranged(&self, key: &[u8]) -> Option<Arc<Ranged>> {
        lock(&self.ranged).get(key)
    }

    /// Whether the playlist copy keyed `key` and created at `created_ms` is new to
    /// this memory (and remember it as read: whoever gets `true` reads it).
    pub(crate) fn first_read(&self, key: &[u8], created_ms: u64) -> bool {
        let mut read = lock(&self.read);
        if read.get(key) == Some(created_ms) {
            return false;
        }
        read.insert(key, created_ms);
        true
    }

    /// A playlist copy [`Memory::first_read`] let through was read: its body parsed and
    /// what follows each of its segments remembered. Counted only then, so a client
    /// that sees the count go up finds the segments known (nothing else waits on it).
    pub(crate) fn playlist_read(&self) {
        self.playlists.fetch_add(1, Ordering::Relaxed);
    }

    /// A playlist read began (a playlist or MPD was answered): its number, for
    /// [`Memory::read_end`] when it ends, however it ends.
    pub(crate) fn read_start(&self) -> u64 {
        let mut reads = lock(&self.reads);
        let n = reads.0;
        reads.0 += 1;
        reads.1.insert(n);
        n
    }

    /// The playlist read numbered `n` ended: wake whoever waits for it.
    pub(crate) fn read_end(&self, n: u64) {
        lock(&self.reads).1.remove(&n);
        self.read_ended.notify_waiters();
    }

    /// The newest playlist read in flight, if any: a request answered now waits at
    /// most for it and those before it ([`Memory::reads_ended_through`]).
    pub(crate) fn newest_read(&self) -> Option<u64> {
        lock(&self.reads).1.last().copied()
    }

    /// Whether every playlist read up to number `n` has ended.
    pub(crate) fn reads_ended_through(&self, n: u64) -> bool {
        lock(&self.reads).1.first().is_none_or(|&oldest| oldest > n)
    }

    /// The next end of a playlist read. Registered when called (`Notify::notified`),
    /// so a read ending between this call and the first poll still wakes it.
    pub(crate) fn read_ended(&self) -> tokio::sync::futures::Notified<'_> {
        self.read_ended.notified()
    }

    /// Where the last range sent under `client_key` (a client and a segment) ended, and
    /// remember `end` (one past the last byte of the range sent now) in its place.
    pub(crate) fn swap_range_end(&self, client_key: &[u8], end: Option<u64>) -> Option<u64> {
        let mut ranges = lock(&self.ranges);
        let previous = ranges.get(client_key);
        if let Some(end) = end {
            ranges.insert(client_key, end);
        }
        previous
    }

    /// Take a prefetch slot of `origin` if fewer than `max` are in flight.
    pub(crate) fn try_acquire(&self, origin: usize, max: u32) -> bool {
        let Some(n) = self.in_flight.get(origin) else {
            return false;
        };
        let taken = n
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (v < max).then_some(v + 1)
            })
            .is_ok();
        if !taken {
            self.skipped.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// Give back a slot [`Memory::try_acquire`] took.
    pub(crate) fn release(&self, origin: usize) {
        if let Some(n) = self.in_flight.get(origin) {
            n.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// A prefetch of `key` started on `route`.
    pub(crate) fn issued(&self, key: &[u8], route: usize) {
        self.issued_at(key, route, Instant::now());
    }

    fn issued_at(&self, key: &[u8], route: usize, now: Instant) {
        self.issued.fetch_add(1, Ordering::Relaxed);
        if let Some((_, _, _, issued, _)) = self.routes.get(route) {
            issued.fetch_add(1, Ordering::Relaxed);
        }
        let mut unused = lock(&self.unused);
        let wasted = unused.expire(now) + unused.insert(key, route, now);
        self.wasted.fetch_add(wasted, Ordering::Relaxed);
    }

    /// The prefetch of `key` stored nothing: a later client fill is not its use (and
    /// nothing was wasted but the attempt, counted as issued).
    pub(crate) fn failed(&self, key: &[u8]) {
        lock(&self.unused).by_key.remove(key);
    }

    /// A client was served `key`: count a use if it was prefetched and not used yet.
    pub(crate) fn served(&self, key: &[u8]) {
        self.served_at(key, Instant::now());
    }

    fn served_at(&self, key: &[u8], now: Instant) {
        if self.issued.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut unused = lock(&self.unused);
        let wasted = unused.expire(now);
        if wasted > 0 {
            self.wasted.fetch_add(wasted, Ordering::Relaxed);
        }
        if let Some((_, route)) = unused.by_key.remove(key) {
            self.used.fetch_add(1, Ordering::Relaxed);
            if let Some((_, _, _, _, used)) = self.routes.get(route) {
                used.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The counters now.
    pub(crate) fn counts(&self) -> Counts {
        Counts {
            issued: self.issued.load(Ordering::Relaxed),
            used: self.used.load(Ordering::Relaxed),
            wasted: self.wasted.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            playlists: self.playlists.load(Ordering::Relaxed),
            switches: self.switches.load(Ordering::Relaxed),
            dropped_switch: self.dropped_switch.load(Ordering::Relaxed),
            routes: self
                .routes
                .iter()
                .enumerate()
                .filter(|(_, r)| r.0)
                .map(|(route, (_, host, prefix, issued, used))| RouteCounts {
                    route,
                    host: host.clone(),
                    path_prefix: prefix.clone(),
                    issued: issued.load(Ordering::Relaxed),
                    used: used.load(Ordering::Relaxed),
                })
                .collect(),
        }
    }

    /// Segments remembered now (tests).
    #[cfg(test)]
    fn segments(&self) -> usize {
        lock(&self.next).len()
    }
}

/// Prefetched objects not used yet, in the order issued.
#[derive(Default)]
struct Unused {
    /// Key → when its prefetch was issued, and on which route.
    by_key: HashMap<Box<[u8]>, (Instant, usize)>,
    /// (issued, key), oldest first; an entry whose key was used or re-issued since is
    /// skipped when it comes up.
    order: VecDeque<(Instant, Box<[u8]>)>,
}

impl Unused {
    /// Remember `key` as issued at `now`; returns how many older ones were forgotten
    /// unused to stay within [`MAX_UNUSED`] (wasted).
    fn insert(&mut self, key: &[u8], route: usize, now: Instant) -> u64 {
        self.by_key.insert(key.into(), (now, route));
        self.order.push_back((now, key.into()));
        let mut wasted = 0;
        while self.by_key.len() > MAX_UNUSED {
            wasted += self.pop_oldest();
        }
        // Entries of used keys pile up in `order`; compact when it is mostly those.
        if self.order.len() > 2 * MAX_UNUSED {
            let by_key = &self.by_key;
            self.order
                .retain(|(t, k)| by_key.get(k).is_some_and(|(at, _)| at == t));
        }
        wasted
    }

    /// Forget the prefetches issued [`WASTED_AFTER`] or longer before `now` and not
    /// used; returns how many (wasted).
    fn expire(&mut self, now: Instant) -> u64 {
        let mut wasted = 0;
        while let Some((t, _)) = self.order.front() {
            if now.saturating_duration_since(*t) < WASTED_AFTER {
                break;
            }
            wasted += self.pop_oldest();
        }
        wasted
    }

    /// Drop the oldest entry of `order`: 1 if it was still unused.
    fn pop_oldest(&mut self) -> u64 {
        let Some((t, k)) = self.order.pop_front() else {
            return 0;
        };
        if self.by_key.get(&k).is_some_and(|(at, _)| *at == t) {
            self.by_key.remove(&k);
            1
        } else {
            0
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(n: u8) -> Arc<Target> {
        Arc::new(Target {
            target: vec![b'/', n].into(),
            key: vec![n].into(),
            route: 0,
            range: None,
        })
    }

    #[test]
    fn the_range_holding_a_byte() {
        let file = |offset, len| {
            Some(Arc::new(Target {
                target: b"/f".to_vec().into(),
                key: b"f".to_vec().into(),
                route: 0,
                range: Some(SubRange { offset, len }),
            }))
        };
        // Out of order, another object between, a hole at 30..40.
        let items: Arc<[Option<Arc<Target>>]> = vec![
            file(10, 10),
            Some(target(1)),
            None,
            file(40, 5),
            file(20, 10),
        ]
        .into();
        let r = Ranged::known(b"f", b"p".to_vec().into(), items);
        assert_eq!(r.at(0), None);
        assert_eq!(r.at(10), Some((0, 10, 20)));
        assert_eq!(r.at(19), Some((0, 10, 20)));
        assert_eq!(r.at(20), Some((4, 20, 30)));
        assert_eq!(r.at(30), None);
        assert_eq!(r.at(44), Some((3, 40, 45)));
        assert_eq!(r.at(45), None);
    }

    #[test]
    fn memory_is_bounded_and_keeps_what_is_used() {
        let m = Memory::new(1, Vec::new());
        let next = Follow {
            seq: b"p".to_vec().into(),
            next: vec![target(1)].into(),
        };
        m.set_next(b"hot", next.clone());
        for i in 0..(MAX_SEGMENTS * 3) {
            m.set_next(format!("k{i}").as_bytes(), next.clone());
            if i % 1000 == 0 {
                assert!(m.next(b"hot").is_some(), "an entry in use stays");
            }
        }
        assert!(m.segments() <= 2 * MAX_SEGMENTS);
        assert!(m.next(b"k0").is_none(), "the oldest are forgotten");
        assert!(m.next(b"hot").is_some());
    }

    #[test]
    fn ranged_files_are_bounded_by_their_ranges() {
        let m = Memory::new(1, Vec::new());
        let file = |n: usize| -> Ranged {
            let items: Arc<[Option<Arc<Target>>]> = (0..n as u64)
                .map(|i| {
                    Some(Arc::new(Target {
                        target: b"/f".to_vec().into(),
                        key: b"f".to_vec().into(),
                        route: 0,
                        range: Some(SubRange { offset: i, len: 1 }),
                    }))
                })
                .collect();
            Ranged::known(b"f", b"p".to_vec().into(), items)
        };
        m.set_ranged(b"hot", file(10));
        let big = MAX_RANGED / 8;
        for i in 0..40 {
            m.set_ranged(format!("k{i}").as_bytes(), file(big / 2));
            assert!(m.ranged(b"hot").is_some(), "an entry in use stays");
        }
        let held = lock(&m.ranged);
        let weight: usize = held
            .current
            .values()
            .chain(held.old.values())
            .map(|r| r.weight())
            .sum();
        assert!(weight <= 2 * MAX_RANGED, "{weight}");
        assert!(!held.current.contains_key(&b"k0"[..]) && !held.old.contains_key(&b"k0"[..]));
    }

    #[test]
    fn budget_is_a_cap_never_a_queue() {
        let m = Memory::new(2, Vec::new());
        assert!(m.try_acquire(0, 2));
        assert!(m.try_acquire(0, 2));
        assert!(!m.try_acquire(0, 2));
        assert!(m.try_acquire(1, 2), "per origin");
        m.release(0);
        assert!(m.try_acquire(0, 2));
        assert!(!m.try_acquire(5, 2), "no such origin");
        assert_eq!(m.counts().skipped, 1, "only a full budget counts");
    }

    #[test]
    fn a_use_is_counted_once_and_never_for_a_failed_prefetch() {
        let m = Memory::new(1, Vec::new());
        m.served(b"a");
        m.issued(b"a", 0);
        m.issued(b"b", 0);
        m.failed(b"b");
        m.served(b"a");
        m.served(b"a");
        m.served(b"b");
        let c = m.counts();
        assert_eq!((c.issued, c.used), (2, 1));
    }

    #[test]
    fn unused_prefetches_are_wasted_after_a_while_and_never_counted_twice() {
        let m = Memory::new(1, Vec::new());
        let t0 = Instant::now();
        m.issued_at(b"a", 0, t0);
        m.issued_at(b"b", 0, t0);
        m.issued_at(b"c", 0, t0 + Duration::from_secs(30));
        m.served_at(b"a", t0 + Duration::from_secs(10));
        // b's minute passes unused: wasted, and a late request for it is no use.
        m.served_at(b"b", t0 + WASTED_AFTER);
        let c = m.counts();
        assert_eq!((c.issued, c.used, c.wasted), (3, 1, 1));
        // c is used in time; re-issuing a (a new prefetch) starts its own clock.
        m.served_at(b"c", t0 + WASTED_AFTER + Duration::from_secs(20));
        m.issued_at(b"a", 0, t0 + WASTED_AFTER);
        m.served_at(b"x", t0 + 2 * WASTED_AFTER + Duration::from_secs(1));
        let c = m.counts();
        assert_eq!((c.issued, c.used, c.wasted), (4, 2, 2));
    }

    #[test]
    fn past_the_bound_the_oldest_unused_are_wasted() {
        let m = Memory::new(1, Vec::new());
        let t0 = Instant::now();
        for i in 0..MAX_UNUSED + 5 {
            m.issued_at(format!("k{i}").as_bytes(), 0, t0);
        }
        assert_eq!(m.counts().wasted, 5);
        m.served_at(b"k0", t0);
        m.served_at(b"k5", t0);
        assert_eq!(
            m.counts().used,
            1,
            "k0 was forgotten as wasted, k5 is a use"
        );
    }

    #[test]
    fn range_ends_are_remembered_per_client_key() {
        let m = Memory::new(1, Vec::new());
        assert_eq!(m.swap_range_end(b"c1 seg", Some(2)), None);
        assert_eq!(m.swap_range_end(b"c2 seg", None), None, "another client");
        assert_eq!(m.swap_range_end(b"c1 seg", Some(100)), Some(2));
        assert_eq!(m.swap_range_end(b"c1 seg", None), Some(100));
        assert_eq!(m.swap_range_end(b"c1 seg", None), Some(100), "kept");
    }

    #[test]
    fn a_switch_stops_the_queue_a_play_on_supersedes_it() {
        let m = Memory::new(1, Vec::new());
        let (a, b): (Arc<[u8]>, Arc<[u8]>) = (b"a".to_vec().into(), b"b".to_vec().into());
        let t1 = m.play(b"v g", &a);
        assert_eq!(m.still(b"v g", &a, t1), Still::Current);
        let t2 = m.play(b"v g", &a);
        assert_eq!(m.still(b"v g", &a, t1), Still::Superseded, "played on");
        assert_eq!(m.still(b"v g", &a, t2), Still::Current);
        let other = m.play(b"w g", &b);
        assert_eq!(m.still(b"v g", &a, t2), Still::Current, "another viewer");
        m.play(b"v g", &b);
        assert_eq!(m.still(b"v g", &a, t2), Still::Switched);
        assert_eq!(m.still(b"w g", &b, other), Still::Current);
        assert_eq!(m.counts().switches, 1);
        assert_eq!(m.still(b"x g", &a, 1), Still::Superseded, "forgotten");
    }

    #[test]
    fn uses_are_counted_on_the_route_that_issued() {
        let route = |on| (on, "*".to_owned(), "/".to_owned());
        let m = Memory::new(1, vec![route(true), route(false), route(true)]);
        m.issued(b"a", 2);
        m.issued(b"b", 2);
        m.issued(b"c", 0);
        m.served(b"a");
        m.served(b"c");
        m.served(b"a");
        let routes = m.counts().routes;
        let got: Vec<_> = routes.iter().map(|r| (r.route, r.issued, r.used)).collect();
        assert_eq!(got, vec![(0, 1, 1), (2, 2, 1)], "routes that prefetch only");
    }

    #[test]
    fn a_playlist_copy_is_read_once() {
        let m = Memory::new(1, Vec::new());
        assert!(m.first_read(b"p", 1));
        assert!(!m.first_read(b"p", 1));
        assert!(m.first_read(b"p", 2), "a new copy is read again");
        assert_eq!(m.counts().playlists, 0, "counted once read");
        m.playlist_read();
        assert_eq!(m.counts().playlists, 1);
    }
}
