//! The writer lease and its hand-over (zero-downtime upgrade): a second store on the
//! same directories is refused; a lent store writes nothing, and the process it was
//! lent to opens it with every object; a store taken back writes again.
#![allow(clippy::unwrap_used, reason = "tests on temp dirs they created")]

mod common;

use std::fs::File;
use std::time::Duration;

use common::*;
use linerate_cache::{LockError, OpenError, Store, StoreLock, WriteRefused};

const MIB: u64 = 1 << 20;

#[test]
fn a_second_store_on_the_same_directories_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[("d0", 64 * MIB), ("d1", 64 * MIB)]);
    let first = Store::open(cfg.clone()).unwrap();
    let Err(e) = Store::open(cfg.clone()) else {
        panic!("a second store opened on held directories");
    };
    assert!(matches!(e, OpenError::Lock(LockError::Held { .. })), "{e}");
    drop(first);
    Store::open(cfg).unwrap();
}

#[test]
fn lent_store_hands_every_object_to_the_next_holder() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[("d0", 64 * MIB)]);
    let old = Store::open(cfg.clone()).unwrap();
    assert!(old.wait_loaded(Duration::from_secs(5)));
    let bodies: Vec<(Vec<u8>, Vec<u8>)> = (0..50)
        .map(|i| {
            let k = format!("k{i}").into_bytes();
            let b = body_for(&k, 20_000);
            (k, b)
        })
        .collect();
    for (k, b) in &bodies {
        put(&old, k, b);
    }
    old.lend(Duration::from_secs(1)).unwrap();
    assert!(matches!(
        old.begin_write(b"new", meta(), Some(3)),
        Err(WriteRefused::Lent)
    ));
    assert!(!old.purge(b"k0"));
    // The old process still answers hits while it drains.
    check_hit(&old, b"k0", &bodies[0].1).unwrap();
    let passed: Vec<File> = old
        .lock_fds()
        .iter()
        .map(|f| File::from(f.try_clone_to_owned().unwrap()))
        .collect();
    let lock = StoreLock::adopt(&cfg, passed).unwrap();
    let new = Store::open_locked(cfg.clone(), lock).unwrap();
    assert!(new.wait_loaded(Duration::from_secs(5)));
    drop(old); // the old process exits: it must not write a snapshot over the new one's
    assert_eq!(new.indexed_objects(), bodies.len());
    for (k, b) in &bodies {
        check_hit(&new, k, b).unwrap();
    }
    put(&new, b"after", b"written by the new holder");
    drop(new);
    let again = Store::open(cfg).unwrap();
    assert!(again.wait_loaded(Duration::from_secs(5)));
    assert_eq!(again.indexed_objects(), bodies.len() + 1);
}

/// A write whose body is still coming in after the lend's grace does not hold the lend
/// up (an upgrade never waits on a long fill): it goes on to its last byte for its
/// readers, who get it whole, and is never published, so the next holder finds nothing
/// partial and fetches it again. A body complete within the grace is published.
#[test]
fn lending_leaves_a_write_still_coming_in_unstored_and_its_readers_whole() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    assert!(store.wait_loaded(Duration::from_secs(5)));
    let mut w = store.begin_write(b"slow", meta(), Some(4)).unwrap();
    let linerate_cache::Lookup::Filling(h) = store.lookup(b"slow") else {
        panic!("not filling")
    };
    let linerate_cache::Body::Streaming(mut progress) = h.body else {
        panic!("not streaming")
    };
    w.append(b"ab").unwrap();
    // Finishes within the grace: published before the store is lent.
    let mut quick = store.begin_write(b"quick", meta(), Some(2)).unwrap();
    quick.append(b"q").unwrap();
    let finisher = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        quick.append(b"q").unwrap();
        quick.finish().unwrap();
    });
    let t = std::time::Instant::now();
    store.lend(Duration::from_millis(300)).unwrap();
    finisher.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    check_hit(&store, b"quick", b"qq").unwrap();
    // The slow one goes on after the lend; its reader is told it is complete.
    w.append(b"cd").unwrap();
    assert_eq!(
        w.finish().unwrap_err().failure,
        linerate_cache::WriteFailure::Aborted
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(
        rt.block_on(progress.wait_for(4)).unwrap(),
        linerate_cache::Readable::End { len: 4 }
    );
    let mut buf = [0u8; 4];
    h.file.read_exact_at(&mut buf, h.body_offset).unwrap();
    assert_eq!(&buf, b"abcd");
    assert!(matches!(
        store.lookup(b"slow"),
        linerate_cache::Lookup::Miss(_)
    ));
    assert_eq!(
        std::fs::read_dir(dir.path().join("d0/tmp"))
            .unwrap()
            .count(),
        0
    );
    // Taken back: writing again, and the unstored write stays unstored.
    store.resume();
    put(&store, b"next", b"x");
    assert!(matches!(
        store.lookup(b"slow"),
        linerate_cache::Lookup::Miss(_)
    ));
    drop(store);
    let again = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    assert!(again.wait_loaded(Duration::from_secs(5)));
    assert!(matches!(
        again.lookup(b"slow"),
        linerate_cache::Lookup::Miss(_)
    ));
    check_hit(&again, b"quick", b"qq").unwrap();
}

#[test]
fn a_store_taken_back_writes_again_and_its_index_is_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[("d0", 64 * MIB)]);
    let store = Store::open(cfg.clone()).unwrap();
    assert!(store.wait_loaded(Duration::from_secs(5)));
    put(&store, b"a", b"first");
    store.lend(Duration::from_secs(1)).unwrap();
    store.resume();
    assert!(!store.is_lent());
    put(&store, b"b", b"second");
    assert!(store.purge(b"a"));
    drop(store);
    let reopened = Store::open(cfg).unwrap();
    assert!(reopened.wait_loaded(Duration::from_secs(5)));
    assert_eq!(reopened.indexed_objects(), 1);
    check_hit(&reopened, b"b", b"second").unwrap();
}
