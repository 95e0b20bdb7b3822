//! `linerate bench`: an HTTP/1.1 load generator built to rank servers that are faster
//! than `wrk` can read.
//!
//! Measured on the build machines' loopback: `wrk` saturates its own core at
//! ~2.6-3.6 GB/s on large bodies, before nginx does, because it copies every body byte
//! into user space. This generator discards bodies inside the kernel
//! (`recv(MSG_TRUNC)`), so one client core lets one server core saturate (nginx then
//! reaches ~4.8 GB/s on 64 KiB files and ~11 GB/s on 2 MiB files). See
//! [`client`] for the event loop and why it is built on `mio`.
//!
//! Workloads: uniformly random files, random byte ranges of one file, and "idle"
//! (thousands of held keep-alive connections while a normal load runs). Results: counts
//! by status and error kind, body bytes, requests/s, GB/s (10^9 bytes), latency
//! percentiles from a fixed-bucket histogram, then one JSON line for scripts.
//!
//! Deliberately not here: TLS, HTTP/2, pipelining, chunked bodies, open-loop (fixed
//! rate) load, several threads. It connects only to the given address, and only to a
//! loopback address unless told otherwise. The binary crate wires [`BenchArgs`] and
//! [`run`] as the `bench` subcommand; `examples/bench.rs` runs it standalone.

#![forbid(unsafe_code)]

pub mod args;
pub mod client;
pub mod histogram;
pub mod report;
pub mod request;
pub mod response;

use std::io::Write as _;

use anyhow::{Context as _, Result};

pub use args::{BenchArgs, Plan, WorkloadKind};
pub use report::Report;

/// File descriptors kept free for stdio, epoll and the like when checking the limit.
const SPARE_FDS: usize = 64;

/// Run the generator: check the options, pin and raise limits if needed, load the
/// server, print the human summary and then the JSON line on stdout.
pub fn run(args: BenchArgs) -> Result<()> {
    let plan = args.plan()?;
    if let Some(cpu) = args.cpu {
        linerate_sys::cpu::pin_current_thread(cpu)
            .with_context(|| format!("pinning to CPU {cpu}"))?;
    }
    let needed = plan.connections + plan.idle_connections + SPARE_FDS;
    let limit = linerate_sys::limits::raise_nofile_limit().context("raising RLIMIT_NOFILE")?;
    if (limit as usize) < needed {
        anyhow::bail!(
            "{} connections need about {needed} file descriptors but the limit is {limit}; \
             raise it (ulimit -n, or the hard limit as root)",
            plan.connections + plan.idle_connections
        );
    }
    let mut emit = |line: &str| {
        let mut out = std::io::stdout().lock();
        // A closed stdout only loses the event; the run itself goes on.
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let report = run_plan(&plan, &mut emit)?;
    let mut out = std::io::stdout().lock();
    write!(out, "{}", report.human()).context("writing the report")?;
    writeln!(out, "{}", report.json()).context("writing the report")?;
    out.flush().context("writing the report")?;
    Ok(())
}

/// Run a checked [`Plan`] and return its [`Report`] without printing anything (events,
/// when the plan asks for them, go to `emit`). For tests and embedding.
pub fn run_plan(plan: &Plan, emit: &mut dyn FnMut(&str)) -> Result<Report> {
    client::run_plan(plan, emit)
}
