//! The connection state machine, fed byte strings a client would send (header blocks
//! made by `h2::hpack`'s encoder, as a client's would be). Tests named
//! `h2spec_<section>_<case>` port h2spec's cases (github.com/summerwind/h2spec,
//! `http2/*.go` and the non-HPACK part of `generic/*.go`) that a connection decides
//! without a server behind it; where h2spec waits for a DATA frame, the test asks
//! [`Connection::send_window`] instead. The others pin the defences and the API.
#![allow(clippy::unwrap_used, reason = "tests")]

use super::*;
use crate::h2::frame::{flag, kind};

/// A request head a client sends.
const GET: &[(&[u8], &[u8])] = &[
    (b":method", b"GET"),
    (b":scheme", b"https"),
    (b":path", b"/live/seg1.ts?x=1"),
    (b":authority", b"cdn.example"),
    (b"user-agent", b"test"),
];

const POST: &[(&[u8], &[u8])] = &[
    (b":method", b"POST"),
    (b":scheme", b"https"),
    (b":path", b"/up"),
    (b":authority", b"cdn.example"),
];

/// The bytes a client sends, built frame by frame.
struct Client {
    enc: Encoder,
    out: Vec<u8>,
}

impl Client {
    /// The preface and an empty SETTINGS.
    fn new() -> Client {
        let mut out = PREFACE.to_vec();
        frame::write_settings(&mut out, &[]);
        Client {
            enc: Encoder::new(),
            out,
        }
    }

    /// Nothing yet (the preface already sent).
    fn more() -> Client {
        Client {
            enc: Encoder::new(),
            out: Vec::new(),
        }
    }

    fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    fn block(&mut self, fields: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        self.enc.encode(fields.iter().copied(), &mut b);
        b
    }

    fn raw(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) -> &mut Client {
        let len = payload.len() as u32;
        self.out.extend_from_slice(&len.to_be_bytes()[1..]);
        self.out.push(kind);
        self.out.push(flags);
        self.out.extend_from_slice(&stream.to_be_bytes());
        self.out.extend_from_slice(payload);
        self
    }

    fn headers(&mut self, stream: u32, fields: &[(&[u8], &[u8])], end_stream: bool) -> &mut Client {
        let b = self.block(fields);
        let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
        self.raw(kind::HEADERS, flags, stream, &b)
    }

    fn get(&mut self, stream: u32) -> &mut Client {
        self.headers(stream, GET, true)
    }

    fn data(&mut self, stream: u32, data: &[u8], end_stream: bool) -> &mut Client {
        let flags = if end_stream { flag::END_STREAM } else { 0 };
        self.raw(kind::DATA, flags, stream, data)
    }

    fn settings(&mut self, params: &[(u16, u32)]) -> &mut Client {
        frame::write_settings(&mut self.out, params);
        self
    }

    fn rst(&mut self, stream: u32, code: ErrorCode) -> &mut Client {
        frame::write_rst_stream(&mut self.out, stream, code);
        self
    }

    fn window_update(&mut self, stream: u32, inc: u32) -> &mut Client {
        frame::write_window_update(&mut self.out, stream, inc);
        self
    }

    fn priority(&mut self, stream: u32, dep: u32) -> &mut Client {
        let mut p = dep.to_be_bytes().to_vec();
        p.push(15);
        self.raw(kind::PRIORITY, 0, stream, &p)
    }

    fn priority_update(&mut self, on: u32, prioritized: u32, value: &[u8]) -> &mut Client {
        let mut p = prioritized.to_be_bytes().to_vec();
        p.extend_from_slice(value);
        self.raw(kind::PRIORITY_UPDATE, 0, on, &p)
    }

    fn ping(&mut self, ack: bool, data: [u8; 8]) -> &mut Client {
        frame::write_ping(&mut self.out, ack, data);
        self
    }
}

/// A frame the server wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Out {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

impl Out {
    fn code(&self) -> ErrorCode {
        let at = if self.kind == kind::GOAWAY { 4 } else { 0 };
        let p = &self.payload[at..at + 4];
        ErrorCode(u32::from_be_bytes([p[0], p[1], p[2], p[3]]))
    }
}

/// A connection with the client's preface and SETTINGS read and our output drained.
fn ready() -> (Connection, Client) {
    ready_with(Limits::default())
}

fn ready_with(limits: Limits) -> (Connection, Client) {
    let mut c = Connection::new(limits);
    let mut client = Client::new();
    feed(&mut c, &client.take()).unwrap();
    drain(&mut c);
    (c, client)
}

/// Feed all of `bytes`; on success every byte must have been consumed.
fn feed(c: &mut Connection, bytes: &[u8]) -> Result<(), ConnError> {
    let n = c.recv(bytes)?;
    assert_eq!(n, bytes.len(), "all consumed");
    Ok(())
}

fn send(c: &mut Connection, client: &mut Client) -> Result<(), ConnError> {
    let bytes = client.take();
    feed(c, &bytes)
}

/// The frames in the output, drained.
fn drain(c: &mut Connection) -> Vec<Out> {
    let out = std::mem::take(c.output());
    let mut frames = Vec::new();
    let mut at = 0;
    while at < out.len() {
        let (len, kind, flags, stream) = frame::peek_header(&out[at..]).unwrap();
        let end = at + HEADER_LEN + len as usize;
        frames.push(Out {
            kind,
            flags,
            stream,
            payload: out[at + HEADER_LEN..end].to_vec(),
        });
        at = end;
    }
    frames
}

fn events(c: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| c.next_event()).collect()
}

/// The client's bytes end the connection with GOAWAY `code`.
#[track_caller]
fn conn_error(c: &mut Connection, client: &mut Client, code: ErrorCode) -> ConnError {
    let e = send(c, client).expect_err("a connection error");
    assert_eq!(e.code, code, "{e:?}");
    let out = drain(c);
    let last = out.last().expect("GOAWAY");
    assert_eq!((last.kind, last.code()), (kind::GOAWAY, code));
    // And it stays dead.
    assert_eq!(c.recv(b"anything"), Err(e));
    e
}

/// The client's bytes make a stream error `code` on `stream` (RST_STREAM), and the
/// connection goes on.
#[track_caller]
fn stream_error(c: &mut Connection, client: &mut Client, stream: u32, code: ErrorCode) {
    send(c, client).expect("no connection error");
    let out = drain(c);
    assert!(
        out.iter()
            .any(|f| f.kind == kind::RST_STREAM && f.stream == stream && f.code() == code),
        "RST_STREAM {code:?} on {stream} in {out:?}"
    );
    still_alive(c);
}

/// The connection answers a PING.
#[track_caller]
fn still_alive(c: &mut Connection) {
    let mut client = Client::more();
    client.ping(false, *b"alive?!!");
    send(c, &mut client).unwrap();
    let out = drain(c);
    assert!(out
        .iter()
        .any(|f| f.kind == kind::PING && f.flags == flag::ACK && f.payload == b"alive?!!"));
}

fn request_on(c: &mut Connection, stream: u32) -> RequestHead2 {
    let ev = events(c);
    for e in ev {
        if let Event::Request {
            stream: s, head, ..
        } = e
        {
            if s == stream {
                return head;
            }
        }
    }
    panic!("no request on {stream}");
}

/// A request whose head `fields` is malformed: stream error PROTOCOL_ERROR and no
/// event for it.
#[track_caller]
fn malformed(fields: &[(&[u8], &[u8])]) {
    let (mut c, mut client) = ready();
    client.headers(1, fields, true);
    stream_error(&mut c, &mut client, 1, ErrorCode::PROTOCOL_ERROR);
    assert!(events(&mut c).is_empty());
}

fn with(extra: &[(&'static [u8], &'static [u8])]) -> Vec<(&'static [u8], &'static [u8])> {
    let mut v: Vec<(&[u8], &[u8])> = GET.to_vec();
    v.extend_from_slice(extra);
    v
}

// ---- §3.5 preface ----

#[test]
fn h2spec_3_5_client_preface() {
    let mut c = Connection::new(Limits::default());
    let ours = drain(&mut c);
    // Our SETTINGS comes first, then the connection window.
    assert_eq!(ours[0].kind, kind::SETTINGS);
    assert_eq!(ours[0].flags, 0);
    assert_eq!(
        (ours[1].kind, ours[1].stream),
        (kind::WINDOW_UPDATE, 0),
        "connection window opened"
    );
    let mut client = Client::new();
    let bytes = client.take();
    // Byte by byte: nothing consumed until a whole preface / frame is there.
    let mut at = 0;
    for end in 1..=bytes.len() {
        at += c.recv(&bytes[at..end]).unwrap();
    }
    assert_eq!(at, bytes.len());
    let out = drain(&mut c);
    assert_eq!((out[0].kind, out[0].flags), (kind::SETTINGS, flag::ACK));
}

#[test]
fn h2spec_3_5_invalid_preface() {
    let mut c = Connection::new(Limits::default());
    drain(&mut c);
    let e = c.recv(b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
    assert_eq!(e.code, ErrorCode::PROTOCOL_ERROR);
    // A wrong prefix is refused before 24 bytes arrive.
    let mut c = Connection::new(Limits::default());
    assert!(c.recv(b"PRI * HTTP/2.0\r\n\r\nXX").is_err());
    let mut c = Connection::new(Limits::default());
    assert_eq!(c.recv(b"PRI * HTTP/2"), Ok(0));
}

#[test]
fn settings_must_follow_the_preface() {
    let mut c = Connection::new(Limits::default());
    let mut client = Client::more();
    client.out.extend_from_slice(PREFACE);
    client.ping(false, [0; 8]);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

// ---- §4 frames ----

#[test]
fn h2spec_4_1_unknown_frame_type() {
    let (mut c, mut client) = ready();
    client.raw(0x16, 0, 0, b"xxxx");
    send(&mut c, &mut client).unwrap();
    still_alive(&mut c);
}

#[test]
fn h2spec_4_1_undefined_flags() {
    let (mut c, mut client) = ready();
    client.raw(kind::PING, 0x16, 0, b"abcdefgh");
    send(&mut c, &mut client).unwrap();
    let out = drain(&mut c);
    assert_eq!((out[0].kind, out[0].flags), (kind::PING, flag::ACK));
    assert_eq!(out[0].payload, b"abcdefgh");
}

#[test]
fn h2spec_4_1_reserved_bit() {
    let (mut c, mut client) = ready();
    client.get(1);
    let mut bytes = client.take();
    bytes[5] |= 0x80; // the stream id's reserved bit
    feed(&mut c, &bytes).unwrap();
    request_on(&mut c, 1);
}

#[test]
fn h2spec_4_2_data_of_max_frame_size() {
    let (mut c, mut client) = ready();
    client
        .headers(1, POST, false)
        .data(1, &[b'x'; 16_384], true);
    send(&mut c, &mut client).unwrap();
    let ev = events(&mut c);
    assert!(ev.contains(&Event::Data {
        stream: 1,
        len: 16_384,
        end_stream: true
    }));
}

#[test]
fn h2spec_4_2_data_over_max_frame_size() {
    let (mut c, mut client) = ready();
    client
        .headers(1, POST, false)
        .data(1, &[b'x'; 16_385], true);
    conn_error(&mut c, &mut client, ErrorCode::FRAME_SIZE_ERROR);
}

#[test]
fn h2spec_4_2_headers_over_max_frame_size() {
    let (mut c, mut client) = ready();
    // Refused on its length, before the block is looked at.
    client.raw(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        &[0; 16_385],
    );
    conn_error(&mut c, &mut client, ErrorCode::FRAME_SIZE_ERROR);
}

#[test]
fn h2spec_4_3_invalid_header_block() {
    let (mut c, mut client) = ready();
    // An indexed field with index 0 (RFC 7541 §6.1): no such entry.
    client.raw(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        &[0x80],
    );
    conn_error(&mut c, &mut client, ErrorCode::COMPRESSION_ERROR);
}

#[test]
fn h2spec_4_3_priority_inside_header_block() {
    let (mut c, mut client) = ready();
    let b = client.block(GET);
    client
        .raw(kind::HEADERS, flag::END_STREAM, 1, &b)
        .priority(1, 0);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_4_3_headers_to_another_stream_inside_header_block() {
    let (mut c, mut client) = ready();
    let b = client.block(GET);
    client.raw(kind::HEADERS, flag::END_STREAM, 1, &b).get(3);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

// ---- §5.1 stream states ----

#[test]
fn h2spec_5_1_idle_data() {
    let (mut c, mut client) = ready();
    client.data(1, b"test", true);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_5_1_idle_rst_stream() {
    let (mut c, mut client) = ready();
    client.rst(1, ErrorCode::CANCEL);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_5_1_idle_window_update() {
    let (mut c, mut client) = ready();
    client.window_update(1, 100);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_5_1_idle_continuation() {
    let (mut c, mut client) = ready();
    let b = client.block(GET);
    client.raw(kind::CONTINUATION, flag::END_HEADERS, 1, &b);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_5_1_half_closed_remote_data() {
    let (mut c, mut client) = ready();
    client.get(1).data(1, b"test", true);
    stream_error(&mut c, &mut client, 1, ErrorCode::STREAM_CLOSED);
    let ev = events(&mut c);
    assert!(matches!(ev[0], Event::Request { stream: 1, .. }));
    assert_eq!(
        ev[1],
        Event::Reset {
            stream: 1,
            code: ErrorCode::STREAM_CLOSED
        }
    );
}

#[test]
fn h2spec_5_1_half_closed_remote_headers() {
    let (mut c, mut client) = ready();
    client.get(1).get(1);
    stream_error(&mut c, &mut client, 1, ErrorCode::STREAM_CLOSED);
}

#[test]
fn h2spec_5_1_half_closed_remote_continuation() {
    let (mut c, mut client) = ready();
    let b = client.block(&[(b"x-more", b"1")]);
    client
        .get(1)
        .raw(kind::CONTINUATION, flag::END_HEADERS, 1, &b);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_5_1_closed_data_after_rst_stream() {
    let (mut c, mut client) = ready();
    client
        .headers(1, POST, false)
        .rst(1, ErrorCode::CANCEL)
        .data(1, b"test", true);
    stream_error(&mut c, &mut client, 1, ErrorCode::STREAM_CLOSED);
}

#[test]
fn h2spec_5_1_closed_headers_after_rst_stream() {
    let (mut c, mut client) = ready();
    client
        .headers(1, POST, false)
        .rst(1, ErrorCode::CANCEL)
        .get(1);
    stream_error(&mut c, &mut client, 1, ErrorCode::STREAM_CLOSED);
}

#[test]
fn h2spec_5_1_closed_continuation_after_rst_stream() {
    let (mut c, mut client) = ready();
    let b = client.block(&[(b"x-more", b"1")]);
    client
        .headers(1, POST, false)
        .rst(1, ErrorCode::CANCEL)
        .raw(kind::CONTINUATION, flag::END_HEADERS, 1, &b);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

/// A stream both sides ended (the response sent with END_STREAM).
fn closed_stream() -> (Connection, Client) {
    let (mut c, mut client) = ready();
    client.get(1);
    send(&mut c, &mut client).unwrap();
    request_on(&mut c, 1);
    assert!(c.send_headers(1, &[(b":status", b"204")], true));
    drain(&mut c);
    assert!(c.is_idle());
    (c, client)
}

#[test]
fn h2spec_5_1_closed_data() {
    let (mut c, mut client) = closed_stream();
    client.data(1, b"test", true);
    stream_error(&mut c, &mut client, 1, ErrorCode::STREAM_CLOSED);
}

#[test]
fn h2spec_5_1_closed_headers() {
    let (mut c, mut client) = closed_stream();
    client.get(1);
    conn_error(&mut c, &mut client, ErrorCode::STREAM_CLOSED);
}

#[test]
fn h2spec_5_1_closed_continuation() {
    let (mut c, mut client) = closed_stream();
    let b = client.block(&[(b"x-more", b"1")]);
    client.raw(kind::CONTINUATION, flag::END_HEADERS, 1, &b);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_5_1_1_stream_id_even() {
    let (mut c, mut client) = ready();
    client.get(2);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_5_1_1_stream_id_going_down() {
    let (mut c, mut client) = ready();
    client.get(5).get(3);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_5_1_2_concurrent_stream_limit() {
    let limits = Limits {
        max_concurrent_streams: 3,
        ..Limits::default()
    };
    let (mut c, mut client) = ready_with(limits);
    for id in [1, 3, 5, 7] {
        client.get(id);
    }
    stream_error(&mut c, &mut client, 7, ErrorCode::REFUSED_STREAM);
    let requests = events(&mut c)
        .iter()
        .filter(|e| matches!(e, Event::Request { .. }))
        .count();
    assert_eq!(requests, 3);
    // Once one ends, a new stream is taken.
    assert!(c.send_headers(1, &[(b":status", b"200")], true));
    client.get(9);
    send(&mut c, &mut client).unwrap();
    request_on(&mut c, 9);
}

// ---- §5.3, §5.4, §5.5 ----

#[test]
fn h2spec_5_3_1_headers_depends_on_itself() {
    let (mut c, mut client) = ready();
    let mut p = 1u32.to_be_bytes().to_vec();
    p.push(15);
    let b = client.block(GET);
    p.extend_from_slice(&b);
    client.raw(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM | flag::PRIORITY,
        1,
        &p,
    );
    stream_error(&mut c, &mut client, 1, ErrorCode::PROTOCOL_ERROR);
    assert!(events(&mut c).is_empty());
}

#[test]
fn h2spec_5_3_1_priority_depends_on_itself() {
    // On an open stream: a stream error.
    let (mut c, mut client) = ready();
    client.headers(1, POST, false).priority(1, 1);
    stream_error(&mut c, &mut client, 1, ErrorCode::PROTOCOL_ERROR);
    // On an idle one RST_STREAM may not be sent (§6.4): the connection ends, with the
    // same code (h2spec takes either).
    let (mut c, mut client) = ready();
    client.priority(1, 1);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_5_4_1_invalid_ping_closes() {
    let (mut c, mut client) = ready();
    client.raw(kind::PING, 0, 0, b"short");
    conn_error(&mut c, &mut client, ErrorCode::FRAME_SIZE_ERROR);
}

#[test]
fn h2spec_5_4_1_goaway_before_close() {
    let (mut c, mut client) = ready();
    client.get(1);
    send(&mut c, &mut client).unwrap();
    drain(&mut c);
    client.raw(kind::PING, 0, 0, b"short");
    let e = send(&mut c, &mut client).unwrap_err();
    let out = drain(&mut c);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].kind, kind::GOAWAY);
    // Last stream: the one handed to the server; the reason as debug data.
    assert_eq!(out[0].payload[..4], 1u32.to_be_bytes());
    assert_eq!(&out[0].payload[8..], e.reason.as_bytes());
}

#[test]
fn h2spec_5_5_unknown_extension_frame() {
    let (mut c, mut client) = ready();
    client.raw(0xff, 0xff, 1, b"extension").get(1);
    send(&mut c, &mut client).unwrap();
    request_on(&mut c, 1);
}

#[test]
fn h2spec_5_5_unknown_frame_inside_header_block() {
    let (mut c, mut client) = ready();
    let b = client.block(GET);
    client
        .raw(kind::HEADERS, flag::END_STREAM, 1, &b)
        .raw(0xff, 0, 1, b"x");
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

// ---- §6.1 DATA, §6.2 HEADERS, §6.3 PRIORITY, §6.4 RST_STREAM ----

#[test]
fn h2spec_6_1_data_on_stream_0() {
    let (mut c, mut client) = ready();
    client.data(0, b"test", true);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_1_data_on_stream_not_open() {
    let (mut c, mut client) = ready();
    client.get(1).data(1, b"test", true);
    stream_error(&mut c, &mut client, 1, ErrorCode::STREAM_CLOSED);
}

#[test]
fn h2spec_6_1_data_with_invalid_pad_length() {
    let (mut c, mut client) = ready();
    client.headers(1, POST, false).raw(
        kind::DATA,
        flag::PADDED | flag::END_STREAM,
        1,
        &[6, b't', b'e', b's', b't'],
    );
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_2_headers_without_end_headers_then_priority() {
    let (mut c, mut client) = ready();
    let b = client.block(GET);
    client
        .raw(kind::HEADERS, flag::END_STREAM, 1, &b)
        .priority(3, 0);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_2_headers_to_another_stream_while_sending_headers() {
    let (mut c, mut client) = ready();
    let b = client.block(GET);
    client.raw(kind::HEADERS, flag::END_STREAM, 1, &b).get(3);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_2_headers_on_stream_0() {
    let (mut c, mut client) = ready();
    client.get(0);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_2_headers_with_invalid_pad_length() {
    let (mut c, mut client) = ready();
    let mut p = vec![200u8];
    let b = client.block(GET);
    p.extend_from_slice(&b);
    client.raw(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM | flag::PADDED,
        1,
        &p,
    );
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_3_priority_on_stream_0() {
    let (mut c, mut client) = ready();
    client.priority(0, 1);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_3_priority_of_wrong_length() {
    let (mut c, mut client) = ready();
    client
        .get(1)
        .raw(kind::PRIORITY, 0, 1, &[0, 0, 0, 3, 15, 0]);
    stream_error(&mut c, &mut client, 1, ErrorCode::FRAME_SIZE_ERROR);
    // On an idle stream: a connection error (no RST_STREAM for idle streams, §6.4).
    let (mut c, mut client) = ready();
    client.raw(kind::PRIORITY, 0, 3, &[0, 0, 0, 1, 15, 0]);
    conn_error(&mut c, &mut client, ErrorCode::FRAME_SIZE_ERROR);
}

#[test]
fn h2spec_6_4_rst_stream_on_stream_0() {
    let (mut c, mut client) = ready();
    client.rst(0, ErrorCode::CANCEL);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_4_rst_stream_on_idle_stream() {
    let (mut c, mut client) = ready();
    client.rst(1, ErrorCode::CANCEL);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_4_rst_stream_of_wrong_length() {
    let (mut c, mut client) = ready();
    client.get(1).raw(kind::RST_STREAM, 0, 1, &[0, 0, 0, 8, 0]);
    conn_error(&mut c, &mut client, ErrorCode::FRAME_SIZE_ERROR);
}

// ---- §6.5 SETTINGS ----

#[test]
fn h2spec_6_5_settings_ack_with_payload() {
    let (mut c, mut client) = ready();
    client.raw(kind::SETTINGS, flag::ACK, 0, &[0, 1, 0, 0, 0x10, 0]);
    conn_error(&mut c, &mut client, ErrorCode::FRAME_SIZE_ERROR);
}

#[test]
fn h2spec_6_5_settings_on_a_stream() {
    let (mut c, mut client) = ready();
    client.raw(kind::SETTINGS, 0, 1, &[0, 1, 0, 0, 0x10, 0]);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_5_settings_of_wrong_length() {
    let (mut c, mut client) = ready();
    client.raw(kind::SETTINGS, 0, 0, &[0, 1, 0, 0, 0x10]);
    conn_error(&mut c, &mut client, ErrorCode::FRAME_SIZE_ERROR);
}

#[test]
fn h2spec_6_5_2_enable_push_not_0_or_1() {
    let (mut c, mut client) = ready();
    client.settings(&[(setting::ENABLE_PUSH, 2)]);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_5_2_initial_window_size_too_large() {
    let (mut c, mut client) = ready();
    client.settings(&[(setting::INITIAL_WINDOW_SIZE, 1 << 31)]);
    conn_error(&mut c, &mut client, ErrorCode::FLOW_CONTROL_ERROR);
}

#[test]
fn h2spec_6_5_2_max_frame_size_too_small() {
    let (mut c, mut client) = ready();
    client.settings(&[(setting::MAX_FRAME_SIZE, 16_383)]);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_5_2_max_frame_size_too_large() {
    let (mut c, mut client) = ready();
    client.settings(&[(setting::MAX_FRAME_SIZE, 1 << 24)]);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_5_2_unknown_setting_ignored() {
    let (mut c, mut client) = ready();
    client.settings(&[(0xff, 1)]);
    send(&mut c, &mut client).unwrap();
    let out = drain(&mut c);
    assert_eq!((out[0].kind, out[0].flags), (kind::SETTINGS, flag::ACK));
}

#[test]
fn h2spec_6_5_3_settings_applied_in_order() {
    let (mut c, mut client) = ready();
    client
        .settings(&[
            (setting::INITIAL_WINDOW_SIZE, 100),
            (setting::INITIAL_WINDOW_SIZE, 1),
        ])
        .get(1);
    send(&mut c, &mut client).unwrap();
    assert_eq!(c.send_window(1), 1);
}

#[test]
fn h2spec_6_5_3_settings_acknowledged() {
    let (mut c, mut client) = ready();
    client.settings(&[(setting::MAX_FRAME_SIZE, 20_000)]);
    send(&mut c, &mut client).unwrap();
    let out = drain(&mut c);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].kind, out[0].flags, out[0].payload.len()),
        (kind::SETTINGS, flag::ACK, 0)
    );
    assert_eq!(c.peer_max_frame_size(), 20_000);
}

// ---- §6.7 PING, §6.8 GOAWAY ----

#[test]
fn h2spec_6_7_ping_answered() {
    let (mut c, mut client) = ready();
    client.ping(false, *b"h2spec\0\0");
    send(&mut c, &mut client).unwrap();
    let out = drain(&mut c);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].kind, out[0].flags, &out[0].payload[..]),
        (kind::PING, flag::ACK, &b"h2spec\0\0"[..])
    );
}

#[test]
fn h2spec_6_7_ping_ack_not_answered() {
    let (mut c, mut client) = ready();
    client.ping(true, *b"h2spec\0\0");
    send(&mut c, &mut client).unwrap();
    assert!(drain(&mut c).is_empty());
}

#[test]
fn h2spec_6_7_ping_on_a_stream() {
    let (mut c, mut client) = ready();
    client.raw(kind::PING, 0, 1, b"h2spec\0\0");
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_7_ping_of_wrong_length() {
    let (mut c, mut client) = ready();
    client.raw(kind::PING, 0, 0, b"h2spec");
    conn_error(&mut c, &mut client, ErrorCode::FRAME_SIZE_ERROR);
}

#[test]
fn h2spec_6_8_goaway_on_a_stream() {
    let (mut c, mut client) = ready();
    client.raw(kind::GOAWAY, 0, 1, &[0, 0, 0, 0, 0, 0, 0, 0]);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

// ---- §6.9 WINDOW_UPDATE and flow control ----

#[test]
fn h2spec_6_9_window_update_0_on_connection() {
    let (mut c, mut client) = ready();
    client.window_update(0, 0);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_9_window_update_0_on_stream() {
    let (mut c, mut client) = ready();
    client.headers(1, POST, false).window_update(1, 0);
    stream_error(&mut c, &mut client, 1, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_9_window_update_of_wrong_length() {
    let (mut c, mut client) = ready();
    client.raw(kind::WINDOW_UPDATE, 0, 0, &[0, 0, 1]);
    conn_error(&mut c, &mut client, ErrorCode::FRAME_SIZE_ERROR);
}

#[test]
fn h2spec_6_9_1_initial_window_of_1() {
    let (mut c, mut client) = ready();
    client.settings(&[(setting::INITIAL_WINDOW_SIZE, 1)]).get(1);
    send(&mut c, &mut client).unwrap();
    assert_eq!(c.send_window(1), 1);
    let h = c.data_frame(1, 1, false).unwrap();
    assert_eq!(h, frame::data_header(1, 1, false));
    assert_eq!(c.send_window(1), 0);
}

/// `data_frames` debits a whole batch of frames at once exactly as `data_frame` does
/// frame by frame: both windows, the stream ended with the batch's END_STREAM, and
/// nothing debited on a stream that is not open.
#[test]
fn a_batch_of_data_frames_debits_both_windows_once() {
    let (mut c, mut client) = ready();
    client.get(1).get(3);
    send(&mut c, &mut client).unwrap();
    assert_eq!(c.send_window(1), DEFAULT_WINDOW);
    assert!(c.data_frames(1, 40_000, false));
    assert_eq!(c.send_window(1), DEFAULT_WINDOW - 40_000);
    assert_eq!(
        c.send_window(3),
        DEFAULT_WINDOW - 40_000,
        "the connection's too"
    );
    assert!(c.data_frames(1, 5_000, true));
    assert_eq!(c.send_window(1), 0, "ended: not open");
    assert!(!c.data_frames(1, 1, false), "a closed stream takes nothing");
    assert_eq!(c.send_window(3), DEFAULT_WINDOW - 45_000);
    assert!(!c.data_frames(5, 1, false), "nor one never opened");
    assert_eq!(c.send_window(3), DEFAULT_WINDOW - 45_000);
}

#[test]
fn h2spec_6_9_1_connection_window_past_max() {
    let (mut c, mut client) = ready();
    client
        .window_update(0, MAX_WINDOW)
        .window_update(0, MAX_WINDOW);
    conn_error(&mut c, &mut client, ErrorCode::FLOW_CONTROL_ERROR);
}

#[test]
fn h2spec_6_9_1_stream_window_past_max() {
    let (mut c, mut client) = ready();
    client
        .headers(1, POST, false)
        .window_update(1, MAX_WINDOW)
        .window_update(1, MAX_WINDOW);
    stream_error(&mut c, &mut client, 1, ErrorCode::FLOW_CONTROL_ERROR);
}

#[test]
fn h2spec_6_9_2_initial_window_changed_after_headers() {
    let (mut c, mut client) = ready();
    client.settings(&[(setting::INITIAL_WINDOW_SIZE, 0)]).get(1);
    send(&mut c, &mut client).unwrap();
    assert_eq!(c.send_window(1), 0);
    events(&mut c);
    client.settings(&[(setting::INITIAL_WINDOW_SIZE, 1)]);
    send(&mut c, &mut client).unwrap();
    assert_eq!(c.send_window(1), 1);
    assert_eq!(events(&mut c), vec![Event::WindowOpened]);
}

#[test]
fn h2spec_6_9_2_negative_window() {
    let (mut c, mut client) = ready();
    client.settings(&[(setting::INITIAL_WINDOW_SIZE, 3)]).get(1);
    send(&mut c, &mut client).unwrap();
    c.data_frame(1, 3, false).unwrap();
    client.settings(&[(setting::INITIAL_WINDOW_SIZE, 2)]);
    send(&mut c, &mut client).unwrap();
    assert_eq!(c.send_window(1), 0, "-1, tracked");
    client.window_update(1, 2);
    send(&mut c, &mut client).unwrap();
    assert_eq!(c.send_window(1), 1);
}

#[test]
fn h2spec_6_9_2_initial_window_size_past_max() {
    let (mut c, mut client) = ready();
    client.raw(kind::SETTINGS, 0, 0, &[0, 4, 0x80, 0, 0, 0]);
    conn_error(&mut c, &mut client, ErrorCode::FLOW_CONTROL_ERROR);
}

#[test]
fn initial_window_change_overflowing_a_stream() {
    let (mut c, mut client) = ready();
    client.get(1).window_update(1, MAX_WINDOW - DEFAULT_WINDOW);
    send(&mut c, &mut client).unwrap();
    assert_eq!(
        c.send_window(1),
        DEFAULT_WINDOW,
        "the connection window is the limit"
    );
    client.settings(&[(setting::INITIAL_WINDOW_SIZE, DEFAULT_WINDOW + 1)]);
    conn_error(&mut c, &mut client, ErrorCode::FLOW_CONTROL_ERROR);
}

// ---- §6.10 CONTINUATION ----

#[test]
fn h2spec_6_10_multiple_continuations() {
    let (mut c, mut client) = ready();
    let b = client.block(&with(&[(b"x-a", b"1"), (b"x-b", b"2")]));
    let (a, rest) = b.split_at(10);
    let (m, z) = rest.split_at(10);
    client
        .raw(kind::HEADERS, flag::END_STREAM, 1, a)
        .raw(kind::CONTINUATION, 0, 1, m)
        .raw(kind::CONTINUATION, flag::END_HEADERS, 1, z);
    send(&mut c, &mut client).unwrap();
    let head = request_on(&mut c, 1);
    assert_eq!(head.field(b"x-b"), Some(&b"2"[..]));
}

#[test]
fn h2spec_6_10_continuation_then_other_frame() {
    let (mut c, mut client) = ready();
    let b = client.block(GET);
    let (a, z) = b.split_at(5);
    client
        .raw(kind::HEADERS, flag::END_STREAM, 1, a)
        .raw(kind::CONTINUATION, 0, 1, z)
        .data(1, b"x", true);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_10_continuation_on_stream_0() {
    let (mut c, mut client) = ready();
    let b = client.block(GET);
    let (a, z) = b.split_at(5);
    client.raw(kind::HEADERS, flag::END_STREAM, 1, a).raw(
        kind::CONTINUATION,
        flag::END_HEADERS,
        0,
        z,
    );
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_10_continuation_after_end_headers() {
    let (mut c, mut client) = ready();
    let b = client.block(&[(b"x-more", b"1")]);
    client
        .headers(1, POST, false)
        .raw(kind::CONTINUATION, flag::END_HEADERS, 1, &b);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_10_continuation_after_continuation_with_end_headers() {
    let (mut c, mut client) = ready();
    let b = client.block(POST);
    let (a, z) = b.split_at(5);
    let more = client.block(&[(b"x-more", b"1")]);
    client
        .raw(kind::HEADERS, 0, 1, a)
        .raw(kind::CONTINUATION, flag::END_HEADERS, 1, z)
        .raw(kind::CONTINUATION, flag::END_HEADERS, 1, &more);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_6_10_continuation_after_data() {
    let (mut c, mut client) = ready();
    let more = client.block(&[(b"x-more", b"1")]);
    client.headers(1, POST, false).data(1, b"x", false).raw(
        kind::CONTINUATION,
        flag::END_HEADERS,
        1,
        &more,
    );
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

// ---- §7 error codes ----

#[test]
fn h2spec_7_goaway_with_unknown_code() {
    let (mut c, mut client) = ready();
    frame::write_goaway(&mut client.out, 0, ErrorCode(0xff), b"");
    send(&mut c, &mut client).unwrap();
    assert_eq!(
        events(&mut c),
        vec![Event::GoAway {
            last_stream: 0,
            code: ErrorCode(0xff)
        }]
    );
    still_alive(&mut c);
}

#[test]
fn h2spec_7_rst_stream_with_unknown_code() {
    let (mut c, mut client) = ready();
    client.headers(1, POST, false).rst(1, ErrorCode(0xff));
    send(&mut c, &mut client).unwrap();
    let ev = events(&mut c);
    assert_eq!(
        ev[1],
        Event::Reset {
            stream: 1,
            code: ErrorCode(0xff)
        }
    );
    still_alive(&mut c);
}

// ---- §8 HTTP semantics ----

#[test]
fn h2spec_8_1_second_headers_without_end_stream() {
    let (mut c, mut client) = ready();
    client
        .headers(1, POST, false)
        .data(1, b"test", false)
        .headers(1, POST, false);
    stream_error(&mut c, &mut client, 1, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_8_1_2_uppercase_field_name() {
    malformed(&with(&[(b"X-Test", b"ok")]));
}

#[test]
fn h2spec_8_1_2_1_unknown_pseudo_header() {
    malformed(&with(&[(b":test", b"ok")]));
    // Extended CONNECT (RFC 8441) is not offered, so `:protocol` is unknown too.
    malformed(&[
        (b":method", b"CONNECT"),
        (b":protocol", b"websocket"),
        (b":scheme", b"https"),
        (b":path", b"/ws"),
        (b":authority", b"h"),
    ]);
}

#[test]
fn h2spec_8_1_2_1_response_pseudo_header() {
    let mut f: Vec<(&[u8], &[u8])> = vec![(b":status", b"200")];
    f.extend_from_slice(GET);
    malformed(&f);
}

#[test]
fn h2spec_8_1_2_1_pseudo_header_in_trailers() {
    let (mut c, mut client) = ready();
    client
        .headers(1, POST, false)
        .data(1, b"test", false)
        .headers(1, &[(b":method", b"POST")], true);
    stream_error(&mut c, &mut client, 1, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_8_1_2_1_pseudo_header_after_regular() {
    malformed(&[
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b"x-first", b"1"),
        (b":path", b"/"),
        (b":authority", b"h"),
    ]);
}

#[test]
fn h2spec_8_1_2_2_connection_specific_field() {
    for name in [
        &b"connection"[..],
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
    ] {
        malformed(&with(&[(name, b"x")]));
    }
}

#[test]
fn h2spec_8_1_2_2_te_other_than_trailers() {
    malformed(&with(&[(b"te", b"trailers, deflate")]));
    let (mut c, mut client) = ready();
    client.headers(1, &with(&[(b"te", b"trailers")]), true);
    send(&mut c, &mut client).unwrap();
    request_on(&mut c, 1);
}

#[test]
fn h2spec_8_1_2_3_empty_path() {
    malformed(&[
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":path", b""),
        (b":authority", b"h"),
    ]);
}

#[test]
fn h2spec_8_1_2_3_missing_method() {
    malformed(&[
        (b":scheme", b"https"),
        (b":path", b"/"),
        (b":authority", b"h"),
    ]);
}

#[test]
fn h2spec_8_1_2_3_missing_scheme() {
    malformed(&[
        (b":method", b"GET"),
        (b":path", b"/"),
        (b":authority", b"h"),
    ]);
}

#[test]
fn h2spec_8_1_2_3_missing_path() {
    malformed(&[
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", b"h"),
    ]);
}

#[test]
fn h2spec_8_1_2_3_duplicate_method() {
    let mut f: Vec<(&[u8], &[u8])> = vec![(b":method", b"GET")];
    f.extend_from_slice(GET);
    malformed(&f);
}

#[test]
fn h2spec_8_1_2_3_duplicate_scheme() {
    let mut f: Vec<(&[u8], &[u8])> = vec![(b":scheme", b"https")];
    f.extend_from_slice(GET);
    malformed(&f);
}

#[test]
fn h2spec_8_1_2_3_duplicate_path() {
    let mut f: Vec<(&[u8], &[u8])> = vec![(b":path", b"/")];
    f.extend_from_slice(GET);
    malformed(&f);
}

#[test]
fn h2spec_8_1_2_6_content_length_differs_from_data() {
    let (mut c, mut client) = ready();
    let mut f = POST.to_vec();
    f.push((b"content-length", b"1"));
    client.headers(1, &f, false).data(1, b"test", true);
    stream_error(&mut c, &mut client, 1, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_8_1_2_6_content_length_differs_from_sum_of_data() {
    let (mut c, mut client) = ready();
    let mut f = POST.to_vec();
    f.push((b"content-length", b"8"));
    client
        .headers(1, &f, false)
        .data(1, b"test", false)
        .data(1, b"test", false)
        .data(1, b"x", true);
    stream_error(&mut c, &mut client, 1, ErrorCode::PROTOCOL_ERROR);
    // Less than content-length when the request ends is as malformed.
    let (mut c, mut client) = ready();
    client.headers(1, &f, false).data(1, b"test", true);
    stream_error(&mut c, &mut client, 1, ErrorCode::PROTOCOL_ERROR);
}

#[test]
fn h2spec_8_2_push_promise_from_client() {
    let (mut c, mut client) = ready();
    client.raw(kind::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]);
    conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
}

// ---- h2spec generic: what a server must accept ----

#[test]
fn h2spec_generic_2_priority_on_idle_stream() {
    let (mut c, mut client) = ready();
    client.priority(3, 0).get(1);
    send(&mut c, &mut client).unwrap();
    request_on(&mut c, 1);
}

#[test]
fn h2spec_generic_2_window_update_on_half_closed_remote() {
    let (mut c, mut client) = ready();
    client.get(1).window_update(1, 100);
    send(&mut c, &mut client).unwrap();
    assert_eq!(c.send_window(1), DEFAULT_WINDOW);
}

#[test]
fn h2spec_generic_2_priority_on_half_closed_remote() {
    let (mut c, mut client) = ready();
    client.get(1).priority(1, 0);
    send(&mut c, &mut client).unwrap();
    assert!(drain(&mut c).is_empty());
}

#[test]
fn h2spec_generic_2_rst_stream_on_half_closed_remote() {
    let (mut c, mut client) = ready();
    client.get(1).rst(1, ErrorCode::CANCEL);
    send(&mut c, &mut client).unwrap();
    assert!(c.is_idle());
    assert_eq!(c.send_window(1), 0);
    assert!(!c.send_headers(1, &[(b":status", b"200")], true));
    assert!(drain(&mut c).is_empty(), "nothing sent on a reset stream");
}

#[test]
fn h2spec_generic_2_priority_on_closed_stream() {
    let (mut c, mut client) = closed_stream();
    client.priority(1, 0);
    send(&mut c, &mut client).unwrap();
    still_alive(&mut c);
}

#[test]
fn h2spec_generic_3_1_data_frames() {
    let (mut c, mut client) = ready();
    client
        .headers(1, POST, false)
        .data(1, b"one", false)
        .raw(kind::DATA, flag::PADDED, 1, &[2, b't', b'w', b'o', 0, 0])
        .data(1, b"three", true);
    send(&mut c, &mut client).unwrap();
    let lens: Vec<_> = events(&mut c)
        .into_iter()
        .filter_map(|e| match e {
            Event::Data {
                len, end_stream, ..
            } => Some((len, end_stream)),
            _ => None,
        })
        .collect();
    assert_eq!(lens, vec![(3, false), (3, false), (5, true)]);
}

#[test]
fn h2spec_generic_3_2_headers_with_padding_and_priority() {
    let (mut c, mut client) = ready();
    let b = client.block(GET);
    let mut p = vec![4u8];
    p.extend_from_slice(&0u32.to_be_bytes());
    p.push(200);
    p.extend_from_slice(&b);
    p.extend_from_slice(&[0; 4]);
    client.raw(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM | flag::PADDED | flag::PRIORITY,
        1,
        &p,
    );
    send(&mut c, &mut client).unwrap();
    let head = request_on(&mut c, 1);
    assert_eq!(head.path(), b"/live/seg1.ts?x=1");
}

#[test]
fn h2spec_generic_3_3_priority_frames_accepted() {
    let (mut c, mut client) = ready();
    let mut exclusive = (1u32 << 31 | 3).to_be_bytes().to_vec();
    exclusive.push(255);
    client
        .priority(1, 0)
        .priority(3, 1)
        .raw(kind::PRIORITY, 0, 5, &exclusive)
        .priority(9, 0)
        .get(7);
    send(&mut c, &mut client).unwrap();
    request_on(&mut c, 7);
}

#[test]
fn h2spec_generic_3_9_window_updates_accepted() {
    let (mut c, mut client) = ready();
    client.get(1).window_update(0, 1).window_update(1, 1);
    send(&mut c, &mut client).unwrap();
    assert_eq!(c.send_window(1), DEFAULT_WINDOW + 1);
    let ev = events(&mut c);
    assert_eq!(ev.last(), Some(&Event::WindowOpened));
    assert_eq!(ev.iter().filter(|e| **e == Event::WindowOpened).count(), 1);
}

#[test]
fn h2spec_generic_4_requests() {
    let (mut c, mut client) = ready();
    let head: Vec<(&[u8], &[u8])> = vec![
        (b":method", b"HEAD"),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b"host", b"cdn.example:8080"),
    ];
    let mut post = POST.to_vec();
    post.push((b"content-length", b"4"));
    client
        .get(1)
        .headers(3, &head, true)
        .headers(5, &post, false)
        .data(5, b"body", true)
        .headers(7, POST, false)
        .data(7, b"body", false)
        .headers(7, &[(b"x-trailer", b"1")], true);
    send(&mut c, &mut client).unwrap();
    let ev = events(&mut c);
    let Event::Request {
        head: h1,
        end_stream: true,
        ..
    } = &ev[0]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(h1.method(), Method::Get);
    assert_eq!(h1.method_token(), "GET");
    assert_eq!(h1.scheme(), b"https");
    assert_eq!(h1.authority(), Some(&b"cdn.example"[..]));
    assert_eq!(h1.path(), b"/live/seg1.ts?x=1");
    assert_eq!(
        h1.fields().collect::<Vec<_>>(),
        vec![(&b"user-agent"[..], &b"test"[..])]
    );
    let Event::Request { head: h3, .. } = &ev[1] else {
        panic!()
    };
    assert_eq!(h3.method(), Method::Head);
    assert_eq!(
        h3.authority(),
        Some(&b"cdn.example:8080"[..]),
        "host when :authority is absent"
    );
    let Event::Request {
        head: h5,
        end_stream: false,
        ..
    } = &ev[2]
    else {
        panic!()
    };
    assert_eq!(h5.content_length(), Some(4));
    assert_eq!(
        ev[3],
        Event::Data {
            stream: 5,
            len: 4,
            end_stream: true
        }
    );
    assert_eq!(
        ev[5],
        Event::Data {
            stream: 7,
            len: 4,
            end_stream: false
        }
    );
    // The trailer section ends the request; its fields are dropped.
    assert_eq!(
        ev[6],
        Event::Data {
            stream: 7,
            len: 0,
            end_stream: true
        }
    );
    assert_eq!(ev.len(), 7);
}

// ---- request heads beyond h2spec ----

#[test]
fn field_values_are_checked() {
    malformed(&with(&[(b"x-a", b"a\0b")]));
    malformed(&with(&[(b"x-a", b"a\r\nb: c")]));
    malformed(&with(&[(b"x-a", b" padded")]));
    malformed(&with(&[(b"x-a", b"padded\t")]));
    malformed(&with(&[(b"x a", b"1")]));
    malformed(&with(&[(b"", b"1")]));
}

#[test]
fn authority_and_host_are_checked() {
    malformed(&[
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":path", b"/"),
        (b":authority", b"user@h"),
    ]);
    malformed(&with(&[(b"host", b"other.example")]));
    malformed(&[
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":path", b"/"),
        (b"host", b"a"),
        (b"host", b"a"),
    ]);
    let (mut c, mut client) = ready();
    client.headers(1, &with(&[(b"host", b"CDN.example")]), true);
    send(&mut c, &mut client).unwrap();
    assert_eq!(request_on(&mut c, 1).authority(), Some(&b"cdn.example"[..]));
}

#[test]
fn paths_are_origin_form_or_asterisk_for_options() {
    malformed(&[
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":path", b"*"),
        (b":authority", b"h"),
    ]);
    malformed(&[
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":path", b"a/b"),
        (b":authority", b"h"),
    ]);
    malformed(&[
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":path", b"/a#b"),
        (b":authority", b"h"),
    ]);
    malformed(&[
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":path", b"/a b"),
        (b":authority", b"h"),
    ]);
    malformed(&[
        (b":method", b"G T"),
        (b":scheme", b"https"),
        (b":path", b"/"),
        (b":authority", b"h"),
    ]);
    let (mut c, mut client) = ready();
    client.headers(
        1,
        &[
            (b":method", b"OPTIONS"),
            (b":scheme", b"https"),
            (b":path", b"*"),
        ],
        true,
    );
    send(&mut c, &mut client).unwrap();
    assert_eq!(request_on(&mut c, 1).path(), b"*");
}

#[test]
fn connect_is_a_request_without_path() {
    malformed(&[
        (b":method", b"CONNECT"),
        (b":scheme", b"https"),
        (b":path", b"/"),
        (b":authority", b"h:443"),
    ]);
    malformed(&[(b":method", b"CONNECT")]);
    let (mut c, mut client) = ready();
    client.headers(
        1,
        &[(b":method", b"CONNECT"), (b":authority", b"h:443")],
        true,
    );
    send(&mut c, &mut client).unwrap();
    let head = request_on(&mut c, 1);
    assert_eq!(
        (head.method(), head.path(), head.scheme()),
        (Method::Connect, &b""[..], &b""[..])
    );
    assert_eq!(head.authority(), Some(&b"h:443"[..]));
}

#[test]
fn content_length_is_folded_as_in_http1() {
    // The framing module's rules: `1, 1` is 1; differing or garbled values refused.
    let (mut c, mut client) = ready();
    let mut f = POST.to_vec();
    f.push((b"content-length", b"1, 1"));
    client.headers(1, &f, false).data(1, b"x", true);
    send(&mut c, &mut client).unwrap();
    let ev = events(&mut c);
    let Event::Request { head, .. } = &ev[0] else {
        panic!()
    };
    assert_eq!(head.content_length(), Some(1));
    assert_eq!(
        ev[1],
        Event::Data {
            stream: 1,
            len: 1,
            end_stream: true
        }
    );
    for bad in [&b"1, 2"[..], b"x", b"-1", b""] {
        let mut f = POST.to_vec();
        f.push((b"content-length", bad));
        malformed(&f);
    }
    // A head that ends the request with a length above 0.
    let mut f = GET.to_vec();
    f.push((b"content-length", b"3"));
    malformed(&f);
    let mut f = GET.to_vec();
    f.push((b"content-length", b"0"));
    let (mut c, mut client) = ready();
    client.headers(1, &f, true);
    send(&mut c, &mut client).unwrap();
    request_on(&mut c, 1);
}

#[test]
fn cookie_crumbs_are_kept_in_order() {
    let (mut c, mut client) = ready();
    client.headers(1, &with(&[(b"cookie", b"a=1"), (b"cookie", b"b=2")]), true);
    send(&mut c, &mut client).unwrap();
    let head = request_on(&mut c, 1);
    assert_eq!(
        head.values(b"cookie").collect::<Vec<_>>(),
        vec![&b"a=1"[..], b"b=2"]
    );
}

// ---- flow control, receiving ----

/// Request bodies are dropped, so credit goes back at once, batched: one
/// WINDOW_UPDATE per half window received, per stream and for the connection.
#[test]
fn credit_is_returned_per_half_window() {
    let limits = Limits {
        initial_window: 65_535,
        connection_window: 65_535,
        ..Limits::default()
    };
    let (mut c, mut client) = ready_with(limits);
    client.headers(1, POST, false);
    for _ in 0..3 {
        client.data(1, &[0; 16_384], false);
    }
    send(&mut c, &mut client).unwrap();
    let out = drain(&mut c);
    let updates: Vec<_> = out
        .iter()
        .filter(|f| f.kind == kind::WINDOW_UPDATE)
        .map(|f| (f.stream, f.payload.clone()))
        .collect();
    assert_eq!(
        updates,
        vec![
            (0, 32_768u32.to_be_bytes().to_vec()),
            (1, 32_768u32.to_be_bytes().to_vec())
        ]
    );
    // The last frame of a request needs no stream credit.
    client.data(1, &[0; 16_384], true);
    send(&mut c, &mut client).unwrap();
    let out = drain(&mut c);
    assert!(out.iter().all(|f| f.stream == 0), "{out:?}");
}

#[test]
fn data_past_the_stream_window_is_a_stream_error() {
    let limits = Limits {
        initial_window: 10_000,
        ..Limits::default()
    };
    let (mut c, mut client) = ready_with(limits);
    // Before the client acknowledges our SETTINGS it may assume 65,535.
    client.headers(1, POST, false).data(1, &[0; 16_384], false);
    send(&mut c, &mut client).unwrap();
    events(&mut c);
    assert!(!c.settings_acked());
    client
        .raw(kind::SETTINGS, flag::ACK, 0, b"")
        .headers(3, POST, false);
    send(&mut c, &mut client).unwrap();
    assert!(c.settings_acked());
    // One frame past the window (credit goes back as data comes, so it takes one).
    client.data(3, &[0; 10_001], false);
    stream_error(&mut c, &mut client, 3, ErrorCode::FLOW_CONTROL_ERROR);
    // Stream 1 shrank by the difference on the ACK: 65,535 - 16,384 - 55,535 < 0.
    client.data(1, b"x", false);
    stream_error(&mut c, &mut client, 1, ErrorCode::FLOW_CONTROL_ERROR);
}

#[test]
fn data_past_the_connection_window_is_a_connection_error() {
    let limits = Limits {
        connection_window: 65_535,
        initial_window: 1 << 20,
        max_frame_size: 1 << 20,
        ..Limits::default()
    };
    let (mut c, mut client) = ready_with(limits);
    client
        .headers(1, POST, false)
        .data(1, &vec![0; 65_536], false);
    conn_error(&mut c, &mut client, ErrorCode::FLOW_CONTROL_ERROR);
}

#[test]
fn data_on_streams_we_reset_is_ignored_but_counted() {
    let limits = Limits {
        connection_window: 65_535,
        ..Limits::default()
    };
    let (mut c, mut client) = ready_with(limits);
    client.headers(1, POST, false);
    send(&mut c, &mut client).unwrap();
    c.reset_stream(1, ErrorCode::CANCEL);
    let out = drain(&mut c);
    assert_eq!(
        (out[0].kind, out[0].code()),
        (kind::RST_STREAM, ErrorCode::CANCEL)
    );
    events(&mut c);
    // In flight when we reset: ignored (§5.1), but the connection window is credited.
    client
        .data(1, &[0; 16_384], false)
        .data(1, &[0; 16_384], false);
    send(&mut c, &mut client).unwrap();
    assert!(events(&mut c).is_empty());
    let out = drain(&mut c);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].kind, out[0].stream), (kind::WINDOW_UPDATE, 0));
}

// ---- sending ----

#[test]
fn response_headers_split_at_the_peer_frame_size() {
    let (mut c, mut client) = ready();
    client.get(1);
    send(&mut c, &mut client).unwrap();
    let big = vec![b'v'; 40_000];
    assert!(c.send_headers(1, &[(b":status", b"200"), (b"x-big", &big)], false));
    let out = drain(&mut c);
    assert_eq!(
        out.iter().map(|f| f.kind).collect::<Vec<_>>(),
        vec![kind::HEADERS, kind::CONTINUATION, kind::CONTINUATION]
    );
    assert!(out.iter().all(|f| f.payload.len() <= 16_384));
    assert_eq!(out[2].flags, flag::END_HEADERS);
    let block: Vec<u8> = out.iter().flat_map(|f| f.payload.clone()).collect();
    let mut fields = Vec::new();
    Decoder::new(4096)
        .decode(&block, 1 << 20, |n, v| fields.push((n.to_vec(), v.len())))
        .unwrap();
    assert_eq!(
        fields,
        vec![(b":status".to_vec(), 3), (b"x-big".to_vec(), 40_000)]
    );
}

#[test]
fn data_frames_debit_both_windows() {
    let (mut c, mut client) = ready();
    client
        .get(1)
        .get(3)
        .settings(&[(setting::MAX_FRAME_SIZE, 1 << 20)]);
    send(&mut c, &mut client).unwrap();
    assert!(c.send_headers(1, &[(b":status", b"200")], false));
    assert_eq!(c.peer_max_frame_size(), 1 << 20);
    assert_eq!(c.send_window(1), DEFAULT_WINDOW);
    let h = c.data_frame(1, 60_000, false).unwrap();
    assert_eq!(h, frame::data_header(1, 60_000, false));
    assert_eq!(c.send_window(1), 5_535);
    assert_eq!(c.send_window(3), 5_535, "the connection window is shared");
    client.window_update(0, 100_000);
    send(&mut c, &mut client).unwrap();
    assert_eq!(c.send_window(3), DEFAULT_WINDOW);
    assert_eq!(c.send_window(1), 5_535);
    // END_STREAM on DATA ends the response: the stream is closed.
    c.data_frame(1, 5_535, true).unwrap();
    assert_eq!(c.data_frame(1, 0, true), None);
    assert!(!c.is_idle());
    c.data_frame(3, 0, true).unwrap();
    assert!(c.is_idle());
}

#[test]
fn a_response_ending_before_the_request_resets_it_with_no_error() {
    let (mut c, mut client) = ready();
    client.headers(1, POST, false).data(1, b"part", false);
    send(&mut c, &mut client).unwrap();
    assert!(c.send_headers(1, &[(b":status", b"413")], true));
    let out = drain(&mut c);
    assert_eq!(
        out.last().map(|f| (f.kind, f.code())),
        Some((kind::RST_STREAM, ErrorCode::NO_ERROR))
    );
    assert!(c.is_idle());
    // The rest of the body in flight is ignored.
    client.data(1, b"rest", true);
    send(&mut c, &mut client).unwrap();
    assert_eq!(events(&mut c).len(), 2, "request and first data only");
    assert!(drain(&mut c).is_empty());
}

#[test]
fn header_table_size_goes_to_the_encoder() {
    let (mut c, mut client) = ready();
    client.settings(&[(setting::HEADER_TABLE_SIZE, 0)]).get(1);
    send(&mut c, &mut client).unwrap();
    drain(&mut c);
    assert!(c.send_headers(1, &[(b":status", b"200")], true));
    let out = drain(&mut c);
    let mut fields = Vec::new();
    Decoder::new(4096)
        .decode(&out[0].payload, 1 << 20, |n, v| {
            fields.push((n.to_vec(), v.to_vec()))
        })
        .unwrap();
    assert_eq!(fields, vec![(b":status".to_vec(), b"200".to_vec())]);
}

// ---- GOAWAY ----

#[test]
fn go_away_names_the_last_stream_and_ignores_later_ones() {
    let (mut c, mut client) = ready();
    client.get(1).headers(3, POST, false);
    send(&mut c, &mut client).unwrap();
    events(&mut c);
    c.go_away(ErrorCode::NO_ERROR, b"drain");
    let out = drain(&mut c);
    assert_eq!(out[0].kind, kind::GOAWAY);
    assert_eq!(out[0].payload[..4], 3u32.to_be_bytes());
    assert_eq!(out[0].code(), ErrorCode::NO_ERROR);
    assert_eq!(&out[0].payload[8..], b"drain");
    // Stream 5 is after the last one: its head is decoded and dropped.
    client.get(5).data(3, b"x", true);
    send(&mut c, &mut client).unwrap();
    assert_eq!(
        events(&mut c),
        vec![Event::Data {
            stream: 3,
            len: 1,
            end_stream: true
        }]
    );
    assert!(!c.is_idle());
    assert!(c.send_headers(1, &[(b":status", b"200")], true));
    assert!(c.send_headers(3, &[(b":status", b"200")], true));
    assert!(c.is_idle());
}

/// A GOAWAY the server sends while a request head is still arriving (HEADERS without
/// END_HEADERS read, CONTINUATION not yet) covers that stream too.
#[test]
fn go_away_covers_a_head_still_arriving() {
    let (mut c, mut client) = ready();
    let b = client.block(GET);
    let (a, z) = b.split_at(4);
    client.raw(kind::HEADERS, flag::END_STREAM, 1, a);
    send(&mut c, &mut client).unwrap();
    c.go_away(ErrorCode::NO_ERROR, b"");
    let out = drain(&mut c);
    assert_eq!(out[0].payload[..4], 0u32.to_be_bytes());
    client.raw(kind::CONTINUATION, flag::END_HEADERS, 1, z);
    send(&mut c, &mut client).unwrap();
    assert!(events(&mut c).is_empty());
    assert!(c.is_idle());
}

#[test]
fn goaway_from_the_client_is_an_event() {
    let (mut c, mut client) = ready();
    frame::write_goaway(&mut client.out, 0, ErrorCode::NO_ERROR, b"bye");
    send(&mut c, &mut client).unwrap();
    assert_eq!(
        events(&mut c),
        vec![Event::GoAway {
            last_stream: 0,
            code: ErrorCode::NO_ERROR
        }]
    );
}

// ---- defences ----

/// CVE-2023-44487: open a stream, reset it, again and again. Each is a handler
/// started and cancelled; past the budget the connection ends.
#[test]
fn rapid_reset_ends_the_connection() {
    let (mut c, mut client) = ready();
    let budget = Limits::default().max_resets_per_window;
    for i in 0..budget {
        client.get(2 * i + 1).rst(2 * i + 1, ErrorCode::CANCEL);
    }
    send(&mut c, &mut client).unwrap();
    let resets = events(&mut c)
        .iter()
        .filter(|e| matches!(e, Event::Reset { .. }))
        .count();
    assert_eq!(resets, budget as usize);
    client
        .get(2 * budget + 1)
        .rst(2 * budget + 1, ErrorCode::CANCEL);
    let e = conn_error(&mut c, &mut client, ErrorCode::ENHANCE_YOUR_CALM);
    assert_eq!(e.reason, "rapid_reset");
}

/// The same budget covers resets the client makes us send (CVE-2025-8671): here
/// WINDOW_UPDATE 0 on each new stream.
#[test]
fn provoked_resets_count_too() {
    let (mut c, mut client) = ready();
    for i in 0..=Limits::default().max_resets_per_window {
        client
            .headers(2 * i + 1, POST, false)
            .window_update(2 * i + 1, 0);
    }
    let e = conn_error(&mut c, &mut client, ErrorCode::ENHANCE_YOUR_CALM);
    assert_eq!(e.reason, "rapid_reset");
}

/// Resets spread over normal traffic stay within the budget: the window is counted in
/// frames.
#[test]
fn resets_among_enough_other_frames_are_fine() {
    let limits = Limits {
        flood_window: 100,
        max_resets_per_window: 10,
        ..Limits::default()
    };
    let (mut c, mut client) = ready_with(limits);
    // 1 reset in every 20 frames; the other frames do something (connection window).
    for i in 0..100 {
        let id = 2 * i + 1;
        client.headers(id, POST, false).rst(id, ErrorCode::CANCEL);
        for _ in 0..18 {
            client.window_update(0, 1);
        }
    }
    send(&mut c, &mut client).unwrap();
    still_alive(&mut c);
}

/// `what` (one frame) up to the budget is taken (the client's first SETTINGS counted
/// already); a few more end the connection with ENHANCE_YOUR_CALM.
fn flood(what: impl Fn(&mut Client)) -> ConnError {
    let (mut c, mut client) = ready();
    client.headers(1, POST, false);
    send(&mut c, &mut client).unwrap();
    flood_on(&mut c, &mut client, what)
}

fn flood_on(c: &mut Connection, client: &mut Client, what: impl Fn(&mut Client)) -> ConnError {
    for _ in 0..Limits::default().max_control_frames_per_window - 1 {
        what(client);
    }
    send(c, client).unwrap();
    drain(c);
    for _ in 0..3 {
        what(client);
    }
    conn_error(c, client, ErrorCode::ENHANCE_YOUR_CALM)
}

#[test]
fn settings_flood() {
    assert_eq!(
        flood(|c| {
            c.settings(&[]);
        })
        .reason,
        "control_frame_flood"
    );
}

#[test]
fn ping_flood() {
    assert_eq!(
        flood(|c| {
            c.ping(false, [1; 8]);
        })
        .reason,
        "control_frame_flood"
    );
}

#[test]
fn empty_data_flood() {
    assert_eq!(
        flood(|c| {
            c.data(1, b"", false);
        })
        .reason,
        "control_frame_flood"
    );
}

#[test]
fn priority_flood() {
    assert_eq!(
        flood(|c| {
            c.priority(3, 0);
        })
        .reason,
        "control_frame_flood"
    );
}

#[test]
fn unknown_frame_flood() {
    assert_eq!(
        flood(|c| {
            c.raw(0x20, 0, 0, b"");
        })
        .reason,
        "control_frame_flood"
    );
}

#[test]
fn window_update_on_closed_stream_flood() {
    let (mut c, mut client) = closed_stream();
    flood_on(&mut c, &mut client, |c| {
        c.window_update(1, 1);
    });
}

#[test]
fn empty_continuation_flood() {
    let (mut c, mut client) = ready();
    let b = client.block(GET);
    client.raw(kind::HEADERS, flag::END_STREAM, 1, &b);
    for _ in 0..=Limits::default().max_control_frames_per_window {
        client.raw(kind::CONTINUATION, 0, 1, b"");
    }
    conn_error(&mut c, &mut client, ErrorCode::ENHANCE_YOUR_CALM);
}

/// The 2024 CONTINUATION flood: a header block that never ends. Past
/// `max_header_block` bytes the connection ends; nothing more is held.
#[test]
fn continuation_flood_is_bounded() {
    let (mut c, mut client) = ready();
    let b = client.block(GET);
    client.raw(kind::HEADERS, flag::END_STREAM, 1, &b);
    let chunk = vec![0u8; 16_000];
    for _ in 0..4 {
        client.raw(kind::CONTINUATION, 0, 1, &chunk);
    }
    send(&mut c, &mut client).unwrap();
    assert!(c.block.len() <= Limits::default().max_header_block as usize);
    client.raw(kind::CONTINUATION, 0, 1, &chunk);
    let e = conn_error(&mut c, &mut client, ErrorCode::ENHANCE_YOUR_CALM);
    assert_eq!(e.reason, "header_block_too_large");
}

/// A head over the list limit (an HPACK bomb decodes to one): the stream opens and the
/// server answers 431 on it; the connection goes on.
#[test]
fn oversized_head_is_request_too_large() {
    let (mut c, mut client) = ready();
    let v = vec![b'v'; 8_000];
    let v: &'static [u8] = Box::leak(v.into_boxed_slice());
    let f = with(&[
        (b"x-1", v),
        (b"x-2", v),
        (b"x-3", v),
        (b"x-4", v),
        (b"x-5", v),
    ]);
    let b = client.block(&f);
    let (a, z) = b.split_at(16_000);
    let (m, z) = z.split_at(16_000);
    client
        .raw(kind::HEADERS, flag::END_STREAM, 1, a)
        .raw(kind::CONTINUATION, 0, 1, m)
        .raw(kind::CONTINUATION, flag::END_HEADERS, 1, z)
        .get(3);
    send(&mut c, &mut client).unwrap();
    let ev = events(&mut c);
    assert_eq!(ev[0], Event::RequestTooLarge { stream: 1 });
    assert!(matches!(ev[1], Event::Request { stream: 3, .. }));
    assert!(c.send_headers(1, &[(b":status", b"431")], true));
}

/// A client that sends PINGs and never reads the answers: reading stops at
/// `max_output` (TCP back-pressure holds the client), and goes on once output is
/// written.
#[test]
fn unread_acknowledgements_stop_reading() {
    let limits = Limits {
        max_output: 1024,
        max_control_frames_per_window: 10_000,
        flood_window: 10_000,
        ..Limits::default()
    };
    let (mut c, mut client) = ready_with(limits);
    for _ in 0..1000 {
        client.ping(false, [7; 8]);
    }
    let bytes = client.take();
    let n = c.recv(&bytes).unwrap();
    assert!(n < bytes.len());
    assert!(c.output().len() <= 1024 + 17);
    assert_eq!(
        c.recv(&bytes[n..]),
        Ok(0),
        "nothing more until output is written"
    );
    let mut at = n;
    while at < bytes.len() {
        c.output().clear();
        at += c.recv(&bytes[at..]).unwrap();
    }
}

#[test]
fn memory_of_closed_streams_is_bounded() {
    let (mut c, mut client) = ready();
    for i in 0..(CLOSED_MEMORY as u32 + 50) {
        client.get(2 * i + 1);
        send(&mut c, &mut client).unwrap();
        assert!(c.send_headers(2 * i + 1, &[(b":status", b"204")], true));
    }
    assert_eq!(c.closed.len(), CLOSED_MEMORY);
    assert!(c.is_idle());
}

// ---- RFC 9218 priorities ----

#[test]
fn we_announce_no_rfc7540_priorities() {
    let mut c = Connection::new(Limits::default());
    let ours = drain(&mut c);
    let params: Vec<(u16, u32)> = frame::settings_params(&ours[0].payload).collect();
    assert!(
        params.contains(&(SETTINGS_NO_RFC7540_PRIORITIES, 1)),
        "{params:?}"
    );
    assert!(params.contains(&(setting::MAX_CONCURRENT_STREAMS, 100)));
}

#[test]
fn priority_field_gives_the_request_priority() {
    let (mut c, mut client) = ready();
    client
        .headers(
            1,
            &with(&[(b"priority", b"u=0"), (b"priority", b"i")]),
            true,
        )
        .get(3);
    send(&mut c, &mut client).unwrap();
    let ev = events(&mut c);
    let Event::Request { head, .. } = &ev[0] else {
        panic!()
    };
    assert_eq!(
        head.priority(),
        Priority {
            urgency: 0,
            incremental: true
        }
    );
    let Event::Request { head, .. } = &ev[1] else {
        panic!()
    };
    assert_eq!(head.priority(), Priority::default());
}

#[test]
fn priority_update_on_an_open_stream_is_an_event() {
    let (mut c, mut client) = ready();
    client.get(1).priority_update(0, 1, b"u=6, i");
    send(&mut c, &mut client).unwrap();
    let ev = events(&mut c);
    assert_eq!(
        ev[1],
        Event::PriorityUpdate {
            stream: 1,
            priority: Priority {
                urgency: 6,
                incremental: true
            }
        }
    );
    // On a closed stream: nothing to do.
    assert!(c.send_headers(1, &[(b":status", b"204")], true));
    client.priority_update(0, 1, b"u=0");
    send(&mut c, &mut client).unwrap();
    assert!(events(&mut c).is_empty());
}

/// RFC 9218 §7.1: a PRIORITY_UPDATE before its request is kept and wins over the
/// request's own `priority` field; only as many as streams may be open are kept.
#[test]
fn priority_update_before_the_request_is_applied() {
    let limits = Limits {
        max_concurrent_streams: 2,
        ..Limits::default()
    };
    let (mut c, mut client) = ready_with(limits);
    client
        .priority_update(0, 1, b"u=1")
        .priority_update(0, 3, b"u=5")
        .priority_update(0, 5, b"u=7")
        .priority_update(0, 5, b"u=6");
    send(&mut c, &mut client).unwrap();
    assert_eq!(c.early_priorities.len(), 2, "bounded");
    client
        .headers(3, &with(&[(b"priority", b"u=0")]), true)
        .get(5);
    send(&mut c, &mut client).unwrap();
    let urgencies: Vec<u8> = events(&mut c)
        .into_iter()
        .filter_map(|e| match e {
            Event::Request { head, .. } => Some(head.priority().urgency),
            _ => None,
        })
        .collect();
    // 3: the update (5) over the field (0); 5: the newest update (6).
    assert_eq!(urgencies, vec![5, 6]);
    assert!(c.early_priorities.is_empty());
}

#[test]
fn priority_update_errors() {
    // Sent on a stream, or naming stream 0 or a push (even) stream: PROTOCOL_ERROR.
    for (on, prioritized) in [(1, 1), (0, 0), (0, 2)] {
        let (mut c, mut client) = ready();
        client.get(1).priority_update(on, prioritized, b"u=1");
        conn_error(&mut c, &mut client, ErrorCode::PROTOCOL_ERROR);
    }
    let (mut c, mut client) = ready();
    client.raw(kind::PRIORITY_UPDATE, 0, 0, &[0, 0, 1]);
    conn_error(&mut c, &mut client, ErrorCode::FRAME_SIZE_ERROR);
    // Values that cannot be used are the defaults (RFC 9218 §4), not an error.
    let (mut c, mut client) = ready();
    client.get(1).priority_update(0, 1, b"u=9, ???");
    send(&mut c, &mut client).unwrap();
    assert_eq!(
        events(&mut c)[1],
        Event::PriorityUpdate {
            stream: 1,
            priority: Priority::default()
        }
    );
}

#[test]
fn priority_update_flood() {
    assert_eq!(
        flood(|c| {
            c.priority_update(0, 1, b"u=1");
        })
        .reason,
        "control_frame_flood"
    );
}
