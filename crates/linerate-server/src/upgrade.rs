//! Zero-downtime upgrade: the running process starts the next one (the binary it was
//! started from, read again from disk, or another path) and hands it every listening
//! socket and the store's writer lease; the old one stops accepting and drains only once
//! the new one says it is ready. A new process that fails before that leaves the old
//! one serving and storing.
//!
//! The two talk over one end each of a `SOCK_SEQPACKET` socketpair (the child's end is
//! named by `LINERATE_UPGRADE_FD`); every message is one packet of text, descriptors
//! attached with SCM_RIGHTS:
//!
//! ```text
//! old → new  "LINERATE-UPGRADE 1\n" + "KIND ADDR\n" per socket     + the sockets
//! new → old  "LEASE\n"          (configuration valid, listeners claimed)
//! old → new  "LEASE N\n"        (store lent: writes stopped, journal synced) + N locks
//!            or "ABORT reason\n"
//! new → old  "READY PID\n"      (store opened, workers started on the sockets)
//!            or "FAIL reason\n" (or the channel closes: the process died)
//! ```
//!
//! Not here: what "lent" means for the store (`linerate_cache::lease`), binding
//! (`server`), or the identities of the sockets (`listeners`).

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::admin::control::Control;
use crate::listeners::{Handover, Inherited};
use crate::notify::Notifier;

/// Environment variable naming the channel descriptor in the new process.
pub const UPGRADE_FD_ENV: &str = "LINERATE_UPGRADE_FD";

/// First line of the first message, with the protocol version.
const HELLO: &str = "LINERATE-UPGRADE 1";

/// How long the old process waits for each step of the new one (start-up, config
/// validation, store opening, workers). The store's index loads in the background
/// after the lease, so even a large store is ready in well under a second here; 30 s
/// covers a cold binary on a loaded machine. A new process that takes longer is killed
/// and the old one keeps serving.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the old process gives its store writes in flight to finish (and be stored)
/// before lending the store; new misses meanwhile are relayed, not stored. A fill still
/// coming in after it does not hold the upgrade up: the old process relays it to its
/// clients to the last byte (within `shutdown_grace_ms`) and does not store it; the new
/// process fetches the object again when asked (`Store::lend`). A segment fill takes
/// well under a second; a fill of a large object from a slow origin costs one more
/// origin fetch instead of a refused upgrade.
const LEND_GRACE: Duration = Duration::from_secs(1);

/// What a closed channel means.
const CLOSED: &str = "the other process exited (channel closed)";

/// Largest protocol message: a listener line is under 64 bytes, a few hundred sockets.
const MAX_MESSAGE: usize = 64 * 1024;

/// The old process's side: everything needed to start and feed the next process.
pub(crate) struct Upgrader {
    /// The binary as started (resolved at start, so a file replaced since is the new one).
    exe: PathBuf,
    /// The command line after the program name, given again to the new process.
    args: Vec<OsString>,
    handover: Arc<Handover>,
    cache: Option<Arc<crate::proxy::ProxyShared>>,
    control: Weak<Control>,
    notifier: Option<Arc<Notifier>>,
    /// One upgrade at a time.
    busy: Mutex<()>,
}

impl Upgrader {
    pub(crate) fn new(
        exe: PathBuf,
        handover: Arc<Handover>,
        cache: Option<Arc<crate::proxy::ProxyShared>>,
        control: Weak<Control>,
        notifier: Option<Arc<Notifier>>,
    ) -> Upgrader {
        Upgrader {
            exe,
            args: std::env::args_os().skip(1).collect(),
            handover,
            cache,
            control,
            notifier,
            busy: Mutex::new(()),
        }
    }

    /// Start the next process (`binary`, or the one this process was started from) and
    /// hand over. `Ok(pid)`: the new process serves, this one has begun to stop.
    /// `Err(why)`: this one keeps serving and storing.
    pub(crate) fn upgrade(&self, binary: Option<PathBuf>) -> Result<u32, String> {
        let Ok(_one) = self.busy.try_lock() else {
            return Err("an upgrade is already in progress".into());
        };
        let exe = binary.unwrap_or_else(|| self.exe.clone());
        tracing::info!(binary = %exe.display(), "upgrade: starting the new process");
        let (mine, theirs) =
            linerate_sys::passfd::seqpacket_pair().map_err(|e| format!("socketpair: {e}"))?;
        linerate_sys::passfd::clear_cloexec(theirs.as_fd())
            .map_err(|e| format!("socketpair: {e}"))?;
        let child = Command::new(&exe)
            .args(&self.args)
            .env(UPGRADE_FD_ENV, theirs.as_raw_fd().to_string())
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES")
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        // Only the child holds its end now: its exit closes the channel.
        drop(theirs);
        let mut next = Next {
            child,
            chan: Channel::new(mine),
        };
        match self.hand_over(&mut next) {
            Ok(pid) => {
                tracing::info!(
                    pid,
                    "upgrade: the new process is ready; this one drains and exits"
                );
                if let Some(n) = &self.notifier {
                    n.send(&format!("MAINPID={pid}\nSTATUS=upgraded: pid {pid} serves"));
                }
                if let Some(c) = self.control.upgrade() {
                    c.stop_handed_over();
                }
                Ok(pid)
            }
            Err(why) => {
                next.abandon();
                if let Some(c) = &self.cache {
                    c.store.resume();
                }
                tracing::error!(reason = %why, "upgrade failed; this process keeps serving");
                Err(why)
            }
        }
    }

    fn hand_over(&self, next: &mut Next) -> Result<u32, String> {
        let (lines, sockets) = self
            .handover
            .copies()
            .map_err(|e| format!("copying the listeners: {e}"))?;
        let fds: Vec<_> = sockets.iter().map(|f| f.as_fd()).collect();
        next.chan
            .send(&format!("{HELLO}\n{lines}"), &fds)
            .map_err(|e| format!("sending the listeners: {e}"))?;
        drop(sockets);
        let (m, _) = next.chan.recv()?;
        if m != "LEASE" {
            return Err(refusal(&m));
        }
        let lock_fds = match &self.cache {
            Some(c) => {
                c.store
                    .lend(LEND_GRACE)
                    .map_err(|e| format!("store not lent: {e}"))?;
                c.store.lock_fds()
            }
            None => Vec::new(),
        };
        next.chan
            .send(&format!("LEASE {}", lock_fds.len()), &lock_fds)
            .map_err(|e| format!("sending the store lease: {e}"))?;
        let (m, _) = next.chan.recv()?;
        match m.strip_prefix("READY ") {
            Some(pid) => pid
                .trim()
                .parse()
                .map_err(|_| format!("bad READY message: {m:?}")),
            None => Err(refusal(&m)),
        }
    }
}

/// A message that is not the expected next step, as the reason an upgrade failed.
fn refusal(m: &str) -> String {
    match m.strip_prefix("FAIL ") {
        Some(why) => format!("the new process failed: {why}"),
        None => format!("unexpected message from the new process: {m:?}"),
    }
}

/// The new process, while the old one talks to it.
struct Next {
    child: Child,
    chan: Channel,
}

impl Next {
    /// The new process failed or timed out: make sure it is gone (it may be alive and
    /// stuck, or about to serve on the sockets it received).
    fn abandon(&mut self) {
        let _ = self.chan.send("ABORT upgrade abandoned", &[]);
        if let Err(e) = self.child.kill() {
            tracing::debug!(error = %e, "upgrade: kill of the new process");
        }
        match self.child.wait() {
            Ok(status) => tracing::info!(%status, "upgrade: the new process has exited"),
            Err(e) => tracing::warn!(error = %e, "upgrade: wait for the new process"),
        }
    }
}

/// One end of the upgrade channel, with a receive timeout of [`STEP_TIMEOUT`].
struct Channel {
    sock: UnixDatagram,
}

impl Channel {
    fn new(fd: OwnedFd) -> Channel {
        // A SOCK_SEQPACKET socket: std's datagram type only sets timeouts and closes it.
        let sock = UnixDatagram::from(fd);
        if let Err(e) = sock.set_read_timeout(Some(STEP_TIMEOUT)) {
            tracing::warn!(error = %e, "upgrade channel timeout");
        }
        Channel { sock }
    }

    fn send(&self, text: &str, fds: &[std::os::fd::BorrowedFd<'_>]) -> Result<(), String> {
        match linerate_sys::passfd::send_with_fds(self.sock.as_fd(), text.as_bytes(), fds, None) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(CLOSED.into()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The next message (trailing newline removed) and its descriptors; a closed
    /// channel or the timeout is an error.
    fn recv(&self) -> Result<(String, Vec<OwnedFd>), String> {
        let mut buf = vec![0u8; MAX_MESSAGE];
        match linerate_sys::passfd::recv_with_fds(self.sock.as_fd(), &mut buf) {
            Ok((0, _)) => Err(CLOSED.into()),
            Ok((n, fds)) => {
                let text = String::from_utf8_lossy(&buf[..n]).trim_end().to_owned();
                Ok((text, fds))
            }
            // A process that exited without reading what we sent resets the channel.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Err(CLOSED.into()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                Err(format!("no answer within {} s", STEP_TIMEOUT.as_secs()))
            }
            Err(e) => Err(format!("upgrade channel: {e}")),
        }
    }
}

/// The new process's side: started by an upgrade, it received the listeners and asks
/// for the store before it serves.
pub struct Successor {
    chan: Channel,
    inherited: Mutex<Option<Inherited>>,
}

impl Successor {
    /// When this process was started by an upgrade (`LINERATE_UPGRADE_FD` set): take
    /// the channel and receive the listening sockets. `Ok(None)` otherwise. Removes the
    /// variable, so a later upgrade's child never sees a stale one. Errors here and
    /// from `Successor::lease` carry no `upgrade:` prefix: the caller adds it.
    pub fn from_env() -> Result<Option<Successor>, String> {
        let Some(v) = std::env::var_os(UPGRADE_FD_ENV) else {
            return Ok(None);
        };
        std::env::remove_var(UPGRADE_FD_ENV);
        let fd: i32 = v
            .to_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("{UPGRADE_FD_ENV}={v:?} is not a descriptor number"))?;
        let chan = Channel::new(
            linerate_sys::passfd::adopt(fd).map_err(|e| format!("{UPGRADE_FD_ENV}={fd}: {e}"))?,
        );
        let (text, fds) = chan.recv()?;
        let mut lines = text.lines();
        if lines.next() != Some(HELLO) {
            return Err(format!("unknown protocol {text:?}"));
        }
        let names: Vec<String> = lines
            .map(|l| l.split(' ').next().unwrap_or_default().to_owned())
            .collect();
        if names.len() != fds.len() {
            return Err(format!(
                "{} listeners described, {} received",
                names.len(),
                fds.len()
            ));
        }
        let inherited = Inherited::from_named(names.into_iter().zip(fds).collect());
        Ok(Some(Successor {
            chan,
            inherited: Mutex::new(Some(inherited)),
        }))
    }

    /// The sockets received (once; later calls get none).
    pub(crate) fn take_listeners(&self) -> Inherited {
        lock(&self.inherited).take().unwrap_or_default()
    }

    /// Ask the old process for the store: it stops writing and passes its locks, one
    /// per disk (none in appliance mode).
    pub(crate) fn lease(&self) -> Result<Vec<File>, String> {
        self.chan
            .send("LEASE", &[])
            .map_err(|e| format!("asking for the store lease: {e}"))?;
        let (text, fds) = self.chan.recv()?;
        let Some(n) = text.strip_prefix("LEASE ") else {
            return Err(format!("the old process said {text:?}"));
        };
        if n.trim().parse::<usize>().ok() != Some(fds.len()) {
            return Err(format!("lease {text:?} with {} locks", fds.len()));
        }
        Ok(fds.into_iter().map(File::from).collect())
    }

    /// Serving: the old process may stop accepting.
    pub(crate) fn ready(&self) {
        let msg = format!("READY {}", std::process::id());
        if let Err(e) = self.chan.send(&msg, &[]) {
            tracing::warn!(error = %e, "upgrade: could not tell the old process we are ready");
        }
    }

    /// This process cannot serve: tell the old one why (it keeps serving).
    pub fn fail(&self, reason: &str) {
        let _ = self.chan.send(&format!("FAIL {reason}"), &[]);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        // The value is a plain option of sockets; a panic elsewhere leaves it whole.
        Err(p) => p.into_inner(),
    }
}
