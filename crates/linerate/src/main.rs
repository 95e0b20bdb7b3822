//! The `linerate` command: parses the command line and configuration file into typed
//! options and hands them to the server. No serving logic lives here.
#![forbid(unsafe_code)]

mod adminctl;
mod cacheconfig;
mod clusterconfig;
mod config;
#[cfg(test)]
mod fillconfig;
mod fillctl;
mod opsconfig;
#[cfg(test)]
mod tlsconfig;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use config::Config;

/// jemalloc, not glibc's malloc. A cache miss makes dozens of allocations on the
/// worker, some freed on the disk's publisher thread; with glibc, `_int_malloc`,
/// `malloc_consolidate`, `unlink_chunk` and `free` were about 10 % of the worker's
/// core and 5 % on the publisher, and 64 KiB misses ran 12-16 % slower (eight
/// alternating pairs, docs/benchmarks.md "The kernel's limit for misses"); hits did
/// not move.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// linerate: a video edge cache that serves HLS/DASH segments and byte ranges with
/// sendfile, pinned workers (one per core; two in cache mode).
#[derive(Parser)]
#[command(name = "linerate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve (with no configuration: the bundled sample library on 127.0.0.1:8080).
    Serve(ServeArgs),
    /// Take this server out of the load balancer: `/health` fails, no new connections
    /// are accepted, in-flight responses finish (admin API; needs `admin.token`).
    Drain(adminctl::DrainArgs),
    /// Serve again after a drain: new connections are accepted, `/health` and `/ready`
    /// answer 200 again (admin API; needs `admin.token`). Refused while stopping.
    Undrain(adminctl::AdminArgs),
    /// Replace the running server without dropping a connection: it starts the new
    /// binary, hands it every listening socket and the cache store, and drains once the
    /// new one serves. Exits non-zero (the old one keeps serving) when the new one fails
    /// (admin API; needs `admin.token`). SIGUSR2 does the same.
    Upgrade(adminctl::UpgradeArgs),
    /// Purge cached objects by URL, URL prefix or tag, on every node of a cluster;
    /// prints which nodes applied it (admin API `/purge`; needs `admin.token`).
    Purge(adminctl::PurgeArgs),
    /// A live terminal view of a running server (admin API `/stats.json`).
    Stats(adminctl::StatsArgs),
    /// Fill (pre-positioning) jobs: submit, follow with a progress bar, pause, resume,
    /// cancel (admin API `/fill/...`; changes need `admin.token`).
    Fill(fillctl::FillArgs),
    /// Validate a configuration file and print the effective configuration; exit 0 if valid.
    CheckConfig {
        /// The configuration file (TOML).
        file: PathBuf,
    },
    /// Load generator for video workloads (bodies discarded in the kernel, so one server
    /// core can be saturated); see docs/benchmarks.md.
    Bench(linerate_bench::BenchArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Configuration file (TOML; see docs/config.md). Flags below override it.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Listen address (repeatable); replaces `server.listen`.
    #[arg(long)]
    listen: Vec<SocketAddr>,
    /// Directory to serve; replaces `appliance.root`.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Worker threads (0 = one per CPU, two in cache mode); replaces `server.workers`.
    #[arg(long)]
    workers: Option<u64>,
    /// Admin API address, `ip:port` or `off`; replaces `admin.listen`.
    #[arg(long, value_name = "ADDR", value_parser = admin_listen)]
    admin: Option<String>,
    /// File holding the admin token (the commands' bearer token; 16+ visible
    /// characters, one trailing newline ignored); replaces `admin.token` and
    /// `admin.token_file`. Read at start and on every reload.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Cache mode quick start: an origin server, `http://host[:port][/base]` or
    /// `https://...` (repeatable: servers of one origin named "origin", with one
    /// catch-all route to it). Replaces the file's `[[origin]]` and `[[route]]`. Needs
    /// `--cache-dir`.
    #[arg(long, value_name = "URL", value_parser = origin_url, requires = "cache_dir")]
    origin: Vec<String>,
    /// Cache mode quick start: the cache directory (one disk named "disk0"; created if
    /// missing). Replaces the file's `[[cache.disk]]`. Needs `--origin`.
    #[arg(long, value_name = "DIR", requires = "origin")]
    cache_dir: Option<PathBuf>,
    /// Capacity of `--cache-dir`, bytes (or with a K, M, G or T suffix: powers of 1024).
    /// Default: 90% of the free space of the filesystem holding it.
    #[arg(long, value_name = "BYTES", value_parser = cache_size, requires = "cache_dir")]
    cache_size: Option<u64>,
}

fn admin_listen(s: &str) -> Result<String, String> {
    opsconfig::check_admin_listen(s).map(|()| s.to_owned())
}

fn origin_url(s: &str) -> Result<String, String> {
    linerate_server::OriginServer::parse(s).map(|_| s.to_owned())
}

fn cache_size(s: &str) -> Result<u64, String> {
    match cacheconfig::parse_size(s)? {
        0 => Err("must be greater than 0".to_owned()),
        n => Ok(n),
    }
}

fn main() -> ExitCode {
    // Before anything opens a descriptor: 3 and up are still the ones systemd passed.
    let systemd = linerate_server::SystemdSockets::take();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args, systemd),
        Command::CheckConfig { file } => check_config(&file),
        Command::Drain(args) => adminctl::drain(&args),
        Command::Undrain(args) => adminctl::undrain(&args),
        Command::Upgrade(args) => adminctl::upgrade(&args),
        Command::Purge(args) => adminctl::purge(&args),
        Command::Stats(args) => adminctl::stats(&args),
        Command::Fill(args) => fillctl::run(&args),
        Command::Bench(args) => linerate_bench::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("linerate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs, systemd: linerate_server::SystemdSockets) -> anyhow::Result<()> {
    // Started by an upgrade: take the old process's listeners first; any failure from
    // here to serving is reported to it, so it keeps serving and says why.
    let successor =
        linerate_server::Successor::from_env().map_err(|e| anyhow::anyhow!("upgrade: {e}"))?;
    let result = serve_with(args, successor.as_ref(), systemd);
    if let (Err(e), Some(s)) = (&result, &successor) {
        s.fail(&format!("{e:#}"));
    }
    result
}

fn serve_with(
    args: ServeArgs,
    successor: Option<&linerate_server::Successor>,
    systemd: linerate_server::SystemdSockets,
) -> anyhow::Result<()> {
    let quick = match (&args.cache_dir, args.origin.is_empty()) {
        (None, true) => None,
        (Some(dir), false) => Some(cacheconfig::QuickStart::resolve(
            &args.origin,
            dir,
            args.cache_size,
        )?),
        // clap's `requires` already refuses these.
        (None, false) => anyhow::bail!("--origin needs --cache-dir"),
        (Some(_), true) => anyhow::bail!("--cache-dir needs --origin"),
    };
    // SIGHUP re-reads the same file with the same command-line overrides.
    let reloader: Option<linerate_server::Reloader> = args.config.clone().map(|path| {
        let overrides = Overrides::of(&args);
        let quick = quick.clone();
        Box::new(move || {
            let mut c = Config::load_with(&path, quick.as_ref()).map_err(|e| format!("{e:#}"))?;
            overrides.apply(&mut c)?;
            c.check_listener_overrides()?;
            Ok(c.to_options())
        }) as linerate_server::Reloader
    });
    let mut config = match &args.config {
        Some(path) => Config::load_with(path, quick.as_ref())?,
        None => Config::parse_with("", quick.as_ref())
            .map_err(|e| anyhow::anyhow!("command line: {e}"))?,
    };
    Overrides::of(&args)
        .apply(&mut config)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(path) = &args.config {
        config
            .check_listener_overrides()
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    config.check_root().map_err(|e| anyhow::anyhow!("{e}"))?;
    let options = config.to_options();
    if let Some(cache) = &options.cache {
        cacheconfig::check_disk_dirs(cache, cacheconfig::DirCheck::Keep).map_err(
            |e| match &args.config {
                Some(path) => anyhow::anyhow!("{}: {e}", path.display()),
                None => anyhow::anyhow!("{e}"),
            },
        )?;
    }
    linerate_server::run_upgradable(options, reloader, successor, systemd, |started| {
        if let Some(admin) = started.admin_addr {
            tracing::info!("admin api at http://{admin}");
        }
        for addr in &started.local_addrs {
            tracing::info!(workers = started.workers, "listening on http://{addr}");
        }
        for addr in &started.tls_addrs {
            tracing::info!(workers = started.workers, "listening on https://{addr}");
        }
    })?;
    Ok(())
}

/// What the command line replaces in the configuration, at start and on every reload.
#[derive(Clone)]
struct Overrides {
    listen: Vec<SocketAddr>,
    root: Option<PathBuf>,
    workers: Option<u64>,
    admin: Option<String>,
    token_file: Option<PathBuf>,
}

impl Overrides {
    fn of(args: &ServeArgs) -> Overrides {
        Overrides {
            listen: args.listen.clone(),
            root: args.root.clone(),
            workers: args.workers,
            admin: args.admin.clone(),
            token_file: args.token_file.clone(),
        }
    }

    /// Replace what the flags give; `--token-file` is read now.
    fn apply(&self, c: &mut Config) -> Result<(), String> {
        if !self.listen.is_empty() {
            c.server.listen = self.listen.clone();
        }
        if let Some(r) = &self.root {
            c.appliance.root = r.clone();
        }
        if let Some(w) = self.workers {
            c.server.workers = w;
        }
        if let Some(a) = &self.admin {
            c.admin.listen = a.clone();
        }
        if let Some(f) = &self.token_file {
            c.admin
                .use_token_file(f.clone())
                .map_err(|e| format!("--token-file: {e}"))?;
        }
        Ok(())
    }
}

fn check_config(file: &std::path::Path) -> anyhow::Result<()> {
    let config = Config::load(file)?;
    // Cache mode serves from the store, so the appliance root is not needed.
    config
        .check_root()
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    if let Some(cache) = &config.to_options().cache {
        cacheconfig::check_disk_dirs(cache, cacheconfig::DirCheck::Undo)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    }
    if let Some(tls) = config.to_options().tls {
        // Load every certificate and key now, so a bad file fails the check, not a start.
        linerate_server::tls::config::TlsConfigBuilder::new(tls)
            .and_then(|b| b.build())
            .map_err(|e| anyhow::anyhow!("{}: tls: {e}", file.display()))?;
    }
    for origin in &config.origin {
        // A missing CA bundle fails the check, not the first https fetch.
        if let Some(ca) = &origin.ca_file {
            std::fs::File::open(ca).map_err(|e| {
                anyhow::anyhow!(
                    "{}: origin {:?}: ca_file {}: {e}",
                    file.display(),
                    &origin.name,
                    ca.display()
                )
            })?;
        }
    }
    print!("{}", config.to_toml());
    Ok(())
}
