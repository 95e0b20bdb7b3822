//! One cache disk: its directories, byte accounting (used, reserved, capacity), its
//! eviction policy and journal, its health, and the files that remember an
//! out-of-service state across restarts.
//!
//! This file does not decide placement, serve lookups or run the background loop (see
//! `store.rs` and `maintenance.rs`); it owns the per-disk state those use.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::config::DiskConfig;
use crate::health::{DiskState, Health};
use crate::index::{lock, Entry};
use crate::io::StoreIo;
use crate::journal::{JournalWriter, Record};
use crate::key::KeyHash;
use crate::placement::Candidate;
use crate::policy::S3Fifo;

/// Allocation unit charged per object: file sizes are rounded up to it because the
/// filesystem allocates whole blocks.
pub const BLOCK: u64 = 4096;

/// Marker file in a disk directory: present while the disk is out of service.
pub const OUT_OF_SERVICE_MARKER: &str = "OUT_OF_SERVICE";

/// File on every in-service disk listing the names of out-of-service disks, so the
/// state survives even when the failed disk cannot be written.
pub const DISK_STATES_FILE: &str = "disk-states";

/// Number of fan-out directories under `objects/` (three hex digits, see
/// [`KeyHash::relative_path`]).
const FANOUT_DIRS: usize = 4096;

/// Word and bit of the fan-out directory of `hash`: the top 12 bits of the hash are
/// its first three hex digits.
fn fanout_bit(hash: KeyHash) -> (usize, u64) {
    let d = (hash.0 >> 116) as usize;
    (d / 64, 1u64 << (d % 64))
}

/// Bytes charged for a file of `len` bytes.
pub fn charge_for(len: u64) -> u64 {
    len.div_ceil(BLOCK).saturating_mul(BLOCK)
}

/// Current Unix time in milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Outcome of asking a disk for space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// Reserved.
    Granted,
    /// Over capacity even counting what eviction will free: refuse, never wait.
    Refused,
}

/// State of one disk.
pub(crate) struct Disk {
    pub(crate) id: u16,
    pub(crate) cfg: DiskConfig,
    pub(crate) candidate: Candidate,
    pub(crate) objects_dir: PathBuf,
    pub(crate) tmp_dir: PathBuf,
    pub(crate) capacity: AtomicU64,
    pub(crate) used: AtomicU64,
    pub(crate) reserved: AtomicU64,
    pub(crate) objects: AtomicU64,
    pub(crate) evictions: AtomicU64,
    pub(crate) admissions_refused: AtomicU64,
    pub(crate) health: Health,
    /// The index of this disk is fully loaded (set by the maintenance task).
    pub(crate) loaded: AtomicBool,
    pub(crate) policy: Mutex<S3Fifo<Entry>>,
    pub(crate) journal: Mutex<Option<JournalWriter>>,
    pub(crate) tmp_seq: AtomicU64,
    /// Wakes the maintenance task early (eviction needed, shutdown).
    pub(crate) wake: (Mutex<bool>, Condvar),
    /// Held by the maintenance task for each step of work, so lending the store
    /// (`Store::lend`) can wait for a step in progress to end.
    pub(crate) step: Mutex<()>,
    /// Objects whose body is complete, waiting for the publisher (`publish.rs`).
    pub(crate) publish: crate::state::PublishQueue,
    /// This process's id, in temporary file names (read once: no `getpid` per write).
    pid: u32,
    /// One bit per fan-out directory known to exist, so a publish skips the `mkdir`
    /// (one syscall of about nine per small object).
    fanout_made: Box<[AtomicU64]>,
}

impl Disk {
    pub(crate) fn new(id: u16, cfg: DiskConfig, state: DiskState) -> Disk {
        Disk {
            id,
            candidate: Candidate::new(&cfg.name, cfg.max_bytes),
            objects_dir: cfg.path.join("objects"),
            tmp_dir: cfg.path.join("tmp"),
            capacity: AtomicU64::new(cfg.max_bytes),
            used: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            objects: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            admissions_refused: AtomicU64::new(0),
            health: Health::new(state),
            loaded: AtomicBool::new(false),
            policy: Mutex::new(S3Fifo::new(cfg.max_bytes)),
            journal: Mutex::new(None),
            tmp_seq: AtomicU64::new(0),
            wake: (Mutex::new(false), Condvar::new()),
            step: Mutex::new(()),
            publish: Default::default(),
            pid: std::process::id(),
            fanout_made: (0..FANOUT_DIRS / 64).map(|_| AtomicU64::new(0)).collect(),
            cfg,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.cfg.name
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.cfg.path
    }

    /// Path of the object file for `hash`.
    pub(crate) fn object_path(&self, hash: KeyHash) -> PathBuf {
        self.objects_dir.join(hash.relative_path())
    }

    /// Whether the fan-out directory of `hash` is known to exist.
    pub(crate) fn fanout_known(&self, hash: KeyHash) -> bool {
        let (w, b) = fanout_bit(hash);
        self.fanout_made[w].load(Ordering::Relaxed) & b != 0
    }

    /// Remember that the fan-out directory of `hash` exists.
    pub(crate) fn fanout_created(&self, hash: KeyHash) {
        let (w, b) = fanout_bit(hash);
        self.fanout_made[w].fetch_or(b, Ordering::Relaxed);
    }

    /// Remember the fan-out directory named `name` (three lower-case hex digits) as
    /// existing; other names are ignored.
    pub(crate) fn fanout_found(&self, name: &str) {
        let is_fanout =
            name.len() == 3 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if let (true, Ok(d)) = (is_fanout, usize::from_str_radix(name, 16)) {
            self.fanout_made[d / 64].fetch_or(1u64 << (d % 64), Ordering::Relaxed);
        }
    }

    /// Forget every fan-out directory (the objects directory was replaced).
    pub(crate) fn fanout_reset(&self) {
        for w in self.fanout_made.iter() {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// A fresh temporary path for a write of `hash`. The pid keeps two processes that
    /// were (wrongly) pointed at one directory from colliding.
    pub(crate) fn tmp_path(&self, hash: KeyHash) -> PathBuf {
        let seq = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        self.tmp_dir
            .join(format!("{:032x}.{}.{seq}", hash.0, self.pid))
    }

    /// Reserve `bytes` for a write; refused when used + reserved would pass capacity.
    pub(crate) fn reserve(&self, bytes: u64) -> Reservation {
        let cap = self.capacity.load(Ordering::Relaxed);
        let used = self.used.load(Ordering::Relaxed);
        let prev = self.reserved.fetch_add(bytes, Ordering::AcqRel);
        if used.saturating_add(prev).saturating_add(bytes) > cap {
            self.reserved.fetch_sub(bytes, Ordering::AcqRel);
            self.admissions_refused.fetch_add(1, Ordering::Relaxed);
            self.wake();
            return Reservation::Refused;
        }
        Reservation::Granted
    }

    /// Give back a reservation.
    pub(crate) fn release(&self, bytes: u64) {
        self.reserved.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Start tracking a published object (policy, used bytes, count).
    pub(crate) fn track(&self, entry: Arc<Entry>, queue: Option<crate::policy::QueueId>) {
        let charge = entry.charge;
        let mut p = lock(&self.policy);
        let tracked = match queue {
            Some(q) => p.insert_into(entry, q),
            None => p.insert(entry),
        };
        // Counted under the policy's lock, as `untrack` uncounts: an entry purged
        // between its indexing and this call is neither tracked nor counted.
        if tracked {
            self.used.fetch_add(charge, Ordering::AcqRel);
            self.objects.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Stop tracking an object (purged, replaced, found missing).
    pub(crate) fn untrack(&self, entry: &Entry) {
        if lock(&self.policy).remove(entry) {
            self.used.fetch_sub(entry.charge, Ordering::AcqRel);
            self.objects.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Used bytes above which eviction starts.
    pub(crate) fn high_mark(&self, percent: u8) -> u64 {
        self.capacity.load(Ordering::Relaxed) / 100 * u64::from(percent)
    }

    /// Append a record to the journal. `Ok` without a journal (disk leaving service).
    pub(crate) fn journal(&self, io: &dyn StoreIo, rec: &Record) -> io::Result<()> {
        match lock(&self.journal).as_mut() {
            Some(j) => j.append(io, rec),
            None => Ok(()),
        }
    }

    /// Hold this disk's journal records until [`Disk::journal_release`]
    /// ([`JournalWriter::hold`]): the publisher's batch.
    pub(crate) fn journal_hold(&self) {
        if let Some(j) = lock(&self.journal).as_mut() {
            j.hold();
        }
    }

    /// Write the held journal records with one `write(2)`. The error is returned after
    /// the lock is released (reporting it may take the disk out of service, which
    /// takes the lock).
    pub(crate) fn journal_release(&self, io: &dyn StoreIo) -> io::Result<()> {
        match lock(&self.journal).as_mut() {
            Some(j) => j.release(io),
            None => Ok(()),
        }
    }

    /// Wake the maintenance task.
    pub(crate) fn wake(&self) {
        let (m, cv) = &self.wake;
        *lock(m) = true;
        cv.notify_one();
    }
}

/// Names listed in a `disk-states` file.
pub(crate) fn parse_disk_states(buf: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(buf)
        .lines()
        .filter_map(|l| l.strip_prefix("out_of_service "))
        .map(str::to_owned)
        .collect()
}

/// Content of a `disk-states` file for these out-of-service names.
pub(crate) fn format_disk_states(names: &[&str]) -> Vec<u8> {
    let mut s =
        String::from("# linerate store: disks out of service (do not edit while running)\n");
    for n in names {
        s.push_str("out_of_service ");
        s.push_str(n);
        s.push('\n');
    }
    s.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charge_rounds_to_blocks() {
        assert_eq!(charge_for(0), 0);
        assert_eq!(charge_for(1), 4096);
        assert_eq!(charge_for(4096), 4096);
        assert_eq!(charge_for(4097), 8192);
    }

    #[test]
    fn disk_states_round_trip() {
        let buf = format_disk_states(&["d1", "d2"]);
        assert_eq!(
            parse_disk_states(&buf),
            vec!["d1".to_owned(), "d2".to_owned()]
        );
    }
}
