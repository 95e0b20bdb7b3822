//! systemd integration without libsystemd: the service notification protocol
//! (sd_notify(3): `READY=1`, `STATUS=`, `MAINPID=`, `STOPPING=1`, and `FDSTORE=1` with
//! `FDNAME=` to keep the listening sockets in systemd across a restart) and socket
//! activation's `LISTEN_FDS`/`LISTEN_FDNAMES` (sd_listen_fds(3)).
//!
//! Written here rather than with the `sd-notify` crate: the protocol is one datagram of
//! `KEY=VALUE` lines to the `AF_UNIX` address in `NOTIFY_SOCKET` (a path, or an
//! abstract name after `@`), and the file-descriptor store needs the same SCM_RIGHTS
//! sending that the upgrade uses (`linerate_sys::passfd`), so a crate would add a
//! dependency for about thirty lines. Every send is best effort: systemd not listening
//! must never stop the server, so failures are logged at debug level only.
//!
//! Not here: deciding when the server is ready (`server`) or what the listeners are
//! (`listeners`).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// `SD_LISTEN_FDS_START`: the first descriptor systemd passes.
const LISTEN_FDS_START: i32 = 3;

/// Where notifications go, when the service manager asked for them.
pub(crate) struct Notifier {
    sock: UnixDatagram,
    addr: SocketAddr,
}

impl Notifier {
    /// From `NOTIFY_SOCKET`; `None` when it is unset (not run by systemd with
    /// `Type=notify`) or unusable.
    pub(crate) fn from_env() -> Option<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")?;
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(name).ok()?
            }
            None => SocketAddr::from_pathname(std::path::Path::new(&path)).ok()?,
        };
        let sock = UnixDatagram::unbound().ok()?;
        Some(Notifier { sock, addr })
    }

    /// Send one notification (`KEY=VALUE` lines).
    pub(crate) fn send(&self, state: &str) {
        self.send_with_fds(state, &[]);
    }

    /// Send one notification with descriptors attached (`FDSTORE=1`).
    pub(crate) fn send_with_fds(&self, state: &str, fds: &[BorrowedFd<'_>]) {
        let r = linerate_sys::passfd::send_with_fds(
            self.sock.as_fd(),
            state.as_bytes(),
            fds,
            Some(&self.addr),
        );
        if let Err(e) = r {
            tracing::debug!(error = %e, state, "service manager notification failed");
        }
    }
}

/// Listening sockets systemd passed to this process (socket activation, or its
/// file-descriptor store on a restart), taken by [`SystemdSockets::take`].
#[derive(Default)]
pub struct SystemdSockets(pub(crate) Vec<(String, OwnedFd)>);

impl SystemdSockets {
    /// Take the descriptors named by `LISTEN_FDS` (each with its name from
    /// `LISTEN_FDNAMES`, `"unknown"` when absent); none unless `LISTEN_PID` is this
    /// process. Call it first thing in `main`, before anything else opens a
    /// descriptor: descriptors 3 and up are then still the ones systemd passed. The
    /// variables are removed, so a child (an upgrade's next process) never takes them
    /// for its own.
    pub fn take() -> SystemdSockets {
        SystemdSockets(listen_fds())
    }
}

fn listen_fds() -> Vec<(String, OwnedFd)> {
    let pid_ok = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        == Some(std::process::id());
    let count = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<i32>().ok())
        .unwrap_or(0);
    let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
    for v in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(v);
    }
    if !pid_ok || count <= 0 {
        return Vec::new();
    }
    let mut names = names.split(':');
    let mut out = Vec::new();
    for fd in LISTEN_FDS_START..LISTEN_FDS_START.saturating_add(count) {
        let name = names.next().unwrap_or("unknown").to_owned();
        match linerate_sys::passfd::adopt(fd) {
            Ok(owned) => out.push((name, owned)),
            Err(e) => tracing::warn!(fd, error = %e, "LISTEN_FDS names a closed descriptor"),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test setup on a temp socket")]
mod tests {
    use super::*;

    #[test]
    fn notifications_and_stored_descriptors_reach_the_socket() {
        let dir = tempfile_dir();
        let path = dir.join("notify");
        let manager = UnixDatagram::bind(&path).unwrap();
        let n = Notifier {
            sock: UnixDatagram::unbound().unwrap(),
            addr: SocketAddr::from_pathname(&path).unwrap(),
        };
        n.send("READY=1\nSTATUS=serving");
        let mut buf = [0u8; 256];
        let got = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..got], b"READY=1\nSTATUS=serving");
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        n.send_with_fds("FDSTORE=1\nFDNAME=http", &[l.as_fd()]);
        let (got, fds) = linerate_sys::passfd::recv_with_fds(manager.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..got], b"FDSTORE=1\nFDNAME=http");
        let stored = std::net::TcpListener::from(fds.into_iter().next().unwrap());
        assert_eq!(stored.local_addr().unwrap(), l.local_addr().unwrap());
        let _ = std::fs::remove_dir_all(dir);
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("linerate-notify-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
