//! Integration tests of the store on temp directories: format checks, atomic publish,
//! restart, purge, read-while-write, eviction and statistics.
#![allow(clippy::unwrap_used, reason = "tests on temp dirs they created")]

mod common;

use std::os::unix::fs::FileExt;
use std::time::Duration;

use common::*;
use linerate_cache::{Body, Lookup, MissReason, Readable, Store, WriteFailure, WriteRefused};

const MIB: u64 = 1 << 20;

fn object_path(dir: &std::path::Path, disk: &str, key: &[u8]) -> std::path::PathBuf {
    dir.join(disk)
        .join("objects")
        .join(linerate_cache::KeyHash::of(key).relative_path())
}

#[test]
fn write_then_hit_with_metadata_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    assert!(matches!(
        store.lookup(b"k"),
        Lookup::Miss(MissReason::NotCached)
    ));
    let small = body_for(b"small", 1000);
    put(&store, b"small", &small);
    let big = vec![7u8; 100_000];
    put(&store, b"big", &big);
    check_hit(&store, b"small", &small).unwrap();
    check_hit(&store, b"big", &big).unwrap();
    let Lookup::Hit(h) = store.lookup(b"big") else {
        panic!("miss")
    };
    assert_eq!(h.body_offset % 4096, 0, "large bodies are page aligned");
    assert_eq!(h.meta.header(b"content-type"), Some(&b"video/mp4"[..]));
    let st = &store.stats()[0];
    assert_eq!(st.objects, 2);
    assert!(st.used_bytes >= 100_000 + 4096);
    assert_eq!(count_files(&dir.path().join("d0/tmp")), 0);
}

#[test]
fn unknown_length_and_length_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    let mut w = store.begin_write(b"chunked", meta(), None).unwrap();
    w.append(&[1u8; 10_000]).unwrap();
    w.append(&[2u8; 10_000]).unwrap();
    w.finish().unwrap();
    let mut body = vec![1u8; 10_000];
    body.extend_from_slice(&[2u8; 10_000]);
    check_hit(&store, b"chunked", &body).unwrap();

    let mut w = store.begin_write(b"short", meta(), Some(100)).unwrap();
    w.append(&[0u8; 50]).unwrap();
    assert_eq!(
        w.finish().unwrap_err().failure,
        WriteFailure::LengthMismatch
    );
    let mut w = store.begin_write(b"long", meta(), Some(10)).unwrap();
    assert!(w.append(&[0u8; 11]).is_err());
    drop(w);
    assert!(matches!(store.lookup(b"short"), Lookup::Miss(_)));
    assert!(matches!(store.lookup(b"long"), Lookup::Miss(_)));
    assert_eq!(
        count_files(&dir.path().join("d0/tmp")),
        0,
        "failed writes leave no temp file"
    );
}

#[test]
fn overwrite_replaces_and_accounts_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    put(&store, b"k", &[1u8; 5000]);
    put(&store, b"k", &[2u8; 9000]);
    check_hit(&store, b"k", &[2u8; 9000]).unwrap();
    let st = &store.stats()[0];
    assert_eq!(st.objects, 1);
    assert_eq!(st.used_bytes, 12288);
}

#[test]
fn wrong_version_checksum_or_key_is_a_miss_not_a_wrong_object() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    for k in [&b"ver"[..], b"sum", b"key"] {
        put(&store, k, &body_for(k, 2000));
    }
    // Version byte.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(object_path(dir.path(), "d0", b"ver"))
        .unwrap();
    f.write_all_at(&[9], 4).unwrap();
    // A byte inside the key: checksum mismatch.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(object_path(dir.path(), "d0", b"sum"))
        .unwrap();
    f.write_all_at(b"X", 57).unwrap();
    // A valid object for another key placed under this key's name (a hash collision).
    std::fs::copy(
        object_path(dir.path(), "d0", b"ver"),
        object_path(dir.path(), "d0", b"key"),
    )
    .unwrap();
    put(&store, b"other", &[5u8; 100]);
    std::fs::copy(
        object_path(dir.path(), "d0", b"other"),
        object_path(dir.path(), "d0", b"key"),
    )
    .unwrap();

    assert!(matches!(
        store.lookup(b"ver"),
        Lookup::Miss(MissReason::Corrupt(_))
    ));
    assert!(matches!(
        store.lookup(b"sum"),
        Lookup::Miss(MissReason::Corrupt(_))
    ));
    assert!(matches!(
        store.lookup(b"key"),
        Lookup::Miss(MissReason::KeyMismatch)
    ));
    // Bad files are removed and forgotten; the next lookups are plain misses.
    assert!(matches!(
        store.lookup(b"ver"),
        Lookup::Miss(MissReason::NotCached)
    ));
    assert!(!object_path(dir.path(), "d0", b"ver").exists());
    let st = &store.stats()[0];
    assert_eq!(st.corrupt_objects, 2);
    assert_eq!(st.objects, 1);
}

#[test]
fn restart_after_clean_stop_keeps_everything_and_reads_only_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[("d0", 256 * MIB), ("d1", 256 * MIB)]);
    let store = Store::open(cfg.clone()).unwrap();
    for i in 0..2000u32 {
        let k = format!("http://o/v/{i}");
        put(&store, k.as_bytes(), &body_for(k.as_bytes(), 3000));
    }
    assert!(store.purge(b"http://o/v/7"));
    store.close();
    drop(store);
    for d in ["d0", "d1"] {
        assert_eq!(
            count_files(&dir.path().join(d)).min(99),
            count_files(&dir.path().join(d))
        );
        let journals: Vec<_> = std::fs::read_dir(dir.path().join(d))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("journal."))
            .collect();
        assert_eq!(journals.len(), 1, "one fresh journal after the snapshot");
    }
    let store = Store::open(cfg).unwrap();
    assert!(store.wait_loaded(Duration::from_secs(10)));
    assert_eq!(store.indexed_objects(), 1999);
    for i in 0..2000u32 {
        let k = format!("http://o/v/{i}");
        if i == 7 {
            assert!(matches!(store.lookup(k.as_bytes()), Lookup::Miss(_)));
        } else {
            check_hit(&store, k.as_bytes(), &body_for(k.as_bytes(), 3000)).unwrap();
        }
    }
    let total: u64 = store.stats().iter().map(|s| s.objects).sum();
    assert_eq!(total, 1999);
    assert!(
        store.stats().iter().all(|s| s.objects > 700),
        "both disks hold a share"
    );
}

#[test]
fn restart_without_snapshot_replays_journal_and_adopts_orphans() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[("d0", 256 * MIB)]);
    {
        let store = Store::open(cfg.clone()).unwrap();
        for i in 0..500u32 {
            let k = format!("k{i}");
            put(&store, k.as_bytes(), &body_for(k.as_bytes(), 3000));
        }
        // Simulate a crash: no close(), and remove the snapshot written by any
        // compaction so only journals remain.
        store.crash_for_test();
    }
    // An orphan: valid object file with no journal record (published just before a
    // crash). Take one object's file and its journal record out of the picture by
    // writing a copy under a new key through a second store on another dir.
    let other = tempfile::tempdir().unwrap();
    let s2 = Store::open(config(other.path(), &[("d0", 64 * MIB)])).unwrap();
    put(&s2, b"orphan", &body_for(b"orphan", 3000));
    let src = object_path(other.path(), "d0", b"orphan");
    let dst = object_path(dir.path(), "d0", b"orphan");
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    std::fs::copy(src, &dst).unwrap();
    // A leftover temp file.
    std::fs::write(dir.path().join("d0/tmp/deadbeef.1.1"), b"partial").unwrap();

    let store = Store::open(cfg).unwrap();
    assert_eq!(count_files(&dir.path().join("d0/tmp")), 0);
    assert!(store.wait_loaded(Duration::from_secs(10)));
    for i in 0..500u32 {
        let k = format!("k{i}");
        check_hit(&store, k.as_bytes(), &body_for(k.as_bytes(), 3000)).unwrap();
    }
    // The reconcile scan adopts the orphan in the background.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.indexed_objects() < 501 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    check_hit(&store, b"orphan", &body_for(b"orphan", 3000)).unwrap();
}

#[test]
fn purge_by_prefix_is_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[("d0", 64 * MIB)]);
    let store = Store::open(cfg.clone()).unwrap();
    for t in ["a", "b"] {
        for i in 0..50 {
            let k = format!("http://h/{t}/{i}");
            put(&store, k.as_bytes(), b"x");
        }
    }
    assert_eq!(store.purge_prefix(b"http://h/a/"), 50);
    assert!(!store.purge(b"http://h/a/1"));
    assert!(matches!(store.lookup(b"http://h/a/3"), Lookup::Miss(_)));
    store.crash_for_test(); // crash: the journal alone must carry the purge
    let store = Store::open(cfg).unwrap();
    assert!(store.wait_loaded(Duration::from_secs(10)));
    assert_eq!(store.indexed_objects(), 50);
    assert!(matches!(store.lookup(b"http://h/a/3"), Lookup::Miss(_)));
    check_hit(&store, b"http://h/b/3", b"x").unwrap();
}

#[test]
fn read_while_write_follows_the_writer_to_completion() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    let mut w = store.begin_write(b"live", meta(), None).unwrap();
    let Lookup::Filling(h) = store.lookup(b"live") else {
        panic!("not filling")
    };
    let Body::Streaming(mut progress) = h.body else {
        panic!("not streaming")
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reader = std::thread::spawn(move || {
        rt.block_on(async {
            let mut got = Vec::new();
            loop {
                match progress.wait_for(got.len() as u64).await.unwrap() {
                    Readable::UpTo(n) => {
                        let mut buf = vec![0u8; n as usize - got.len()];
                        h.file
                            .read_exact_at(&mut buf, h.body_offset + got.len() as u64)
                            .unwrap();
                        got.extend_from_slice(&buf);
                    }
                    Readable::End { len } => {
                        assert_eq!(len, got.len() as u64);
                        return got;
                    }
                }
            }
        })
    });
    for i in 0..20u8 {
        w.append(&[i; 1000]).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    w.finish().unwrap();
    let got = reader.join().unwrap();
    let want: Vec<u8> = (0..20u8).flat_map(|i| [i; 1000]).collect();
    assert_eq!(got, want);
    check_hit(&store, b"live", &want).unwrap();
}

#[test]
fn read_while_write_reports_writer_failure() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    let mut w = store.begin_write(b"doomed", meta(), Some(10_000)).unwrap();
    let Lookup::Filling(h) = store.lookup(b"doomed") else {
        panic!("not filling")
    };
    let Body::Streaming(mut progress) = h.body else {
        panic!("not streaming")
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reader = std::thread::spawn(move || {
        rt.block_on(async {
            let mut offset = 0;
            loop {
                match progress.wait_for(offset).await {
                    Ok(Readable::UpTo(n)) => offset = n,
                    Ok(Readable::End { .. }) => return Ok(offset),
                    Err(e) => return Err((offset, e)),
                }
            }
        })
    });
    w.append(&[1u8; 5000]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    w.abort(WriteFailure::Aborted); // origin died half-way
    let (offset, err) = reader.join().unwrap().unwrap_err();
    assert_eq!(offset, 5000);
    assert_eq!(err.written, 5000);
    assert_eq!(err.reason, WriteFailure::Aborted);
    assert!(matches!(store.lookup(b"doomed"), Lookup::Miss(_)));
    assert_eq!(count_files(&dir.path().join("d0/tmp")), 0);
}

#[test]
fn complete_unstored_finishes_readers_but_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    let mut w = store.begin_write(b"long", meta(), Some(3000)).unwrap();
    let Lookup::Filling(h) = store.lookup(b"long") else {
        panic!("not filling")
    };
    let Body::Streaming(mut progress) = h.body else {
        panic!("not streaming")
    };
    w.append(&[7u8; 3000]).unwrap();
    // The origin then sent bytes past its Content-Length: the declared body is whole,
    // but the object is not kept.
    w.complete_unstored();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let end = rt.block_on(progress.wait_for(3000)).unwrap();
    assert_eq!(end, Readable::End { len: 3000 });
    // The reader's descriptor still reads every byte after the file is gone.
    let mut buf = vec![0u8; 3000];
    h.file.read_exact_at(&mut buf, h.body_offset).unwrap();
    assert_eq!(buf, vec![7u8; 3000]);
    assert!(matches!(store.lookup(b"long"), Lookup::Miss(_)));
    assert_eq!(count_files(&dir.path().join("d0/tmp")), 0);
    assert_eq!(count_files(&dir.path().join("d0/objects")), 0);
    // A short body is still a length mismatch, never complete.
    let mut w = store.begin_write(b"short", meta(), Some(3000)).unwrap();
    let Lookup::Filling(h) = store.lookup(b"short") else {
        panic!("not filling")
    };
    let Body::Streaming(mut progress) = h.body else {
        panic!("not streaming")
    };
    w.append(&[1u8; 1000]).unwrap();
    w.complete_unstored();
    let err = rt.block_on(progress.wait_for(1000)).unwrap_err();
    assert_eq!(err.reason, WriteFailure::LengthMismatch);
}

#[test]
fn eviction_runs_ahead_and_keeps_used_bytes_under_the_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &[("d0", 4 * MIB)]);
    cfg.high_watermark_percent = 80;
    cfg.low_watermark_percent = 60;
    // The filesystem itself reported as nearly empty: the store's own watermarks are
    // under test, not how full this machine's disk is (below 20 % free the store
    // rightly evicts to make room on the filesystem, and everything goes).
    let io = std::sync::Arc::new(linerate_cache::fault::FaultyIo::new());
    io.set_space(Some(linerate_cache::io::FsSpace {
        total_bytes: 1 << 40,
        available_bytes: 1 << 39,
        read_only: false,
    }));
    let store = Store::open_with_io(cfg, io).unwrap();
    // Popular objects, hit repeatedly.
    let popular: Vec<String> = (0..20).map(|i| format!("pop/{i}")).collect();
    for k in &popular {
        put(&store, k.as_bytes(), &[1u8; 16_000]);
    }
    let mut refused = 0;
    for i in 0..2000 {
        for k in popular.iter().skip(i % 4).step_by(4) {
            assert!(
                matches!(store.lookup(k.as_bytes()), Lookup::Hit(_)),
                "popular {k} lost at {i}"
            );
        }
        let k = format!("once/{i}");
        match store.begin_write(k.as_bytes(), meta(), Some(16_000)) {
            Ok(mut w) => {
                w.append(&[2u8; 16_000]).unwrap();
                w.finish().unwrap();
            }
            Err(WriteRefused::NoSpace) => refused += 1,
            Err(e) => panic!("{e}"),
        }
        if i % 50 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let st = &store.stats()[0];
    // How many writes were refused rather than waiting depends on how promptly the
    // evictor thread is scheduled on a loaded 2-core machine; both outcomes are fine.
    assert!(st.evictions > 100, "{st:?}");
    assert_eq!(st.evictions + st.objects + refused, 2020, "{st:?}");
    assert!(st.used_bytes <= st.capacity_bytes / 100 * 80, "{st:?}");
    assert_eq!(st.admissions_refused, refused);
    let files: usize = std::fs::read_dir(dir.path().join("d0/objects"))
        .unwrap()
        .map(|d| count_files(&d.unwrap().path()))
        .sum();
    assert_eq!(
        files as u64, st.objects,
        "every evicted object's file is gone"
    );
}

#[test]
fn contains_answers_from_the_index_for_stored_and_in_flight_keys() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    assert!(!store.contains(b"k"));
    put(&store, b"k", &body_for(b"k", 1000));
    assert!(store.contains(b"k"));
    assert!(!store.contains(b"k2"), "another key");
    let mut w = store.begin_write(b"live", meta(), Some(10)).unwrap();
    assert!(store.contains(b"live"), "being written");
    w.append(&[1u8; 10]).unwrap();
    w.finish().unwrap();
    assert!(store.contains(b"live"));
    assert!(store.purge(b"k"));
    assert!(!store.contains(b"k"), "purged");
}

/// Guards `Store::keys` and `Store::peek`, which the cache's tag index is rebuilt with
/// at start: every stored key is listed (not one being written), and a peek reads the
/// stored fields after a restart, misses what is not stored.
#[test]
fn keys_and_peek_read_every_stored_object_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[("d0", 64 * MIB)]);
    let store = Store::open(cfg.clone()).unwrap();
    for i in 0..20 {
        put(&store, format!("http://h/{i}").as_bytes(), b"x");
    }
    let _writing = store.begin_write(b"http://h/live", meta(), None).unwrap();
    let mut keys: Vec<Vec<u8>> = store.keys().into_iter().map(Vec::from).collect();
    keys.sort();
    assert_eq!(keys.len(), 20, "the write in flight is not listed");
    drop(_writing);
    store.close();
    drop(store);
    let store = Store::open(cfg).unwrap();
    assert!(store.wait_loaded(Duration::from_secs(10)));
    assert_eq!(store.keys().len(), 20);
    let Lookup::Hit(h) = store.peek(b"http://h/7") else {
        panic!("stored object not found by peek")
    };
    assert_eq!(h.meta.header(b"content-type"), Some(&b"video/mp4"[..]));
    assert!(matches!(
        store.peek(b"http://h/none"),
        Lookup::Miss(MissReason::NotCached)
    ));
}

/// Pinning at admission (issue 22): a key asked to be pinned before its write begins is
/// written pinned: indexed pinned when published, with no moment unpinned for eviction
/// (a fill job pinned only after the answer, and eviction could take the object first).
/// Once the request is over, later writes of the key are ordinary again.
#[test]
fn a_write_begun_after_pin_on_write_is_published_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    assert!(store.wait_loaded(Duration::from_secs(5)));
    store.pin_on_write(b"wanted");
    put(&store, b"wanted", b"pinned from the start");
    put(&store, b"other", b"not pinned");
    let pinned = store.pinned_bytes();
    assert!(pinned > 0, "published unpinned");
    store.pin_on_write_done(b"wanted");
    // A later write of the key (a new version) is not pinned by the old request.
    store.purge(b"wanted");
    assert_eq!(store.pinned_bytes(), 0);
    put(&store, b"wanted", b"again");
    assert_eq!(store.pinned_bytes(), 0);
    // A write already in flight when the pin is asked for is published pinned too.
    let mut w = store.begin_write(b"flying", meta(), Some(3)).unwrap();
    store.pin_on_write(b"flying");
    w.append(b"abc").unwrap();
    w.finish().unwrap();
    store.pin_on_write_done(b"flying");
    assert!(store.pinned_bytes() > 0);
}

/// Guards a pin on write against outliving the request that asked for it (review
/// finding C4): a pinned fill job asks before it requests an object, and when its
/// request fails (its own connection broke, or the answer could not be used) while
/// another client's write of the same key goes on, that write was still published
/// pinned, with no job left to unpin it: pinned for ever. A pin on write applies to a
/// write only while some request still asks for it at the publish; a pin of an object
/// still being written (`Store::pin`) is refused and leaves no mark behind.
#[test]
fn a_pin_on_write_given_up_before_the_publish_pins_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    assert!(store.wait_loaded(Duration::from_secs(5)));
    // Asked before the write began, given up before its publish.
    store.pin_on_write(b"begun-after");
    let mut w = store.begin_write(b"begun-after", meta(), Some(3)).unwrap();
    w.append(b"abc").unwrap();
    store.pin_on_write_done(b"begun-after");
    w.finish().unwrap();
    // Asked while the write was in flight, given up before its publish.
    let mut w = store.begin_write(b"in-flight", meta(), Some(3)).unwrap();
    store.pin_on_write(b"in-flight");
    w.append(b"abc").unwrap();
    store.pin_on_write_done(b"in-flight");
    w.finish().unwrap();
    // Pinned while still being written: refused, and nothing of it stays.
    let mut w = store.begin_write(b"pinned-early", meta(), Some(3)).unwrap();
    assert!(!store.pin(b"pinned-early", true));
    w.append(b"abc").unwrap();
    w.finish().unwrap();
    for key in [&b"begun-after"[..], b"in-flight", b"pinned-early"] {
        assert!(matches!(store.peek(key), Lookup::Hit(_)), "not published");
    }
    assert_eq!(store.pinned_bytes(), 0, "published pinned for nobody");
    // Two requests ask and one gives up: the other still does, so it is pinned.
    store.pin_on_write(b"two");
    store.pin_on_write(b"two");
    let mut w = store.begin_write(b"two", meta(), Some(3)).unwrap();
    w.append(b"abc").unwrap();
    store.pin_on_write_done(b"two");
    w.finish().unwrap();
    store.pin_on_write_done(b"two");
    assert!(
        store.pinned_bytes() > 0,
        "the request still asking lost its pin"
    );
}

/// Guards the journal of a write published pinned (a pinned fill job's, pinned at
/// admission): its `Pin` record is written before its `Insert`, and a replay ignores a
/// pin of an object it has not seen yet, so the insert itself must say pinned, or a
/// restart from the journal (no snapshot: a crash) loses the pin.
#[test]
fn a_write_published_pinned_stays_pinned_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[("d0", 64 * MIB)]);
    let store = Store::open(cfg.clone()).unwrap();
    assert!(store.wait_loaded(Duration::from_secs(5)));
    store.pin_on_write(b"wanted");
    put(&store, b"wanted", b"pinned from the start");
    store.pin_on_write_done(b"wanted");
    let pinned = store.pinned_bytes();
    assert!(pinned > 0, "published unpinned");
    store.crash_for_test();
    let store = Store::open(cfg).unwrap();
    assert!(store.wait_loaded(Duration::from_secs(10)));
    assert_eq!(store.pinned_bytes(), pinned, "the pin was lost");
}

/// Guards `Store::lookup_nowait` (the server's event loop looks up with it): an object
/// whose header is not in the page cache is not read (`None`: the caller looks it up
/// where waiting is harmless); a miss answers as `lookup` does; once the header was
/// read, it answers the hit. On a real disk (target/tmp), where pages can be dropped.
#[test]
fn lookup_nowait_never_reads_a_header_from_the_disk() {
    use std::os::fd::AsFd;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    let body = vec![3u8; 100_000];
    put(&store, b"cold", &body);
    // Published with the default durability: on disk and clean, so its pages drop.
    let f = std::fs::File::open(object_path(dir.path(), "d0", b"cold")).unwrap();
    f.sync_all().unwrap();
    linerate_sys::pagecache::fadvise(f.as_fd(), 0, 0, linerate_sys::pagecache::Advice::DontNeed)
        .unwrap();
    assert!(
        store.lookup_nowait(b"cold").is_none(),
        "a cold header was read"
    );
    assert!(matches!(
        store.lookup_nowait(b"missing"),
        Some(Lookup::Miss(MissReason::NotCached))
    ));
    check_hit(&store, b"cold", &body).unwrap();
    assert!(matches!(store.lookup_nowait(b"cold"), Some(Lookup::Hit(_))));
}
