//! `[fill]`: how pre-positioning (fill) jobs run (see `fill` for what a job is;
//! reference: docs/config.md). The type reads and prints itself in the file's shape
//! (serde): unknown keys and bad values are errors, which the binary's parser places at
//! their key and line.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::optserde;

/// Default `[fill] concurrency`: objects fetched at once, all jobs together.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// Default `[fill] yield_above`: a fill job starts no new object while more client
/// fills than this are in flight.
pub const DEFAULT_YIELD_ABOVE: usize = 8;

/// Default `[fill] retries`: further tries of an object whose failure may pass.
pub const DEFAULT_RETRIES: u32 = 2;

/// Default `[fill] max_urls_per_job`: objects one job may plan (URLs and manifests
/// listed, and the segments its playlists add). A planned object costs about 200 bytes
/// of memory and a line of its job's progress log when it settles.
pub const DEFAULT_MAX_URLS_PER_JOB: usize = 100_000;

/// Largest `[fill] max_urls_per_job` accepted.
pub const MAX_URLS_PER_JOB: usize = 1_000_000;

/// The `[fill]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FillOptions {
    /// Objects fetched at once, all jobs together (at least 1).
    #[serde(deserialize_with = "optserde::positive")]
    pub concurrency: usize,
    /// Bytes per second, all jobs together; 0 = no cap.
    pub rate_bytes_per_s: u64,
    /// Client-driven fills in flight above which no fill-job object starts.
    pub yield_above: usize,
    /// Further tries of an object whose failure may pass (a `5xx`, a timeout, a cut
    /// connection or body, a store busy), each after a backoff; a `404`, `410`, an
    /// answer the cache may not store or pins that leave no room fail at once. Each
    /// failure is counted by reason once, when the object gives up.
    pub retries: u32,
    /// Share (0.0..=1.0) of the objects of unfinished jobs marked `"ready": true` that
    /// must be held before `/ready` first answers 200 (after that, fill no longer holds
    /// readiness back). 0 = fill jobs never hold readiness back.
    #[serde(deserialize_with = "optserde::share")]
    pub ready_coverage: f64,
    /// Objects one job may plan (1 to [`MAX_URLS_PER_JOB`]): a job listing more is
    /// refused (`413`); segments a playlist adds past it are counted failed
    /// (`over max_urls_per_job`), not planned.
    #[serde(deserialize_with = "max_urls")]
    pub max_urls_per_job: usize,
    /// Where jobs are kept across restarts; `None`: the first disk's directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_file: Option<PathBuf>,
}

impl Default for FillOptions {
    fn default() -> Self {
        FillOptions {
            concurrency: DEFAULT_CONCURRENCY,
            rate_bytes_per_s: 0,
            yield_above: DEFAULT_YIELD_ABOVE,
            retries: DEFAULT_RETRIES,
            ready_coverage: 0.0,
            max_urls_per_job: DEFAULT_MAX_URLS_PER_JOB,
            state_file: None,
        }
    }
}

fn max_urls<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = usize::deserialize(d)?;
    if !(1..=MAX_URLS_PER_JOB).contains(&n) {
        return Err(serde::de::Error::custom(format!(
            "must be between 1 and {MAX_URLS_PER_JOB}"
        )));
    }
    Ok(n)
}
