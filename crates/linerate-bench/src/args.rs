//! Command-line options of `linerate bench` and their check into a [`Plan`]: every
//! option's default, unit and meaning is here, and so is the loopback-only rule.
//!
//! Parse, don't validate (STYLE.md #14): a `Plan` is only built from options that make
//! sense together, so the client loop never meets a contradiction. This module does not
//! open sockets or files other than `--paths-file`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use crate::request::{generated_paths, parse_paths_file, RequestKind};

/// Which requests the active connections send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadKind {
    /// `GET` of paths chosen uniformly at random from `--paths-file` or
    /// `--prefix`/`--count`/`--suffix`; success is 200.
    Files,
    /// `GET` with `Range: bytes=a-b` of `--range-size` bytes at random offsets within
    /// `--file-size` bytes of `--path`; success is 206 with exactly that many bytes.
    Ranges,
    /// The `files` workload, after first opening `--idle-connections` keep-alive
    /// connections (one request each, so the server really accepted them) that then
    /// stay idle for the whole run. Reports whether the active clients were still served.
    Idle,
}

impl WorkloadKind {
    /// Name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Files => "files",
            WorkloadKind::Ranges => "ranges",
            WorkloadKind::Idle => "idle",
        }
    }
}

/// Options of the load generator (`linerate bench`).
///
/// Closed loop: each of `--connections` keep-alive connections sends a request, reads
/// the whole response (bodies are discarded in the kernel, never copied), and sends the
/// next. Results go to stdout, with a final one-line JSON object for scripts.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Server address, IP:PORT. Only loopback addresses are accepted unless
    /// --allow-non-loopback is given.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub target: SocketAddr,

    /// Allow a target outside 127.0.0.0/8 and ::1. Off by default so tests and
    /// benchmarks cannot send load anywhere by mistake.
    #[arg(long)]
    pub allow_non_loopback: bool,

    /// Workload to run.
    #[arg(long, value_enum, default_value_t = WorkloadKind::Files)]
    pub workload: WorkloadKind,

    /// Active keep-alive connections, each with one request in flight.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,

    /// Measured time, after the warm-up: a number of seconds, or with a unit
    /// (500ms, 10s, 2m).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Time the workload runs before measuring starts (same syntax as --duration);
    /// lets connections open, caches fill and TCP windows grow.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,

    /// files/idle: file with one request path per line (`#` comments, blank lines ignored).
    #[arg(long, conflicts_with = "prefix")]
    pub paths_file: Option<PathBuf>,

    /// files/idle: generate paths PREFIX0SUFFIX .. PREFIX{COUNT-1}SUFFIX instead of a file.
    #[arg(long, requires = "count")]
    pub prefix: Option<String>,

    /// files/idle: how many paths --prefix generates.
    #[arg(long)]
    pub count: Option<usize>,

    /// files/idle: appended to each generated path (e.g. ".bin"). Default: nothing.
    #[arg(long, default_value = "")]
    pub suffix: String,

    /// files: make every request a URL never asked before (`?u=SEED.N` appended), so a
    /// cache misses on each one: the miss-path benchmark.
    #[arg(long)]
    pub unique: bool,

    /// files/idle: choose paths by Zipf popularity with this exponent instead of
    /// uniformly: the i-th path (1-based, in file or --count order: the first is the
    /// most popular) is asked with probability proportional to 1/i^S. Video libraries
    /// measure S around 0.8-1.0. A number above 0, at most 10.
    #[arg(long)]
    pub zipf: Option<f64>,

    /// files/idle: also report the latency of requests for the first K paths on their
    /// own ("hot_latency_us" in the JSON line): with --zipf, the K most popular.
    #[arg(long, default_value_t = 0)]
    pub hot_count: usize,

    /// ranges: the path of the file to read ranges from.
    #[arg(long)]
    pub path: Option<String>,

    /// ranges: size of that file; ranges stay within it. Bytes, or with a binary unit
    /// (K, M, G = KiB, MiB, GiB).
    #[arg(long, value_parser = parse_size)]
    pub file_size: Option<u64>,

    /// ranges: bytes per request (same syntax as --file-size).
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub range_size: u64,

    /// Idle keep-alive connections to open before the load starts and hold during it.
    /// Required (non-zero) for --workload idle; allowed with the others.
    #[arg(long, default_value_t = 0)]
    pub idle_connections: usize,

    /// Pause after the idle connections are open and before the load starts, so a
    /// script can read the server's memory (same syntax as --duration).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub idle_settle: Duration,

    /// Pin the generator's thread to this CPU (sched_setaffinity). Default: not pinned.
    #[arg(long)]
    pub cpu: Option<usize>,

    /// Seed of the path/offset choice; the same seed asks for the same sequence.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Override the status that counts as success (default 200, or 206 for ranges).
    #[arg(long)]
    pub expect_status: Option<u16>,

    /// Value of the Host header. Default: the --target address.
    #[arg(long)]
    pub host: Option<String>,

    /// Also print JSON event lines (idle_ready, measure_start, measure_end) to stdout
    /// as they happen, so a script can sample the server at those moments.
    #[arg(long)]
    pub events: bool,
}

/// Everything the client loop needs, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Server address (loopback unless allowed otherwise).
    pub target: SocketAddr,
    /// Workload name for the report.
    pub workload: WorkloadKind,
    /// What the active connections request.
    pub requests: RequestKind,
    /// Host header value.
    pub host: String,
    /// Status override.
    pub expect_status: Option<u16>,
    /// Active connections (≥ 1).
    pub connections: usize,
    /// Idle connections (0 = none).
    pub idle_connections: usize,
    /// Pause between "idle connections open" and the load.
    pub idle_settle: Duration,
    /// Warm-up before measuring.
    pub warmup: Duration,
    /// Measured time (> 0).
    pub duration: Duration,
    /// PRNG seed.
    pub seed: u64,
    /// Every `Files` request a new URL (`--unique`).
    pub unique: bool,
    /// Zipf exponent of the path choice (`--zipf`); `None` is uniform.
    pub zipf: Option<f64>,
    /// Requests for the first this many paths are also timed on their own.
    pub hot_count: usize,
    /// Print event lines.
    pub events: bool,
}

/// Most active connections: beyond this a single-threaded closed-loop client stops
/// adding load and only adds queueing; use --idle-connections for connection count.
pub const MAX_ACTIVE_CONNECTIONS: usize = 10_000;

/// Most idle connections: the ephemeral port range of one client address to one server
/// port (net.ipv4.ip_local_port_range, 28,232 ports by default) minus headroom.
pub const MAX_IDLE_CONNECTIONS: usize = 25_000;

impl BenchArgs {
    /// Check the options against each other and read `--paths-file`.
    pub fn plan(&self) -> Result<Plan> {
        if !self.target.ip().is_loopback() && !self.allow_non_loopback {
            bail!(
                "refusing to load {}: not a loopback address (pass --allow-non-loopback to \
                 benchmark a server on another host)",
                self.target
            );
        }
        if self.connections == 0 || self.connections > MAX_ACTIVE_CONNECTIONS {
            bail!("--connections must be between 1 and {MAX_ACTIVE_CONNECTIONS}");
        }
        if self.idle_connections > MAX_IDLE_CONNECTIONS {
            bail!("--idle-connections must be at most {MAX_IDLE_CONNECTIONS}");
        }
        if self.duration.is_zero() {
            bail!("--duration must be more than zero");
        }
        if self.workload == WorkloadKind::Idle && self.idle_connections == 0 {
            bail!("--workload idle needs --idle-connections N (N > 0)");
        }
        if let Some(s) = self.zipf {
            if !(s > 0.0 && s <= 10.0) {
                bail!("--zipf must be a number above 0 and at most 10 (got {s})");
            }
        }
        let requests = match self.workload {
            WorkloadKind::Files | WorkloadKind::Idle => {
                if self.path.is_some() || self.file_size.is_some() {
                    bail!("--path and --file-size belong to --workload ranges");
                }
                let paths = self.paths()?;
                if self.hot_count > paths.len() {
                    bail!(
                        "--hot-count {} is more than the {} request paths",
                        self.hot_count,
                        paths.len()
                    );
                }
                RequestKind::Files { paths }
            }
            WorkloadKind::Ranges => {
                if self.unique || self.zipf.is_some() || self.hot_count > 0 {
                    bail!("--unique, --zipf and --hot-count belong to --workload files or idle");
                }
                if self.paths_file.is_some() || self.prefix.is_some() {
                    bail!("--paths-file and --prefix belong to --workload files or idle");
                }
                let (Some(path), Some(file_size)) = (&self.path, self.file_size) else {
                    bail!("--workload ranges needs --path and --file-size");
                };
                RequestKind::Ranges {
                    path: path.clone(),
                    file_size,
                    range_size: self.range_size,
                }
            }
        };
        Ok(Plan {
            target: self.target,
            workload: self.workload,
            requests,
            host: self.host.clone().unwrap_or_else(|| self.target.to_string()),
            expect_status: self.expect_status,
            connections: self.connections,
            idle_connections: self.idle_connections,
            idle_settle: self.idle_settle,
            warmup: self.warmup,
            duration: self.duration,
            seed: self.seed,
            unique: self.unique,
            zipf: self.zipf,
            hot_count: self.hot_count,
            events: self.events,
        })
    }

    fn paths(&self) -> Result<Vec<String>> {
        let paths = match (&self.paths_file, &self.prefix) {
            (Some(file), _) => {
                let text = std::fs::read_to_string(file)
                    .with_context(|| format!("reading --paths-file {}", file.display()))?;
                parse_paths_file(&text)
            }
            (None, Some(prefix)) => generated_paths(prefix, self.count.unwrap_or(0), &self.suffix),
            (None, None) => bail!(
                "--workload {} needs --paths-file or --prefix/--count",
                self.workload.as_str()
            ),
        };
        if paths.is_empty() {
            bail!("no request paths (empty --paths-file or --count 0)");
        }
        Ok(paths)
    }
}

/// `10`, `10s`, `500ms`, `2m`, `1.5s`: seconds unless a unit is given.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (e.g. 10, 10s, 500ms, 2m)"))?;
    Duration::try_from_secs_f64(v * scale).map_err(|_| format!("invalid duration {s:?}"))
}

/// `65536`, `64K`, `64KiB`, `1M`, `2MiB`, `1G`: bytes, binary units.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "ki" | "kib" => 10,
        "m" | "mi" | "mib" => 20,
        "g" | "gi" | "gib" => 30,
        _ => return Err(format!("invalid size {s:?} (e.g. 65536, 64K, 1MiB, 1G)")),
    };
    let n: u64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {s:?} too large"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn plan(argv: &[&str]) -> Result<Plan> {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied()))?;
        cli.args.plan()
    }

    #[test]
    fn units() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("-1").is_err() && parse_duration("x").is_err());
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("2MiB").unwrap(), 2 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert!(parse_size("1T").is_err() && parse_size("M").is_err());
        assert!(parse_size("99999999999G").is_err());
    }

    #[test]
    fn loopback_only_by_default() {
        let e = plan(&["--target", "10.0.0.1:80", "--prefix", "/a", "--count", "1"]).unwrap_err();
        assert!(e.to_string().contains("loopback"), "{e}");
        assert!(plan(&[
            "--target",
            "10.0.0.1:80",
            "--prefix",
            "/a",
            "--count",
            "1",
            "--allow-non-loopback"
        ])
        .is_ok());
        assert!(plan(&["--target", "[::1]:80", "--prefix", "/a", "--count", "1"]).is_ok());
        assert!(plan(&["--target", "127.0.0.2:80", "--prefix", "/a", "--count", "1"]).is_ok());
    }

    #[test]
    fn workload_options_must_match() {
        let p = plan(&["--prefix", "/s/", "--count", "3", "--suffix", ".bin"]).unwrap();
        match p.requests {
            RequestKind::Files { paths } => assert_eq!(paths, ["/s/0.bin", "/s/1.bin", "/s/2.bin"]),
            RequestKind::Ranges { .. } => panic!("files expected"),
        }
        assert_eq!(p.host, "127.0.0.1:8080");
        assert!(plan(&[]).is_err(), "files without paths");
        assert!(
            plan(&["--workload", "ranges", "--path", "/x"]).is_err(),
            "no file size"
        );
        let p = plan(&["--workload", "ranges", "--path", "/x", "--file-size", "1G"]).unwrap();
        assert!(matches!(
            p.requests,
            RequestKind::Ranges {
                file_size: 1073741824,
                range_size: 1048576,
                ..
            }
        ));
        assert!(
            plan(&["--workload", "idle", "--prefix", "/a", "--count", "1"]).is_err(),
            "idle count"
        );
        assert!(plan(&[
            "--workload",
            "idle",
            "--prefix",
            "/a",
            "--count",
            "1",
            "--idle-connections",
            "5"
        ])
        .is_ok());
        assert!(plan(&["--prefix", "/a", "--count", "1", "--connections", "0"]).is_err());
        let p = plan(&[
            "--prefix",
            "/a",
            "--count",
            "4",
            "--zipf",
            "0.9",
            "--hot-count",
            "2",
        ])
        .unwrap();
        assert_eq!((p.zipf, p.hot_count), (Some(0.9), 2));
        for bad in ["0", "-1", "NaN", "11"] {
            assert!(
                plan(&["--prefix", "/a", "--count", "4", "--zipf", bad]).is_err(),
                "--zipf {bad}"
            );
        }
        assert!(plan(&["--prefix", "/a", "--count", "4", "--hot-count", "5"]).is_err());
        assert!(plan(&[
            "--workload",
            "ranges",
            "--path",
            "/x",
            "--file-size",
            "1G",
            "--zipf",
            "1"
        ])
        .is_err());
        assert!(plan(&["--prefix", "/a", "--count", "1", "--duration", "0"]).is_err());
    }
}
