//! Crash consistency: a child process (this test binary, re-executed in child mode)
//! writes, overwrites and purges objects from several threads; the parent kill -9s it
//! at a pseudo-random moment, reopens the store and checks that no object is corrupt,
//! no completed object is lost, no purged object came back and no temp file remains.
//! Repeated over many rounds on the same directory, so restarts also load what earlier
//! crashes left.
#![allow(clippy::unwrap_used, reason = "tests on temp dirs they created")]

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use linerate_cache::format::decode_complete;
use linerate_cache::{KeyHash, Lookup, Store, StoreConfig};

const CHILD_ENV: &str = "LINERATE_CRASH_CHILD_DIR";
const ROUND_ENV: &str = "LINERATE_CRASH_ROUND";
const ROUNDS: u64 = 12;
const WRITER_THREADS: usize = 4;
/// Largest body, bytes: mixes packed small objects and page-aligned large ones.
const MAX_BODY: usize = 48 * 1024;

fn crash_config(dir: &Path) -> StoreConfig {
    let mut c = config(dir, &[("d0", 1 << 40), ("d1", 1 << 40)]);
    c.error_threshold = u32::MAX;
    // Small enough that compaction (journal rotation + snapshot) also happens while
    // writes are in flight and can be interrupted.
    c.journal_compact_bytes = 64 * 1024;
    c
}

/// Child mode: write until killed. Does nothing when run as a normal test.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let round: u64 = std::env::var(ROUND_ENV).unwrap().parse().unwrap();
    let store = Arc::new(Store::open(crash_config(Path::new(&dir))).unwrap());
    let threads: Vec<_> = (0..WRITER_THREADS)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in 0u64.. {
                    let key = format!("http://origin/r{round}/t{t}/{i}");
                    let body = body_for(key.as_bytes(), MAX_BODY);
                    // Half the writes announce their length, half stream.
                    let expected = (i % 2 == 0).then_some(body.len() as u64);
                    let Ok(mut w) = store.begin_write(key.as_bytes(), meta(), expected) else {
                        continue;
                    };
                    for chunk in body.chunks(16 * 1024) {
                        w.append(chunk).unwrap();
                    }
                    w.finish().unwrap();
                    println!("done {key}");
                    if i % 7 == 3 {
                        // Overwrite (same deterministic body) and purge an older one.
                        put(&store, key.as_bytes(), &body);
                        println!("done {key}");
                        let old = format!("http://origin/r{round}/t{t}/{}", i - 2);
                        println!("purging {old}");
                        store.purge(old.as_bytes());
                        println!("purged {old}");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Check every object file on every disk: header valid, key matches the file name,
/// body complete, checksum right, bytes as generated. Returns the number checked.
fn verify_all_files(dir: &Path) -> usize {
    let mut n = 0;
    for disk in ["d0", "d1"] {
        let objects = dir.join(disk).join("objects");
        for fan in std::fs::read_dir(&objects).unwrap() {
            for f in std::fs::read_dir(fan.unwrap().path()).unwrap() {
                let path = f.unwrap().path();
                let file = std::fs::File::open(&path).unwrap();
                let len = file.metadata().unwrap().len();
                let mut head = vec![0u8; 4096.min(len as usize)];
                file.read_exact_at(&mut head, 0).unwrap();
                let h =
                    decode_complete(&head).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let name = path.file_name().unwrap().to_str().unwrap();
                assert_eq!(KeyHash::from_file_name(name), Some(KeyHash::of(&h.key)));
                assert_eq!(len, h.body_offset + h.body_len, "{}", path.display());
                let mut body = vec![0u8; h.body_len as usize];
                file.read_exact_at(&mut body, h.body_offset).unwrap();
                assert_eq!(xxhash_rust::xxh3::xxh3_64(&body), h.body_checksum);
                assert_eq!(body, body_for(&h.key, MAX_BODY));
                n += 1;
            }
        }
    }
    n
}

#[test]
fn kill_9_during_concurrent_writes_loses_and_corrupts_nothing() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut done: Vec<String> = Vec::new();
    let mut purged: Vec<String> = Vec::new();
    // Purges the kill may have interrupted: either outcome is correct.
    let mut purging: Vec<String> = Vec::new();
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .env(ROUND_ENV, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = Arc::clone(&lines);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        // Kill somewhere between start-up (index load) and a few hundred ms of writes.
        let ms = 150 + xxhash_rust::xxh3::xxh3_64(&round.to_le_bytes()) % 350;
        std::thread::sleep(Duration::from_millis(ms));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        for line in lines.lock().unwrap().iter() {
            if let Some(k) = line.strip_prefix("done ") {
                done.push(k.to_owned());
            } else if let Some(k) = line.strip_prefix("purging ") {
                purging.push(k.to_owned());
            } else if let Some(k) = line.strip_prefix("purged ") {
                purged.push(k.to_owned());
            }
        }

        let store = Store::open(crash_config(dir.path())).unwrap();
        for d in ["d0", "d1"] {
            assert_eq!(
                count_files(&dir.path().join(d).join("tmp")),
                0,
                "temp files left"
            );
        }
        assert!(store.wait_loaded(Duration::from_secs(30)));
        let mut lost = Vec::new();
        for k in done.iter().filter(|k| !purging.contains(k)) {
            if let Err(e) = check_hit(&store, k.as_bytes(), &body_for(k.as_bytes(), MAX_BODY)) {
                lost.push(format!("{k}: {e}"));
            }
        }
        assert!(
            lost.is_empty(),
            "round {round}: {} lost, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(3)]
        );
        for k in &purged {
            assert!(
                matches!(store.lookup(k.as_bytes()), Lookup::Miss(_)),
                "round {round}: purged {k} is back"
            );
        }
        // Every round ends with a clean stop or (odd rounds) an abandoned store whose
        // journals the next child must replay: lent (as to the next process of an
        // upgrade), which writes no snapshot on close, then dropped so that its writer
        // lease lets the next child open the store.
        if round % 2 == 0 {
            store.close();
        } else {
            store.lend(Duration::from_secs(5)).unwrap();
            drop(store);
        }
        let files = verify_all_files(dir.path());
        let live: std::collections::HashSet<&String> =
            done.iter().filter(|k| !purging.contains(k)).collect();
        assert!(
            files >= live.len(),
            "round {round}: {files} files for {} objects",
            live.len()
        );
        eprintln!("round {round}: killed after {ms} ms, {} objects complete, {} purged, {files} files verified", done.len(), purged.len());
    }
    assert!(
        done.len() > 500,
        "the child wrote too little to test anything: {}",
        done.len()
    );
}
