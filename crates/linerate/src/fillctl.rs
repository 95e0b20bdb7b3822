//! `linerate fill`: submit and follow fill (pre-positioning) jobs through the admin API
//! (`/fill/...`, see docs/operations.md). `--wait` follows a job to its end: a progress
//! bar redrawn in place on a terminal, one plain line per change otherwise (logs, CI).
//!
//! The bar is a line redrawn with `\r`: a crate such as indicatif would bring a
//! terminal layer (console, unicode-width) for one line of ASCII.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

use crate::adminctl::{call_with_body, AdminArgs};

/// `linerate fill ...`.
#[derive(clap::Args)]
pub struct FillArgs {
    #[command(subcommand)]
    command: FillCommand,
}

#[derive(clap::Subcommand)]
enum FillCommand {
    /// Submit (or resubmit: the same content changes nothing) the job in FILE (JSON).
    Submit {
        /// Job name (A-Z a-z 0-9 - _ .).
        name: String,
        /// The job: {"urls": [...], "manifests": [...], "priority": 0, ...}.
        file: PathBuf,
        #[command(flatten)]
        wait: WaitArgs,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// One job's state and counters, or every job's.
    Status {
        /// Job name; all jobs when left out.
        name: Option<String>,
        #[command(flatten)]
        wait: WaitArgs,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Pause a job (objects in flight finish).
    Pause {
        /// Job name.
        name: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Resume a paused job.
    Resume {
        /// Job name.
        name: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Cancel a job (it stays listed; objects fetched stay cached).
    Cancel {
        /// Job name.
        name: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Forget a job.
    Delete {
        /// Job name.
        name: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(clap::Args)]
struct WaitArgs {
    /// Follow the job until it is done, failed or cancelled; exit 1 unless done.
    #[arg(long)]
    wait: bool,
    /// Milliseconds between polls with `--wait`.
    #[arg(long, default_value_t = 500)]
    interval_ms: u64,
}

/// One admin call: method, path, body → the JSON answer (an error unless 2xx).
type Call<'a> = dyn Fn(&str, &str, &[u8]) -> anyhow::Result<Value> + 'a;

/// Run `linerate fill`.
pub fn run(args: &FillArgs) -> anyhow::Result<()> {
    let admin = match &args.command {
        FillCommand::Submit { admin, .. }
        | FillCommand::Status { admin, .. }
        | FillCommand::Pause { admin, .. }
        | FillCommand::Resume { admin, .. }
        | FillCommand::Cancel { admin, .. }
        | FillCommand::Delete { admin, .. } => admin,
    };
    let (addr, token) = admin.resolve()?;
    let call = |method: &str, path: &str, body: &[u8]| -> anyhow::Result<Value> {
        let (status, text) = call_with_body(addr, method, path, &token, body)?;
        if !(200..300).contains(&status) {
            anyhow::bail!("{method} {path}: {status}: {}", text.trim());
        }
        serde_json::from_str(&text).context("admin API answered something that is not JSON")
    };
    match &args.command {
        FillCommand::Submit {
            name, file, wait, ..
        } => {
            let body = std::fs::read(file).with_context(|| format!("{}", file.display()))?;
            let answer = call("PUT", &format!("/fill/manifests/{name}"), &body)?;
            let outcome = answer["outcome"].as_str().unwrap_or("?");
            println!("{name}: {outcome}");
            if wait.wait {
                follow(&call, name, wait.interval_ms)?;
            } else {
                println!("{}", line(&answer["job"]));
            }
        }
        FillCommand::Status { name, wait, .. } => match name {
            Some(n) if wait.wait => follow(&call, n, wait.interval_ms)?,
            Some(n) => println!("{}", line(&call("GET", &format!("/fill/jobs/{n}"), b"")?)),
            None => {
                let all = call("GET", "/fill/jobs", b"")?;
                let jobs = all["jobs"].as_array().cloned().unwrap_or_default();
                if jobs.is_empty() {
                    println!("no fill jobs");
                }
                for j in &jobs {
                    println!("{}", line(j));
                }
            }
        },
        FillCommand::Pause { name, .. } => action(&call, name, "pause")?,
        FillCommand::Resume { name, .. } => action(&call, name, "resume")?,
        FillCommand::Cancel { name, .. } => action(&call, name, "cancel")?,
        FillCommand::Delete { name, .. } => {
            call("DELETE", &format!("/fill/jobs/{name}"), b"")?;
            println!("{name}: deleted");
        }
    }
    Ok(())
}

fn action(call: &Call<'_>, name: &str, what: &str) -> anyhow::Result<()> {
    let job = call("POST", &format!("/fill/jobs/{name}/{what}"), b"")?;
    println!("{}", line(&job));
    Ok(())
}

/// Poll until the job ends; draw progress; an error unless it ended done.
fn follow(call: &Call<'_>, name: &str, interval_ms: u64) -> anyhow::Result<()> {
    let tty = std::io::stdout().is_terminal();
    let mut last = String::new();
    loop {
        let job = call("GET", &format!("/fill/jobs/{name}"), b"")?;
        let state = job["state"].as_str().unwrap_or("?").to_owned();
        let text = if tty { bar(&job) } else { line(&job) };
        let mut out = std::io::stdout();
        if tty {
            write!(out, "\r\x1b[2K{text}")?;
        } else if text != last {
            writeln!(out, "{text}")?;
        }
        out.flush()?;
        last = text;
        match state.as_str() {
            "done" => {
                if tty {
                    println!();
                }
                return Ok(());
            }
            "failed" | "cancelled" => {
                if tty {
                    println!();
                }
                anyhow::bail!("fill job {name} ended {state}");
            }
            _ => std::thread::sleep(Duration::from_millis(interval_ms.max(50))),
        }
    }
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// One job in one plain line.
fn line(job: &Value) -> String {
    let reasons = job["failed_reasons"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}: {}", n(v)))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let mut s = format!(
        "{} {} planned {} done {} skipped {} failed {} bytes {} rate {}/s eta {}",
        job["name"].as_str().unwrap_or("?"),
        job["state"].as_str().unwrap_or("?"),
        n(&job["planned"]),
        n(&job["done"]),
        n(&job["skipped_present"]),
        n(&job["failed"]),
        n(&job["bytes"]),
        human(job["rate_bytes_per_s"].as_f64().unwrap_or(0.0)),
        eta(&job["eta_s"]),
    );
    if !reasons.is_empty() {
        s.push_str(&format!(" ({reasons})"));
    }
    s
}

/// One job as a progress bar.
fn bar(job: &Value) -> String {
    const WIDTH: usize = 30;
    let planned = n(&job["planned"]);
    let settled = n(&job["done"]) + n(&job["skipped_present"]) + n(&job["failed"]);
    let share = if planned == 0 {
        0.0
    } else {
        settled as f64 / planned as f64
    };
    let filled = ((share * WIDTH as f64) as usize).min(WIDTH);
    format!(
        "{} [{}{}] {:>5.1}% {}/{} done {} skipped {} failed {} {}/s eta {} {}",
        job["name"].as_str().unwrap_or("?"),
        "#".repeat(filled),
        "-".repeat(WIDTH - filled),
        share * 100.0,
        settled,
        planned,
        n(&job["done"]),
        n(&job["skipped_present"]),
        n(&job["failed"]),
        human(job["rate_bytes_per_s"].as_f64().unwrap_or(0.0)),
        eta(&job["eta_s"]),
        job["state"].as_str().unwrap_or("?"),
    )
}

fn eta(v: &Value) -> String {
    match v.as_f64() {
        Some(s) => format!("{s:.0}s"),
        None => "-".into(),
    }
}

fn human(bytes: f64) -> String {
    for (unit, scale) in [("GB", 1e9), ("MB", 1e6), ("kB", 1e3)] {
        if bytes >= scale {
            return format!("{:.1} {unit}", bytes / scale);
        }
    }
    format!("{bytes:.0} B")
}

#[cfg(test)]
mod tests {
    #[test]
    fn lines_and_bars() {
        let job: serde_json::Value = serde_json::from_str(
            r#"{"name":"j","state":"running","planned":10,"done":4,"skipped_present":1,"failed":0,"failed_reasons":{},"bytes":5000,"rate_bytes_per_s":2500000.0,"eta_s":3.0}"#,
        )
        .unwrap_or_default();
        assert_eq!(
            super::line(&job),
            "j running planned 10 done 4 skipped 1 failed 0 bytes 5000 rate 2.5 MB/s eta 3s"
        );
        let b = super::bar(&job);
        assert!(
            b.contains("[###############---------------]  50.0% 5/10"),
            "{b}"
        );
    }
}
