//! Fuzz target: the HTTP/2 connection state machine (`h2::conn::Connection`) fed a
//! client's bytes after a valid preface and SETTINGS, answering every request as a
//! server would (HEADERS, then DATA frames within the send windows). Nothing may panic
//! (debug assertions on: no DATA past a window or the client's frame size); input is
//! consumed in whole frames; output stays within `max_output` plus one frame's answers;
//! events name only streams the machine announced and has not reset; a connection
//! error is final.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use linerate_http::h2::conn::{Connection, Event, Limits};
use linerate_http::h2::frame::{self, MAX_WINDOW, PREFACE};

/// Body bytes each response sends.
const BODY: u32 = 40_000;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let limits = if mode & 1 == 0 {
        Limits::default()
    } else {
        // Tight limits, so the fuzzer reaches every bound.
        Limits {
            max_concurrent_streams: 3,
            initial_window: 100,
            connection_window: 65_535,
            max_header_list_size: 200,
            max_header_block: 300,
            flood_window: 50,
            max_resets_per_window: 5,
            max_control_frames_per_window: 10,
            max_output: 256,
            ..Limits::default()
        }
    };
    let mut c = Connection::new(limits);
    c.output().clear();
    let mut input = PREFACE.to_vec();
    frame::write_settings(&mut input, &[]);
    input.extend_from_slice(data);
    // Open streams and the body bytes each still has to send.
    let mut open: BTreeMap<u32, u32> = BTreeMap::new();
    let mut at = 0;
    let mut stalls = 0;
    while at < input.len() {
        let n = match c.recv(&input[at..]) {
            Ok(n) => n,
            Err(e) => {
                assert_eq!(c.recv(&input[at..]), Err(e), "a connection error is final");
                return;
            }
        };
        assert!(n <= input.len() - at);
        assert!(
            c.output().len() <= limits.max_output + 256,
            "output {} past the bound",
            c.output().len()
        );
        at += n;
        while let Some(ev) = c.next_event() {
            match ev {
                Event::Request { stream, .. } | Event::RequestTooLarge { stream } => {
                    assert!(open.insert(stream, BODY).is_none(), "announced twice");
                    // False when a frame later in the same read reset it: its
                    // `Reset` event is queued behind.
                    let _ = c.send_headers(stream, &[(b":status", b"200")], false);
                }
                Event::Data { stream, .. } => {
                    assert!(open.contains_key(&stream), "data on {stream}");
                }
                Event::Reset { stream, .. } => {
                    assert!(open.remove(&stream).is_some(), "reset of {stream}");
                }
                Event::PriorityUpdate { stream, priority } => {
                    assert!(open.contains_key(&stream), "priority update on {stream}");
                    assert!(priority.urgency <= 7);
                }
                Event::WindowOpened | Event::GoAway { .. } => {}
            }
        }
        // Send what the windows allow.
        for (&stream, left) in open.iter_mut() {
            let w = c.send_window(stream);
            assert!(w <= MAX_WINDOW);
            let n = w.min(c.peer_max_frame_size()).min(*left);
            if n > 0 || *left == 0 {
                *left -= n;
                let _ = c.data_frame(stream, n, *left == 0);
            }
        }
        open.retain(|&s, left| *left > 0 || c.send_window(s) > 0);
        c.output().clear();
        if n == 0 {
            stalls += 1;
            if stalls > 2 {
                // An incomplete frame at the end: nothing more to read.
                break;
            }
        } else {
            stalls = 0;
        }
    }
});
