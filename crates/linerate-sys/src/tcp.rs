//! TCP socket options for observing and shaping connections: `TCP_INFO` (read for a
//! sampled fraction of connections only), `TCP_CONGESTION` and `SO_MAX_PACING_RATE`
//! (set once on each listener; accepted sockets inherit both).
//!
//! Why a sample: Netflix measured that full per-connection TCP statistics cost 5-10% of
//! the CPU (DESIGN.md); one `getsockopt(TCP_INFO)` is a syscall plus a socket lock, so the
//! server reads it only for the connections it samples. Does not decide the sample, keep
//! histograms or retry: thin wrappers only.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `SO_MAX_PACING_RATE` (asm-generic/socket.h; the same on every architecture Linux
/// supports except alpha/mips/parisc/sparc, which linerate does not target). Not every
/// libc version exports it.
const SO_MAX_PACING_RATE: libc::c_int = 47;

/// Longest congestion-control name the kernel accepts (`TCP_CA_NAME_MAX`).
pub const CONGESTION_NAME_MAX: usize = 16;

/// The leading part of the kernel's `struct tcp_info` (include/uapi/linux/tcp.h) up to
/// `tcpi_delivery_rate` (Linux 4.9). The kernel copies `min(len, its size)` bytes, so a
/// shorter struct than the running kernel's is always safe to pass.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct RawTcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    flags: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
}

/// The `TCP_INFO` fields linerate keeps histograms of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpInfo {
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Data segments sent over the connection's life (retransmissions included).
    pub data_segs_out: u32,
    /// Most recent delivery-rate estimate, bytes per second (0 before any estimate).
    pub delivery_rate: u64,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// The socket's `SO_MAX_PACING_RATE`, bytes per second (`u64::MAX` = no cap).
    pub max_pacing_rate: u64,
}

/// `getsockopt(TCP_INFO)`.
pub fn tcp_info(sock: BorrowedFd<'_>) -> io::Result<TcpInfo> {
    let mut raw = RawTcpInfo::default();
    let mut len = std::mem::size_of::<RawTcpInfo>() as libc::socklen_t;
    // SAFETY: `raw` is a live, writable, plain-old-data struct of `len` bytes; the kernel
    // writes at most `len` bytes and updates `len`.
    let ret = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut raw as *mut RawTcpInfo).cast(),
            &mut len,
        )
    };
    crate::cvt(ret as libc::c_long)?;
    Ok(TcpInfo {
        rtt_us: raw.rtt,
        total_retrans: raw.total_retrans,
        data_segs_out: raw.data_segs_out,
        delivery_rate: raw.delivery_rate,
        snd_cwnd: raw.snd_cwnd,
        max_pacing_rate: raw.max_pacing_rate,
    })
}

/// `setsockopt(TCP_CONGESTION, name)`. `ENOENT` means the kernel has no such algorithm
/// (module not loaded); `EPERM` that an unprivileged process asked for one not listed in
/// `net.ipv4.tcp_allowed_congestion_control`.
pub fn set_congestion(sock: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() > CONGESTION_NAME_MAX || name.contains('\0') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: `name` is a live readable buffer of `name.len()` bytes; the kernel copies it.
    let ret = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    crate::cvt(ret as libc::c_long).map(|_| ())
}

/// `getsockopt(TCP_CONGESTION)`: the algorithm in use on `sock`.
pub fn congestion(sock: BorrowedFd<'_>) -> io::Result<String> {
    let mut buf = [0u8; CONGESTION_NAME_MAX];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is a live writable buffer of `len` bytes.
    let ret = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    crate::cvt(ret as libc::c_long)?;
    let n = (len as usize).min(buf.len());
    let end = buf[..n].iter().position(|&b| b == 0).unwrap_or(n);
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// `setsockopt(SO_MAX_PACING_RATE)`: cap the socket's pacing rate, bytes per second.
/// Enforced by the `fq` qdisc, or by TCP's internal pacing (Linux ≥ 4.13) without it.
pub fn set_max_pacing_rate(sock: BorrowedFd<'_>, bytes_per_sec: u64) -> io::Result<()> {
    // Linux ≥ 4.19 accepts a u64; older kernels only a u32, so a value that fits is sent
    // as a u32 (works everywhere), and only larger caps need the u64 form.
    let ret = if let Ok(small) = u32::try_from(bytes_per_sec) {
        // SAFETY: `small` is a live u32 the kernel reads.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_MAX_PACING_RATE,
                (&small as *const u32).cast(),
                std::mem::size_of::<u32>() as libc::socklen_t,
            )
        }
    } else {
        // SAFETY: `bytes_per_sec` is a live u64 the kernel reads.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_MAX_PACING_RATE,
                (&bytes_per_sec as *const u64).cast(),
                std::mem::size_of::<u64>() as libc::socklen_t,
            )
        }
    };
    crate::cvt(ret as libc::c_long).map(|_| ())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test setup on loopback")]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn info_congestion_and_pacing_on_loopback() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        // Reno is always built in. Both are set on the listener and inherited by accepted
        // sockets: the kernel copies the listener's `struct sock` into the child
        // (sk_clone_lock), and keeps a congestion control set with setsockopt unless the
        // route carries its own (`ip route ... congctl`; tcp_ca_openreq_child). The
        // server relies on this instead of two setsockopt calls per accepted connection.
        set_congestion(listener.as_fd(), "reno").unwrap();
        set_max_pacing_rate(listener.as_fd(), 1_000_000).unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        assert_eq!(congestion(server.as_fd()).unwrap(), "reno");
        assert_eq!(tcp_info(server.as_fd()).unwrap().max_pacing_rate, 1_000_000);
        server.write_all(&[7u8; 10_000]).unwrap();
        let mut buf = vec![0u8; 10_000];
        client.read_exact(&mut buf).unwrap();
        let info = tcp_info(server.as_fd()).unwrap();
        assert!(info.snd_cwnd > 0, "{info:?}");
        assert!(info.data_segs_out > 0, "{info:?}");
        assert!(set_congestion(server.as_fd(), "no-such-cc").is_err());
        assert!(set_congestion(server.as_fd(), "").is_err());
    }
}
