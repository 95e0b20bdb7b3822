//! Sending a response over user-space TLS, the path used when the kernel has no kTLS
//! (as on the build machines) or not for the negotiated cipher.
//!
//! Bytes cannot go from the page cache to the socket here: they must pass through the
//! cipher. So the cost is kept to one copy in and one out per byte: the head and the file
//! bytes are gathered into a plaintext chunk of [`TLS_CHUNK`] bytes read straight from
//! the file (`pread`), sealed by rustls into full 16 KiB records in an output chunk, and
//! written with one `send` per chunk. Both chunks come from a per-worker pool and go
//! back after the response, so a busy worker allocates none. The head shares the first
//! record with the first body bytes, as `MSG_MORE` arranges on the plain path.
//!
//! Cold ranges are warmed on the disk's blocking pool first, exactly as on the plain
//! path, so `pread` never waits for a disk inside the event loop. Not here: the plain
//! and kTLS paths (`transfer`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use linerate_http::range::ByteRange;

use crate::context::Worker;
use crate::response::{Body, Piece, Response, TransferError};
use crate::stats::DeliveryPath;
use crate::tls::conn::TlsStream;

use super::TLS_CHUNK;

/// Send one response completely over user-space TLS.
/// `sent` gets the plaintext bytes sealed and written.
pub(crate) async fn send(
    worker: &Worker,
    tls: &mut TlsStream,
    response: Response,
    sent: &mut u64,
) -> Result<(), TransferError> {
    let (plain, out) = worker.take_tls_chunks();
    let mut w = Writer {
        worker,
        tls,
        plain,
        out,
        sent: 0,
    };
    let result = w.response(response).await;
    *sent = w.sent;
    if let Some(stats) = worker.request_stats() {
        stats.sent(DeliveryPath::UserspaceTls, w.sent);
    }
    worker.give_tls_chunks(w.plain, w.out);
    result
}

/// Send a batch of HTTP/2 frame parts over user-space TLS (the copy path: file bytes
/// are read into the plaintext chunk with the frame headers and sealed together).
pub(crate) async fn send_parts(
    worker: &Worker,
    tls: &mut TlsStream,
    parts: &[crate::transfer::Part<'_>],
    sent: &mut u64,
) -> Result<(), TransferError> {
    let (plain, out) = worker.take_tls_chunks();
    let mut w = Writer {
        worker,
        tls,
        plain,
        out,
        sent: 0,
    };
    let mut result = Ok(());
    for part in parts {
        result = match part {
            crate::transfer::Part::Bytes(b) => w.bytes(b).await,
            crate::transfer::Part::File(file, range, _) => w.file(file, *range).await,
        };
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = w.flush().await;
    }
    *sent = w.sent;
    if let Some(stats) = worker.request_stats() {
        stats.sent(DeliveryPath::UserspaceTls, w.sent);
    }
    worker.give_tls_chunks(w.plain, w.out);
    result
}

struct Writer<'a> {
    worker: &'a Worker,
    tls: &'a mut TlsStream,
    plain: Vec<u8>,
    out: Vec<u8>,
    /// Plaintext bytes written so far.
    sent: u64,
}

impl Writer<'_> {
    async fn response(&mut self, response: Response) -> Result<(), TransferError> {
        match response.body {
            Body::Empty => self.bytes(&response.head).await?,
            Body::File { file, range, .. } => {
                self.bytes(&response.head).await?;
                self.file(&file, range).await?;
            }
            Body::Multipart { file, plan } => {
                self.bytes(&response.head).await?;
                for part in &plan.parts {
                    self.bytes(&part.head).await?;
                    self.file(&file, part.range).await?;
                }
                self.bytes(&plan.trailer).await?;
            }
            Body::Pieces(mut body) => {
                self.bytes(&response.head).await?;
                // Streamed: each piece is flushed, so a follower never holds bytes back.
                while let Some(piece) = body.next().await? {
                    match piece {
                        Piece::Bytes(b) => self.bytes(b).await?,
                        Piece::File(file, range) | Piece::Written(file, range) => {
                            self.file(file, range).await?
                        }
                    }
                    self.flush().await?;
                }
            }
        }
        self.flush().await
    }

    async fn bytes(&mut self, mut bytes: &[u8]) -> Result<(), TransferError> {
        while !bytes.is_empty() {
            let n = (TLS_CHUNK - self.plain.len()).min(bytes.len());
            self.plain.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.plain.len() == TLS_CHUNK {
                self.flush().await?;
            }
        }
        Ok(())
    }

    async fn file(&mut self, file: &File, range: ByteRange) -> Result<(), TransferError> {
        let end = range.start + range.len;
        let mut offset = range.start;
        let mut resident_until = offset;
        while offset < end {
            if offset >= resident_until {
                resident_until =
                    crate::transfer::ensure_resident(self.worker, file, offset, end).await?;
            }
            let len = self.plain.len();
            let want = usize::try_from(resident_until - offset)
                .unwrap_or(TLS_CHUNK)
                .min(TLS_CHUNK - len);
            self.plain.resize(len + want, 0);
            let before = std::time::Instant::now();
            let read = file.read_at(&mut self.plain[len..], offset);
            if let Some(stats) = self.worker.request_stats() {
                let ns = u64::try_from(before.elapsed().as_nanos()).unwrap_or(u64::MAX);
                stats.loop_io(ns, read.as_ref().map_or(0, |&n| n as u64));
            }
            match read {
                Ok(0) => {
                    self.plain.truncate(len);
                    // Shorter than its cached length says: never serve that entry again.
                    self.worker.open_file_cache.forget_fd(file.as_raw_fd());
                    return Err(TransferError::Truncated);
                }
                Ok(n) => {
                    self.plain.truncate(len + n);
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.plain.truncate(len),
                Err(e) => {
                    self.plain.truncate(len);
                    return Err(TransferError::Disk(e));
                }
            }
            if self.plain.len() == TLS_CHUNK {
                self.flush().await?;
            }
        }
        Ok(())
    }

    /// Seal what is gathered and send it, with anything rustls had pending first.
    async fn flush(&mut self) -> Result<(), TransferError> {
        self.out.clear();
        self.out.append(&mut self.tls.pending);
        let plain = self.plain.len() as u64;
        if plain > 0 {
            self.tls
                .encrypt(&self.plain, &mut self.out)
                .map_err(TransferError::ClientGone)?;
            self.plain.clear();
        }
        let limit = self.worker.live().options.timeouts.send;
        write_all(&self.tls.stream, &self.out, limit).await?;
        self.sent += plain;
        Ok(())
    }
}

/// Write all of `bytes`, allowing `limit` per stall.
pub(crate) async fn write_all(
    stream: &tokio::net::TcpStream,
    mut bytes: &[u8],
    limit: std::time::Duration,
) -> Result<(), TransferError> {
    while !bytes.is_empty() {
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                match tokio::time::timeout(limit, stream.writable()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(TransferError::ClientGone(e)),
                    Err(_) => return Err(TransferError::SendTimeout),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(TransferError::ClientGone(e)),
        }
    }
    Ok(())
}
