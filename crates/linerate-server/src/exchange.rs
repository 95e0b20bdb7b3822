//! What the connection hands a handler: the [`Request`] (parsed head, body, client
//! address) and, through [`Interim`], a way to send interim (1xx) responses ahead of
//! the final one. It sits above the send paths (`transport`), which it uses for those
//! interim heads, and below the handlers.

use std::future::Future;
use std::net::IpAddr;

use linerate_http::{Persistence, RequestHead, StatusCode};

use crate::context::Worker;
use crate::response::{Body, Response};
use crate::stats::CachePhase;
use crate::transport::Transport;

/// A request as the connection hands it to a handler.
pub(crate) struct Request<'a> {
    /// The parsed head (borrowing the connection's buffer).
    pub(crate) head: &'a RequestHead<'a>,
    /// The request body, read whole when `handler::Mode::forwarded_body_limit` allowed it;
    /// empty otherwise.
    pub(crate) body: Vec<u8>,
    /// The client's address (cache mode only; `None` if the socket could not say).
    pub(crate) peer: Option<IpAddr>,
    /// Whether the connection is TLS (the scheme of the request's URI).
    pub(crate) secure: bool,
    /// It came over HTTP/2: a body of unknown length is not chunked (DATA frames end
    /// it), and there are no interim responses.
    pub(crate) http2: bool,
    /// Where interim (1xx) responses go before the final one.
    pub(crate) interim: Interim<'a>,
}

/// The client's connection, for interim (1xx) responses sent ahead of the final one
/// (cache mode forwards an origin's `103 Early Hints`, RFC 9110 §15.2). Closed to
/// HTTP/1.0 clients (§15.2: "a server MUST NOT send a 1xx response to an HTTP/1.0
/// client"). A failed send closes it: the final response will find the client gone.
pub(crate) struct Interim<'a> {
    io: Option<&'a mut Transport>,
    /// An HTTP/2 stream's: the head goes to its connection as a HEADERS frame.
    stream: Option<Box<dyn FnMut(Vec<u8>) + 'a>>,
    worker: &'a Worker,
}

impl<'a> Interim<'a> {
    /// Interim responses for this request go to `io` when `open` (an HTTP/1.1 client).
    pub(crate) fn new(io: &'a mut Transport, worker: &'a Worker, open: bool) -> Interim<'a> {
        Interim {
            io: open.then_some(io),
            stream: None,
            worker,
        }
    }

    /// Interim responses for an HTTP/2 stream: each head is handed to `sink`, which
    /// queues it for the stream's connection (RFC 9113 §8.1: HEADERS before the final
    /// ones).
    pub(crate) fn stream(worker: &'a Worker, sink: impl FnMut(Vec<u8>) + 'a) -> Interim<'a> {
        Interim {
            io: None,
            stream: Some(Box::new(sink)),
            worker,
        }
    }

    /// Whether interim responses reach the client.
    pub(crate) fn enabled(&self) -> bool {
        self.io.is_some() || self.stream.is_some()
    }

    /// Send one interim response head (status line, fields, blank line).
    pub(crate) async fn send(&mut self, head: Vec<u8>) {
        if let Some(sink) = &mut self.stream {
            sink(head);
            return;
        }
        let Some(io) = self.io.as_deref_mut() else {
            return;
        };
        let interim = Response {
            head,
            body: Body::Empty,
            persistence: Persistence::KeepAlive,
            status: StatusCode::Other(103),
            cache: CachePhase::Local,
            refusal: None,
        };
        let mut sent = 0;
        if io.send(self.worker, interim, &mut sent).await.is_err() {
            self.io = None;
        }
    }

    /// Drive `work` to its end while passing on the interim heads that arrive on `rx`
    /// (in order, each before `work`'s result is returned).
    pub(crate) async fn forward_while<F: Future>(
        &mut self,
        work: F,
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    ) -> F::Output {
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                biased;
                Some(head) = rx.recv() => self.send(head).await,
                out = &mut work => {
                    while let Ok(head) = rx.try_recv() {
                        self.send(head).await;
                    }
                    return out;
                }
            }
        }
    }
}
