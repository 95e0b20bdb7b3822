//! Store benchmark (not a test): write throughput, and index restore time with a
//! million objects after a clean stop and after a kill -9.
//!
//!     store_bench fill DIR N THREADS BODY_BYTES DURABILITY   write N objects, clean stop
//!     store_bench crash-fill DIR N THREADS BODY_BYTES        write N objects, then wait
//!                                                            to be killed (no snapshot)
//!     store_bench restore DIR N                              reopen; time to first hit
//!                                                            of an old object, to loaded
//!
//! `bench/store.sh` drives it. Keys are `http://bench/obj/<i>`.
#![allow(clippy::unwrap_used, reason = "benchmark on a directory it owns")]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use linerate_cache::{DiskConfig, Durability, Lookup, ObjectMeta, Store, StoreConfig};

fn config(dir: &Path, durability: Durability, compact: u64) -> StoreConfig {
    let mut c = StoreConfig::new(vec![DiskConfig {
        name: "d0".into(),
        path: dir.join("d0"),
        max_bytes: 1 << 42,
    }]);
    c.durability = durability;
    c.journal_compact_bytes = compact;
    c
}

fn key(i: u64) -> String {
    format!(
        "http://bench.example/title-{}/1080p/segment-{:06}.m4s",
        i / 1000,
        i % 1000
    )
}

fn fill(store: &Arc<Store>, n: u64, threads: u64, body: usize) -> Duration {
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = Arc::clone(store);
            std::thread::spawn(move || {
                let buf = vec![0x5Au8; body];
                let meta = ObjectMeta {
                    status: 200,
                    headers: vec![(b"Content-Type".to_vec(), b"video/iso.segment".to_vec())],
                    ..ObjectMeta::default()
                };
                let mut i = t;
                while i < n {
                    let mut w = store
                        .begin_write(key(i).as_bytes(), meta.clone(), Some(body as u64))
                        .unwrap();
                    w.append(&buf).unwrap();
                    w.finish().unwrap();
                    i += threads;
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    started.elapsed()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = Path::new(&args[2]);
    let n: u64 = args[3].parse().unwrap();
    match args[1].as_str() {
        "fill" | "crash-fill" => {
            let threads: u64 = args[4].parse().unwrap();
            let body: usize = args[5].parse().unwrap();
            let crash = args[1] == "crash-fill";
            let durability = match args.get(6).map(String::as_str) {
                Some("sync") => Durability::SyncBeforePublish,
                _ => Durability::NoSync,
            };
            // crash-fill never compacts: the worst case, a full journal replay.
            let compact = if crash { u64::MAX } else { 64 << 20 };
            let store = Arc::new(Store::open(config(dir, durability, compact)).unwrap());
            let took = fill(&store, n, threads, body);
            let secs = took.as_secs_f64();
            println!(
                "wrote {n} objects of {body} B with {threads} threads ({}) in {secs:.2} s: {:.0} objects/s, {:.1} MB/s",
                durability.as_str(),
                n as f64 / secs,
                n as f64 * body as f64 / secs / 1e6
            );
            if crash {
                println!("ready");
                std::thread::sleep(Duration::from_secs(3600));
            }
            let t = Instant::now();
            store.close();
            println!(
                "clean stop (snapshot) took {:.2} s",
                t.elapsed().as_secs_f64()
            );
        }
        "restore" => {
            let t0 = Instant::now();
            let store = Store::open(config(dir, Durability::NoSync, 64 << 20)).unwrap();
            let opened = t0.elapsed();
            let probe = key(n / 2);
            let hit = matches!(store.lookup(probe.as_bytes()), Lookup::Hit(_));
            let first_hit = t0.elapsed();
            assert!(store.wait_loaded(Duration::from_secs(600)));
            let loaded = t0.elapsed();
            let count = store.indexed_objects();
            let mut misses = 0;
            for i in (0..n).step_by(997) {
                if !matches!(store.lookup(key(i).as_bytes()), Lookup::Hit(_)) {
                    misses += 1;
                }
            }
            println!(
                "restore: open returned after {:.1} ms; first lookup of an old object {} after {:.1} ms; index of {count} objects loaded after {:.0} ms; sampled misses {misses}",
                opened.as_secs_f64() * 1e3,
                if hit { "hit" } else { "MISSED" },
                first_hit.as_secs_f64() * 1e3,
                loaded.as_secs_f64() * 1e3
            );
            let t = Instant::now();
            store.close();
            println!(
                "clean stop (snapshot) took {:.2} s",
                t.elapsed().as_secs_f64()
            );
        }
        other => panic!("unknown mode {other}"),
    }
}
