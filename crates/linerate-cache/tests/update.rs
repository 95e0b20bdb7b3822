//! Integration tests of metadata updates (`Store::update_meta`) and of how purges and a
//! second write of the same key treat a write in flight.
#![allow(clippy::unwrap_used, reason = "tests on temp dirs they created")]

mod common;

use std::os::unix::fs::FileExt;
use std::time::Duration;

use common::*;
use linerate_cache::{
    Body, Lookup, ObjectHandle, ObjectMeta, Readable, Store, UpdateError, WriteFailure,
};

const MIB: u64 = 1 << 20;

fn fresh_meta() -> ObjectMeta {
    ObjectMeta {
        status: 200,
        request_time_ms: 1_700_000_100_000,
        response_time_ms: 1_700_000_100_050,
        etag: Some(b"\"v1\"".to_vec()),
        last_modified_s: Some(1_700_000_000),
        headers: vec![
            (b"Content-Type".to_vec(), b"video/mp4".to_vec()),
            (b"Cache-Control".to_vec(), b"max-age=600".to_vec()),
            (b"Date".to_vec(), b"Tue, 14 Nov 2023 22:15:00 GMT".to_vec()),
        ],
        derived: Default::default(),
    }
}

fn hit(store: &Store, key: &[u8]) -> ObjectHandle {
    match store.lookup(key) {
        Lookup::Hit(h) => h,
        other => panic!("not a hit: {}", other.as_str()),
    }
}

fn read_body(h: &ObjectHandle) -> Vec<u8> {
    let len = h.body_len().unwrap();
    let mut buf = vec![0u8; len as usize];
    h.file.read_exact_at(&mut buf, h.body_offset).unwrap();
    buf
}

fn object_path(dir: &std::path::Path, disk: &str, key: &[u8]) -> std::path::PathBuf {
    dir.join(disk)
        .join("objects")
        .join(linerate_cache::KeyHash::of(key).relative_path())
}

#[test]
fn update_replaces_meta_keeps_body_and_old_handles_read_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    let body = body_for(b"manifest", 20_000);
    put(&store, b"manifest", &body);
    let old = hit(&store, b"manifest");
    let used_before = store.stats()[0].used_bytes;

    assert_eq!(store.update_meta(b"manifest", fresh_meta()), Ok(true));

    // The handle opened before still reads the old object, body and metadata, in full.
    assert_eq!(read_body(&old), body);
    assert_eq!(*old.meta, meta());
    // A new lookup sees the new metadata over the same body, with a valid header.
    check_hit(&store, b"manifest", &body).unwrap();
    let new = hit(&store, b"manifest");
    assert_eq!(*new.meta, fresh_meta());
    assert!(new.created_ms > old.created_ms);
    let st = &store.stats()[0];
    assert_eq!(st.objects, 1);
    assert_eq!(st.reserved_bytes, 0);
    assert!(st.used_bytes.abs_diff(used_before) <= 4096, "{st:?}");
    assert_eq!(count_files(&dir.path().join("d0/tmp")), 0);

    // Again (a second 304), back to smaller metadata.
    assert_eq!(store.update_meta(b"manifest", meta()), Ok(true));
    check_hit(&store, b"manifest", &body).unwrap();
    assert_eq!(*hit(&store, b"manifest").meta, meta());
    assert_eq!(store.stats()[0].objects, 1);
    assert_eq!(store.stats()[0].used_bytes, used_before);
}

#[test]
fn update_of_missing_or_in_flight_key_is_false() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    assert_eq!(store.update_meta(b"nothing", fresh_meta()), Ok(false));
    // Only in flight: not stored yet.
    let mut w = store.begin_write(b"filling", meta(), None).unwrap();
    w.append(b"abc").unwrap();
    assert_eq!(store.update_meta(b"filling", fresh_meta()), Ok(false));
    w.append(b"def").unwrap();
    w.finish().unwrap();
    check_hit(&store, b"filling", b"abcdef").unwrap();
    assert_eq!(*hit(&store, b"filling").meta, meta());
    // Purged: gone.
    assert!(store.purge(b"filling"));
    assert_eq!(store.update_meta(b"filling", fresh_meta()), Ok(false));
    assert_eq!(count_files(&dir.path().join("d0/tmp")), 0);
}

#[test]
fn update_gives_way_to_a_write_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    put(&store, b"k", b"old body");
    let mut w = store.begin_write(b"k", meta(), None).unwrap();
    w.append(b"new body").unwrap();
    assert_eq!(
        store.update_meta(b"k", fresh_meta()),
        Err(UpdateError::Changed)
    );
    w.finish().unwrap();
    check_hit(&store, b"k", b"new body").unwrap();
    assert_eq!(*hit(&store, b"k").meta, meta());
    assert_eq!(count_files(&dir.path().join("d0/tmp")), 0);
}

#[test]
fn update_survives_restart_and_crash() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[("d0", 64 * MIB), ("d1", 64 * MIB)]);
    let keys: Vec<String> = (0..20).map(|i| format!("http://o/live/{i}.m3u8")).collect();
    {
        let store = Store::open(cfg.clone()).unwrap();
        for k in &keys {
            put(&store, k.as_bytes(), &body_for(k.as_bytes(), 5000));
        }
        for k in keys.iter().step_by(2) {
            assert_eq!(store.update_meta(k.as_bytes(), fresh_meta()), Ok(true));
        }
        store.close();
    }
    let check = |store: &Store| {
        for (i, k) in keys.iter().enumerate() {
            check_hit(store, k.as_bytes(), &body_for(k.as_bytes(), 5000)).unwrap();
            let want = if i % 2 == 0 { fresh_meta() } else { meta() };
            assert_eq!(*hit(store, k.as_bytes()).meta, want, "{k}");
        }
    };
    // Clean restart (snapshot).
    let store = Store::open(cfg.clone()).unwrap();
    assert!(store.wait_loaded(Duration::from_secs(10)));
    check(&store);
    assert_eq!(store.indexed_objects(), keys.len());
    // Update the other half, then "crash": the journal alone carries the updates.
    for k in keys.iter().skip(1).step_by(2) {
        assert_eq!(store.update_meta(k.as_bytes(), fresh_meta()), Ok(true));
    }
    let used: u64 = store.stats().iter().map(|s| s.used_bytes).sum();
    store.crash_for_test();
    let store = Store::open(cfg).unwrap();
    // Updating right after the start works whether or not the index has loaded yet.
    assert_eq!(store.update_meta(keys[0].as_bytes(), meta()), Ok(true));
    assert!(store.wait_loaded(Duration::from_secs(10)));
    assert_eq!(store.indexed_objects(), keys.len());
    assert_eq!(*hit(&store, keys[0].as_bytes()).meta, meta());
    for k in &keys[1..] {
        check_hit(&store, k.as_bytes(), &body_for(k.as_bytes(), 5000)).unwrap();
        assert_eq!(*hit(&store, k.as_bytes()).meta, fresh_meta(), "{k}");
    }
    let used_after: u64 = store.stats().iter().map(|s| s.used_bytes).sum();
    assert!(used_after.abs_diff(used) <= 4096, "{used} vs {used_after}");
    for d in ["d0", "d1"] {
        assert_eq!(count_files(&dir.path().join(d).join("tmp")), 0);
    }
}

#[test]
fn update_of_a_large_body_copies_it_all() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &[("d0", 64 * MIB)]);
    cfg.durability = linerate_cache::Durability::SyncBeforePublish;
    let store = Store::open(cfg).unwrap();
    let body: Vec<u8> = (0..3 * MIB + 12_345)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    put(&store, b"segment", &body);
    let old = hit(&store, b"segment");
    assert_eq!(store.update_meta(b"segment", fresh_meta()), Ok(true));
    check_hit(&store, b"segment", &body).unwrap();
    let new = hit(&store, b"segment");
    assert_eq!(new.body_offset % 4096, 0, "large bodies stay page aligned");
    assert_eq!(*new.meta, fresh_meta());
    assert_eq!(read_body(&old), body);
    let st = &store.stats()[0];
    assert_eq!((st.objects, st.reserved_bytes), (1, 0));
    assert_eq!(
        st.used_bytes,
        4096 + (3 * MIB + 12_345).div_ceil(4096) * 4096
    );
}

#[test]
fn update_refuses_oversized_meta_and_removes_a_corrupt_body() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    put(&store, b"k", &[3u8; 9000]);
    let mut huge = fresh_meta();
    huge.headers = (0..300)
        .map(|i| (format!("X-{i}").into_bytes(), b"v".to_vec()))
        .collect();
    assert_eq!(store.update_meta(b"k", huge), Err(UpdateError::TooLarge));
    let mut long = fresh_meta();
    long.headers.push((b"X-Long".to_vec(), vec![b'a'; 70_000]));
    assert_eq!(store.update_meta(b"k", long), Err(UpdateError::TooLarge));
    check_hit(&store, b"k", &[3u8; 9000]).unwrap();

    // Flip one body byte behind the store's back: the update must not re-stamp it.
    let h = hit(&store, b"k");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(object_path(dir.path(), "d0", b"k"))
        .unwrap();
    f.write_all_at(&[4], h.body_offset + 100).unwrap();
    assert_eq!(
        store.update_meta(b"k", fresh_meta()),
        Err(UpdateError::Corrupt)
    );
    assert!(matches!(store.lookup(b"k"), Lookup::Miss(_)));
    let st = &store.stats()[0];
    assert_eq!((st.objects, st.corrupt_objects, st.used_bytes), (0, 1, 0));
    assert_eq!(count_files(&dir.path().join("d0/tmp")), 0);
}

fn follow(h: ObjectHandle) -> std::thread::JoinHandle<Result<u64, (u64, WriteFailure)>> {
    let Body::Streaming(mut progress) = h.body else {
        panic!("not streaming")
    };
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut offset = 0;
            loop {
                match progress.wait_for(offset).await {
                    Ok(Readable::UpTo(n)) => offset = n,
                    Ok(Readable::End { len }) => return Ok(len),
                    Err(e) => return Err((e.written, e.reason)),
                }
            }
        })
    })
}

#[test]
fn purge_cancels_a_write_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    put(&store, b"k", b"stored");
    let mut w = store.begin_write(b"k", meta(), None).unwrap();
    w.append(&[1u8; 1000]).unwrap();
    // A reader following the write (the stored object hides it: look up another key).
    let mut w2 = store.begin_write(b"only-in-flight", meta(), None).unwrap();
    w2.append(&[2u8; 1000]).unwrap();
    let Lookup::Filling(h) = store.lookup(b"only-in-flight") else {
        panic!("not filling")
    };
    let reader = follow(h);
    assert!(store.purge(b"k"));
    assert!(!store.purge(b"only-in-flight"), "nothing stored yet");
    // Lookups stop finding the cancelled write at once.
    assert!(matches!(store.lookup(b"only-in-flight"), Lookup::Miss(_)));
    // Appends still succeed; finish refuses to publish; readers get the failure.
    w.append(&[1u8; 1000]).unwrap();
    w2.append(&[2u8; 1000]).unwrap();
    assert_eq!(w.finish().unwrap_err().failure, WriteFailure::Aborted);
    assert_eq!(w2.finish().unwrap_err().failure, WriteFailure::Aborted);
    assert_eq!(reader.join().unwrap(), Err((2000, WriteFailure::Aborted)));
    assert!(matches!(store.lookup(b"k"), Lookup::Miss(_)));
    assert!(matches!(store.lookup(b"only-in-flight"), Lookup::Miss(_)));

    // Prefix purge cancels too.
    let mut w = store.begin_write(b"p/1", meta(), Some(3)).unwrap();
    assert_eq!(store.purge_prefix(b"p/"), 0);
    w.append(b"abc").unwrap();
    assert_eq!(w.finish().unwrap_err().failure, WriteFailure::Aborted);
    assert!(matches!(store.lookup(b"p/1"), Lookup::Miss(_)));
    // A write begun after the purge is stored.
    put(&store, b"p/1", b"abc");
    check_hit(&store, b"p/1", b"abc").unwrap();

    assert_eq!(store.stats()[0].objects, 1);
    assert_eq!(store.stats()[0].reserved_bytes, 0);
    assert_eq!(count_files(&dir.path().join("d0/tmp")), 0);
}

#[test]
fn second_write_of_a_key_displaces_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    let mut first = store.begin_write(b"k", meta(), None).unwrap();
    first.append(b"first").unwrap();
    let Lookup::Filling(h) = store.lookup(b"k") else {
        panic!("not filling")
    };
    let reader_of_first = follow(h);
    let mut second = store.begin_write(b"k", meta(), None).unwrap();
    second.append(b"second!").unwrap();
    // Lookups follow the second.
    let Lookup::Filling(h) = store.lookup(b"k") else {
        panic!("not filling")
    };
    let reader_of_second = follow(h);
    second.finish().unwrap();
    assert_eq!(first.finish().unwrap_err().failure, WriteFailure::Aborted);
    assert_eq!(reader_of_second.join().unwrap(), Ok(7));
    assert_eq!(
        reader_of_first.join().unwrap(),
        Err((5, WriteFailure::Aborted))
    );
    check_hit(&store, b"k", b"second!").unwrap();
    let st = &store.stats()[0];
    assert_eq!((st.objects, st.used_bytes, st.reserved_bytes), (1, 8192, 0));
    assert_eq!(count_files(&dir.path().join("d0/tmp")), 0);
}

#[test]
fn updates_racing_purges_never_bring_an_object_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &[("d0", 256 * MIB), ("d1", 256 * MIB)]);
    // A flush between the writer's last cancel check and its rename widens the window
    // in which a purge must be caught under the shard lock (and the rename undone).
    cfg.durability = linerate_cache::Durability::SyncBeforePublish;
    let store = std::sync::Arc::new(Store::open(cfg).unwrap());
    let keys: Vec<String> = (0..200).map(|i| format!("http://o/m/{i}")).collect();
    for k in &keys {
        put(&store, k.as_bytes(), &body_for(k.as_bytes(), 40_000));
    }
    // Purging starts once an update has succeeded, so the two really overlap however
    // the threads are scheduled (on a loaded 2-core CI machine the purges could
    // otherwise all finish before an updater runs).
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let updaters: Vec<_> = (0..2)
        .map(|t| {
            let store = std::sync::Arc::clone(&store);
            let keys = keys.clone();
            let progress = std::sync::Arc::clone(&progress);
            std::thread::spawn(move || {
                let mut updated = 0;
                for round in 0..5 {
                    for k in keys.iter().skip((t + round) % 2) {
                        match store.update_meta(k.as_bytes(), fresh_meta()) {
                            Ok(true) => {
                                updated += 1;
                                progress.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                            Ok(false) | Err(UpdateError::Changed) => {}
                            Err(e) => panic!("{k}: {e}"),
                        }
                    }
                }
                updated
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while progress.load(std::sync::atomic::Ordering::SeqCst) == 0
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    for k in &keys {
        store.purge(k.as_bytes());
        std::thread::yield_now();
    }
    let updated: u32 = updaters.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(updated > 0);
    for k in &keys {
        assert!(
            matches!(store.lookup(k.as_bytes()), Lookup::Miss(_)),
            "{k} came back"
        );
    }
    for st in store.stats() {
        assert_eq!(
            (st.objects, st.used_bytes, st.reserved_bytes),
            (0, 0, 0),
            "{st:?}"
        );
    }
    for d in ["d0", "d1"] {
        assert_eq!(count_files(&dir.path().join(d).join("tmp")), 0);
        let files: usize = std::fs::read_dir(dir.path().join(d).join("objects"))
            .unwrap()
            .map(|e| count_files(&e.unwrap().path()))
            .sum();
        assert_eq!(files, 0, "{d}: files left behind");
    }
}

#[test]
fn writes_finishing_while_purged_are_never_published() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &[("d0", 256 * MIB)]);
    cfg.durability = linerate_cache::Durability::SyncBeforePublish;
    let store = std::sync::Arc::new(Store::open(cfg).unwrap());
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let purger = {
        let store = std::sync::Arc::clone(&store);
        std::thread::spawn(move || {
            for k in rx {
                store.purge(k.as_bytes());
            }
        })
    };
    let mut aborted = 0;
    for i in 0..300 {
        let k = format!("http://o/seg/{i}");
        let mut w = store.begin_write(k.as_bytes(), meta(), Some(5000)).unwrap();
        w.append(&[9u8; 5000]).unwrap();
        tx.send(k).unwrap(); // purged while (or just after) this write finishes
        match w.finish() {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.failure, WriteFailure::Aborted);
                aborted += 1;
            }
        }
    }
    drop(tx);
    purger.join().unwrap();
    // Usually some purges land mid-finish (caught under the shard lock); how many
    // depends on scheduling, so it is only reported.
    eprintln!("{aborted} of 300 writes cancelled by their purge");
    for i in 0..300 {
        let k = format!("http://o/seg/{i}");
        assert!(
            matches!(store.lookup(k.as_bytes()), Lookup::Miss(_)),
            "{k} survived its purge"
        );
    }
    let st = &store.stats()[0];
    assert_eq!(
        (st.objects, st.used_bytes, st.reserved_bytes),
        (0, 0, 0),
        "{st:?}"
    );
    let files: usize = std::fs::read_dir(dir.path().join("d0/objects"))
        .unwrap()
        .map(|e| count_files(&e.unwrap().path()))
        .sum();
    assert_eq!(files, 0, "files left behind");
    assert_eq!(count_files(&dir.path().join("d0/tmp")), 0);
}
