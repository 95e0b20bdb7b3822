//! Helpers shared by the store's integration tests: configs on temp dirs,
//! deterministic bodies derived from keys, and full verification of a stored object.
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    reason = "test helpers on temp dirs the test created"
)]

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use linerate_cache::format::decode_complete;
use linerate_cache::{Body, DiskConfig, Durability, Lookup, ObjectMeta, Store, StoreConfig};

pub fn disk(dir: &Path, name: &str, max_bytes: u64) -> DiskConfig {
    DiskConfig {
        name: name.to_owned(),
        path: dir.join(name),
        max_bytes,
    }
}

pub fn config(dir: &Path, disks: &[(&str, u64)]) -> StoreConfig {
    let mut c = StoreConfig::new(disks.iter().map(|(n, b)| disk(dir, n, *b)).collect());
    c.durability = Durability::NoSync;
    c.maintenance_interval = Duration::from_millis(20);
    c
}

/// Body for `key`: length and bytes derived from the key, so any reader can verify.
pub fn body_for(key: &[u8], max_len: usize) -> Vec<u8> {
    let h = xxhash_rust::xxh3::xxh3_64(key);
    let len = (h as usize % max_len) + 1;
    (0..len)
        .map(|i| (h.wrapping_add(i as u64 * 31) >> 7) as u8)
        .collect()
}

pub fn meta() -> ObjectMeta {
    ObjectMeta {
        status: 200,
        headers: vec![(b"Content-Type".to_vec(), b"video/mp4".to_vec())],
        ..ObjectMeta::default()
    }
}

pub fn put(store: &Store, key: &[u8], body: &[u8]) {
    let mut w = store
        .begin_write(key, meta(), Some(body.len() as u64))
        .unwrap();
    for chunk in body.chunks(7000) {
        w.append(chunk).unwrap();
    }
    w.finish().unwrap();
}

/// Whether `key` is a verified hit whose body (read back from the file) is `expected`
/// and whose header checksum matches the body.
pub fn check_hit(store: &Store, key: &[u8], expected: &[u8]) -> Result<(), String> {
    match store.lookup(key) {
        Lookup::Hit(h) => {
            let Body::Complete { len } = h.body else {
                return Err("not complete".into());
            };
            if len != expected.len() as u64 {
                return Err(format!("length {len} != {}", expected.len()));
            }
            let mut buf = vec![0u8; len as usize];
            h.file
                .read_exact_at(&mut buf, h.body_offset)
                .map_err(|e| e.to_string())?;
            if buf != expected {
                return Err("body differs".into());
            }
            let mut head = vec![0u8; h.body_offset as usize];
            h.file
                .read_exact_at(&mut head, 0)
                .map_err(|e| e.to_string())?;
            let header = decode_complete(&head).map_err(|e| e.to_string())?;
            if header.key != key || header.body_checksum != xxhash_rust::xxh3::xxh3_64(&buf) {
                return Err("header key or body checksum wrong".into());
            }
            if h.meta.status != 200 {
                return Err("meta lost".into());
            }
            Ok(())
        }
        other => Err(format!("not a hit: {}", other.as_str())),
    }
}

/// Files in a directory (0 if it does not exist).
pub fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}
