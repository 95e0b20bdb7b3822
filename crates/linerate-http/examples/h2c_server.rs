//! A minimal h2c (prior knowledge) server around `linerate_http::h2::conn`, to show how
//! a server drives the state machine and to check it against real clients (curl
//! `--http2-prior-knowledge`, `nghttp`, `h2load`). Blocking I/O, a thread per
//! connection, 127.0.0.1 only; every response is `body` bytes of zeros, sent as a DATA
//! header from `data_frame` followed by the payload written separately, as a server
//! would `sendfile` it.
//!
//! ```sh
//! cargo run -p linerate-http --example h2c_server -- 8080 65536
//! curl --http2-prior-knowledge http://127.0.0.1:8080/x -o /dev/null
//! h2load -n 1000 -c 4 -m 10 http://127.0.0.1:8080/x
//! ```
#![allow(clippy::unwrap_used, reason = "example")]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use linerate_http::h2::conn::{Connection, Event, Limits};
use linerate_http::h2::frame::ErrorCode;

fn main() {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().map_or(0, |p| p.parse().unwrap());
    let body: u64 = args.next().map_or(65_536, |b| b.parse().unwrap());
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    println!("listening on {}", listener.local_addr().unwrap());
    for sock in listener.incoming() {
        let sock = sock.unwrap();
        std::thread::spawn(move || {
            if let Err(e) = serve(sock, body) {
                eprintln!("connection: {e}");
            }
        });
    }
}

fn serve(mut sock: TcpStream, body: u64) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    let mut conn = Connection::new(Limits::default());
    let zeros = vec![0u8; 1 << 20];
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    // Body bytes left per stream.
    let mut left: BTreeMap<u32, u64> = BTreeMap::new();
    let mut peer_done = false;
    loop {
        // Control frames and heads first, then DATA as far as the windows allow.
        flush(&mut sock, &mut conn)?;
        let mut sent_any = false;
        for (&stream, rest) in left.iter_mut() {
            let window = conn.send_window(stream).min(conn.peer_max_frame_size());
            let n = (*rest).min(u64::from(window)) as u32;
            if n == 0 && *rest > 0 {
                continue;
            }
            *rest -= u64::from(n);
            let Some(header) = conn.data_frame(stream, n, *rest == 0) else {
                *rest = 0;
                continue;
            };
            // The server's `send(MSG_MORE)` + `sendfile`.
            sock.write_all(&header)?;
            sock.write_all(&zeros[..n as usize])?;
            sent_any = true;
        }
        left.retain(|_, rest| *rest > 0);
        flush(&mut sock, &mut conn)?;
        if sent_any {
            continue;
        }
        if peer_done && conn.is_idle() {
            return Ok(());
        }
        // Nothing to send: wait for the client.
        let n = sock.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        let used = match conn.recv(&buf) {
            Ok(used) => used,
            Err(e) => {
                eprintln!("connection error {} ({})", e.code.as_str(), e.reason);
                flush(&mut sock, &mut conn)?;
                return Ok(());
            }
        };
        buf.drain(..used);
        while let Some(ev) = conn.next_event() {
            match ev {
                Event::Request { stream, head, .. } => {
                    let len = body.to_string();
                    let status: &[u8] = if head.method() == linerate_http::Method::Connect {
                        b"405"
                    } else {
                        b"200"
                    };
                    let no_body = status != b"200" || head.method() == linerate_http::Method::Head;
                    conn.send_headers(
                        stream,
                        &[
                            (b":status", status),
                            (b"content-length", len.as_bytes()),
                            (b"content-type", b"video/mp2t"),
                        ],
                        no_body,
                    );
                    if !no_body {
                        left.insert(stream, body);
                    }
                }
                Event::RequestTooLarge { stream } => {
                    conn.send_headers(stream, &[(b":status", b"431")], true);
                }
                Event::Reset { stream, .. } => {
                    left.remove(&stream);
                }
                Event::GoAway { .. } => peer_done = true,
                // A real server reorders its DATA by priority (RFC 9218); this one sends
                // streams in id order.
                Event::Data { .. } | Event::WindowOpened | Event::PriorityUpdate { .. } => {}
            }
        }
        if peer_done && conn.is_idle() {
            conn.go_away(ErrorCode::NO_ERROR, b"");
        }
    }
}

fn flush(sock: &mut TcpStream, conn: &mut Connection) -> std::io::Result<()> {
    let out = conn.output();
    if !out.is_empty() {
        sock.write_all(out)?;
        out.clear();
    }
    Ok(())
}
