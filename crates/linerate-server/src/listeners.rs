//! Listening sockets as things that outlive a process: their identities (kind and
//! address), the set a process inherited (from the previous process of an upgrade, or
//! from systemd's `LISTEN_FDS`), and the copies the main thread keeps to hand over.
//!
//! Why hand sockets over instead of binding new ones: every worker has its own
//! `SO_REUSEPORT` socket, each with its own accept queue, and closing one resets the
//! connections queued on it (clients see a reset, the kernel counts nothing, the
//! operator sees failures). A socket passed over SCM_RIGHTS is the same socket with the
//! same queue, so the next process accepts what the old one had queued.
//!
//! Not here: binding and tuning sockets (`server`) or the messages that carry them
//! (`upgrade`, `notify`).

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;

/// A listener socket and the address it was configured as (port 0 included), which
/// per-listener settings (`[tcp.listeners]`) are keyed by.
pub(crate) type ConfiguredListener = (TcpListener, SocketAddr);

/// What a listening socket is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListenerKind {
    /// `server.listen`: plain HTTP.
    Http,
    /// `tls.listen`: connections begin with a TLS handshake.
    Https,
    /// `admin.listen`: the admin API.
    Admin,
}

impl ListenerKind {
    /// The name in the upgrade protocol and in systemd's `FDNAME=`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ListenerKind::Http => "http",
            ListenerKind::Https => "https",
            ListenerKind::Admin => "admin",
        }
    }

    /// The kind named `s`; `None` for a name this version does not know.
    pub(crate) fn parse(s: &str) -> Option<ListenerKind> {
        match s {
            "http" => Some(ListenerKind::Http),
            "https" => Some(ListenerKind::Https),
            "admin" => Some(ListenerKind::Admin),
            _ => None,
        }
    }
}

/// Sockets a process received at start, not yet claimed by its configuration.
#[derive(Default)]
pub(crate) struct Inherited {
    sockets: Vec<(ListenerKind, SocketAddr, TcpListener)>,
}

impl Inherited {
    /// Sockets passed with names (`http`, `https`, `admin`). A descriptor that is not a
    /// bound TCP socket, or whose name is unknown, is closed with a warning; systemd
    /// socket activation without names (`"unknown"`) is taken as plain HTTP.
    pub(crate) fn from_named(named: Vec<(String, OwnedFd)>) -> Inherited {
        let mut sockets = Vec::new();
        for (name, fd) in named {
            let kind = match name.as_str() {
                "unknown" => Some(ListenerKind::Http),
                other => ListenerKind::parse(other),
            };
            let listener = TcpListener::from(fd);
            match (kind, listener.local_addr()) {
                (Some(kind), Ok(addr)) => {
                    // The flag lives on the shared file description; set it anyway, in
                    // case systemd's socket was created blocking.
                    if let Err(e) = listener.set_nonblocking(true) {
                        tracing::warn!(%addr, error = %e, "inherited listener");
                        continue;
                    }
                    sockets.push((kind, addr, listener));
                }
                (kind, addr) => tracing::warn!(
                    name,
                    known = kind.is_some(),
                    addr = ?addr.ok(),
                    "inherited descriptor is not a listener this server knows; closing it"
                ),
            }
        }
        Inherited { sockets }
    }

    /// Whether nothing was inherited.
    pub(crate) fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }

    /// Take every inherited socket of `kind` bound to `addr`. A configured port 0
    /// ("any port") matches the first inherited address of that kind and IP, so a
    /// server configured with port 0 keeps the port it was given across upgrades.
    pub(crate) fn take(&mut self, kind: ListenerKind, addr: SocketAddr) -> Vec<TcpListener> {
        let addr = if addr.port() == 0 {
            match self
                .sockets
                .iter()
                .find(|(k, a, _)| *k == kind && a.ip() == addr.ip())
            {
                Some((_, a, _)) => *a,
                None => return Vec::new(),
            }
        } else {
            addr
        };
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.sockets)
            .into_iter()
            .partition(|(k, a, _)| *k == kind && *a == addr);
        self.sockets = rest;
        mine.into_iter().map(|(_, _, l)| l).collect()
    }

    /// Close what the configuration did not claim (an address it no longer lists),
    /// saying so: connections queued on those sockets are lost with them.
    pub(crate) fn close_unclaimed(self) {
        for (kind, addr, _) in self.sockets {
            tracing::warn!(kind = kind.as_str(), %addr, "inherited listener not in the configuration; closing it");
        }
    }
}

/// Copies of every listening socket this process serves on, kept by the main thread
/// for the next process (upgrade) or systemd's store. Holding them also keeps each
/// socket, and its queue, alive while an upgrade hands it over. Closed ([`Handover::close`])
/// as soon as this process stops accepting: a socket nobody will accept on must be
/// closed, so that new connections are refused and go elsewhere instead of queueing.
#[derive(Default)]
pub(crate) struct Handover {
    entries: Mutex<Vec<(ListenerKind, SocketAddr, OwnedFd)>>,
}

impl Handover {
    /// Keep a copy of `l` (one `dup`).
    pub(crate) fn keep(&mut self, kind: ListenerKind, l: &TcpListener) -> std::io::Result<()> {
        let addr = l.local_addr()?;
        let fd = l.as_fd().try_clone_to_owned()?;
        lock(&self.entries).push((kind, addr, fd));
        Ok(())
    }

    /// One `KIND ADDR` line per socket, and a copy of each socket in the same order
    /// (to send). Empty once closed.
    pub(crate) fn copies(&self) -> std::io::Result<(String, Vec<OwnedFd>)> {
        let entries = lock(&self.entries);
        let mut text = String::new();
        let mut fds = Vec::with_capacity(entries.len());
        for (k, a, f) in entries.iter() {
            text.push_str(&format!("{} {a}\n", k.as_str()));
            fds.push(f.try_clone()?);
        }
        Ok((text, fds))
    }

    /// Copies of the sockets of one kind (systemd's `FDNAME=` names a whole message).
    pub(crate) fn copies_of(&self, kind: ListenerKind) -> std::io::Result<Vec<OwnedFd>> {
        lock(&self.entries)
            .iter()
            .filter(|(k, _, _)| *k == kind)
            .map(|(_, _, f)| f.try_clone())
            .collect()
    }

    /// Close the copies (this process stops accepting).
    pub(crate) fn close(&self) {
        lock(&self.entries).clear();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        // A list of descriptors stays whole whatever panicked while holding it.
        Err(p) => p.into_inner(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test setup on loopback")]
mod tests {
    use super::*;

    #[test]
    fn inherited_sockets_are_claimed_by_kind_and_address() {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let b = TcpListener::bind("127.0.0.1:0").unwrap();
        let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let mut h = Handover::default();
        h.keep(ListenerKind::Http, &a).unwrap();
        h.keep(ListenerKind::Admin, &b).unwrap();
        let (text, fds) = h.copies().unwrap();
        assert_eq!(text, format!("http {aa}\nadmin {ba}\n"));
        let named = text
            .lines()
            .zip(fds)
            .map(|(line, fd)| (line.split(' ').next().unwrap().to_owned(), fd))
            .collect();
        let mut inh = Inherited::from_named(named);
        assert!(inh.take(ListenerKind::Https, aa).is_empty());
        assert!(inh
            .take(ListenerKind::Http, "127.0.0.2:0".parse().unwrap())
            .is_empty());
        // Port 0 in the configuration: the port the previous process was given.
        assert_eq!(
            inh.take(ListenerKind::Http, "127.0.0.1:0".parse().unwrap())
                .len(),
            1
        );
        assert_eq!(inh.take(ListenerKind::Admin, ba).len(), 1);
        assert!(inh.is_empty());
        h.close();
        assert!(h.copies().unwrap().1.is_empty());
    }
}
