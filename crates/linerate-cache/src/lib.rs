//! Cache storage for linerate: a persistent, multi-disk (JBOD) object store whose
//! objects are plain files served with sendfile.
//!
//! What it owns: object placement across disks (weighted rendezvous hashing), the
//! on-disk object format and its atomic publish, the sharded in-memory index and its
//! persistence (journal + snapshot, loaded in the background after a restart or crash),
//! read-while-write, per-disk failure handling, S3-FIFO eviction ahead of need, purge,
//! metadata updates (freshening after a 304) and statistics. What it does not do:
//! build cache keys from requests, decide freshness, talk to origins or send bytes to
//! clients (cache mode and the server do); it has no `unsafe` (syscalls it needs are in
//! `linerate-sys`).
//!
//! Entry point: [`Store`]. See `docs/store.md` (configuration) and
//! `docs/on-disk-format.md` (files on disk).
#![forbid(unsafe_code)]

pub mod config;
pub mod fault;
pub mod format;
pub mod health;
mod index;
pub mod io;
pub mod journal;
pub mod lease;
mod lend;
mod lookup;
mod maintenance;
pub mod meta;
mod open_files;
pub mod placement;
pub mod policy;
pub mod progress;
mod publish;
mod state;
mod stats;
mod store;
mod update;

pub mod key;

pub use config::{ConfigError, DiskConfig, Durability, StoreConfig};
pub use health::{DiskErrorKind, DiskState};
pub use key::KeyHash;
pub use lease::{LockError, StoreLock};
pub use lend::LendError;
pub use lookup::{Body, Lookup, MissReason, ObjectHandle};
pub use meta::ObjectMeta;
pub use progress::{BodyProgress, Progress, Readable, WriteFailure, WriterFailed};
pub use state::writer::{ObjectWriter, Published, WriteError};
pub use state::PublishDone;
pub use stats::DiskStats;
pub use store::{OpenError, Store, WriteRefused};
pub use update::UpdateError;
