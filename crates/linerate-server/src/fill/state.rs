//! Jobs across restarts: a JSON file (by default `fill-jobs.json` in the first disk's
//! directory), written whole to a temporary name and renamed over the old one, after
//! every change an operator makes and whenever a job finishes.
//!
//! What comes back: each job's spec, and its state when it was paused, cancelled or
//! finished (finished jobs keep their counters). A job that was queued, waiting or
//! running starts over: its plan is made again and everything already held counts as
//! `skipped_present`, so nothing stored before the restart is fetched twice.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::PoisonError;

use serde::{Deserialize, Serialize};

use super::{Counters, Fills, Spec, State};

/// The file's name in the first disk's directory.
pub(super) const FILE_NAME: &str = "fill-jobs.json";

#[derive(Serialize, Deserialize)]
struct Saved {
    name: String,
    spec: Spec,
    state: State,
    counters: Counters,
    /// Keys the job pinned (as text: keys are visible ASCII and the slice separator).
    #[serde(default)]
    pinned_keys: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct File {
    version: u32,
    jobs: Vec<Saved>,
}

impl Fills {
    /// Write every job (errors are logged: the jobs keep running without the file).
    pub(super) fn save(&self) {
        let Some(path) = &self.state_file else { return };
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let file = File {
            version: 1,
            jobs: jobs
                .values()
                .map(|j| Saved {
                    name: j.name.clone(),
                    spec: j.spec.clone(),
                    state: j.state,
                    counters: j.counters.clone(),
                    pinned_keys: j
                        .pinned_keys
                        .iter()
                        .filter_map(|k| String::from_utf8(k.clone()).ok())
                        .collect(),
                })
                .collect(),
        };
        drop(jobs);
        if let Err(e) = write_atomically(path, &file) {
            tracing::warn!(path = %path.display(), error = %e, "could not save fill jobs");
        }
    }

    /// Read the jobs saved by the last run (at start-up).
    pub(super) fn load(&self) {
        let Some(path) = &self.state_file else { return };
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "could not read fill jobs");
                return;
            }
        };
        let file: File = match serde_json::from_slice(&text) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "fill jobs file unreadable; starting without jobs");
                return;
            }
        };
        for saved in file.jobs {
            let (window, todo) = match self.validate(&saved.spec) {
                Ok(p) => p,
                Err(reason) => {
                    // The routes changed under it: the operator has to submit it again.
                    tracing::warn!(job = %saved.name, %reason, "saved fill job no longer valid; dropped");
                    continue;
                }
            };
            let job = if matches!(saved.state, State::Done | State::Failed | State::Cancelled) {
                let mut job = self.new_job(
                    &saved.name,
                    saved.spec,
                    window,
                    VecDeque::new(),
                    saved.state,
                );
                job.counters = saved.counters;
                job
            } else {
                let state = if saved.state == State::Paused {
                    State::Paused
                } else {
                    State::Queued
                };
                self.new_job(&saved.name, saved.spec, window, todo, state)
            };
            let mut job = job;
            job.pinned_keys = saved
                .pinned_keys
                .into_iter()
                .map(String::into_bytes)
                .collect();
            self.jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(saved.name, job);
        }
        tracing::info!(
            jobs = self
                .jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len(),
            "fill jobs restored"
        );
    }
}

fn write_atomically(path: &Path, file: &File) -> std::io::Result<()> {
    let text = serde_json::to_vec(file).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}
