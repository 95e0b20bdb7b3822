//! h2spec's "generic" cases that a server must accept, ported to the HTTP/2 wire layer
//! (`linerate_http::h2`): every frame type h2spec sends in its generic group parses to the
//! values sent, and every HPACK representation of its generic §5 group decodes to the
//! field sent. The rejecting cases (h2spec's http2/ and hpack/ groups) are unit tests in
//! `src/h2/frame.rs` and `src/h2/hpack.rs`, named `h2spec_*` after their case numbers.
//!
//! What these guard: a parser that refuses a valid frame or representation (a padding
//! or priority off by one, a flag misread, a Huffman or integer mistake) ends real
//! clients' connections; h2spec's positive cases are the list a conforming client sends.
#![allow(clippy::unwrap_used, reason = "tests")]

use linerate_http::h2::frame::{
    self, flag, kind, setting, ErrorCode, Frame, Priority, DEFAULT_MAX_FRAME_SIZE, HEADER_LEN,
};
use linerate_http::h2::hpack::{Decoder, Encoder};

const MAX: u32 = DEFAULT_MAX_FRAME_SIZE;

fn fr(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    v.extend_from_slice(&[kind, flags]);
    v.extend_from_slice(&stream.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// Every frame in `buf`, which must parse whole.
fn frames(buf: &[u8]) -> Vec<Frame<'_>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let (f, n) = frame::parse(&buf[at..], MAX).unwrap().unwrap();
        out.push(f);
        at += n;
    }
    out
}

/// The request h2spec sends (`spec.CommonHeaders`), encoded by our own encoder.
fn request_block() -> Vec<u8> {
    let mut out = Vec::new();
    Encoder::new().encode(
        [
            (&b":method"[..], &b"GET"[..]),
            (b":scheme", b"http"),
            (b":path", b"/"),
            (b":authority", b"127.0.0.1:8080"),
        ],
        &mut out,
    );
    out
}

fn decode_all(block: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    Decoder::new(4096)
        .decode(block, 64 * 1024, |n, v| {
            out.push((
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            ))
        })
        .unwrap();
    out
}

// --- h2spec generic/3.1 DATA

/// h2spec generic 3.1.1 / 3.1.2: DATA frames, one and several.
#[test]
fn h2spec_generic_3_1_1_data_frames() {
    let mut buf = fr(kind::DATA, 0, 1, b"test");
    buf.extend(fr(kind::DATA, flag::END_STREAM, 1, b"test"));
    assert_eq!(
        frames(&buf),
        [
            Frame::Data {
                stream: 1,
                data: b"test",
                flow_len: 4,
                end_stream: false
            },
            Frame::Data {
                stream: 1,
                data: b"test",
                flow_len: 4,
                end_stream: true
            },
        ]
    );
}

/// h2spec generic 3.1.3: DATA with padding ("test" + 5 zero bytes).
#[test]
fn h2spec_generic_3_1_3_data_frame_with_padding() {
    let buf = fr(
        kind::DATA,
        flag::PADDED | flag::END_STREAM,
        1,
        b"\x05test\0\0\0\0\0",
    );
    assert_eq!(
        frames(&buf),
        [Frame::Data {
            stream: 1,
            data: b"test",
            flow_len: 10,
            end_stream: true
        }]
    );
}

// --- h2spec generic/3.2 HEADERS

/// h2spec generic 3.2.1: a HEADERS frame.
#[test]
fn h2spec_generic_3_2_1_headers_frame() {
    let block = request_block();
    let mut buf = Vec::new();
    frame::write_headers(&mut buf, 1, &block, true, MAX);
    let [Frame::Headers {
        stream: 1,
        block: b,
        end_stream: true,
        end_headers: true,
        priority: None,
    }] = frames(&buf)[..]
    else {
        panic!()
    };
    assert_eq!(b, block);
    assert_eq!(
        decode_all(b)[3],
        (":authority".into(), "127.0.0.1:8080".into())
    );
}

/// h2spec generic 3.2.2: HEADERS with 8 bytes of padding.
#[test]
fn h2spec_generic_3_2_2_headers_frame_with_padding() {
    let block = request_block();
    let mut payload = vec![8];
    payload.extend_from_slice(&block);
    payload.extend_from_slice(&[0; 8]);
    let buf = fr(
        kind::HEADERS,
        flag::PADDED | flag::END_HEADERS | flag::END_STREAM,
        1,
        &payload,
    );
    let [Frame::Headers {
        block: b,
        priority: None,
        ..
    }] = frames(&buf)[..]
    else {
        panic!()
    };
    assert_eq!(b, block);
}

/// h2spec generic 3.2.3: HEADERS with priority (dependency 0, weight 255, exclusive).
#[test]
fn h2spec_generic_3_2_3_headers_frame_with_priority() {
    let block = request_block();
    let mut payload = vec![0x80, 0, 0, 0, 255];
    payload.extend_from_slice(&block);
    let buf = fr(
        kind::HEADERS,
        flag::PRIORITY | flag::END_HEADERS | flag::END_STREAM,
        1,
        &payload,
    );
    let [Frame::Headers {
        block: b,
        priority: Some(p),
        ..
    }] = frames(&buf)[..]
    else {
        panic!()
    };
    assert_eq!(b, block);
    assert_eq!(
        p,
        Priority {
            dependency: 0,
            exclusive: true,
            weight: 255
        }
    );
}

// --- h2spec generic/3.3 PRIORITY

/// h2spec generic 3.3.1-3.3.4: PRIORITY with weight 1 and 256 (sent as 0 and 255), a
/// dependency, and the exclusive flag.
#[test]
fn h2spec_generic_3_3_priority_frames() {
    for (payload, want) in [
        (
            [0, 0, 0, 0, 0],
            Priority {
                dependency: 0,
                exclusive: false,
                weight: 0,
            },
        ),
        (
            [0, 0, 0, 0, 255],
            Priority {
                dependency: 0,
                exclusive: false,
                weight: 255,
            },
        ),
        (
            [0, 0, 0, 3, 10],
            Priority {
                dependency: 3,
                exclusive: false,
                weight: 10,
            },
        ),
        (
            [0x80, 0, 0, 3, 10],
            Priority {
                dependency: 3,
                exclusive: true,
                weight: 10,
            },
        ),
    ] {
        let buf = fr(kind::PRIORITY, 0, 1, &payload);
        assert_eq!(
            frames(&buf),
            [Frame::Priority {
                stream: 1,
                priority: want
            }]
        );
    }
}

/// h2spec generic 3.3.5: PRIORITY for an idle stream (3), then HEADERS on a lower one (1):
/// both parse (stream states are the connection's).
#[test]
fn h2spec_generic_3_3_5_priority_on_idle_stream_then_lower_headers() {
    let mut buf = fr(kind::PRIORITY, 0, 3, &[0, 0, 0, 0, 15]);
    frame::write_headers(&mut buf, 1, &request_block(), true, MAX);
    let f = frames(&buf);
    assert!(matches!(f[0], Frame::Priority { stream: 3, .. }));
    assert!(matches!(f[1], Frame::Headers { stream: 1, .. }));
}

// --- h2spec generic/3.4-3.9

/// h2spec generic 3.4.1: RST_STREAM (CANCEL).
#[test]
fn h2spec_generic_3_4_1_rst_stream_frame() {
    let mut buf = Vec::new();
    frame::write_rst_stream(&mut buf, 1, ErrorCode::CANCEL);
    assert_eq!(buf, fr(kind::RST_STREAM, 0, 1, &[0, 0, 0, 8]));
    assert_eq!(
        frames(&buf),
        [Frame::RstStream {
            stream: 1,
            code: ErrorCode::CANCEL
        }]
    );
}

/// h2spec generic 3.5.1: SETTINGS, answered by our ACK.
#[test]
fn h2spec_generic_3_5_1_settings_frame() {
    let buf = fr(
        kind::SETTINGS,
        0,
        0,
        &[0, 3, 0, 0, 0, 100, 0, 4, 0, 0, 0xff, 0xff],
    );
    let [Frame::Settings { ack: false, params }] = frames(&buf)[..] else {
        panic!()
    };
    assert_eq!(
        frame::settings_params(params).collect::<Vec<_>>(),
        [
            (setting::MAX_CONCURRENT_STREAMS, 100),
            (setting::INITIAL_WINDOW_SIZE, 65_535)
        ]
    );
    let mut ack = Vec::new();
    frame::write_settings_ack(&mut ack);
    assert_eq!(ack, fr(kind::SETTINGS, flag::ACK, 0, &[]));
}

/// h2spec generic 3.7.1: PING, answered with ACK and the same data.
#[test]
fn h2spec_generic_3_7_1_ping_frame() {
    let buf = fr(kind::PING, 0, 0, b"h2spec\0\0");
    let [Frame::Ping { ack: false, data }] = frames(&buf)[..] else {
        panic!()
    };
    let mut answer = Vec::new();
    frame::write_ping(&mut answer, true, data);
    assert_eq!(answer, fr(kind::PING, flag::ACK, 0, b"h2spec\0\0"));
}

/// h2spec generic 3.8.1: GOAWAY.
#[test]
fn h2spec_generic_3_8_1_goaway_frame() {
    let buf = fr(kind::GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        frames(&buf),
        [Frame::GoAway {
            last_stream: 0,
            code: ErrorCode::NO_ERROR,
            debug: b""
        }]
    );
}

/// h2spec generic 3.9.1 / 3.9.2: WINDOW_UPDATE on stream 0 and on stream 1.
#[test]
fn h2spec_generic_3_9_window_update_frames() {
    let mut buf = Vec::new();
    frame::write_window_update(&mut buf, 0, 1);
    frame::write_window_update(&mut buf, 1, 1);
    assert_eq!(
        frames(&buf),
        [
            Frame::WindowUpdate {
                stream: 0,
                increment: 1
            },
            Frame::WindowUpdate {
                stream: 1,
                increment: 1
            },
        ]
    );
}

// --- h2spec generic/3.10 CONTINUATION

/// h2spec generic 3.10.1 / 3.10.2: HEADERS then one and several CONTINUATION frames; the
/// fragments joined decode to the request.
#[test]
fn h2spec_generic_3_10_continuation_frames() {
    let block = request_block();
    for pieces in [2, 4] {
        let step = block.len().div_ceil(pieces);
        let chunks: Vec<&[u8]> = block.chunks(step).collect();
        let mut buf = fr(kind::HEADERS, flag::END_STREAM, 1, chunks[0]);
        for (i, c) in chunks.iter().enumerate().skip(1) {
            let last = i == chunks.len() - 1;
            buf.extend(fr(
                kind::CONTINUATION,
                if last { flag::END_HEADERS } else { 0 },
                1,
                c,
            ));
        }
        let mut joined = Vec::new();
        for f in frames(&buf) {
            match f {
                Frame::Headers {
                    block,
                    end_headers: false,
                    ..
                } => joined.extend_from_slice(block),
                Frame::Continuation { block, .. } => joined.extend_from_slice(block),
                f => panic!("{f:?}"),
            }
        }
        assert_eq!(joined, block);
        assert_eq!(decode_all(&joined).len(), 4);
    }
}

// --- h2spec generic/5 HPACK: every representation a client may send

/// h2spec generic 5.1-5.13: each representation, after the request fields, decodes.
#[test]
fn h2spec_generic_5_hpack_representations() {
    let ua = ("user-agent".to_string(), "h2spec".to_string());
    let xt = ("x-test".to_string(), "h2spec".to_string());
    let cases: [(&str, &[u8], (String, String)); 13] = [
        ("5.1 indexed", b"\xba", ("user-agent".into(), "".into())),
        (
            "5.2 incremental, huffman name",
            b"\x40\x87\xb5\x05\xb1\x61\xcc\x5a\x93\x84\x9c\x48\xac\xa4",
            ua.clone(),
        ),
        (
            "5.3 incremental, plain",
            b"\x40\x0a\x75\x73\x65\x72\x2d\x61\x67\x65\x6e\x74\x06\x68\x32\x73\x70\x65\x63",
            ua.clone(),
        ),
        (
            "5.4 incremental, new name",
            b"\x40\x06\x78\x2d\x74\x65\x73\x74\x06\x68\x32\x73\x70\x65\x63",
            xt.clone(),
        ),
        (
            "5.5 incremental, new name huffman",
            b"\x40\x85\xf2\xb2\x4a\x84\xff\x84\x9c\x48\xac\xa4",
            xt.clone(),
        ),
        (
            "5.6 without indexing",
            b"\x00\x0a\x75\x73\x65\x72\x2d\x61\x67\x65\x6e\x74\x06\x68\x32\x73\x70\x65\x63",
            ua.clone(),
        ),
        (
            "5.7 without indexing, huffman",
            b"\x00\x87\xb5\x05\xb1\x61\xcc\x5a\x93\x84\x9c\x48\xac\xa4",
            ua.clone(),
        ),
        (
            "5.8 without indexing, new name",
            b"\x00\x06\x78\x2d\x74\x65\x73\x74\x06\x68\x32\x73\x70\x65\x63",
            xt.clone(),
        ),
        (
            "5.9 without indexing, new name huffman",
            b"\x00\x85\xf2\xb2\x4a\x84\xff\x84\x9c\x48\xac\xa4",
            xt.clone(),
        ),
        (
            "5.10 never indexed",
            b"\x10\x0a\x75\x73\x65\x72\x2d\x61\x67\x65\x6e\x74\x06\x68\x32\x73\x70\x65\x63",
            ua.clone(),
        ),
        (
            "5.11 never indexed, huffman",
            b"\x10\x87\xb5\x05\xb1\x61\xcc\x5a\x93\x84\x9c\x48\xac\xa4",
            ua.clone(),
        ),
        (
            "5.12 never indexed, new name",
            b"\x10\x85\xf2\xb2\x4a\x84\xff\x84\x9c\x48\xac\xa4",
            xt.clone(),
        ),
        // h2spec's 5.13 repeats 5.12's bytes; here the form it names: never indexed with an
        // indexed name (static 58, user-agent) and a Huffman value.
        (
            "5.13 never indexed, indexed name",
            b"\x1f\x2b\x84\x9c\x48\xac\xa4",
            ua.clone(),
        ),
    ];
    for (label, rep, want) in cases {
        let mut block = request_block();
        block.extend_from_slice(rep);
        let got = decode_all(&block);
        assert_eq!(got.len(), 5, "{label}");
        assert_eq!(got[4], want, "{label}");
    }
}

/// h2spec generic 5.14 / 5.15: one and two dynamic table size updates (128, then 4096)
/// at the start of a block.
#[test]
fn h2spec_generic_5_14_dynamic_table_size_updates() {
    for prefix in [&b"\x3f\x61"[..], b"\x3f\x61\x3f\xe1\x1f"] {
        let mut block = prefix.to_vec();
        block.extend(request_block());
        assert_eq!(decode_all(&block).len(), 4);
    }
}

/// The zero-copy DATA path: the 9-byte header alone, then the payload the caller sends
/// itself, is the same frame `write_data` builds.
#[test]
fn data_header_then_payload_is_a_data_frame() {
    let payload = vec![7u8; 16_384];
    let mut wire = frame::data_header(3, payload.len() as u32, true).to_vec();
    assert_eq!(wire.len(), HEADER_LEN);
    wire.extend_from_slice(&payload);
    let mut built = Vec::new();
    frame::write_data(&mut built, 3, &payload, true);
    assert_eq!(wire, built);
    assert_eq!(
        frames(&wire),
        [Frame::Data {
            stream: 3,
            data: &payload[..],
            flow_len: 16_384,
            end_stream: true
        }]
    );
}
