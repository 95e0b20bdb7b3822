//! The writer lease and its hand-over (zero-downtime upgrade): a second store on the
//! same directories is refused; a lent store writes nothing, and the process it was
//! lent to opens it with every object; a store taken back writes again.
#![allow(clippy::unwrap_used, reason = "tests on temp dirs they created")]

mod common;

use std::fs::File;
use std::time::Duration;

use common::*;
use linerate_cache::{LendError, LockError, OpenError, Store, StoreLock, WriteRefused};

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

#[test]
fn lending_waits_for_writes_in_flight_and_gives_up_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    assert!(store.wait_loaded(Duration::from_secs(5)));
    let mut w = store.begin_write(b"slow", meta(), Some(4)).unwrap();
    w.append(b"ab").unwrap();
    assert!(matches!(
        store.lend(Duration::from_millis(50)),
        Err(LendError::WritesInFlight(1))
    ));
    // Not lent after the failure: the write finishes and another starts.
    w.append(b"cd").unwrap();
    w.finish().unwrap();
    check_hit(&store, b"slow", b"abcd").unwrap();
    put(&store, b"next", b"x");
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
