//! Connections whose records the kernel encrypts and decrypts (kTLS): the hand-over of
//! rustls's traffic secrets after the handshake, reads that see each record's content
//! type, the control records that can follow the handshake, and the record count
//! against the cipher's confidentiality limit.
//!
//! After the hand-over the socket is used exactly like a plain one for sending: the
//! head with `MSG_MORE`, then `sendfile` from the page cache (`transfer`), and the
//! kernel seals records on the way out. Reads must go through `recvmsg` with a control
//! buffer (`linerate_sys::ktls::recv_record`), because the kernel refuses to hand a
//! non-data record to a plain `read`.
//!
//! Control records (RFC 8446 §6, §4.6.3): `close_notify` ends the connection cleanly
//! (we answer with ours); any other alert ends it; a TLS 1.3 KeyUpdate is followed
//! where the kernel can replace keys (Linux ≥ 6.14, found by the start-up probe):
//! the receive key is updated and, when the peer asked, ours too after telling it so;
//! on older kernels the connection is closed cleanly, since its next record would
//! not decrypt. Any other post-handshake message (a TLS 1.2 renegotiation attempt) ends
//! the connection. Not here: the handshake (`tls::conn`).

use std::io;
use std::os::fd::AsFd;

use linerate_sys::ktls::{self, Cipher, Direction, Keys, Version};
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::{CipherSuite, ConnectionTrafficSecrets, ProtocolVersion, SupportedCipherSuite};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::tls::conn::{Handshaken, MAX_RECORD_PLAINTEXT};

/// Bytes reserved per kTLS read: one whole record of plaintext, so a request head
/// (one small record) always fits and a read never splits a control record.
const READ_KTLS: usize = MAX_RECORD_PLAINTEXT;

/// Fraction of the confidentiality limit at which we rekey or stop sending: 7/8,
/// leaving 2^21 records (32 GiB of 16 KiB records) of margin under AES-GCM's 2^24.5
/// (RFC 8446 §5.5), more than any one response's estimate.
const LIMIT_NUMERATOR: u64 = 7;
const LIMIT_DENOMINATOR: u64 = 8;

/// HandshakeType key_update (RFC 8446 §4).
const HANDSHAKE_KEY_UPDATE: u8 = 24;

/// The kernel's (version, cipher) for a negotiated suite, if it is one kTLS can carry.
pub(crate) fn kernel_suite(
    version: Option<ProtocolVersion>,
    suite: Option<SupportedCipherSuite>,
) -> Option<(Version, Cipher)> {
    let version = match version? {
        ProtocolVersion::TLSv1_3 => Version::Tls13,
        ProtocolVersion::TLSv1_2 => Version::Tls12,
        _ => return None,
    };
    let cipher = match suite?.suite() {
        CipherSuite::TLS13_AES_128_GCM_SHA256
        | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => Cipher::Aes128Gcm,
        CipherSuite::TLS13_AES_256_GCM_SHA384
        | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => Cipher::Aes256Gcm,
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
        | CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        | CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => Cipher::Chacha20Poly1305,
        _ => return None,
    };
    Some((version, cipher))
}

/// What to do before sending more records under the current key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LimitAction {
    /// Under the limit: send.
    Proceed,
    /// Would pass the limit: switch to the next key first (TLS 1.3 KeyUpdate).
    Rekey,
    /// Would pass the limit and no rekey is possible: close instead of sending.
    Close,
}

/// Records a response of `bytes` sent in `writes` calls may take: one per 16 KiB of
/// plaintext, plus one per call (each call can close a partial record).
fn record_estimate(bytes: u64, writes: u64) -> u64 {
    bytes.div_ceil(MAX_RECORD_PLAINTEXT as u64) + writes
}

/// The decision for sending `estimate` more records after `sent`, under `limit`.
fn limit_action(sent: u64, estimate: u64, limit: u64, can_rekey: bool) -> LimitAction {
    if sent.saturating_add(estimate) <= limit {
        LimitAction::Proceed
    } else if can_rekey {
        LimitAction::Rekey
    } else {
        LimitAction::Close
    }
}

/// A connection on kernel TLS.
pub(crate) struct KtlsStream {
    /// The socket; sends on it are encrypted by the kernel.
    pub(crate) stream: TcpStream,
    kernel: KernelConnection<ServerConnectionData>,
    version: Version,
    cipher: Cipher,
    /// The kernel can replace keys on a keyed socket.
    rekey: bool,
    /// Records sent under the current transmit key (an upper-bound estimate).
    tx_records: u64,
    /// Records received (an estimate, for logs: the limit binds the peer's sending).
    rx_records: u64,
    /// Rekey or stop at this many records.
    tx_limit: u64,
    eof: bool,
}

/// Install the handshake's traffic secrets in the kernel. On error the connection is
/// unusable (rustls gave its keys away) and must be closed.
pub(crate) fn hand_over(
    h: Handshaken,
    version: Version,
    cipher: Cipher,
    rekey: bool,
) -> io::Result<(KtlsStream, Vec<u8>)> {
    let limit = match h.conn.negotiated_cipher_suite() {
        Some(SupportedCipherSuite::Tls13(s)) => s.common.confidentiality_limit,
        Some(SupportedCipherSuite::Tls12(s)) => s.common.confidentiality_limit,
        None => 0,
    };
    let (secrets, kernel) = h
        .conn
        .dangerous_into_kernel_connection()
        .map_err(|e| io::Error::other(e.to_string()))?;
    let fd = h.stream.as_fd();
    ktls::attach_ulp(fd)?;
    install(
        fd,
        Direction::Transmit,
        version,
        cipher,
        secrets.tx.0,
        &secrets.tx.1,
    )?;
    install(
        fd,
        Direction::Receive,
        version,
        cipher,
        secrets.rx.0,
        &secrets.rx.1,
    )?;
    let stream = KtlsStream {
        stream: h.stream,
        kernel,
        version,
        cipher,
        rekey,
        tx_records: 0,
        rx_records: 0,
        tx_limit: limit / LIMIT_DENOMINATOR * LIMIT_NUMERATOR,
        eof: false,
    };
    Ok((stream, h.early))
}

fn install(
    fd: std::os::fd::BorrowedFd<'_>,
    dir: Direction,
    version: Version,
    cipher: Cipher,
    seq: u64,
    secrets: &ConnectionTrafficSecrets,
) -> io::Result<()> {
    let (key, iv) = match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
        | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (key.as_ref(), iv.as_ref()),
        _ => return Err(io::Error::from(io::ErrorKind::Unsupported)),
    };
    let iv: &[u8; 12] = iv
        .try_into()
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    ktls::set_keys(
        fd,
        dir,
        &Keys {
            version,
            cipher,
            key,
            iv,
            seq,
        },
    )
}

impl KtlsStream {
    /// The negotiated version and cipher, for logs.
    pub(crate) fn describe(&self) -> (&'static str, &'static str) {
        (self.version.as_str(), self.cipher.as_str())
    }

    /// Records received so far (estimate).
    pub(crate) fn rx_records(&self) -> u64 {
        self.rx_records
    }

    /// Resolves when the socket has something to read.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        if self.eof {
            return Ok(());
        }
        self.stream.readable().await
    }

    /// Append decrypted application data to `buf`; `Ok(0)` once the peer closed.
    /// Control records are handled on the way (see the module docs).
    pub(crate) fn try_read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        loop {
            if self.eof {
                return Ok(0);
            }
            let len = buf.len();
            buf.resize(len + READ_KTLS, 0);
            let fd = self.stream.as_fd();
            let got = self.stream.try_io(Interest::READABLE, || {
                ktls::recv_record(fd, &mut buf[len..])
            });
            let (n, record_type) = match got {
                Ok(r) => r,
                Err(e) => {
                    buf.truncate(len);
                    return Err(e);
                }
            };
            if record_type == ktls::CONTENT_APPLICATION_DATA {
                buf.truncate(len + n);
                if n == 0 {
                    self.eof = true;
                }
                self.rx_records += (n as u64).div_ceil(MAX_RECORD_PLAINTEXT as u64);
                return Ok(n);
            }
            let record = buf[len..len + n].to_vec();
            buf.truncate(len);
            self.rx_records += 1;
            self.control(record_type, &record)?;
        }
    }

    fn control(&mut self, record_type: u8, body: &[u8]) -> io::Result<()> {
        match record_type {
            ktls::CONTENT_ALERT => match body {
                // close_notify (RFC 8446 §6.1): a clean end.
                [_, 0] => {
                    self.eof = true;
                    Ok(())
                }
                [_, desc] => Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    format!("peer sent alert {desc}"),
                )),
                _ => Err(io::Error::from(io::ErrorKind::InvalidData)),
            },
            ktls::CONTENT_HANDSHAKE => {
                let mut rest = body;
                while let [typ, a, b, c, more @ ..] = rest {
                    let len = u32::from_be_bytes([0, *a, *b, *c]) as usize;
                    if more.len() < len {
                        return Err(io::Error::from(io::ErrorKind::InvalidData));
                    }
                    let (msg, after) = more.split_at(len);
                    rest = after;
                    match (*typ, msg) {
                        (HANDSHAKE_KEY_UPDATE, [request]) if self.version == Version::Tls13 => {
                            self.peer_key_update(*request == 1)?
                        }
                        _ => {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!("unexpected handshake message {typ} after the handshake"),
                            ))
                        }
                    }
                }
                if rest.is_empty() {
                    Ok(())
                } else {
                    Err(io::Error::from(io::ErrorKind::InvalidData))
                }
            }
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected record type {other}"),
            )),
        }
    }

    /// RFC 8446 §4.6.3: switch our receive key; if the peer asked, announce and switch
    /// our transmit key too.
    fn peer_key_update(&mut self, requested: bool) -> io::Result<()> {
        if !self.rekey {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "peer KeyUpdate, and this kernel cannot replace kTLS keys (Linux < 6.14)",
            ));
        }
        let (seq, secrets) = self
            .kernel
            .update_rx_secret()
            .map_err(|e| io::Error::other(e.to_string()))?;
        install(
            self.stream.as_fd(),
            Direction::Receive,
            self.version,
            self.cipher,
            seq,
            &secrets,
        )?;
        if requested {
            self.rekey_tx()?;
        }
        Ok(())
    }

    /// Send KeyUpdate(update_not_requested) under the old key, then use the next one.
    fn rekey_tx(&mut self) -> io::Result<()> {
        let msg = [HANDSHAKE_KEY_UPDATE, 0, 0, 1, 0];
        let n = ktls::send_record(self.stream.as_fd(), ktls::CONTENT_HANDSHAKE, &msg)?;
        if n != msg.len() {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        let (seq, secrets) = self
            .kernel
            .update_tx_secret()
            .map_err(|e| io::Error::other(e.to_string()))?;
        install(
            self.stream.as_fd(),
            Direction::Transmit,
            self.version,
            self.cipher,
            seq,
            &secrets,
        )?;
        self.tx_records = 0;
        Ok(())
    }

    /// Account for a response of `bytes` sent in `writes` calls before sending it:
    /// each call can close a partial record, so the estimate is one record per 16 KiB
    /// plus one per call. Past the limit, rekey (TLS 1.3 on a kernel that can) or
    /// refuse, and the connection closes before the limit is reached.
    pub(crate) fn before_response(&mut self, bytes: u64, writes: u64) -> io::Result<()> {
        let estimate = record_estimate(bytes, writes);
        let can_rekey = self.version == Version::Tls13 && self.rekey;
        match limit_action(self.tx_records, estimate, self.tx_limit, can_rekey) {
            LimitAction::Proceed => {}
            LimitAction::Rekey => self.rekey_tx()?,
            LimitAction::Close => {
                return Err(io::Error::other(
                    "record limit of the cipher reached and this kernel cannot rekey",
                ))
            }
        }
        self.tx_records += estimate;
        Ok(())
    }

    /// Best-effort close_notify (warning level 1, description 0).
    pub(crate) fn close_notify(&self) {
        let _ = ktls::send_record(self.stream.as_fd(), ktls::CONTENT_ALERT, &[1, 0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_estimated_up_and_the_limit_rekeys_or_closes() {
        assert_eq!(record_estimate(0, 1), 1);
        assert_eq!(record_estimate(16 * 1024, 2), 3);
        assert_eq!(record_estimate(16 * 1024 + 1, 2), 4);
        // AES-GCM under TLS 1.3: 2^24.5 records (RFC 8446 §5.5); we act at 7/8.
        let limit = (1u64 << 24) / LIMIT_DENOMINATOR * LIMIT_NUMERATOR;
        assert_eq!(limit_action(0, 130, limit, false), LimitAction::Proceed);
        assert_eq!(
            limit_action(limit - 130, 130, limit, false),
            LimitAction::Proceed
        );
        assert_eq!(
            limit_action(limit - 129, 130, limit, true),
            LimitAction::Rekey
        );
        assert_eq!(
            limit_action(limit - 129, 130, limit, false),
            LimitAction::Close
        );
        assert_eq!(
            limit_action(u64::MAX, 1, u64::MAX, false),
            LimitAction::Proceed
        );
    }

    #[test]
    fn only_kernel_capable_suites_map() {
        use rustls::crypto::ring::cipher_suite as cs;
        let v13 = Some(ProtocolVersion::TLSv1_3);
        assert_eq!(
            kernel_suite(v13, Some(cs::TLS13_AES_128_GCM_SHA256)),
            Some((Version::Tls13, Cipher::Aes128Gcm))
        );
        assert_eq!(
            kernel_suite(
                Some(ProtocolVersion::TLSv1_2),
                Some(cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256)
            ),
            Some((Version::Tls12, Cipher::Chacha20Poly1305))
        );
        assert_eq!(kernel_suite(None, Some(cs::TLS13_AES_256_GCM_SHA384)), None);
        assert_eq!(kernel_suite(Some(ProtocolVersion::TLSv1_1), None), None);
    }
}
