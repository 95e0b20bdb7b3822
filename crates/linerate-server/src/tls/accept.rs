//! A new connection on a TLS listener: run the handshake under its deadline, then pick
//! the path its records take (kernel TLS when the start-up probe found the kernel
//! accepts the negotiated version and cipher, user-space TLS otherwise), and count what
//! happened in the worker's statistics (`linerate_tls_handshakes_total{outcome}`).
//!
//! Also here: [`SharedTls`], the TLS state all workers share, and the per-worker task
//! that follows certificate reloads.
//!
//! Not here: the handshake mechanics (`tls::conn`) or the kernel hand-over (`tls::ktls`).

use std::rc::Rc;
use std::sync::Arc;

use rustls::HandshakeKind;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::admin::control::Control;
use crate::context::Worker;
use crate::options::KtlsMode;
use crate::stats::TlsOutcome;
use crate::tls::conn::{HandshakeError, TlsStream};
use crate::tls::{conn as tls_conn, ktls as ktls_conn};
use crate::transport::Transport;

/// Per-worker: keep this worker's copy of the TLS configuration current. Worker 0
/// also rebuilds it whenever the configuration is reloaded (SIGHUP or the admin API),
/// reading the certificate files again on a blocking thread, and publishes it; a
/// reload whose certificates fail to load keeps the running ones. Connections that
/// are already established keep the configuration they started with.
pub(crate) async fn follow_config(worker: Rc<Worker>, control: Arc<Control>) {
    let Some(tls) = worker.shared.tls.as_ref() else {
        return;
    };
    let mut configs = tls.configs.clone();
    let mut options = control.watch_options();
    let rebuilds = worker.index == 0;
    loop {
        tokio::select! {
            r = configs.changed() => {
                if r.is_err() {
                    return;
                }
                let config = configs.borrow_and_update().clone();
                worker.set_tls_config(config);
                tracing::debug!(worker = worker.index, "TLS configuration updated");
            }
            r = options.changed(), if rebuilds => {
                if r.is_err() {
                    return;
                }
                let new = options.borrow_and_update().clone();
                let builder = tls.builder.clone();
                let built = tokio::task::spawn_blocking(move || {
                    builder.build_from(new.tls.as_ref())
                })
                .await;
                match built {
                    Ok(Ok(config)) => {
                        tls.publish.send_replace(config);
                        tracing::info!("TLS certificates reloaded");
                    }
                    Ok(Err(e)) => {
                        tracing::error!(error = %e, "TLS reload failed; the running certificates stay")
                    }
                    Err(e) => tracing::error!(error = %e, "TLS reload task failed"),
                }
            }
        }
    }
}

/// Handshake `stream` and choose its path. `None`: the connection was closed (every
/// failure is answered, counted and logged at debug here).
pub(crate) async fn accept(
    worker: &Rc<Worker>,
    stream: TcpStream,
) -> Option<(Transport, Vec<u8>, bool)> {
    let tls = worker.shared.tls.as_ref()?;
    let config = worker.tls_config()?;
    let stats = &worker.stats;
    let kernel_possible = tls.mode == KtlsMode::Auto && !tls.support.ciphers.is_empty();
    let deadline = Instant::now() + tls.handshake_timeout;
    let done = tokio::select! {
        r = tls_conn::handshake(stream, config, kernel_possible, deadline) => r,
        _ = worker.stopped() => return None,
    };
    let h = match done {
        Ok(h) => h,
        Err(e) => {
            let outcome = match e {
                HandshakeError::Timeout => TlsOutcome::Timeout,
                HandshakeError::PlainHttp => TlsOutcome::PlainHttp,
                HandshakeError::Protocol(_) => TlsOutcome::Refused,
                HandshakeError::ClientClosed => TlsOutcome::Abandoned,
            };
            stats.tls(outcome, false);
            match &e {
                HandshakeError::Protocol(err) => {
                    tracing::debug!(kind = e.as_str(), error = %err, "TLS handshake failed")
                }
                _ => tracing::debug!(kind = e.as_str(), "TLS handshake failed"),
            }
            return None;
        }
    };
    let resumed = h.conn.handshake_kind() == Some(HandshakeKind::Resumed);
    let h2 = h.conn.alpn_protocol() == Some(crate::tls::config::ALPN_H2);
    if kernel_possible && h.incoming.is_empty() {
        let suite =
            ktls_conn::kernel_suite(h.conn.protocol_version(), h.conn.negotiated_cipher_suite());
        if let Some((version, cipher)) = suite.filter(|(v, c)| tls.support.supports(*v, *c)) {
            return match ktls_conn::hand_over(h, version, cipher, tls.support.rekey) {
                Ok((k, early)) => {
                    stats.tls(TlsOutcome::KernelTls, resumed);
                    tracing::trace!(
                        version = version.as_str(),
                        cipher = cipher.as_str(),
                        "kernel TLS"
                    );
                    Some((Transport::Ktls(Box::new(k)), early, h2))
                }
                // The kernel attaches TLS only to an established socket: a client that
                // already closed (ENOTCONN) or reset is gone, not a failure of ours.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOTCONN) | Some(libc::ECONNRESET) | Some(libc::EPIPE)
                    ) =>
                {
                    stats.tls(TlsOutcome::Abandoned, resumed);
                    tracing::debug!(error = %e, "client left before the kernel TLS hand-over");
                    None
                }
                Err(e) => {
                    stats.tls(TlsOutcome::HandoverFailed, resumed);
                    tracing::warn!(error = %e, "kernel TLS hand-over failed; closing");
                    None
                }
            };
        }
    }
    stats.tls(TlsOutcome::UserspaceTls, resumed);
    let mut h = h;
    let early = std::mem::take(&mut h.early);
    Some((Transport::Tls(Box::new(TlsStream::new(h))), early, h2))
}
