//! Typed configuration of the object store: [`StoreConfig`] and one [`DiskConfig`] per
//! cache directory, with documented defaults (also listed in `docs/store.md`).
//!
//! This file does not parse TOML (the binary maps its config file onto these types) and
//! does not touch the disks; [`StoreConfig::validate`] checks only what can be checked
//! without I/O.

use std::path::PathBuf;
use std::time::Duration;

/// One cache directory, normally the mount point of one physical disk (JBOD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskConfig {
    /// Stable name of the disk, the input of rendezvous placement: renaming a disk moves
    /// its share of objects, changing its path does not. Required, unique, at most 64
    /// bytes, letters, digits, `-` and `_`.
    pub name: String,
    /// Directory the store owns (`objects/`, `tmp/`, journals and snapshot live below
    /// it). Created if missing.
    pub path: PathBuf,
    /// Most bytes of objects (file sizes rounded up to 4 KiB) to keep on this disk; also
    /// the placement weight. The effective capacity is the smaller of this and the
    /// filesystem's size. Required.
    pub max_bytes: u64,
}

/// How hard a publish works to survive power loss (kill -9 is survived either way: the
/// page cache outlives the process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `fdatasync` the object before renaming it into place, so after power loss a
    /// published name never points at unwritten blocks. Cost: one device flush per
    /// object (≈0.05–0.5 ms on NVMe, 5–20 ms on a spinning disk); measured in
    /// `docs/benchmarks.md`. Default.
    SyncBeforePublish,
    /// Rename without syncing. After power loss an object may be lost or, on
    /// filesystems without rename-after-write ordering, read back as zeros: its header
    /// then fails its checksum and it is a miss. Fastest.
    NoSync,
}

impl Durability {
    /// Short stable name for logs and config.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::SyncBeforePublish => "sync_before_publish",
            Durability::NoSync => "no_sync",
        }
    }
}

/// Default number of index shards. 256 mutexes keep the chance that two of 64 cores
/// look up the same shard at once around 1/4 per pair-moment while costing 16 KiB.
pub const DEFAULT_INDEX_SHARDS: usize = 256;

/// Configuration of the whole store.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    /// Cache directories, one per disk. At least one.
    pub disks: Vec<DiskConfig>,
    /// Publish durability. Default [`Durability::SyncBeforePublish`].
    pub durability: Durability,
    /// Index shards (rounded up to a power of two). Default
    /// [`DEFAULT_INDEX_SHARDS`]; more shards cost 64 bytes each.
    pub index_shards: usize,
    /// Start evicting when a disk holds more than this percentage of its capacity.
    /// Default 95.
    pub high_watermark_percent: u8,
    /// Evict down to this percentage. Default 90. The gap is the room writes use
    /// without ever waiting for eviction.
    pub low_watermark_percent: u8,
    /// Largest object (or slice) accepted, bytes. Default 4 GiB.
    pub max_object_bytes: u64,
    /// Body bytes of complete objects waiting for their disk's publisher (flush,
    /// rename) past which that disk refuses new writes (relayed, not stored) until it
    /// catches up. Default 256 MiB.
    pub max_publish_backlog: u64,
    /// Errors on one disk within [`StoreConfig::error_window`] that take it out of
    /// service. Default 16: a few transient errors are tolerated, a failing disk is
    /// cut off within seconds at any real request rate.
    pub error_threshold: u32,
    /// Window over which errors are counted. Default 60 s.
    pub error_window: Duration,
    /// How often an out-of-service disk is probed. Default 30 s.
    pub probe_interval: Duration,
    /// Rotate a disk's journal into a snapshot once it exceeds this many bytes. Default
    /// 64 MiB (≈ 600,000 records): bounds the replay after a crash to well under a
    /// second while rewriting the snapshot rarely.
    pub journal_compact_bytes: u64,
    /// After loading the index, walk each disk's `objects/` in the background to adopt
    /// files the journal missed and delete files that fail their header check.
    /// Default true. Cost: one `readdir` per object file, no reads for indexed ones.
    pub reconcile_on_start: bool,
    /// How often the background task of each disk wakes when nothing signals it.
    /// Default 1 s.
    pub maintenance_interval: Duration,
    /// Most objects whose file is kept open between hits, across all disks (see
    /// `handles.rs`): a hit on one costs no open, header read, `fstat` or close.
    /// Default [`crate::open_files::DEFAULT_OPEN_FILES`]; 0 opens the file on every hit.
    /// Each costs a file descriptor (the server caps it below its `RLIMIT_NOFILE`).
    pub open_files: usize,
    /// How long a kept file answers hits before its path is checked again (one
    /// `stat`: same device and inode, full length). Default
    /// [`crate::open_files::DEFAULT_RECHECK`] (1 s): the longest a file removed, moved or
    /// truncated by hand is still served from the open file.
    pub open_file_recheck: Duration,
}

impl StoreConfig {
    /// A configuration with the given disks and every other field at its default.
    pub fn new(disks: Vec<DiskConfig>) -> StoreConfig {
        StoreConfig {
            disks,
            durability: Durability::SyncBeforePublish,
            index_shards: DEFAULT_INDEX_SHARDS,
            high_watermark_percent: 95,
            low_watermark_percent: 90,
            max_object_bytes: 4 << 30,
            max_publish_backlog: 256 << 20,
            error_threshold: 16,
            error_window: Duration::from_secs(60),
            probe_interval: Duration::from_secs(30),
            journal_compact_bytes: 64 << 20,
            reconcile_on_start: true,
            maintenance_interval: Duration::from_secs(1),
            open_files: crate::open_files::DEFAULT_OPEN_FILES,
            open_file_recheck: crate::open_files::DEFAULT_RECHECK,
        }
    }

    /// Check what can be checked without touching the disks.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.disks.is_empty() {
            return Err(ConfigError::NoDisks);
        }
        if self.disks.len() > usize::from(u16::MAX) {
            return Err(ConfigError::TooManyDisks);
        }
        for (i, d) in self.disks.iter().enumerate() {
            let name_ok = !d.name.is_empty()
                && d.name.len() <= 64
                && d.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !name_ok {
                return Err(ConfigError::BadDiskName(d.name.clone()));
            }
            if self.disks[..i].iter().any(|o| o.name == d.name) {
                return Err(ConfigError::DuplicateDisk(d.name.clone()));
            }
            if d.max_bytes == 0 {
                return Err(ConfigError::ZeroCapacity(d.name.clone()));
            }
        }
        if !(self.low_watermark_percent < self.high_watermark_percent
            && self.high_watermark_percent <= 100)
        {
            return Err(ConfigError::Watermarks);
        }
        if self.index_shards == 0 || self.error_threshold == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        Ok(())
    }
}

/// A configuration the store cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `disks` is empty.
    #[error("no cache disks configured")]
    NoDisks,
    /// More than 65535 disks.
    #[error("too many disks")]
    TooManyDisks,
    /// A disk name is empty, too long or has characters other than `[A-Za-z0-9_-]`.
    #[error("bad disk name {0:?}")]
    BadDiskName(String),
    /// Two disks share a name.
    #[error("duplicate disk name {0:?}")]
    DuplicateDisk(String),
    /// A disk has `max_bytes = 0`.
    #[error("disk {0:?} has zero capacity")]
    ZeroCapacity(String),
    /// Watermarks are not `low < high <= 100`.
    #[error("watermarks must satisfy low < high <= 100")]
    Watermarks,
    /// `index_shards` or `error_threshold` is zero.
    #[error("index_shards and error_threshold must be positive")]
    ZeroLimit,
}
