//! Publishing in the background (`ObjectWriter::finish_later`): readers are told the
//! body is complete before the flush, the disk's publisher group-commits, and a disk
//! too far behind refuses new objects without losing one it accepted.
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed step should fail loudly"
)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::*;
use linerate_cache::fault::FaultyIo;
use linerate_cache::{Body, Durability, Lookup, Progress, Store, WriteRefused};

const MIB: u64 = 1 << 20;

/// Guards "the client's response is never delayed by the flush": a reader following a
/// write sees it complete as soon as `finish_later` returns, before any publish; the
/// object is a hit once the publisher calls back.
#[test]
fn readers_see_the_body_complete_before_the_publish() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), &[("d0", 64 * MIB)])).unwrap();
    let body = body_for(b"k", 100_000);
    let mut w = store
        .begin_write(b"k", meta(), Some(body.len() as u64))
        .unwrap();
    w.append(&body).unwrap();
    let Lookup::Filling(h) = store.lookup_latest(b"k") else {
        panic!("the write is followable")
    };
    let Body::Streaming(progress) = &h.body else {
        panic!("streaming")
    };
    let (tx, rx) = mpsc::channel();
    w.finish_later(Box::new(move |r| tx.send(r.is_ok()).unwrap()));
    assert_eq!(
        progress.current(),
        Progress::Complete {
            len: body.len() as u64
        }
    );
    assert!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        "published"
    );
    check_hit(&store, b"k", &body).unwrap();
    assert!(store.stats()[0].published >= 1);
}

/// Guards the backlog bound: while more than `max_publish_backlog` bytes wait for the
/// publisher, a new write is refused (`Behind`, counted); every object accepted before
/// is still published whole; once the publisher catches up, writes are accepted again.
#[test]
fn a_disk_behind_its_flushes_refuses_new_objects_and_loses_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &[("d0", 512 * MIB)]);
    cfg.max_publish_backlog = 256 * 1024;
    // Flushes happen only with this durability (the tests' default is `NoSync`): without
    // it the delay below never applied, and the backlog grew only when the publisher
    // happened to be slower than this loop (it failed under a loaded full suite).
    cfg.durability = Durability::SyncBeforePublish;
    // A disk whose flush takes 20 ms (on tmpfs a real one takes nothing).
    let io = Arc::new(FaultyIo::new());
    io.set_sync_delay(Some(Duration::from_millis(20)));
    let store = Store::open_with_io(cfg, io.clone()).unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let mut accepted = Vec::new();
    let mut refused = false;
    // A batch costs the publisher at least one 20 ms flush; queuing an object costs
    // microseconds, so the backlog passes 256 KiB (four objects) within the first.
    for i in 0..5000 {
        let key = format!("obj{i}");
        let body = body_for(key.as_bytes(), 64 * 1024);
        match store.begin_write(key.as_bytes(), meta(), Some(body.len() as u64)) {
            Ok(mut w) => {
                w.append(&body).unwrap();
                let d = Arc::clone(&done);
                w.finish_later(Box::new(move |r| {
                    assert!(r.is_ok(), "{r:?}");
                    d.fetch_add(1, Ordering::SeqCst);
                }));
                accepted.push((key, body));
            }
            Err(WriteRefused::Behind) => {
                refused = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused, "the backlog never passed its bound");
    assert!(store.stats()[0].behind_refused >= 1);
    wait_until("every accepted object published", || {
        done.load(Ordering::SeqCst) == accepted.len()
    });
    for (key, body) in &accepted {
        check_hit(&store, key.as_bytes(), body).unwrap();
    }
    let st = &store.stats()[0];
    assert_eq!(st.published, accepted.len() as u64);
    assert!(
        st.publish_batches < st.published,
        "group commit: {} flushes for {} objects",
        st.publish_batches,
        st.published
    );
    // Caught up: a new write is accepted and published.
    io.set_sync_delay(None);
    let mut w = store.begin_write(b"after", meta(), Some(3)).unwrap();
    w.append(b"abc").unwrap();
    w.finish().unwrap();
    check_hit(&store, b"after", b"abc").unwrap();
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out: {what}");
}

/// Guards the newest response winning while it waits for its flush: a key stored as
/// "old" and written again as "new" answers "new" to a plain lookup as soon as the new
/// body is complete, before the (slow) publish; the older copy is never served again.
#[test]
fn a_complete_write_waiting_for_its_publish_wins_over_the_stored_copy() {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(FaultyIo::new());
    let mut cfg = config(dir.path(), &[("d0", 64 * MIB)]);
    // The publish waits for the (slow) flush only with this durability (the tests'
    // default is `NoSync`, with which this test raced the publisher thread).
    cfg.durability = Durability::SyncBeforePublish;
    let store = Store::open_with_io(cfg, io.clone()).unwrap();
    put(&store, b"k", b"old");
    io.set_sync_delay(Some(Duration::from_millis(300)));
    let mut w = store.begin_write(b"k", meta(), Some(3)).unwrap();
    w.append(b"new").unwrap();
    let Lookup::Hit(h) = store.lookup(b"k") else {
        panic!("the stored copy answers while the new body is incomplete")
    };
    assert_eq!(h.body_len(), Some(3));
    let (tx, rx) = mpsc::channel();
    w.finish_later(Box::new(move |r| tx.send(r.is_ok()).unwrap()));
    match store.lookup(b"k") {
        Lookup::Filling(h) => {
            let mut body = vec![0; 3];
            use std::os::unix::fs::FileExt;
            h.file.read_exact_at(&mut body, h.body_offset).unwrap();
            assert_eq!(body, b"new");
        }
        other => panic!("the complete new write must answer, got {}", other.as_str()),
    }
    assert!(rx.recv_timeout(Duration::from_secs(10)).unwrap());
    io.set_sync_delay(None);
    check_hit(&store, b"k", b"new").unwrap();
}

/// Guards a takedown's proof: a write whose body is complete answers lookups as the
/// object while it waits for its publish, so purging it reports the object removed
/// (it answered `false` -- "nothing purged" -- for an object a client had just been
/// served), and it is never published.
#[test]
fn purging_a_complete_write_awaiting_its_publish_counts_as_removed() {
    let dir = tempfile::tempdir().unwrap();
    // A disk whose flush takes 500 ms: the write waits for its publish meanwhile.
    let io = Arc::new(FaultyIo::new());
    io.set_sync_delay(Some(Duration::from_millis(500)));
    let mut cfg = config(dir.path(), &[("d0", 64 * MIB)]);
    cfg.durability = Durability::SyncBeforePublish;
    let store = Store::open_with_io(cfg, io).unwrap();
    let body = body_for(b"k", 100_000);
    let mut w = store
        .begin_write(b"k", meta(), Some(body.len() as u64))
        .unwrap();
    w.append(&body).unwrap();
    let (tx, rx) = mpsc::channel();
    w.finish_later(Box::new(move |r| tx.send(r.is_ok()).unwrap()));
    assert!(
        matches!(store.lookup(b"k"), Lookup::Filling(_)),
        "complete, awaiting its publish"
    );
    assert!(
        store.purge(b"k"),
        "the object clients were served is removed"
    );
    assert!(
        !rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        "a purged write is not published"
    );
    assert!(matches!(store.lookup(b"k"), Lookup::Miss(_)));
    assert!(!store.purge(b"k"), "nothing left to remove");
}
