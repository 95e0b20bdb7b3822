//! Hit-ratio benchmark (not a test): replays a synthetic video workload against the
//! store's eviction policy (S3-FIFO, `linerate_cache::policy`) and a plain byte-capacity
//! LRU of the same size, and prints object and byte hit ratios.
//!
//! Workload: titles with Zipf popularity; a viewing session picks a title and reads its
//! segments sequentially from the start (or from a random point, for seeks) for a
//! geometric number of segments. In the middle third of the trace a burst of one-hit
//! objects (a catalogue crawl, a long-tail prefetch) is interleaved with the sessions:
//! the pollution that flushes an LRU cache (nginx#868). Deterministic (fixed seed).
//!
//!     cargo run --release -p linerate-cache --example hit_ratio [-- CAPACITY_GIB]
#![allow(clippy::unwrap_used, reason = "benchmark on generated data")]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use linerate_cache::policy::{PolicyState, S3Fifo, Tracked};

const TITLES: usize = 5_000;
const ZIPF_ALPHA: f64 = 0.9;
const SEGMENTS_PER_TITLE: u64 = 600; // 20 min of 2 s segments
const MEAN_SESSION_SEGMENTS: f64 = 60.0;
const SESSIONS: usize = 60_000;
const SEEK_PROBABILITY: f64 = 0.2;
/// One-hit objects in the burst, and their size range in bytes.
const BURST_OBJECTS: usize = 400_000;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Copy)]
struct Req {
    id: u128,
    size: u64,
    polluting: bool,
}

fn trace() -> Vec<Req> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let weights: Vec<f64> = (1..=TITLES)
        .map(|r| 1.0 / (r as f64).powf(ZIPF_ALPHA))
        .collect();
    let total: f64 = weights.iter().sum();
    let mut cdf = Vec::with_capacity(TITLES);
    let mut acc = 0.0;
    for w in &weights {
        acc += w / total;
        cdf.push(acc);
    }
    // Per-title bitrate: segment sizes between 0.5 and 2 MB.
    let seg_size =
        |title: usize| 500_000 + (xxhash_rust::xxh3::xxh3_64(&title.to_le_bytes()) % 1_500_000);
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let u = rng.unit();
        let title = cdf.partition_point(|&c| c < u).min(TITLES - 1);
        let start = if rng.unit() < SEEK_PROBABILITY {
            rng.next() % SEGMENTS_PER_TITLE
        } else {
            0
        };
        let len = (-(rng.unit().max(1e-12)).ln() * MEAN_SESSION_SEGMENTS) as u64 + 1;
        let mut s = Vec::new();
        for seg in start..(start + len).min(SEGMENTS_PER_TITLE) {
            let id = ((title as u128) << 32) | u128::from(seg);
            s.push(Req {
                id,
                size: seg_size(title),
                polluting: false,
            });
        }
        sessions.push(s);
    }
    // Interleave sessions (several concurrent viewers) into one request stream.
    let mut out = Vec::new();
    let mut active: Vec<std::vec::IntoIter<Req>> = Vec::new();
    let mut next = sessions.into_iter();
    loop {
        while active.len() < 200 {
            match next.next() {
                Some(s) => active.push(s.into_iter()),
                None => break,
            }
        }
        if active.is_empty() {
            break;
        }
        let i = (rng.next() % active.len() as u64) as usize;
        match active[i].next() {
            Some(r) => out.push(r),
            None => {
                active.swap_remove(i);
            }
        }
    }
    // The burst: one-hit objects spread over the middle third.
    let (a, b) = (out.len() / 3, 2 * out.len() / 3);
    let mut polluted = Vec::with_capacity(out.len() + BURST_OBJECTS);
    polluted.extend_from_slice(&out[..a]);
    let every = (b - a) as f64 / BURST_OBJECTS as f64;
    let mut k = 0usize;
    for (j, r) in out[a..b].iter().enumerate() {
        while (k as f64) * every <= j as f64 && k < BURST_OBJECTS {
            let id = (1u128 << 100) | k as u128;
            polluted.push(Req {
                id,
                size: 500_000 + rng.next() % 1_500_000,
                polluting: true,
            });
            k += 1;
        }
        polluted.push(*r);
    }
    polluted.extend_from_slice(&out[b..]);
    polluted
}

trait Cache {
    fn access(&mut self, r: &Req) -> bool;
}

struct Lru {
    cap: u64,
    bytes: u64,
    tick: u64,
    map: HashMap<u128, (u64, u64)>,
    order: BTreeMap<u64, u128>,
}

impl Cache for Lru {
    fn access(&mut self, r: &Req) -> bool {
        self.tick += 1;
        if let Some((t, s)) = self.map.get_mut(&r.id) {
            self.order.remove(t);
            *t = self.tick;
            self.order.insert(self.tick, r.id);
            let _ = s;
            return true;
        }
        self.map.insert(r.id, (self.tick, r.size));
        self.order.insert(self.tick, r.id);
        self.bytes += r.size;
        while self.bytes > self.cap {
            let (_, id) = self.order.pop_first().unwrap();
            let (_, s) = self.map.remove(&id).unwrap();
            self.bytes -= s;
        }
        false
    }
}

struct Obj(u128, u64, PolicyState);
impl Tracked for Obj {
    fn key_hash(&self) -> u128 {
        self.0
    }
    fn charge(&self) -> u64 {
        self.1
    }
    fn policy(&self) -> &PolicyState {
        &self.2
    }
}

struct S3 {
    cap: u64,
    p: S3Fifo<Obj>,
    map: HashMap<u128, Arc<Obj>>,
    victims: Vec<Arc<Obj>>,
}

impl Cache for S3 {
    fn access(&mut self, r: &Req) -> bool {
        if let Some(o) = self.map.get(&r.id) {
            o.policy().touch();
            return true;
        }
        let o = Arc::new(Obj(r.id, r.size, PolicyState::default()));
        self.map.insert(r.id, Arc::clone(&o));
        self.p.insert(o);
        if self.p.bytes() > self.cap {
            self.p.evict(self.p.bytes() - self.cap, &mut self.victims);
            for v in self.victims.drain(..) {
                self.map.remove(&v.0);
            }
        }
        false
    }
}

#[derive(Default)]
struct Score {
    reqs: u64,
    hits: u64,
    bytes: u64,
    hit_bytes: u64,
}

fn run(cache: &mut dyn Cache, trace: &[Req], count_pollution: bool) -> Score {
    let mut s = Score::default();
    for r in trace {
        let hit = cache.access(r);
        if r.polluting && !count_pollution {
            continue;
        }
        s.reqs += 1;
        s.bytes += r.size;
        if hit {
            s.hits += 1;
            s.hit_bytes += r.size;
        }
    }
    s
}

fn main() {
    let cap_gib: f64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100.0);
    let cap = (cap_gib * (1u64 << 30) as f64) as u64;
    let clean: Vec<Req> = trace().into_iter().filter(|r| !r.polluting).collect();
    let polluted = trace();
    let unique: HashMap<u128, u64> = clean.iter().map(|r| (r.id, r.size)).collect();
    let ws: u64 = unique.values().sum();
    println!(
        "workload: {TITLES} titles (Zipf {ZIPF_ALPHA}), {SESSIONS} sessions, {} video requests, {} one-hit objects in the burst",
        clean.len(),
        polluted.len() - clean.len()
    );
    println!(
        "video working set {:.1} GiB; cache {:.1} GiB ({:.1} %)",
        ws as f64 / (1u64 << 30) as f64,
        cap_gib,
        100.0 * cap as f64 / ws as f64
    );
    println!("| trace | policy | object hit ratio | byte hit ratio |");
    println!("|---|---|---|---|");
    let runs = [
        ("clean", &clean, false),
        ("polluted, video requests", &polluted, false),
        ("polluted, all requests", &polluted, true),
    ];
    for (name, t, count_pollution) in runs {
        let mut results = Vec::new();
        for policy in ["LRU", "S3-FIFO"] {
            let mut lru = Lru {
                cap,
                bytes: 0,
                tick: 0,
                map: HashMap::new(),
                order: BTreeMap::new(),
            };
            let mut s3 = S3 {
                cap,
                p: S3Fifo::new(cap),
                map: HashMap::new(),
                victims: Vec::new(),
            };
            let c: &mut dyn Cache = if policy == "LRU" { &mut lru } else { &mut s3 };
            let s = run(c, t, count_pollution);
            let (ohr, bhr) = (
                100.0 * s.hits as f64 / s.reqs as f64,
                100.0 * s.hit_bytes as f64 / s.bytes as f64,
            );
            println!("| {name} | {policy} | {ohr:.2} % | {bhr:.2} % |");
            results.push(bhr);
        }
        println!(
            "| {name} | S3-FIFO − LRU | | {:+.2} points |",
            results[1] - results[0]
        );
    }
}
