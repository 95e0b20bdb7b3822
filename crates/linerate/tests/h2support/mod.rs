//! A raw HTTP/2 client for the end-to-end tests (http2.rs, and ktls_vm.rs inside the
//! kTLS VM): frames from `linerate_http::h2::frame`, responses decoded with its HPACK
//! decoder, requests encoded as literal fields. For what curl and h2load cannot show:
//! flow control to the byte, priorities, floods, byte-exact bodies on a TLS stream.
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use linerate_http::h2::frame::{self, ErrorCode, Frame};
use linerate_http::h2::hpack;

/// A raw HTTP/2 client over any byte stream (plain TCP for h2c with prior knowledge,
/// or a TLS stream that negotiated `h2`).
pub struct Raw<S: Read + Write = TcpStream> {
    pub s: S,
    /// Received bytes: `buf[at..end]` not yet parsed. Reads go straight into `buf`
    /// (no staging copy), it is compacted only when a read needs room, and a DATA
    /// payload is copied once, into its body: the kTLS VM compares this client's
    /// throughput with the HTTP/1.1 client's, which reads a body into place in one copy.
    buf: Vec<u8>,
    at: usize,
    end: usize,
    dec: hpack::Decoder,
}

/// Room kept free at the end of `Raw::buf` for a read.
const READ_ROOM: usize = 64 * 1024;

/// Each stream's status and body.
pub type Answers = HashMap<u32, (u16, Vec<u8>)>;

/// A frame as received, owned.
#[derive(Debug)]
pub enum Got {
    Headers {
        stream: u32,
        fields: Vec<(String, String)>,
        end: bool,
    },
    Data {
        stream: u32,
        data: Vec<u8>,
        end: bool,
    },
    Reset {
        stream: u32,
        code: ErrorCode,
    },
    GoAway {
        last_stream: u32,
        code: ErrorCode,
    },
    Other,
}

impl Raw<TcpStream> {
    /// Connect (h2c), send the preface and `settings`, and open the connection window
    /// by `conn_window` more bytes.
    pub fn connect(addr: SocketAddr, settings: &[(u16, u32)], conn_window: u32) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw::over(s, settings, conn_window)
    }
}

impl<S: Read + Write> Raw<S> {
    /// Start HTTP/2 on `s`: the preface, `settings`, and `conn_window` more bytes of
    /// connection window.
    pub fn over(s: S, settings: &[(u16, u32)], conn_window: u32) -> Raw<S> {
        let mut out = frame::PREFACE.to_vec();
        frame::write_settings(&mut out, settings);
        if conn_window > 0 {
            frame::write_window_update(&mut out, 0, conn_window);
        }
        let mut raw = Raw {
            s,
            buf: Vec::new(),
            at: 0,
            end: 0,
            dec: hpack::Decoder::new(4096),
        };
        raw.send(&out);
        raw
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
        self.s.flush().unwrap();
    }

    /// A GET on `stream` with these extra fields (literal, not indexed, no Huffman).
    pub fn get(&mut self, stream: u32, path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        let mut field = |n: &str, v: &str| {
            block.push(0x00);
            block.push(n.len() as u8);
            block.extend_from_slice(n.as_bytes());
            block.push(v.len() as u8);
            block.extend_from_slice(v.as_bytes());
        };
        field(":method", "GET");
        field(":scheme", "http");
        // The Host the HTTP/1.1 test client sends: same cache key.
        field(":authority", "test");
        field(":path", path);
        for (n, v) in extra {
            field(n, v);
        }
        let mut out = Vec::new();
        frame::write_headers(
            &mut out,
            stream,
            &block,
            true,
            frame::DEFAULT_MAX_FRAME_SIZE,
        );
        out
    }

    /// The next frame, handed to `each` with the HPACK decoder and the stream (for a
    /// reply), borrowed from the read buffer; `None` when the connection closed (or
    /// nothing came in time).
    fn next_frame<R>(
        &mut self,
        each: impl FnOnce(Frame<'_>, &mut hpack::Decoder, &mut S) -> R,
    ) -> Option<R> {
        loop {
            if let Some((f, used)) =
                frame::parse(&self.buf[self.at..self.end], frame::MAX_MAX_FRAME_SIZE).unwrap()
            {
                let r = each(f, &mut self.dec, &mut self.s);
                self.at += used;
                return Some(r);
            }
            if self.at == self.end {
                (self.at, self.end) = (0, 0);
            }
            if self.buf.len() - self.end < READ_ROOM {
                self.buf.copy_within(self.at..self.end, 0);
                self.end -= self.at;
                self.at = 0;
                if self.buf.len() - self.end < READ_ROOM {
                    self.buf.resize(self.end + READ_ROOM, 0);
                }
            }
            match self.s.read(&mut self.buf[self.end..]) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.end += n,
            }
        }
    }

    /// The next frame, `None` when the connection closed (or nothing came in time).
    pub fn next(&mut self) -> Option<Got> {
        self.next_frame(|f, dec, s| match f {
            Frame::Headers {
                stream,
                block,
                end_stream,
                end_headers,
                ..
            } => {
                assert!(end_headers, "test client: no CONTINUATION expected");
                Got::Headers {
                    stream,
                    fields: decode(dec, block),
                    end: end_stream,
                }
            }
            Frame::Data {
                stream,
                data,
                end_stream,
                ..
            } => Got::Data {
                stream,
                data: data.to_vec(),
                end: end_stream,
            },
            Frame::RstStream { stream, code } => Got::Reset { stream, code },
            Frame::GoAway {
                last_stream, code, ..
            } => Got::GoAway { last_stream, code },
            Frame::Settings { ack: false, .. } => {
                let mut ack = Vec::new();
                frame::write_settings_ack(&mut ack);
                s.write_all(&ack).ok();
                Got::Other
            }
            _ => Got::Other,
        })
    }

    /// Read until every stream in `streams` has ended: each one's status, body and the
    /// order in which they ended. DATA payloads go straight from the read buffer into
    /// their bodies.
    pub fn responses(&mut self, streams: &[u32]) -> (Answers, Vec<u32>) {
        let mut out: Answers = HashMap::new();
        let mut ended = Vec::new();
        while ended.len() < streams.len() {
            let ends = self
                .next_frame(|f, dec, s| match f {
                    Frame::Headers {
                        stream,
                        block,
                        end_stream,
                        end_headers,
                        ..
                    } => {
                        assert!(end_headers, "test client: no CONTINUATION expected");
                        let status = decode(dec, block)
                            .iter()
                            .find(|(n, _)| n == ":status")
                            .map(|(_, v)| v.parse().unwrap())
                            .unwrap();
                        out.entry(stream).or_default().0 = status;
                        end_stream.then_some(stream)
                    }
                    Frame::Data {
                        stream,
                        data,
                        end_stream,
                        ..
                    } => {
                        out.entry(stream).or_default().1.extend_from_slice(data);
                        end_stream.then_some(stream)
                    }
                    Frame::RstStream { stream, code } => panic!("stream {stream} reset: {code:?}"),
                    Frame::GoAway { code, .. } => panic!("GOAWAY {code:?}"),
                    Frame::Settings { ack: false, .. } => {
                        let mut ack = Vec::new();
                        frame::write_settings_ack(&mut ack);
                        s.write_all(&ack).ok();
                        None
                    }
                    _ => None,
                })
                .expect("connection closed before the responses ended");
            ended.extend(ends);
        }
        (out, ended)
    }
}

/// A header block's fields, decoded.
fn decode(dec: &mut hpack::Decoder, block: &[u8]) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    dec.decode(block, 1 << 20, |n, v| {
        fields.push((
            String::from_utf8_lossy(n).into_owned(),
            String::from_utf8_lossy(v).into_owned(),
        ))
    })
    .unwrap();
    fields
}

/// A stream read a little at a time (8 KiB per read, this pause before each), so the
/// server's socket fills in the middle of its DATA turns.
pub struct SlowReader<S>(pub S, pub Duration);

impl<S: Read> Read for SlowReader<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::thread::sleep(self.1);
        let n = buf.len().min(8 * 1024);
        self.0.read(&mut buf[..n])
    }
}

impl<S: Write> Write for SlowReader<S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The ranges [`incremental_streams_are_exact`] asks of `/b.ts` (six parts; short enough
/// for this client's one-byte literal lengths).
pub const SLOW_RANGES: &str =
    "bytes=0-200000,300001-500007,600002-800014,900003-1100021,1200004-1400028,1500005-";

/// Ask `/a.ts` (`a`) twice, `/b.ts` (`b`) once and [`SLOW_RANGES`] of `/b.ts` as
/// incremental streams (RFC 9218: they take turns), read them all, and check every body
/// byte for byte; the multipart one against `multipart` (HTTP/1.1's answer to the same
/// ranges), boundaries aside.
pub fn incremental_streams_are_exact<S: Read + Write>(
    raw: &mut Raw<S>,
    a: &[u8],
    b: &[u8],
    multipart: &[u8],
) {
    let incremental = [("priority", "u=3, i")];
    let mut reqs = Vec::new();
    reqs.extend(raw.get(1, "/a.ts", &incremental));
    reqs.extend(raw.get(3, "/b.ts", &incremental));
    reqs.extend(raw.get(5, "/a.ts", &incremental));
    reqs.extend(raw.get(7, "/b.ts", &[incremental[0], ("range", SLOW_RANGES)]));
    raw.send(&reqs);
    let (got, _) = raw.responses(&[1, 3, 5, 7]);
    assert!(got[&1] == (200, a.to_vec()), "stream 1 differs");
    assert!(got[&3] == (200, b.to_vec()), "stream 3 differs");
    assert!(got[&5] == (200, a.to_vec()), "stream 5 differs");
    let (status, body) = &got[&7];
    assert_eq!(*status, 206);
    let boundary = |body: &[u8]| {
        String::from_utf8_lossy(body)
            .trim_start()
            .lines()
            .next()
            .expect("a first boundary line")
            .trim_start_matches('-')
            .to_owned()
    };
    let want = String::from_utf8_lossy(multipart).replace(&boundary(multipart), "B");
    let have = String::from_utf8_lossy(body).replace(&boundary(body), "B");
    assert!(have.len() > 6 * 200_000, "{} bytes", have.len());
    assert!(have == want, "the multipart body differs from HTTP/1.1's");
}
