//! Standalone runner for the load generator, the same options as `linerate bench`:
//! `cargo run --release -p linerate-bench --example bench -- --target 127.0.0.1:8080 ...`.
//! Exists so the generator can be used and tested before (and without) the server
//! binary; it adds nothing to the library.

use clap::Parser;

/// linerate load generator (HTTP/1.1, bodies discarded in the kernel).
#[derive(Parser)]
#[command(name = "linerate-bench", version)]
struct Cli {
    #[command(flatten)]
    args: linerate_bench::BenchArgs,
}

fn main() -> anyhow::Result<()> {
    linerate_bench::run(Cli::parse().args)
}
