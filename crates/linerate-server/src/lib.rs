//! The linerate server runtime: thread per core, one `SO_REUSEPORT` listener per worker
//! per address, HTTP/1.1 connections that answer from files with `sendfile(2)`, cold
//! reads on a per-disk blocking pool, timeouts, and graceful stop.
//!
//! Protocol decisions live in `linerate-http` (sans-I/O) and syscalls in `linerate-sys`;
//! this crate wires them to sockets and files. It does not parse configuration files
//! (the binary does) and has no global lock or shared counter on the request path:
//! everything a request writes belongs to the worker that accepted its connection.
#![forbid(unsafe_code)]

mod accesslog;
pub mod admin;
mod appliance;
pub mod cacheopts;
mod clock;
mod cluster;
pub mod clusteropts;
mod coldpool;
mod conn;
mod context;
mod dirwatch;
mod exchange;
mod fill;
pub mod fillopts;
mod handler;
mod http2;
mod listeners;
mod logbudget;
pub mod media;
pub mod notify;
mod openfiles;
pub mod operate;
pub mod options;
pub mod optserde;
mod origin;
mod park;
mod proxy;
mod purge;
mod purgelog;
mod response;
mod server;
pub mod stats;
mod tcpsample;
pub mod tls;
mod transfer;
mod transport;
pub mod upgrade;
mod worker;

pub use admin::control::{ReloadOutcome, Reloader, RunState};
pub use cacheopts::{CacheOptions, OriginOptions, OriginServer, QueryKey, RouteOptions};
pub use cluster::ring::rank_names as cluster_rank;
pub use clusteropts::{ClusterOptions, PeerOptions};
pub use notify::SystemdSockets;
pub use options::{
    CertificateOptions, KtlsMode, Pinning, ServerOptions, Timeouts, TlsOptions, UnknownSni,
};
pub use server::{run, run_until, run_upgradable, run_with_reload, ServerError, Started};
pub use upgrade::Successor;
