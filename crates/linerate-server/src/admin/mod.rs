//! The operator's side of a running server, off the request path: the admin HTTP API
//! on its own thread (`api`, with its `Host` check in `host`), the documents it renders from the workers' counters
//! (`metrics`), readiness (`ready`), and the run-time control channel that drain, reload and log reopening
//! go through (`control`, also driven by signals from the main thread).
//!
//! Not here: the counters themselves (`stats`, written by the workers) or the options
//! (`operate`).

pub(crate) mod api;
pub mod control;
pub(crate) mod host;
pub(crate) mod metrics;
pub(crate) mod ready;
