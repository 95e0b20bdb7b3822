//! Kernel TLS (kTLS, `Documentation/networking/tls.rst`): attach the `tls` upper-layer
//! protocol to a TCP socket, install the record keys for sending (`TLS_TX`) and
//! receiving (`TLS_RX`), and move records whose content type matters (alerts, handshake
//! messages after the handshake) with `recvmsg`/`sendmsg` and the `TLS_*_RECORD_TYPE`
//! control messages.
//!
//! The `tls12_crypto_info_*` structures are defined here rather than taken from `libc`
//! because their presence there varies between libc releases; the layouts are the
//! kernel's UAPI (`include/uapi/linux/tls.h`) and never change. Nothing here performs a
//! handshake, derives keys or decides when to use kTLS: the server does, once at
//! start-up with [`probe`] and per connection with the keys rustls hands over.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `SOL_TLS`: the socket level of the kTLS options.
const SOL_TLS: libc::c_int = 282;
/// `TLS_TX`: install the transmit key.
const TLS_TX: libc::c_int = 1;
/// `TLS_RX`: install the receive key.
const TLS_RX: libc::c_int = 2;
/// `TLS_SET_RECORD_TYPE`: cmsg type giving a sent record's content type.
const TLS_SET_RECORD_TYPE: libc::c_int = 1;
/// `TLS_GET_RECORD_TYPE`: cmsg type carrying a received record's content type.
const TLS_GET_RECORD_TYPE: libc::c_int = 2;
/// `TCP_ULP`: attach an upper-layer protocol (here "tls").
const TCP_ULP: libc::c_int = 31;

const TLS_CIPHER_AES_GCM_128: u16 = 51;
const TLS_CIPHER_AES_GCM_256: u16 = 52;
const TLS_CIPHER_CHACHA20_POLY1305: u16 = 54;

/// TLS record content type `application_data` (RFC 8446 §5.1).
pub const CONTENT_APPLICATION_DATA: u8 = 23;
/// TLS record content type `alert`.
pub const CONTENT_ALERT: u8 = 21;
/// TLS record content type `handshake`.
pub const CONTENT_HANDSHAKE: u8 = 22;

/// The protocol version whose record format the kernel must use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// TLS 1.2 (`TLS_1_2_VERSION`, 0x0303): explicit 8-byte nonce per record.
    Tls12,
    /// TLS 1.3 (`TLS_1_3_VERSION`, 0x0304): nonce from the sequence number, inner type.
    Tls13,
}

impl Version {
    fn code(self) -> u16 {
        match self {
            Version::Tls12 => 0x0303,
            Version::Tls13 => 0x0304,
        }
    }

    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Tls12 => "tls1.2",
            Version::Tls13 => "tls1.3",
        }
    }
}

/// The AEADs kTLS can carry that linerate negotiates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// AES-128-GCM.
    Aes128Gcm,
    /// AES-256-GCM.
    Aes256Gcm,
    /// ChaCha20-Poly1305.
    Chacha20Poly1305,
}

impl Cipher {
    /// Every cipher, in the order the probe tries them.
    pub const ALL: [Cipher; 3] = [
        Cipher::Aes128Gcm,
        Cipher::Aes256Gcm,
        Cipher::Chacha20Poly1305,
    ];

    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Cipher::Aes128Gcm => "aes-128-gcm",
            Cipher::Aes256Gcm => "aes-256-gcm",
            Cipher::Chacha20Poly1305 => "chacha20-poly1305",
        }
    }

    fn key_len(self) -> usize {
        match self {
            Cipher::Aes128Gcm => 16,
            Cipher::Aes256Gcm | Cipher::Chacha20Poly1305 => 32,
        }
    }
}

/// Key material for one direction, as TLS defines it: the AEAD key, the 12-byte
/// "write IV" (RFC 8446 §5.3; for TLS 1.2 AES-GCM the first 4 bytes are the implicit
/// salt of RFC 5288 §3) and the sequence number of the next record.
pub struct Keys<'a> {
    /// The negotiated protocol version.
    pub version: Version,
    /// The AEAD.
    pub cipher: Cipher,
    /// The AEAD key (16 or 32 bytes, per cipher).
    pub key: &'a [u8],
    /// The 12-byte IV.
    pub iv: &'a [u8; 12],
    /// The next record's sequence number.
    pub seq: u64,
}

/// `struct tls_crypto_info` + the AES-GCM fields (`tls12_crypto_info_aes_gcm_{128,256}`).
#[repr(C)]
struct AesGcm<const K: usize> {
    version: u16,
    cipher_type: u16,
    iv: [u8; 8],
    key: [u8; K],
    salt: [u8; 4],
    rec_seq: [u8; 8],
}

/// `struct tls12_crypto_info_chacha20_poly1305` (12-byte IV, no salt).
#[repr(C)]
struct Chacha {
    version: u16,
    cipher_type: u16,
    iv: [u8; 12],
    key: [u8; 32],
    rec_seq: [u8; 8],
}

/// Which direction a key is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Records this socket sends.
    Transmit,
    /// Records this socket receives.
    Receive,
}

/// `setsockopt(SOL_TCP, TCP_ULP, "tls")`. `ENOENT`: the kernel has no `tls` module
/// (`CONFIG_TLS` unset or the module not loadable).
pub fn attach_ulp(sock: BorrowedFd<'_>) -> io::Result<()> {
    let name = b"tls";
    // SAFETY: `sock` is live; the option value is a readable 3-byte buffer.
    let ret = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_TCP,
            TCP_ULP,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    crate::cvt(ret as libc::c_long).map(|_| ())
}

/// `setsockopt(SOL_TLS, TLS_TX or TLS_RX, crypto_info)`: install `keys` for one
/// direction. Setting a direction a second time (a TLS 1.3 key update) needs Linux
/// ≥ 6.14; older kernels answer `EBUSY`.
pub fn set_keys(sock: BorrowedFd<'_>, dir: Direction, keys: &Keys<'_>) -> io::Result<()> {
    if keys.key.len() != keys.cipher.key_len() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let opt = match dir {
        Direction::Transmit => TLS_TX,
        Direction::Receive => TLS_RX,
    };
    let seq = keys.seq.to_be_bytes();
    let mut salt = [0u8; 4];
    salt.copy_from_slice(&keys.iv[..4]);
    let mut explicit = [0u8; 8];
    // RFC 5288 §3 / kernel convention: for AES-GCM the kernel builds the nonce as
    // salt ‖ iv, and with TLS 1.3 XORs the sequence into it, so iv = IV[4..12].
    explicit.copy_from_slice(&keys.iv[4..]);
    match keys.cipher {
        Cipher::Aes128Gcm => {
            let mut key = [0u8; 16];
            key.copy_from_slice(keys.key);
            let info = AesGcm::<16> {
                version: keys.version.code(),
                cipher_type: TLS_CIPHER_AES_GCM_128,
                iv: explicit,
                key,
                salt,
                rec_seq: seq,
            };
            setsockopt_struct(sock, opt, &info)
        }
        Cipher::Aes256Gcm => {
            let mut key = [0u8; 32];
            key.copy_from_slice(keys.key);
            let info = AesGcm::<32> {
                version: keys.version.code(),
                cipher_type: TLS_CIPHER_AES_GCM_256,
                iv: explicit,
                key,
                salt,
                rec_seq: seq,
            };
            setsockopt_struct(sock, opt, &info)
        }
        Cipher::Chacha20Poly1305 => {
            let mut key = [0u8; 32];
            key.copy_from_slice(keys.key);
            let info = Chacha {
                version: keys.version.code(),
                cipher_type: TLS_CIPHER_CHACHA20_POLY1305,
                iv: *keys.iv,
                key,
                rec_seq: seq,
            };
            setsockopt_struct(sock, opt, &info)
        }
    }
}

fn setsockopt_struct<T>(sock: BorrowedFd<'_>, opt: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `sock` is live; `value` is a readable `T` of `size_of::<T>()` bytes with
    // the kernel's UAPI layout (`#[repr(C)]`, no padding: all fields are byte arrays
    // after two u16s).
    let ret = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            SOL_TLS,
            opt,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    crate::cvt(ret as libc::c_long).map(|_| ())
}

/// `recvmsg(2)` on a kTLS receive socket with room for the `TLS_GET_RECORD_TYPE`
/// control message. Returns the bytes read and the records' content type. The kernel
/// never merges records of different types into one read, and a non-application record
/// is returned only to a caller that supplies the control buffer (a plain `read`
/// gets `EIO`), which is why every kTLS read goes through here.
pub fn recv_record(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, u8)> {
    // Room for one cmsghdr carrying one byte, aligned as the kernel writes it.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: zeroed msghdr is a valid "no name, no iov" header; fields set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `sock` is live; `msg` points at `iov` (the caller's writable buffer) and
    // `control` (64 writable bytes), both outliving the call.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    let n = crate::cvt(n as libc::c_long)? as usize;
    let mut record_type = CONTENT_APPLICATION_DATA;
    // SAFETY: `msg` was filled by the kernel; CMSG_FIRSTHDR/NXTHDR stay within
    // `msg_controllen` bytes of `control`, which is alive and aligned for cmsghdr.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == SOL_TLS && (*c).cmsg_type == TLS_GET_RECORD_TYPE {
                record_type = *libc::CMSG_DATA(c);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n, record_type))
}

/// `sendmsg(2)` of one record of `record_type` (alert, handshake) on a kTLS transmit
/// socket, with `TLS_SET_RECORD_TYPE`. Returns bytes accepted.
pub fn send_record(sock: BorrowedFd<'_>, record_type: u8, data: &[u8]) -> io::Result<usize> {
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: as in `recv_record`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure size computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(1) } as usize;
    // SAFETY: the control buffer holds CMSG_SPACE(1) ≤ 64 bytes, aligned for cmsghdr;
    // CMSG_FIRSTHDR is non-null because msg_controllen ≥ sizeof(cmsghdr).
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = SOL_TLS;
        (*c).cmsg_type = TLS_SET_RECORD_TYPE;
        (*c).cmsg_len = libc::CMSG_LEN(1) as usize;
        *libc::CMSG_DATA(c) = record_type;
    }
    // SAFETY: `sock` is live; `msg` points at live buffers (the kernel only reads
    // `data`, despite iovec's `*mut`).
    let n = unsafe {
        libc::sendmsg(
            sock.as_raw_fd(),
            &msg,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    crate::cvt(n as libc::c_long).map(|n| n as usize)
}

/// What this kernel's kTLS accepts, found once at start-up by [`probe`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Support {
    /// (version, cipher) pairs for which both `TLS_TX` and `TLS_RX` were accepted.
    pub ciphers: Vec<(Version, Cipher)>,
    /// Whether keys can be replaced on a keyed socket (TLS 1.3 KeyUpdate; Linux ≥ 6.14).
    pub rekey: bool,
    /// Why kTLS is unavailable, when `ciphers` is empty.
    pub absent_because: Option<String>,
}

impl Support {
    /// Whether `cipher` under `version` can be handed to the kernel.
    pub fn supports(&self, version: Version, cipher: Cipher) -> bool {
        self.ciphers.contains(&(version, cipher))
    }
}

/// Try each (version, cipher) on a loopback TCP pair: attach the ULP to both ends and
/// install dummy keys for TX on one and RX on the other. `ENOENT` on the ULP means no
/// kTLS at all; `ENOPROTOOPT`/`EINVAL`/`ENOTSUPP` on a key means that cipher is missing.
/// Also tries a second `TLS_TX` on a TLS 1.3 socket to learn whether rekeying works.
/// Costs a few sockets, once.
pub fn probe() -> Support {
    use std::os::fd::AsFd;
    let mut support = Support::default();
    let key = [0x42u8; 32];
    let iv = [7u8; 12];
    for version in [Version::Tls12, Version::Tls13] {
        for cipher in Cipher::ALL {
            let pair = match loopback_pair() {
                Ok(p) => p,
                Err(e) => {
                    support.absent_because = Some(format!("probe socket: {e}"));
                    return support;
                }
            };
            let keys = Keys {
                version,
                cipher,
                key: &key[..cipher.key_len()],
                iv: &iv,
                seq: 0,
            };
            let ok = (|| -> io::Result<()> {
                attach_ulp(pair.0.as_fd())?;
                attach_ulp(pair.1.as_fd())?;
                set_keys(pair.0.as_fd(), Direction::Transmit, &keys)?;
                set_keys(pair.1.as_fd(), Direction::Receive, &keys)?;
                Ok(())
            })();
            match ok {
                Ok(()) => {
                    support.ciphers.push((version, cipher));
                    if version == Version::Tls13
                        && set_keys(pair.0.as_fd(), Direction::Transmit, &keys).is_ok()
                    {
                        support.rekey = true;
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    support.absent_because =
                        Some("the kernel has no `tls` module (TCP_ULP \"tls\": ENOENT)".into());
                    return support;
                }
                Err(_) => {}
            }
        }
    }
    if support.ciphers.is_empty() {
        support.absent_because = Some("the kernel accepted no cipher".into());
    }
    support
}

fn loopback_pair() -> io::Result<(std::net::TcpStream, std::net::TcpStream)> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let a = std::net::TcpStream::connect(l.local_addr()?)?;
    let (b, _) = l.accept()?;
    Ok((a, b))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn uapi_layouts_match_the_kernel() {
        // include/uapi/linux/tls.h: 4-byte header + iv + key + salt + rec_seq.
        assert_eq!(std::mem::size_of::<AesGcm<16>>(), 4 + 8 + 16 + 4 + 8);
        assert_eq!(std::mem::size_of::<AesGcm<32>>(), 4 + 8 + 32 + 4 + 8);
        assert_eq!(std::mem::size_of::<Chacha>(), 4 + 12 + 32 + 8);
    }

    #[test]
    fn probe_answers_without_failing() {
        // On a kernel without CONFIG_TLS (the build machines) this says why; inside
        // the kTLS VM it lists ciphers. Either way it must not panic or leak.
        let s = probe();
        assert!(s.ciphers.is_empty() == s.absent_because.is_some(), "{s:?}");
    }

    #[test]
    fn wrong_key_length_is_einval() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        use std::os::fd::AsFd;
        let keys = Keys {
            version: Version::Tls13,
            cipher: Cipher::Aes256Gcm,
            key: &[0u8; 16],
            iv: &[0u8; 12],
            seq: 0,
        };
        let e = set_keys(a.as_fd(), Direction::Transmit, &keys).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
}
