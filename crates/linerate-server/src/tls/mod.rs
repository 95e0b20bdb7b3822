//! HTTPS: the server's TLS configuration (`config`), the handshake and the user-space
//! record layer (`conn`), the hand-over to kernel TLS and its control records (`ktls`),
//! the accept path that picks between them (`accept`), and sending a response over
//! user-space TLS (`send`). After the handshake a kernel-TLS connection uses the plain
//! send path (`transfer`), so only user-space TLS has a send path of its own here.
//!
//! Not here: what a request gets (the handlers) or the plain connection loop (`conn`,
//! which serves HTTPS connections too, through `transport`).

pub(crate) mod accept;
pub mod config;
pub(crate) mod conn;
pub(crate) mod ktls;
pub(crate) mod send;

/// Plaintext gathered per encrypt-and-send: sixteen full records. A 2 MiB segment costs
/// 8 sends. Measured on loopback against 128 KiB (docs/benchmarks.md, HTTPS): 256 KiB
/// gave ~15% more GB/s and less CPU per GB for 2 MiB segments. The cost is memory per
/// response in flight (a plaintext and a ciphertext chunk, 512 KiB, pooled per worker).
pub(crate) const TLS_CHUNK: usize = 256 * 1024;
