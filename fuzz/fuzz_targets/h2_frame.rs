//! Fuzz target: HTTP/2 frame parsing (`h2::frame::parse`) over a buffer of frames, as a
//! connection reads them. Nothing may panic; each frame consumes at least its header and
//! at most what is buffered; after a stream error the frame is skipped by its header's
//! length; and the frames a server also writes (SETTINGS, PING, WINDOW_UPDATE,
//! RST_STREAM, GOAWAY, HEADERS, DATA) re-encode to bytes that parse back to the same
//! frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_http::h2::frame::{self, Frame, FrameError, HEADER_LEN};

fn reparse(bytes: &[u8], max: u32) -> Frame<'_> {
    let (f, n) = frame::parse(bytes, max)
        .expect("a frame we wrote parses")
        .expect("a frame we wrote is whole");
    assert_eq!(n, bytes.len());
    f
}

fn check_round_trip(f: &Frame<'_>, max: u32) {
    let mut out = Vec::new();
    match *f {
        Frame::Settings { ack: false, params } => {
            let list: Vec<(u16, u32)> = frame::settings_params(params).collect();
            frame::write_settings(&mut out, &list);
        }
        Frame::Settings { ack: true, .. } => frame::write_settings_ack(&mut out),
        Frame::Ping { ack, data } => frame::write_ping(&mut out, ack, data),
        Frame::WindowUpdate { stream, increment } => {
            frame::write_window_update(&mut out, stream, increment)
        }
        Frame::RstStream { stream, code } => frame::write_rst_stream(&mut out, stream, code),
        Frame::GoAway {
            last_stream,
            code,
            debug,
        } => frame::write_goaway(&mut out, last_stream, code, debug),
        Frame::Data {
            stream,
            data,
            end_stream,
            ..
        } => {
            frame::write_data(&mut out, stream, data, end_stream);
            assert_eq!(
                out[..HEADER_LEN],
                frame::data_header(stream, data.len() as u32, end_stream)
            );
            match reparse(&out, max) {
                Frame::Data {
                    stream: s,
                    data: d,
                    flow_len,
                    end_stream: e,
                } => {
                    assert_eq!((s, d, e), (stream, data, end_stream));
                    assert_eq!(flow_len as usize, data.len());
                }
                other => panic!("DATA came back as {other:?}"),
            }
            return;
        }
        Frame::Headers {
            stream,
            block,
            end_stream,
            ..
        } => {
            // Split at the smallest frame size, then joined again.
            frame::write_headers(
                &mut out,
                stream,
                block,
                end_stream,
                frame::DEFAULT_MAX_FRAME_SIZE,
            );
            let mut joined = Vec::new();
            let mut at = 0;
            let mut last_end_headers = false;
            while at < out.len() {
                let (g, n) = frame::parse(&out[at..], frame::DEFAULT_MAX_FRAME_SIZE)
                    .expect("parses")
                    .expect("whole");
                match g {
                    Frame::Headers {
                        block,
                        end_stream: e,
                        end_headers,
                        priority: None,
                        stream: s,
                    } => {
                        assert_eq!((at, s, e), (0, stream, end_stream));
                        joined.extend_from_slice(block);
                        last_end_headers = end_headers;
                    }
                    Frame::Continuation {
                        block,
                        end_headers,
                        stream: s,
                    } => {
                        assert!(at > 0 && !last_end_headers);
                        assert_eq!(s, stream);
                        joined.extend_from_slice(block);
                        last_end_headers = end_headers;
                    }
                    other => panic!("HEADERS came back as {other:?}"),
                }
                at += n;
            }
            assert!(last_end_headers);
            assert_eq!(joined, block);
            return;
        }
        _ => return,
    }
    assert_eq!(&reparse(&out, max), f);
}

fuzz_target!(|data: &[u8]| {
    // First byte: which SETTINGS_MAX_FRAME_SIZE we advertised.
    let Some((&pick, mut buf)) = data.split_first() else {
        return;
    };
    let max = match pick % 3 {
        0 => frame::DEFAULT_MAX_FRAME_SIZE,
        1 => 64,
        _ => frame::MAX_MAX_FRAME_SIZE,
    };
    loop {
        match frame::parse(buf, max) {
            Ok(None) => {
                // Not whole: either no header yet, or a payload still to come.
                if let Some((len, ..)) = frame::peek_header(buf) {
                    assert!(len <= max);
                    assert!(buf.len() < HEADER_LEN + len as usize);
                }
                return;
            }
            Ok(Some((f, n))) => {
                assert!(n >= HEADER_LEN && n <= buf.len());
                let (len, ..) = frame::peek_header(buf).expect("a parsed frame has a header");
                assert_eq!(n, HEADER_LEN + len as usize);
                if let Frame::Data { data, flow_len, .. } = f {
                    assert!(data.len() <= flow_len as usize && flow_len == len);
                }
                if let Frame::Settings { params, .. } = f {
                    assert_eq!(params.len() % 6, 0);
                    for (id, value) in frame::settings_params(params) {
                        assert_eq!(frame::check_setting(id, value), Ok(()));
                    }
                }
                check_round_trip(&f, max);
                buf = &buf[n..];
            }
            Err(FrameError::Stream(stream, code, why)) => {
                assert!(stream != 0 && !why.is_empty() && code.as_str() != "unknown");
                let (len, ..) = frame::peek_header(buf).expect("an error frame has a header");
                let n = HEADER_LEN + len as usize;
                assert!(n <= buf.len());
                buf = &buf[n..];
            }
            Err(FrameError::Connection(code, why)) => {
                assert!(!why.is_empty() && code.as_str() != "unknown");
                return;
            }
        }
    }
});
