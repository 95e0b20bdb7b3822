//! Connections to origin servers: TCP (plus TLS for https), one worker's pool of idle
//! ones per server, and the cap on how many a worker holds.
//!
//! A pooled connection is only as good as the origin's idea of it: origins close idle
//! keep-alive connections after their own timeout (nginx 75 s, Apache and Node 5 s).
//! So before reuse we look, without blocking, for an end-of-file or unsolicited bytes
//! and throw such a connection away; the remaining race (the origin closes just as we
//! send) is the caller's retry. Not here: what goes over the connection (`exchange` in
//! the parent module, `response`).

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::{timeout_at, Instant};
use tokio_rustls::client::TlsStream;

use super::error::OriginError;
use super::shared::OriginShared;

/// A plain or TLS byte stream to an origin server.
enum Stream {
    Plain(TcpStream),
    // Boxed: a rustls client connection is a few KiB, a TcpStream a few words.
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// What a look at the connection found, without waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Peek {
    /// Nothing to read: the connection is quiet (and, as far as we can tell, open).
    Quiet,
    /// Bytes arrived that no request asked for (one of them is now consumed).
    Data,
    /// The origin closed its side (or the read failed).
    Closed,
}

/// One open connection to one server, holding one of its worker's slots.
pub(super) struct Conn {
    stream: Stream,
    /// Released when the connection is dropped.
    slot: Slot,
}

impl Conn {
    /// Connect to `server` (TCP, `TCP_NODELAY`, then TLS for https), all by `deadline`.
    pub(super) async fn connect(
        shared: &OriginShared,
        server: usize,
        slot: Slot,
        deadline: Instant,
    ) -> Result<Conn, OriginError> {
        let s = &shared.opts.servers[server];
        let tcp = match timeout_at(deadline, TcpStream::connect((s.host.as_str(), s.port))).await {
            Err(_) => return Err(OriginError::ConnectTimeout),
            Ok(Err(e)) => return Err(OriginError::Connect(e)),
            Ok(Ok(tcp)) => tcp,
        };
        // Requests go out in one write and we wait for the answer: Nagle would only
        // delay a request that does not fill a segment.
        tcp.set_nodelay(true).map_err(OriginError::Connect)?;
        let stream = match (shared.tls(), shared.server_name(server)) {
            (Some(config), Some(name)) if s.tls => {
                let connector = tokio_rustls::TlsConnector::from(config.clone());
                match timeout_at(deadline, connector.connect(name.clone(), tcp)).await {
                    Err(_) => return Err(OriginError::ConnectTimeout),
                    Ok(Err(e)) => return Err(OriginError::Tls(e.to_string())),
                    Ok(Ok(tls)) => Stream::Tls(Box::new(tls)),
                }
            }
            (_, _) if s.tls => {
                // `OriginShared::new` builds both for every https server.
                return Err(OriginError::Tls("no TLS configuration".to_owned()));
            }
            _ => Stream::Plain(tcp),
        };
        shared.count_opened(server);
        Ok(Conn { stream, slot })
    }

    /// Send `bytes` (the whole request) and flush them to the socket.
    pub(super) async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    /// Whether the connection is TLS (tokio-rustls zeroes the space a read is offered).
    pub(super) fn is_tls(&self) -> bool {
        matches!(self.stream, Stream::Tls(_))
    }

    /// Append up to `want` bytes to `buf` (`want` > 0), waiting until `deadline`.
    /// `Ok(Some(0))` is end of file; `Ok(None)` that the deadline passed. Cancel-safe: `buf`
    /// only ever grows by the bytes actually read. The bytes are read into `buf`'s spare
    /// capacity as it is: nothing is zeroed first on plain TCP (a fill reads into a
    /// 256 KiB buffer: zeroing the whole window each time was 1.2 % of a 2 MiB miss's
    /// CPU, docs/benchmarks.md "Misses"); a TLS stream zeroes it itself.
    pub(super) async fn read_until(
        &mut self,
        buf: &mut Vec<u8>,
        want: usize,
        deadline: Instant,
    ) -> io::Result<Option<usize>> {
        buf.reserve(want);
        let mut space = bytes::BufMut::limit(&mut *buf, want);
        match timeout_at(
            deadline,
            tokio::io::AsyncReadExt::read_buf(&mut self.stream, &mut space),
        )
        .await
        {
            Err(_) => Ok(None),
            Ok(Err(e)) => Err(e),
            Ok(Ok(n)) => Ok(Some(n)),
        }
    }

    /// Look for bytes or end of file without waiting. Run unconstrained, because under
    /// tokio's cooperative budget a ready socket can report "pending", which here would
    /// pass a connection with stray bytes as quiet.
    pub(super) async fn peek(&mut self) -> Peek {
        let stream = &mut self.stream;
        tokio::task::unconstrained(std::future::poll_fn(|cx| {
            let mut byte = [0u8; 1];
            let mut rb = ReadBuf::new(&mut byte);
            Poll::Ready(match Pin::new(&mut *stream).poll_read(cx, &mut rb) {
                Poll::Pending => Peek::Quiet,
                Poll::Ready(Ok(())) if rb.filled().is_empty() => Peek::Closed,
                Poll::Ready(Ok(())) => Peek::Data,
                Poll::Ready(Err(_)) => Peek::Closed,
            })
        }))
        .await
    }

    /// Put this connection back in its worker's pool (or close it if the pool is gone).
    pub(super) fn release(self) {
        if let Some(pool) = self.slot.pool.upgrade() {
            pool.idle.borrow_mut().push(self);
            pool.changed.notify_one();
        }
    }
}

/// One worker's connections to one server: the idle ones (LIFO: the most recently used
/// is the least likely to have been closed by the origin) and the count of all open.
pub(super) struct ServerPool {
    idle: RefCell<Vec<Conn>>,
    open: Cell<usize>,
    /// Signalled when a connection returns to the pool or closes.
    changed: Notify,
}

impl ServerPool {
    /// An empty pool.
    pub(super) fn new() -> ServerPool {
        ServerPool {
            idle: RefCell::new(Vec::new()),
            open: Cell::new(0),
            changed: Notify::new(),
        }
    }

    /// The most recently pooled connection that is still quiet, if any; others found
    /// on the way are closed.
    pub(super) async fn take_idle(&self) -> Option<Conn> {
        loop {
            let mut conn = self.idle.borrow_mut().pop()?;
            if conn.peek().await == Peek::Quiet {
                return Some(conn);
            }
        }
    }

    /// Close the longest-idle pooled connection, freeing its slot; false if none.
    pub(super) fn evict_oldest(&self) -> bool {
        let mut idle = self.idle.borrow_mut();
        if idle.is_empty() {
            return false;
        }
        let conn = idle.remove(0);
        drop(idle);
        drop(conn);
        true
    }

    /// A slot for a new connection, if fewer than `max` are open.
    pub(super) fn try_reserve(self: &Rc<Self>, max: usize) -> Option<Slot> {
        let open = self.open.get();
        if open >= max {
            return None;
        }
        self.open.set(open + 1);
        Some(Slot {
            pool: Rc::downgrade(self),
        })
    }

    /// Wait until a connection returns or closes, or `deadline`; false on timeout.
    pub(super) async fn wait_change(&self, deadline: Instant) -> bool {
        timeout_at(deadline, self.changed.notified()).await.is_ok()
    }

    /// Connections open now (busy plus idle).
    #[cfg(test)]
    pub(super) fn open(&self) -> usize {
        self.open.get()
    }

    /// Connections idle in the pool now.
    #[cfg(test)]
    pub(super) fn idle(&self) -> usize {
        self.idle.borrow().len()
    }
}

/// One of the `max_connections` a worker may hold to a server. Weak, so that idle
/// connections (which hold slots) do not keep their own pool alive in a cycle.
pub(super) struct Slot {
    pool: Weak<ServerPool>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.open.set(pool.open.get().saturating_sub(1));
            pool.changed.notify_one();
        }
    }
}
