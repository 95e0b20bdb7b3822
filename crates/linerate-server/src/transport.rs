//! What a connection's bytes travel over: plain TCP, kernel TLS, or user-space TLS.
//! `conn` reads requests and sends responses through this one type, so the HTTP logic
//! is the same on every path; each variant keeps its own fast path: plain and kTLS send
//! with `sendfile` (`transfer`), user-space TLS seals chunks (`tls::send`).
//!
//! Only plain connections park (see `park`): a TLS connection's state (rustls's, or the
//! kernel-connection object that follows key updates) does not fit in a parked slot.

use std::io;

use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::context::Worker;
use crate::response::{Body, Response, TransferError};
use crate::stats::DeliveryPath;
use crate::tls::conn::TlsStream;
use crate::tls::ktls::KtlsStream;
use crate::transfer;

/// A connection's transport.
pub(crate) enum Transport {
    /// Plain HTTP.
    Plain(TcpStream),
    /// HTTPS with records in the kernel.
    Ktls(Box<KtlsStream>),
    /// HTTPS with records in rustls.
    Tls(Box<TlsStream>),
}

impl Transport {
    /// Resolves when a read may make progress.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.readable().await,
            Transport::Ktls(k) => k.readable().await,
            Transport::Tls(t) => t.readable().await,
        }
    }

    /// Append request bytes to `buf` (into its spare capacity): `Ok(0)` at end of
    /// stream, `WouldBlock` if none.
    pub(crate) fn try_read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => {
                let room = buf.capacity() - buf.len();
                let n = s.try_read_buf(buf)?;
                if n > 0 && n < room {
                    // A short read emptied the receive queue, so the next `recv` could
                    // only say EAGAIN; tokio keeps the socket "readable" until one does,
                    // which cost one wasted `recv` per keep-alive request. Clear the
                    // readiness here instead. Safe with edge-triggered epoll: bytes that
                    // arrive after the `recv` raise a new edge, which sets it again.
                    let _ = s.try_io(Interest::READABLE, || {
                        Err::<(), _>(io::ErrorKind::WouldBlock.into())
                    });
                }
                Ok(n)
            }
            Transport::Ktls(k) => k.try_read_buf(buf),
            Transport::Tls(t) => t.try_read_buf(buf),
        }
    }

    /// Send one response completely; `sent` gets the bytes the kernel accepted
    /// (plaintext bytes on the TLS paths, so every path counts the same thing).
    pub(crate) async fn send(
        &mut self,
        worker: &Worker,
        response: Response,
        sent: &mut u64,
    ) -> Result<(), TransferError> {
        match self {
            Transport::Plain(s) => {
                transfer::send(worker, s, response, sent, DeliveryPath::Sendfile).await
            }
            Transport::Ktls(k) => {
                let (bytes, writes) = size(&response);
                k.before_response(bytes, writes)
                    .map_err(TransferError::ClientGone)?;
                transfer::send(worker, &k.stream, response, sent, DeliveryPath::KernelTls).await
            }
            Transport::Tls(t) => crate::tls::send::send(worker, t, response, sent).await,
        }
    }

    /// Send a batch of HTTP/2 frame parts completely (see `transfer::send_parts`).
    pub(crate) async fn send_parts(
        &mut self,
        worker: &Worker,
        parts: &[transfer::Part<'_>],
        sent: &mut u64,
    ) -> Result<(), TransferError> {
        match self {
            Transport::Plain(s) => {
                transfer::send_parts(worker, s, parts, sent, DeliveryPath::Sendfile).await
            }
            Transport::Ktls(k) => {
                let (mut bytes, mut writes) = (0, 1);
                for part in parts {
                    match part {
                        transfer::Part::Bytes(b) => {
                            bytes += b.len() as u64;
                            writes += 1;
                        }
                        transfer::Part::File(_, range, _) => {
                            bytes += range.len;
                            writes += 1 + range.len.div_ceil(transfer::SENDFILE_CHUNK as u64);
                        }
                    }
                }
                k.before_response(bytes, writes)
                    .map_err(TransferError::ClientGone)?;
                transfer::send_parts(worker, &k.stream, parts, sent, DeliveryPath::KernelTls).await
            }
            Transport::Tls(t) => crate::tls::send::send_parts(worker, t, parts, sent).await,
        }
    }

    /// Whether this is a TLS connection.
    pub(crate) fn secure(&self) -> bool {
        !matches!(self, Transport::Plain(_))
    }

    /// The TCP socket underneath (for TCP_INFO sampling and the peer address).
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Ktls(k) => &k.stream,
            Transport::Tls(t) => &t.stream,
        }
    }

    /// Whether this connection may be parked (see the module docs).
    pub(crate) fn parkable(&self) -> bool {
        matches!(self, Transport::Plain(_))
    }

    /// Tell a TLS peer we are closing (close_notify, RFC 8446 §6.1), best effort and
    /// without waiting: the socket closes right after.
    pub(crate) fn goodbye(&mut self) {
        match self {
            Transport::Plain(_) => {}
            Transport::Ktls(k) => {
                tracing::trace!(
                    rx_records = k.rx_records(),
                    version = k.describe().0,
                    "ktls connection closing"
                );
                k.close_notify();
            }
            Transport::Tls(t) => {
                let mut out = std::mem::take(&mut t.pending);
                t.close_notify(&mut out);
                let _ = t.stream.try_write(&out);
            }
        }
    }
}

/// Bytes and write calls a response takes (for the kTLS record estimate).
fn size(response: &Response) -> (u64, u64) {
    let head = response.head.len() as u64;
    match &response.body {
        Body::Empty => (head, 1),
        Body::File { range, .. } => (
            head + range.len,
            2 + range.len.div_ceil(transfer::SENDFILE_CHUNK as u64),
        ),
        Body::Multipart { plan, .. } => {
            let parts = plan.parts.len() as u64;
            let sendfiles = plan
                .parts
                .iter()
                .map(|p| p.range.len.div_ceil(transfer::SENDFILE_CHUNK as u64))
                .sum::<u64>();
            (head + plan.body_len, 2 + 2 * parts + sendfiles)
        }
        // A streamed body is sent in as many pieces as the fill delivers; bound the
        // writes generously (one per 4 KiB, plus slack for small pieces).
        Body::Pieces(body) => {
            let len = body.len_hint();
            (head + len, 1024 + len.div_ceil(4096))
        }
    }
}
