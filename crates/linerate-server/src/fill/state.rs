//! Jobs across restarts and upgrades, kept so that no change rewrites a job's URL list:
//!
//! - the job list (`fill-jobs.json` by default, in the first disk's directory): each
//!   job's name and state, a few dozen bytes a job, written whole (to a temporary name,
//!   renamed over the old one) after a change an operator makes and whenever a job
//!   finishes;
//! - beside it, in a directory named like it with `.d` (`fill-jobs.d/`), each job's
//!   spec (`NAME.spec.json`), written once when the job is submitted or replaced;
//! - and each job's progress log (`NAME.log`), appended to as objects settle: one line
//!   per object done, skipped as present or failed (with its key and body bytes), per
//!   try to be retried (its bytes), per playlist read (how many objects it added) and
//!   per key pinned. Replayed at start-up it gives the counters back exactly (done
//!   stays done, bytes are kept) and names the objects already settled, which the plan
//!   made again from the spec leaves out. A last line cut short by a crash (no newline)
//!   is ignored, as is any line that does not parse. When a job finishes its log is
//!   compacted to one counters line and its pinned keys.
//!
//! What comes back: every job in its state. A job that was queued, waiting or running
//! goes on with the objects not settled yet; a playlist it had read is read again for
//! the segments it lists that are not settled (not counted again). The version-1 file
//! (specs and counters inline, rewritten whole on every change) is read and converted.
//!
//! After an upgrade has lent the store to the next process (which reads these files),
//! this process writes none of them.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::PoisonError;

use serde::{Deserialize, Serialize};

use super::{Counters, Fills, Job, Spec, State};

/// The job list's name in the first disk's directory.
pub(super) const FILE_NAME: &str = "fill-jobs.json";

/// A job in the version-1 file.
#[derive(Deserialize)]
struct SavedV1 {
    name: String,
    spec: Spec,
    state: State,
    counters: Counters,
    #[serde(default)]
    pinned_keys: Vec<String>,
}

/// A job in the list (version 2).
#[derive(Serialize, Deserialize)]
struct Listed {
    name: String,
    state: State,
}

#[derive(Deserialize)]
struct Head {
    version: u32,
}

#[derive(Deserialize)]
struct FileV1 {
    jobs: Vec<SavedV1>,
}

#[derive(Serialize, Deserialize)]
struct FileV2 {
    version: u32,
    jobs: Vec<Listed>,
}

/// What a job's progress log says.
#[derive(Default)]
pub(super) struct Replayed {
    pub(super) counters: Counters,
    /// Keys of the objects settled (done, skipped, failed).
    pub(super) settled: HashSet<Box<[u8]>>,
    pub(super) pinned: BTreeSet<Vec<u8>>,
    /// Whether the log says what was planned (a `N` or `C` record: a job converted
    /// from version 1 that had not finished has none, and is planned afresh).
    pub(super) planned: bool,
}

/// Replay a progress log's text (see the module comment for the records).
pub(super) fn replay(text: &[u8]) -> Replayed {
    let mut r = Replayed::default();
    // A last line without its newline was cut short: ignored.
    let whole = match text.iter().rposition(|&b| b == b'\n') {
        Some(i) => &text[..=i],
        None => &[][..],
    };
    for line in whole.split(|&b| b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        if apply(&mut r, line).is_some() && (line.starts_with("N ") || line.starts_with("C ")) {
            r.planned = true;
        }
    }
    r
}

fn apply(r: &mut Replayed, line: &str) -> Option<()> {
    let (kind, rest) = line.split_once(' ')?;
    let c = &mut r.counters;
    match kind {
        "N" => c.planned += rest.parse::<u64>().ok()?,
        "R" => c.bytes += rest.parse::<u64>().ok()?,
        "P" => {
            r.pinned.insert(unhex(rest)?);
        }
        "C" => *c = serde_json::from_str(rest).ok()?,
        "D" | "S" => {
            let (bytes, key) = rest.split_once(' ')?;
            let bytes: u64 = bytes.parse().ok()?;
            let key = unhex(key)?;
            c.bytes += bytes;
            if kind == "D" {
                c.done += 1;
            } else {
                c.skipped_present += 1;
            }
            r.settled.insert(key.into());
        }
        "F" => {
            let mut parts = rest.splitn(3, ' ');
            let bytes: u64 = parts.next()?.parse().ok()?;
            let key = parts.next()?;
            let reason = parts.next()?;
            let key = if key == "-" { None } else { Some(unhex(key)?) };
            c.bytes += bytes;
            c.failed += 1;
            *c.failed_reasons.entry(reason.to_owned()).or_default() += 1;
            if let Some(k) = key {
                r.settled.insert(k.into());
            }
        }
        _ => return None,
    }
    Some(())
}

pub(super) fn hex(key: &[u8]) -> String {
    let mut s = String::with_capacity(key.len() * 2);
    for b in key {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A job's record lines (each ends in a newline).
pub(super) mod record {
    use super::hex;

    pub(in crate::fill) fn planned(n: u64) -> String {
        format!("N {n}\n")
    }
    pub(in crate::fill) fn done(bytes: u64, key: &[u8]) -> String {
        format!("D {bytes} {}\n", hex(key))
    }
    pub(in crate::fill) fn skipped(bytes: u64, key: &[u8]) -> String {
        format!("S {bytes} {}\n", hex(key))
    }
    pub(in crate::fill) fn failed(bytes: u64, key: Option<&[u8]>, reason: &str) -> String {
        let key = key.map_or_else(|| "-".to_owned(), hex);
        format!("F {bytes} {key} {}\n", reason.replace(['\n', '\r'], " "))
    }
    pub(in crate::fill) fn retried(bytes: u64) -> String {
        format!("R {bytes}\n")
    }
    pub(in crate::fill) fn pinned(key: &[u8]) -> String {
        format!("P {}\n", hex(key))
    }
}

impl Fills {
    /// The directory of the specs and progress logs.
    fn job_dir(&self) -> Option<PathBuf> {
        self.state_file.as_ref().map(|p| p.with_extension("d"))
    }

    fn job_file(&self, name: &str, ext: &str) -> Option<PathBuf> {
        self.job_dir().map(|d| d.join(format!("{name}.{ext}")))
    }

    /// Whether this process may write the files (not after lending the store).
    fn writable(&self) -> bool {
        self.state_file.is_some() && !self.px.store.is_lent()
    }

    /// Append `text` (whole lines) to `job`'s progress log.
    pub(super) fn record(&self, job: &mut Job, text: &str) {
        if text.is_empty() || !self.writable() {
            return;
        }
        if let Some(f) = &mut job.log {
            if let Err(e) = f.write_all(text.as_bytes()) {
                tracing::warn!(job = %job.name, error = %e, "could not append to the fill job's progress log");
                job.log = None;
            }
        }
    }

    /// A new or replaced job: write its spec (the JSON submitted) and start its
    /// progress log with `first`.
    pub(super) fn begin_files(&self, job: &mut Job, spec: &[u8], first: &str) {
        if !self.writable() {
            return;
        }
        let (Some(dir), Some(spec_path), Some(log_path)) = (
            self.job_dir(),
            self.job_file(&job.name, "spec.json"),
            self.job_file(&job.name, "log"),
        ) else {
            return;
        };
        let r = std::fs::create_dir_all(&dir)
            .and_then(|()| write_atomically(&spec_path, spec))
            .and_then(|()| write_atomically(&log_path, first.as_bytes()))
            .and_then(|()| open_append(&log_path));
        match r {
            Ok(f) => job.log = Some(f),
            Err(e) => {
                tracing::warn!(job = %job.name, path = %dir.display(), error = %e, "could not save the fill job");
            }
        }
    }

    /// A finished job's log: one counters line and its pinned keys.
    pub(super) fn compact(&self, job: &mut Job) {
        let Some(path) = self.job_file(&job.name, "log") else {
            return;
        };
        if !self.writable() {
            return;
        }
        let mut text = format!(
            "C {}\n",
            serde_json::to_string(&job.counters).unwrap_or_default()
        );
        for k in &job.pinned_keys {
            text.push_str(&record::pinned(k));
        }
        job.log = None;
        match write_atomically(&path, text.as_bytes()).and_then(|()| open_append(&path)) {
            Ok(f) => job.log = Some(f),
            Err(e) => {
                tracing::warn!(job = %job.name, error = %e, "could not compact the fill job's progress log")
            }
        }
    }

    /// A deleted job's files.
    pub(super) fn remove_files(&self, name: &str) {
        if !self.writable() {
            return;
        }
        for ext in ["spec.json", "log"] {
            if let Some(p) = self.job_file(name, ext) {
                let _ = std::fs::remove_file(p);
            }
        }
    }

    /// Write the job list (errors are logged: the jobs keep running without it).
    pub(super) fn save(&self) {
        let Some(path) = &self.state_file else { return };
        if !self.writable() {
            return;
        }
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let file = FileV2 {
            version: 2,
            jobs: jobs
                .values()
                .map(|j| Listed {
                    name: j.name.clone(),
                    state: j.state,
                })
                .collect(),
        };
        drop(jobs);
        let r = serde_json::to_vec(&file)
            .map_err(std::io::Error::other)
            .and_then(|text| write_atomically(path, &text));
        if let Err(e) = r {
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
        let listed = match serde_json::from_slice::<Head>(&text).map(|h| h.version) {
            Ok(1) => self.convert_v1(&text),
            Ok(2) => serde_json::from_slice::<FileV2>(&text).map(|f| f.jobs),
            Ok(v) => Err(serde::de::Error::custom(format!("unknown version {v}"))),
            Err(e) => Err(e),
        };
        let listed = match listed {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "fill jobs file unreadable; starting without jobs");
                return;
            }
        };
        for l in listed {
            self.restore(l);
        }
        let n = self
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        tracing::info!(jobs = n, "fill jobs restored");
        self.save();
    }

    /// One job of the list, from its spec and progress log.
    fn restore(&self, l: Listed) {
        let spec: Result<Spec, String> = self
            .job_file(&l.name, "spec.json")
            .ok_or_else(String::new)
            .and_then(|p| std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display())))
            .and_then(|t| serde_json::from_slice(&t).map_err(|e| e.to_string()));
        let spec = match spec {
            Ok(s) => s,
            Err(reason) => {
                tracing::warn!(job = %l.name, %reason, "saved fill job has no readable spec; dropped");
                return;
            }
        };
        let (window, todo) = match self.validate(&spec, None) {
            Ok(p) => p,
            Err((_, reason)) => {
                // The routes changed under it: the operator has to submit it again.
                tracing::warn!(job = %l.name, %reason, "saved fill job no longer valid; dropped");
                return;
            }
        };
        let log_path = self.job_file(&l.name, "log");
        let text = log_path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .unwrap_or_default();
        let replayed = replay(&text);
        let finished = matches!(l.state, State::Done | State::Failed | State::Cancelled);
        let planned = todo.len() as u64;
        let todo: VecDeque<_> = if finished {
            VecDeque::new()
        } else {
            todo.into_iter()
                .filter_map(|mut item| {
                    if !replayed.settled.contains(&item.key(&self.px).0[..]) {
                        Some(item)
                    } else if item.playlist {
                        item.replay = true;
                        Some(item)
                    } else {
                        None
                    }
                })
                .collect()
        };
        let state = match l.state {
            s if finished => s,
            State::Paused => State::Paused,
            _ => State::Queued,
        };
        let Replayed {
            mut counters,
            settled,
            pinned,
            planned: counted,
        } = replayed;
        let first = if counted {
            String::new()
        } else {
            counters.planned = planned;
            record::planned(planned)
        };
        let mut job = self.new_job(&l.name, spec, window, todo, state);
        job.counters = counters;
        job.fetched = job.counters.done;
        job.pinned_keys = pinned;
        if job.todo.iter().any(|i| i.replay) {
            job.settled = settled;
        }
        if let Some(p) = &log_path {
            if self.writable() {
                // A record cut short by a crash is cut off, so the next one starts on
                // a line of its own.
                let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                if whole < text.len() {
                    if let Err(e) = OpenOptions::new()
                        .write(true)
                        .open(p)
                        .and_then(|f| f.set_len(whole as u64))
                    {
                        tracing::warn!(job = %l.name, error = %e, "could not cut the torn record off the fill job's progress log");
                    }
                }
                job.log = open_append(p)
                    .map_err(|e| tracing::warn!(job = %l.name, error = %e, "could not open the fill job's progress log"))
                    .ok();
            }
        }
        self.record(&mut job, &first);
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(l.name, job);
    }

    /// A version-1 file: each job's spec and counters written to its own files.
    fn convert_v1(&self, text: &[u8]) -> Result<Vec<Listed>, serde_json::Error> {
        let file: FileV1 = serde_json::from_slice(text)?;
        let mut out = Vec::new();
        for saved in file.jobs {
            if let (Some(dir), Some(spec_path), Some(log_path)) = (
                self.job_dir(),
                self.job_file(&saved.name, "spec.json"),
                self.job_file(&saved.name, "log"),
            ) {
                // Version 1 kept counters only for finished jobs (others started over).
                let finished =
                    matches!(saved.state, State::Done | State::Failed | State::Cancelled);
                let mut log = if finished {
                    format!(
                        "C {}\n",
                        serde_json::to_string(&saved.counters).unwrap_or_default()
                    )
                } else {
                    String::new()
                };
                for k in &saved.pinned_keys {
                    log.push_str(&record::pinned(k.as_bytes()));
                }
                let r = std::fs::create_dir_all(&dir)
                    .and_then(|()| {
                        write_atomically(
                            &spec_path,
                            &serde_json::to_vec(&saved.spec).map_err(std::io::Error::other)?,
                        )
                    })
                    .and_then(|()| write_atomically(&log_path, log.as_bytes()));
                if let Err(e) = r {
                    tracing::warn!(job = %saved.name, error = %e, "could not convert the saved fill job");
                    continue;
                }
            }
            out.push(Listed {
                name: saved.name,
                state: saved.state,
            });
        }
        tracing::info!(jobs = out.len(), "fill jobs file converted to version 2");
        Ok(out)
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().append(true).create(true).open(path)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn a_log_replays_to_its_counters_and_a_torn_tail_is_ignored() {
        let mut log = String::new();
        log += &record::planned(4);
        log += &record::done(100, b"k1");
        log += &record::retried(7);
        log += &record::failed(3, Some(b"k2"), "status 404");
        log += &record::failed(0, None, "playlist entry not followed");
        log += &record::skipped(0, b"k3\x01s0");
        log += &record::pinned(b"k1");
        log += "D 50 6b34"; // cut short by a crash: no newline
        let r = replay(log.as_bytes());
        let c = &r.counters;
        assert_eq!(
            (c.planned, c.done, c.skipped_present, c.failed, c.bytes),
            (4, 1, 1, 2, 110)
        );
        assert_eq!(c.failed_reasons["status 404"], 1);
        assert!(r.settled.contains(&b"k1"[..]));
        assert!(r.settled.contains(&b"k3\x01s0"[..]));
        assert!(!r.settled.contains(&b"k4"[..]), "the torn record");
        assert_eq!(r.pinned.len(), 1);
        // A compacted log starts from its counters line.
        let again =
            replay(format!("C {}\nD 1 6b35\n", serde_json::to_string(c).unwrap()).as_bytes());
        assert_eq!((again.counters.done, again.counters.bytes), (2, 111));
        // Garbage lines are skipped, not fatal.
        assert_eq!(replay(b"Z 1\nD x y\nN 2\n").counters.planned, 2);
    }
}
