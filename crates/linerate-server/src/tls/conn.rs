//! The TLS handshake, and the user-space record layer that connections use when the
//! kernel cannot take the records over.
//!
//! rustls's unbuffered API drives both: it never copies plaintext into buffers of its
//! own, decrypts from our input buffer and encrypts straight into our output buffer.
//! When kernel TLS may follow, the handshake reads exactly one record at a time (header,
//! then body), so that no byte of a record after the handshake is ever taken from the
//! socket before the kernel holds the keys: a record the kernel did not see would break
//! its sequence numbers. Without kTLS, reads take whatever is there.
//!
//! Defined answers to bad input (counted per worker: `linerate_tls_handshakes_total{outcome}`): bytes that are
//! not TLS get a fatal alert; plain HTTP on the TLS port (detected by its first byte,
//! an upper-case method letter where a TLS record has a content type ≤ 0x18) gets a
//! plain `400` and close, as nginx does; a handshake not finished within the handshake
//! timeout is closed (the TLS slowloris defence). Every path drops the socket and the
//! rustls state with the task; nothing is kept per failed connection.
//!
//! Not here: choosing the kernel path and handing keys over (`tls_accept`, `ktls`),
//! sending responses (`tls::send`).

use std::io;
use std::sync::Arc;

use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncodeTlsData, EncryptError};
use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

/// TLS record header: type, version, length (RFC 8446 §5.1).
const RECORD_HEADER: usize = 5;

/// Largest record on the wire: 2^14 bytes of plaintext plus at most 256 of expansion
/// (RFC 8446 §5.2; RFC 5246 §6.2.3 allows 2048 for 1.2, which rustls never sends).
pub(crate) const MAX_RECORD: usize = RECORD_HEADER + (1 << 14) + 256;

/// Largest plaintext per record (RFC 8446 §5.1).
pub(crate) const MAX_RECORD_PLAINTEXT: usize = 1 << 14;

/// Bytes one user-space read asks for: a few full records, so a pipelined burst of
/// requests costs one syscall, while an idle connection's buffer is freed (see
/// [`TlsStream::try_read_buf`]).
const READ_TLS: usize = 4 * MAX_RECORD;

/// Per-record expansion reserved when encrypting: header 5 + tag 16 + TLS 1.3 inner
/// type 1, or 5 + explicit nonce 8 + tag 16 for TLS 1.2; 32 covers both.
const RECORD_OVERHEAD: usize = 32;

/// The plain-HTTP answer on a TLS port (nginx sends a similar 400).
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\nServer: linerate\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Length: 41\r\nConnection: close\r\n\r\n\
plain HTTP request sent to an HTTPS port\n";

/// Bytes of a plain-HTTP request read and dropped before answering it (see above).
const PLAIN_HTTP_DRAIN: usize = 16 * 1024;

/// How long the plain-HTTP answer and a final alert may take to leave: best effort.
const GOODBYE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// Why a handshake did not complete. Each is the client's doing or a timeout.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    /// Not finished before the handshake deadline (slowloris defence).
    Timeout,
    /// The first bytes were a plain HTTP request: answered with 400.
    PlainHttp,
    /// rustls refused what the client sent (garbage, no common cipher, unknown SNI
    /// with refusal configured, no ALPN overlap...): a fatal alert was sent.
    Protocol(rustls::Error),
    /// The client closed or reset the connection mid-handshake.
    ClientClosed,
}

impl HandshakeError {
    /// Short stable name for logs and metric labels.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            HandshakeError::Timeout => "timeout",
            HandshakeError::PlainHttp => "plain_http",
            HandshakeError::Protocol(_) => "protocol",
            HandshakeError::ClientClosed => "client_closed",
        }
    }
}

/// A completed handshake.
pub(crate) struct Handshaken {
    /// The rustls connection, ready for application data.
    pub(crate) conn: UnbufferedServerConnection,
    /// The socket.
    pub(crate) stream: TcpStream,
    /// Received bytes rustls has not consumed (empty after an exact-record handshake).
    pub(crate) incoming: Vec<u8>,
    /// Application data that arrived with the client's last handshake flight.
    pub(crate) early: Vec<u8>,
}

/// What the state machine asks for next.
enum Step {
    Again,
    Read,
    Transmit,
    Done,
    Closed,
    Failed(rustls::Error),
}

/// Run the server side of a handshake until application data may flow, or fail.
/// `exact_records`: read one record at a time (kernel TLS may take over afterwards).
pub(crate) async fn handshake(
    stream: TcpStream,
    config: Arc<ServerConfig>,
    exact_records: bool,
    deadline: Instant,
) -> Result<Handshaken, HandshakeError> {
    let mut conn = UnbufferedServerConnection::new(config).map_err(HandshakeError::Protocol)?;
    let mut incoming: Vec<u8> = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    let mut early: Vec<u8> = Vec::new();
    let mut first_read = true;
    loop {
        let status = conn.process_tls_records(&mut incoming);
        let discard = status.discard;
        let step = match status.state {
            Err(e) => Step::Failed(e),
            Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                encode(&mut enc, &mut out);
                Step::Again
            }
            Ok(ConnectionState::TransmitTlsData(t)) => {
                // `done` only records that we will transmit; we do so before asking
                // rustls for anything else.
                t.done();
                Step::Transmit
            }
            Ok(ConnectionState::BlockedHandshake) => Step::Read,
            Ok(ConnectionState::WriteTraffic(_)) => Step::Done,
            Ok(ConnectionState::ReadTraffic(mut r)) => {
                let mut step = Step::Again;
                while let Some(rec) = r.next_record() {
                    match rec {
                        Ok(rec) => early.extend_from_slice(rec.payload),
                        Err(e) => {
                            step = Step::Failed(e);
                            break;
                        }
                    }
                }
                step
            }
            Ok(ConnectionState::PeerClosed) | Ok(ConnectionState::Closed) => Step::Closed,
            // Early data is never accepted (max_early_data_size is 0); any other
            // state a later rustls adds is retried.
            Ok(_) => Step::Again,
        };
        incoming.drain(..discard);
        match step {
            Step::Again => {}
            Step::Transmit => {
                write_all(&stream, &out, deadline).await?;
                out.clear();
            }
            Step::Read => {
                let want = if exact_records {
                    to_record_end(&incoming)
                } else {
                    READ_TLS
                };
                read_some(&stream, &mut incoming, want, deadline).await?;
                if first_read {
                    first_read = false;
                    if looks_like_plain_http(&incoming) {
                        // Take in what the client sent (a request head fits in one
                        // read): closing a socket with unread input sends a reset,
                        // which could destroy the answer before the client reads it.
                        let mut sink = [0u8; PLAIN_HTTP_DRAIN];
                        let _ = stream.try_read(&mut sink);
                        let until = Instant::now() + GOODBYE_TIMEOUT;
                        let _ = write_all(&stream, PLAIN_HTTP_ANSWER, until.min(deadline)).await;
                        return Err(HandshakeError::PlainHttp);
                    }
                }
            }
            Step::Done => {
                return Ok(Handshaken {
                    conn,
                    stream,
                    incoming,
                    early,
                })
            }
            Step::Closed => return Err(HandshakeError::ClientClosed),
            Step::Failed(e) => {
                // rustls queued a fatal alert describing the failure; send it.
                out.clear();
                if let Ok(ConnectionState::EncodeTlsData(mut enc)) =
                    conn.process_tls_records(&mut []).state
                {
                    encode(&mut enc, &mut out);
                }
                let until = Instant::now() + GOODBYE_TIMEOUT;
                let _ = write_all(&stream, &out, until.min(deadline)).await;
                return Err(HandshakeError::Protocol(e));
            }
        }
    }
}

/// Append rustls's pending handshake bytes to `out`.
fn encode<D>(enc: &mut EncodeTlsData<'_, D>, out: &mut Vec<u8>) {
    let start = out.len();
    let mut room = MAX_RECORD;
    loop {
        out.resize(start + room, 0);
        match enc.encode(&mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                return;
            }
            Err(EncodeError::InsufficientSize(s)) => room = s.required_size,
            Err(EncodeError::AlreadyEncoded) => {
                out.truncate(start);
                return;
            }
        }
    }
}

/// Bytes to read so that `buf` ends exactly at a record boundary: the rest of the
/// last, partial record, or a header when `buf` holds whole records.
fn to_record_end(buf: &[u8]) -> usize {
    let mut pos = 0;
    loop {
        if buf.len() < pos + RECORD_HEADER {
            return pos + RECORD_HEADER - buf.len();
        }
        let len = usize::from(u16::from_be_bytes([buf[pos + 3], buf[pos + 4]]));
        let end = pos + RECORD_HEADER + len;
        if buf.len() < end {
            return end - buf.len();
        }
        pos = end;
    }
}

/// Whether `buf` holds at least one whole record.
fn has_whole_record(buf: &[u8]) -> bool {
    buf.len() >= RECORD_HEADER
        && buf.len() >= RECORD_HEADER + usize::from(u16::from_be_bytes([buf[3], buf[4]]))
}

/// A TLS record starts with a content type 20-24; an HTTP request with a method token
/// in upper-case letters (RFC 9110 §9.1: methods are case-sensitive, all registered
/// ones upper-case).
fn looks_like_plain_http(buf: &[u8]) -> bool {
    buf.first().is_some_and(|b| b.is_ascii_uppercase())
}

/// Read at most `want` bytes (at least one) into `buf` before `deadline`.
async fn read_some(
    stream: &TcpStream,
    buf: &mut Vec<u8>,
    want: usize,
    deadline: Instant,
) -> Result<(), HandshakeError> {
    let len = buf.len();
    buf.resize(len + want, 0);
    loop {
        match stream.try_read(&mut buf[len..]) {
            Ok(0) => {
                buf.truncate(len);
                return Err(HandshakeError::ClientClosed);
            }
            Ok(n) => {
                buf.truncate(len + n);
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                buf.truncate(len);
                return Err(HandshakeError::ClientClosed);
            }
        }
        match timeout_at(deadline, stream.readable()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(HandshakeError::ClientClosed),
            Err(_) => {
                buf.truncate(len);
                return Err(HandshakeError::Timeout);
            }
        }
    }
}

async fn write_all(
    stream: &TcpStream,
    mut bytes: &[u8],
    deadline: Instant,
) -> Result<(), HandshakeError> {
    while !bytes.is_empty() {
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                match timeout_at(deadline, stream.writable()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return Err(HandshakeError::ClientClosed),
                    Err(_) => return Err(HandshakeError::Timeout),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(HandshakeError::ClientClosed),
        }
    }
    Ok(())
}

/// A connection whose records rustls encrypts and decrypts in user space.
pub(crate) struct TlsStream {
    /// The socket.
    pub(crate) stream: TcpStream,
    conn: UnbufferedServerConnection,
    /// Ciphertext received and not yet decrypted; unallocated while empty.
    incoming: Vec<u8>,
    /// TLS bytes rustls produced while reading (an answer to a peer KeyUpdate), sent
    /// ahead of the next response.
    pub(crate) pending: Vec<u8>,
    /// The peer sent close_notify or closed the socket.
    eof: bool,
}

fn tls_io(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl TlsStream {
    /// Wrap a completed handshake.
    pub(crate) fn new(h: Handshaken) -> TlsStream {
        TlsStream {
            stream: h.stream,
            conn: h.conn,
            incoming: h.incoming,
            pending: Vec::new(),
            eof: false,
        }
    }

    /// Resolves when [`TlsStream::try_read_buf`] may make progress.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        if self.eof || has_whole_record(&self.incoming) {
            return Ok(());
        }
        self.stream.readable().await
    }

    /// Append decrypted application data to `buf`. `Ok(0)`: the peer closed (with
    /// close_notify, or without: a truncation, which for a server reading requests is
    /// just a close). `WouldBlock`: nothing yet. Alerts and post-handshake messages are
    /// handled by rustls on the way.
    pub(crate) fn try_read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let before = buf.len();
        loop {
            loop {
                let status = self.conn.process_tls_records(&mut self.incoming);
                let discard = status.discard;
                let progress = match status.state {
                    Ok(ConnectionState::ReadTraffic(mut r)) => {
                        while let Some(rec) = r.next_record() {
                            buf.extend_from_slice(rec.map_err(tls_io)?.payload);
                        }
                        true
                    }
                    Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                        encode(&mut enc, &mut self.pending);
                        true
                    }
                    Ok(ConnectionState::TransmitTlsData(t)) => {
                        t.done();
                        true
                    }
                    Ok(ConnectionState::PeerClosed) | Ok(ConnectionState::Closed) => {
                        self.eof = true;
                        false
                    }
                    Ok(_) => false,
                    Err(e) => return Err(tls_io(e)),
                };
                self.incoming.drain(..discard);
                if !progress {
                    break;
                }
            }
            if self.incoming.is_empty() {
                // An idle connection holds no record buffer.
                self.incoming = Vec::new();
            }
            if buf.len() > before {
                return Ok(buf.len() - before);
            }
            if self.eof {
                return Ok(0);
            }
            let len = self.incoming.len();
            self.incoming.resize(len + READ_TLS, 0);
            match self.stream.try_read(&mut self.incoming[len..]) {
                Ok(0) => {
                    self.incoming.truncate(len);
                    self.eof = true;
                    return Ok(0);
                }
                Ok(n) => self.incoming.truncate(len + n),
                Err(e) => {
                    self.incoming.truncate(len);
                    return Err(e);
                }
            }
        }
    }

    /// Encrypt `plain` into records appended to `out` (full 16 KiB records, the most
    /// TLS allows, for all but the last).
    pub(crate) fn encrypt(&mut self, plain: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let start = out.len();
        let mut room =
            plain.len() + plain.len().div_ceil(MAX_RECORD_PLAINTEXT).max(1) * RECORD_OVERHEAD;
        loop {
            let status = self.conn.process_tls_records(&mut []);
            match status.state {
                Ok(ConnectionState::WriteTraffic(mut w)) => loop {
                    out.resize(start + room, 0);
                    match w.encrypt(plain, &mut out[start..]) {
                        Ok(n) => {
                            out.truncate(start + n);
                            return Ok(());
                        }
                        Err(EncryptError::InsufficientSize(s)) => room = s.required_size,
                        Err(e) => {
                            out.truncate(start);
                            return Err(io::Error::other(e.to_string()));
                        }
                    }
                },
                Ok(ConnectionState::EncodeTlsData(mut enc)) => encode(&mut enc, out),
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(other) => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        format!("cannot send in TLS state {other:?}"),
                    ))
                }
                Err(e) => return Err(tls_io(e)),
            }
        }
    }

    /// The last records to send before closing, appended to `out`: the alert rustls
    /// queued if the connection failed (bad_record_mac...), else a close_notify (RFC
    /// 8446 §6.1).
    pub(crate) fn close_notify(&mut self, out: &mut Vec<u8>) {
        // Bounded: each state below either ends the loop or consumes queued output.
        for _ in 0..4 {
            match self.conn.process_tls_records(&mut []).state {
                Ok(ConnectionState::EncodeTlsData(mut enc)) => encode(&mut enc, out),
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(ConnectionState::WriteTraffic(mut w)) => {
                    let start = out.len();
                    out.resize(start + RECORD_OVERHEAD + 2, 0);
                    match w.queue_close_notify(&mut out[start..]) {
                        Ok(n) => out.truncate(start + n),
                        Err(_) => out.truncate(start),
                    }
                    return;
                }
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_end_reads_only_to_a_boundary() {
        assert_eq!(to_record_end(&[]), 5);
        assert_eq!(to_record_end(&[22, 3, 1]), 2);
        assert_eq!(to_record_end(&[22, 3, 1, 0, 4]), 4);
        assert_eq!(to_record_end(&[22, 3, 1, 0, 4, 1, 2]), 2);
        assert_eq!(to_record_end(&[22, 3, 1, 0, 1, 9]), 5);
        assert_eq!(to_record_end(&[22, 3, 1, 0, 1, 9, 23, 3]), 3);
    }

    #[test]
    fn plain_http_is_recognised_and_tls_is_not() {
        assert!(looks_like_plain_http(b"GET / HTTP/1.1\r\n"));
        assert!(!looks_like_plain_http(&[22, 3, 1, 0, 200]));
        assert!(!looks_like_plain_http(b""));
        assert!(has_whole_record(&[23, 3, 3, 0, 1, 0]));
        assert!(!has_whole_record(&[23, 3, 3, 0, 2, 0]));
    }
}
