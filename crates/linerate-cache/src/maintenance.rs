//! The background task of one disk (one thread per disk, never on the request path):
//! load the index from snapshot + journals, then loop keeping used bytes between the
//! watermarks, compacting the journal into a snapshot, walking `objects/` once to
//! reconcile it with the index, and probing the disk while it is out of service.
//!
//! Eviction runs here, ahead of need: writes only reserve bytes and never wait for it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::format::read_header;
use crate::health::{DiskErrorKind, DiskState};
use crate::index::{lock, Entry};
use crate::io::{IoOp, StoreIo};
use crate::journal::{self, list_journals, JournalWriter, Record, SNAPSHOT_NAME};
use crate::key::KeyHash;
use crate::policy::{PolicyState, QueueId};
use crate::state::disk::{charge_for, now_ms, OUT_OF_SERVICE_MARKER};
use crate::state::Inner;

/// Fan-out directories the reconcile scan visits between two eviction checks, so a
/// long scan never delays eviction by more than a few milliseconds.
const RECONCILE_DIRS_PER_STEP: usize = 16;

/// Victims unlinked per eviction batch before used bytes are re-checked.
const EVICT_BATCH_BYTES: u64 = 64 << 20;

/// Bytes written to a probe file: one page, like an object header.
const PROBE_LEN: usize = 4096;

/// Body of the per-disk thread.
pub(crate) fn run(inner: &Arc<Inner>, i: usize) {
    let disk = &inner.disks[i];
    let mut reconcile: Option<Vec<PathBuf>> = None;
    let mut next_probe = Instant::now() + inner.cfg.probe_interval;
    let mut trash: Vec<PathBuf> = Vec::new();
    loop {
        if inner.shutdown.load(Ordering::Acquire) {
            return;
        }
        // One step of work under the step lock; a lent store (Store::lend) does none.
        let step = lock(&disk.step);
        if inner.lent.load(Ordering::Acquire) {
            drop(step);
            idle(inner, disk);
            continue;
        }
        if !disk.health.in_service() {
            reconcile = None;
            if Instant::now() >= next_probe {
                next_probe = Instant::now() + inner.cfg.probe_interval;
                if probe(&*inner.io, disk.dir(), &disk.objects_dir, &disk.tmp_dir) {
                    if let Some(t) = return_to_service(inner, i) {
                        trash.push(t);
                    }
                }
            }
        } else if !disk.loaded.load(Ordering::Acquire) {
            load(inner, i);
            if inner.cfg.reconcile_on_start {
                reconcile = inner.io.read_dir(&disk.objects_dir).ok();
            }
            continue;
        } else {
            evict_if_needed(inner, i);
            let journal_bytes = lock(&disk.journal).as_ref().map_or(0, |j| j.bytes);
            if journal_bytes > inner.cfg.journal_compact_bytes {
                compact(inner, i);
            }
            if let Some(dirs) = reconcile.as_mut() {
                let n = dirs.len().saturating_sub(RECONCILE_DIRS_PER_STEP);
                for dir in dirs.split_off(n) {
                    reconcile_dir(inner, i, &dir);
                }
                if dirs.is_empty() {
                    reconcile = None;
                    tracing::info!(disk = %disk.name(), "reconcile scan finished");
                }
                continue;
            }
            if let Some(t) = trash.pop() {
                remove_tree(&*inner.io, &t);
                continue;
            }
        }
        drop(step);
        idle(inner, disk);
    }
}

/// Wait for a wake-up or the maintenance interval.
fn idle(inner: &Inner, disk: &crate::state::disk::Disk) {
    let (m, cv) = &disk.wake;
    let mut woken = lock(m);
    if !*woken {
        woken = match cv.wait_timeout(woken, inner.cfg.maintenance_interval) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
    }
    *woken = false;
}

/// Give disk `i` a journal again after the store was lent (`Store::resume`): a new
/// generation after every journal on the disk (the process it was lent to may have
/// written some), then a snapshot of this process's index over all of them.
pub(crate) fn rejournal(inner: &Inner, i: usize) {
    let disk = &inner.disks[i];
    let io = &*inner.io;
    let gen = list_journals(io, disk.dir())
        .ok()
        .and_then(|g| g.last().copied())
        .map_or(1, |g| g + 1);
    match JournalWriter::create(io, disk.dir(), gen) {
        Ok(j) => *lock(&disk.journal) = Some(j),
        Err(e) => {
            inner.disk_error(disk.id, IoOp::Create, disk.dir(), &e);
            return;
        }
    }
    if disk.loaded.load(Ordering::Acquire) {
        compact(inner, i);
    }
}

/// A loaded record before it becomes an index entry.
struct Loaded {
    hash: KeyHash,
    key: Vec<u8>,
    charge: u64,
    created_ms: u64,
    queue: QueueId,
}

/// Replay snapshot + journals of disk `i` into a private map, then publish it into the
/// shared index. Lookups meanwhile fall back to opening files by name.
fn load(inner: &Arc<Inner>, i: usize) {
    let disk = &inner.disks[i];
    let io = &*inner.io;
    let started = Instant::now();
    let current_gen = lock(&disk.journal).as_ref().map_or(u64::MAX, |j| j.gen);
    let mut order: Vec<Option<Loaded>> = Vec::new();
    let mut pos: HashMap<u128, usize> = HashMap::new();
    let mut apply = |rec: Record| match rec {
        Record::Insert {
            hash,
            charge,
            created_ms,
            queue,
            key,
        } => {
            // A refreshed copy of a pinned object stays pinned (as `Inner::
            // account_inserted` does while running).
            let mut queue = queue;
            if let Some(p) = pos.insert(hash.0, order.len()) {
                if order[p]
                    .as_ref()
                    .is_some_and(|l| l.queue == QueueId::Pinned)
                {
                    queue = QueueId::Pinned;
                }
                order[p] = None;
            }
            order.push(Some(Loaded {
                hash,
                key,
                charge,
                created_ms,
                queue,
            }));
        }
        Record::Remove { hash } => {
            if let Some(p) = pos.remove(&hash.0) {
                order[p] = None;
            }
        }
        Record::Pin { hash, pinned } => {
            if let Some(l) = pos.get(&hash.0).and_then(|&p| order[p].as_mut()) {
                l.queue = if pinned {
                    QueueId::Pinned
                } else {
                    QueueId::Main
                };
            }
        }
    };
    let snap_path = disk.dir().join(SNAPSHOT_NAME);
    let mut first_gen = 0;
    match io.read_file(&snap_path) {
        Ok(buf) => match journal::parse(&buf, true) {
            Ok(p) => {
                first_gen = p.gen;
                if p.torn {
                    inner.count_error(
                        disk.id,
                        DiskErrorKind::Corrupt,
                        IoOp::ReadFile,
                        &snap_path,
                        "snapshot truncated",
                    );
                }
                p.records.into_iter().for_each(&mut apply);
            }
            Err(h) => inner.count_error(
                disk.id,
                DiskErrorKind::Corrupt,
                IoOp::ReadFile,
                &snap_path,
                h.as_str(),
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => inner.disk_error(disk.id, IoOp::ReadFile, &snap_path, &e),
    }
    let gens = list_journals(io, disk.dir()).unwrap_or_default();
    let mut replayed = 0usize;
    for &gen in gens.iter().filter(|&&g| g < current_gen) {
        let path = journal::journal_path(disk.dir(), gen);
        if gen < first_gen {
            let _ = io.remove_file(&path); // superseded by the snapshot
            continue;
        }
        match io.read_file(&path).map(|b| journal::parse(&b, false)) {
            Ok(Ok(p)) => {
                replayed += p.records.len();
                p.records.into_iter().for_each(&mut apply);
            }
            Ok(Err(h)) => inner.count_error(
                disk.id,
                DiskErrorKind::Corrupt,
                IoOp::ReadFile,
                &path,
                h.as_str(),
            ),
            Err(e) => inner.disk_error(disk.id, IoOp::ReadFile, &path, &e),
        }
        if inner.shutdown.load(Ordering::Acquire) || !disk.health.in_service() {
            return;
        }
    }
    let mut count = 0u64;
    for l in order.into_iter().flatten() {
        let entry = Arc::new(Entry {
            hash: l.hash,
            key: l.key.into_boxed_slice(),
            disk: disk.id,
            charge: l.charge,
            created_ms: l.created_ms,
            policy: PolicyState::default(),
            open: Default::default(),
        });
        match inner.index.insert(Arc::clone(&entry)) {
            crate::index::Inserted::New => disk.track(entry, Some(l.queue)),
            crate::index::Inserted::Replaced(old) => {
                // `old` came from another disk and is older: drop it there.
                inner.delete_object(&old);
                disk.track(entry, Some(l.queue));
            }
            crate::index::Inserted::KeptNewer(newer) => {
                if newer.disk != disk.id {
                    let _ = io.remove_file(&disk.object_path(l.hash));
                    let _ = disk.journal(io, &Record::Remove { hash: l.hash });
                }
            }
        }
        count += 1;
    }
    disk.loaded.store(true, Ordering::Release);
    inner.notify_loaded();
    tracing::info!(disk = %disk.name(), objects = count, journal_records = replayed, ms = started.elapsed().as_millis() as u64, "index loaded");
    if replayed > 0 {
        // Make the next start a pure snapshot read and drop the replayed journals.
        compact(inner, i);
    }
}

/// Evict from disk `i` while used + reserved bytes exceed the high watermark, down to
/// the low one; likewise while the filesystem's free space is below the share the
/// watermarks leave free (something else is filling the disk), up to that share at the
/// low watermark. Cost: one `statvfs` per call.
fn evict_if_needed(inner: &Inner, i: usize) {
    let disk = &inner.disks[i];
    let high = disk.high_mark(inner.cfg.high_watermark_percent);
    let low = disk.high_mark(inner.cfg.low_watermark_percent);
    let fs_short = match inner.io.space(disk.dir()) {
        Ok(s) => {
            let pct = |p: u8| s.total_bytes / 100 * u64::from(100 - p);
            if s.available_bytes < pct(inner.cfg.high_watermark_percent) {
                pct(inner.cfg.low_watermark_percent).saturating_sub(s.available_bytes)
            } else {
                0
            }
        }
        Err(e) => {
            inner.disk_error(disk.id, IoOp::Space, disk.dir(), &e);
            0
        }
    };
    let mut extra = fs_short;
    loop {
        let used = disk.used.load(Ordering::Acquire) + disk.reserved.load(Ordering::Acquire);
        if (used <= high && extra == 0)
            || inner.shutdown.load(Ordering::Acquire)
            || !disk.health.in_service()
        {
            return;
        }
        let want = used.saturating_sub(low).max(extra).min(EVICT_BATCH_BYTES);
        let mut victims = Vec::new();
        lock(&disk.policy).evict(want, &mut victims);
        if victims.is_empty() {
            return; // everything left is reserved by writes in progress
        }
        for v in &victims {
            extra = extra.saturating_sub(v.charge);
            disk.used.fetch_sub(v.charge, Ordering::AcqRel);
            disk.objects.fetch_sub(1, Ordering::Relaxed);
            disk.evictions.fetch_add(1, Ordering::Relaxed);
            if inner.index.remove_if_same(v) {
                inner.delete_object(v);
            }
        }
    }
}

/// Rotate disk `i`'s journal and write a snapshot of its live objects. Safe against
/// concurrent writes: every change is applied in memory before it is journaled, so the
/// snapshot taken after the rotation covers the old journal, and replaying the new
/// journal over it is idempotent.
pub(crate) fn compact(inner: &Inner, i: usize) {
    let disk = &inner.disks[i];
    let io = &*inner.io;
    let started = Instant::now();
    // Errors are reported after the journal lock is released: reporting may take the
    // disk out of service, which takes that lock.
    let rotated = {
        let mut j = lock(&disk.journal);
        let Some(cur) = j.as_mut() else { return };
        let old = cur.gen;
        let synced = cur.sync(io).map_err(|e| (IoOp::Sync, e));
        let created = JournalWriter::create(io, disk.dir(), old + 1).map(|new| *j = Some(new));
        synced
            .and(created.map_err(|e| (IoOp::Create, e)))
            .map(|()| old)
    };
    let old_gen = match rotated {
        Ok(g) => g,
        Err((op, e)) => {
            inner.disk_error(disk.id, op, disk.dir(), &e);
            return;
        }
    };
    let live = lock(&disk.policy).live();
    let records = live.iter().map(|(e, q)| Record::Insert {
        hash: e.hash,
        charge: e.charge,
        created_ms: e.created_ms,
        queue: *q,
        key: e.key.to_vec(),
    });
    match journal::write_snapshot(io, disk.dir(), old_gen + 1, records) {
        Ok(n) => {
            for g in list_journals(io, disk.dir()).unwrap_or_default() {
                if g <= old_gen {
                    let _ = io.remove_file(&journal::journal_path(disk.dir(), g));
                }
            }
            tracing::info!(disk = %disk.name(), objects = n, ms = started.elapsed().as_millis() as u64, "index snapshot written");
        }
        Err(e) => inner.disk_error(disk.id, IoOp::Write, disk.dir(), &e),
    }
}

/// Compare one fan-out directory with the index: adopt valid files the index lacks
/// (published just before a crash, journal record lost), delete files that fail their
/// header check.
fn reconcile_dir(inner: &Inner, i: usize, dir: &Path) {
    let disk = &inner.disks[i];
    let io = &*inner.io;
    let Ok(files) = io.read_dir(dir) else { return };
    for path in files {
        let Some(hash) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(KeyHash::from_file_name)
        else {
            continue;
        };
        if inner.index.get(hash).is_some_and(|e| e.disk == disk.id) {
            continue;
        }
        match read_header(io, &path) {
            Ok(Some((h, len))) if KeyHash::of(&h.key) == hash => {
                if lock(&inner.purged_prefixes)
                    .iter()
                    .any(|p| h.key.starts_with(p))
                {
                    let _ = io.remove_file(&path);
                    continue;
                }
                let entry = Arc::new(Entry {
                    hash,
                    key: h.key.clone().into_boxed_slice(),
                    disk: disk.id,
                    charge: charge_for(len),
                    created_ms: h.created_ms,
                    policy: PolicyState::default(),
                    open: Default::default(),
                });
                inner.index_published(Arc::clone(&entry));
                let rec = Record::Insert {
                    hash,
                    charge: entry.charge,
                    created_ms: entry.created_ms,
                    queue: QueueId::Small,
                    key: h.key,
                };
                let _ = disk.journal(io, &rec);
            }
            Ok(_) => {
                inner.count_error(
                    disk.id,
                    DiskErrorKind::Corrupt,
                    IoOp::Read,
                    &path,
                    "reconcile: bad header",
                );
                let _ = io.remove_file(&path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => inner.disk_error(disk.id, IoOp::Read, &path, &e),
        }
    }
}

/// Is the disk usable? Directories exist (re-created if needed), a page can be written,
/// synced, read back and removed, and the filesystem is writable.
fn probe(io: &dyn StoreIo, dir: &Path, objects: &Path, tmp: &Path) -> bool {
    let path = tmp.join(format!("probe.{}", std::process::id()));
    let pattern: Vec<u8> = (0..PROBE_LEN).map(|i| (i % 251) as u8).collect();
    let result = (|| -> std::io::Result<bool> {
        io.create_dir(dir)?;
        io.create_dir(objects)?;
        io.create_dir(tmp)?;
        let _ = io.remove_file(&path);
        let f = io.create_new(&path)?;
        io.write_at(&f, &path, &pattern, 0)?;
        io.sync_data(&f, &path)?;
        let mut back = vec![0u8; PROBE_LEN];
        let n = io.read_at(&f, &path, &mut back, 0)?;
        io.remove_file(&path)?;
        Ok(n == PROBE_LEN && back == pattern && !io.space(dir)?.read_only)
    })();
    matches!(result, Ok(true))
}

/// Bring disk `i` back: it returns empty (its old objects may predate purges made while
/// it was out), so the old `objects/` is renamed aside for background deletion.
/// Returns the directory to delete.
fn return_to_service(inner: &Inner, i: usize) -> Option<PathBuf> {
    let disk = &inner.disks[i];
    let io = &*inner.io;
    let trash = disk.dir().join(format!("trash.{}", now_ms()));
    let moved = io.rename(&disk.objects_dir, &trash).is_ok();
    disk.fanout_reset();
    let ok = io.create_dir(&disk.objects_dir).is_ok();
    for g in list_journals(io, disk.dir()).unwrap_or_default() {
        let _ = io.remove_file(&journal::journal_path(disk.dir(), g));
    }
    let _ = io.remove_file(&disk.dir().join(SNAPSHOT_NAME));
    let journal = JournalWriter::create(io, disk.dir(), 1);
    let space = io.space(disk.dir());
    let (Ok(j), Ok(space), true) = (journal, space, ok) else {
        return None;
    };
    disk.capacity
        .store(disk.cfg.max_bytes.min(space.total_bytes), Ordering::Relaxed);
    *lock(&disk.journal) = Some(j);
    let _ = io.remove_file(&disk.dir().join(OUT_OF_SERVICE_MARKER));
    disk.health.reset_window();
    disk.loaded.store(true, Ordering::Release);
    disk.health.set_state(DiskState::InService);
    inner.persist_disk_states();
    inner.notify_loaded();
    tracing::warn!(disk = %disk.name(), "disk back in service (empty)");
    moved.then_some(trash)
}

/// Delete a directory tree through the I/O seam (old objects of a returning disk).
fn remove_tree(io: &dyn StoreIo, dir: &Path) {
    if let Ok(children) = io.read_dir(dir) {
        for c in children {
            if io.is_dir(&c).unwrap_or(false) {
                remove_tree(io, &c);
            } else {
                let _ = io.remove_file(&c);
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}
