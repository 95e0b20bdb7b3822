//! Fuzz target: the origin-response parsers (`linerate_http::upstream`). Neither the
//! head parser nor the chunked decoder may panic; a complete head must lie within the
//! input and the head limit; and the chunked decoder must give the same answer (bytes
//! consumed, finished, body or error) however its input is split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_http::upstream::{parse_response_head, ChunkedDecoder, Framing, MAX_RESPONSE_HEAD};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let request_was_head = flags & 1 == 1;
    let mut body = data;
    if let Ok(Some((head, head_len))) = parse_response_head(data, request_was_head) {
        assert!(head_len <= data.len());
        assert!(head_len <= MAX_RESPONSE_HEAD);
        assert!((200..=599).contains(&head.status));
        if request_was_head {
            assert_eq!(head.framing, Framing::Empty);
        }
        if head.framing == Framing::UntilClose {
            assert!(!head.keep_alive);
        }
        body = &data[head_len..];
    }

    // The whole body at once...
    let mut whole = ChunkedDecoder::new();
    let mut whole_out = Vec::new();
    let whole_result = whole.decode(body, &mut whole_out);
    if let Ok((n, _)) = whole_result {
        assert!(n <= body.len());
        assert!(whole_out.len() <= n);
    }

    // ...and the same bytes in pieces whose sizes come from the flags byte.
    let step = usize::from(flags >> 1) + 1;
    let mut split = ChunkedDecoder::new();
    let mut split_out = Vec::new();
    let mut consumed = 0;
    let mut split_result = Ok((0, false));
    let mut at = 0;
    while at < body.len() {
        let end = (at + step).min(body.len());
        match split.decode(&body[consumed..end], &mut split_out) {
            Ok((n, done)) => {
                consumed += n;
                split_result = Ok((consumed, done));
                if done {
                    break;
                }
            }
            Err(e) => {
                split_result = Err(e);
                break;
            }
        }
        at = end;
    }
    if body.is_empty() {
        split_result = split.decode(body, &mut split_out);
    }
    assert_eq!(whole_result, split_result);
    if whole_result.is_ok() {
        assert_eq!(whole_out, split_out);
    }
});
