//! Message framing (RFC 9112 §6.3, RFC 9110 §8.6) pinned on both sides at once: each
//! case of `Content-Length` / `Transfer-Encoding` field lines goes through the request
//! parser and the origin-response parser, which share `linerate_http::framing`, so a
//! change to either side's answer shows up next to the other's.
#![allow(clippy::unwrap_used, reason = "tests")]

use linerate_http::framing::{BodyFraming, FramingError, ResponseFraming};
use linerate_http::request::{parse_request, FieldBuf, ParseOutcome, RequestError};
use linerate_http::upstream::{parse_response_head, ResponseError};

/// A request side answer, through the real request parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Req {
    Ok(BodyFraming),
    Err(RequestError),
}

/// A response side answer, through the real origin-response parser.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Resp {
    Ok(ResponseFraming),
    Err(ResponseError),
}

fn request(fields: &str) -> Req {
    let raw = format!("POST / HTTP/1.1\r\nHost: h\r\n{fields}\r\n");
    let room = Box::leak(Box::new(FieldBuf::new()));
    match parse_request(Box::leak(raw.into_bytes().into_boxed_slice()), room) {
        Ok(ParseOutcome::Complete { head, .. }) => Req::Ok(head.body),
        Ok(ParseOutcome::Partial) => panic!("partial: {fields:?}"),
        Err(e) => Req::Err(e),
    }
}

fn response(fields: &str) -> Resp {
    let raw = format!("HTTP/1.1 200 OK\r\n{fields}\r\n");
    match parse_response_head(raw.as_bytes(), false) {
        Ok(Some((head, _))) => Resp::Ok(head.framing),
        Ok(None) => panic!("partial: {fields:?}"),
        Err(e) => Resp::Err(e),
    }
}

/// Every framing case, pinned on both sides at once: the same field lines in a
/// request (RFC 9112 §6.3 for requests) and in a `200` response (§6.3 for
/// responses). Most were tested on one side only before this module; the request
/// parser's and the origin client's tests of these rules moved here.
#[test]
fn both_sides() {
    use BodyFraming as B;
    use FramingError as F;
    use ResponseFraming as R;
    let req_err = |e| match e {
        F::LengthAndTransferEncoding => Req::Err(RequestError::LengthAndTransferEncoding),
        F::BadContentLength => Req::Err(RequestError::BadContentLength),
        F::BadTransferEncoding => Req::Err(RequestError::BadTransferEncoding),
    };
    let resp_err = |e| match e {
        F::BadContentLength => Resp::Err(ResponseError::BadContentLength),
        F::LengthAndTransferEncoding | F::BadTransferEncoding => {
            Resp::Err(ResponseError::BadTransferEncoding)
        }
    };
    let ok_req = Req::Ok;
    let ok_resp = Resp::Ok;
    let cases: &[(&str, Req, Resp)] = &[
        ("", ok_req(B::None), ok_resp(R::UntilClose)),
        // Content-Length.
        (
            "Content-Length: 0\r\n",
            ok_req(B::None),
            ok_resp(R::Length(0)),
        ),
        (
            "Content-Length: 5\r\n",
            ok_req(B::Length(5)),
            ok_resp(R::Length(5)),
        ),
        (
            "Content-Length: 1, 1\r\n",
            ok_req(B::Length(1)),
            ok_resp(R::Length(1)),
        ),
        (
            "Content-Length: 5, 5\r\n",
            ok_req(B::Length(5)),
            ok_resp(R::Length(5)),
        ),
        (
            "Content-Length: 5\r\nContent-Length: 5\r\n",
            ok_req(B::Length(5)),
            ok_resp(R::Length(5)),
        ),
        (
            "Content-Length: 5, 5\r\nContent-Length: 5\r\n",
            ok_req(B::Length(5)),
            ok_resp(R::Length(5)),
        ),
        (
            "Content-Length: 18446744073709551615\r\n",
            ok_req(B::Length(u64::MAX)),
            ok_resp(R::Length(u64::MAX)),
        ),
        // Transfer-Encoding that both sides take.
        (
            "Transfer-Encoding: chunked\r\n",
            ok_req(B::Chunked),
            ok_resp(R::Chunked),
        ),
        (
            "Transfer-Encoding: Chunked\r\n",
            ok_req(B::Chunked),
            ok_resp(R::Chunked),
        ),
        (
            "Transfer-Encoding: gzip, chunked\r\n",
            ok_req(B::Chunked),
            ok_resp(R::Chunked),
        ),
        (
            "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
            ok_req(B::Chunked),
            ok_resp(R::Chunked),
        ),
        (
            "Transfer-Encoding: gzip\r\nTransfer-Encoding: Chunked\r\n",
            ok_req(B::Chunked),
            ok_resp(R::Chunked),
        ),
        // Other codings without chunked: a request cannot be delimited (§6.3 ¶4), a
        // response runs until close.
        (
            "Transfer-Encoding: gzip\r\n",
            req_err(F::BadTransferEncoding),
            ok_resp(R::UntilClose),
        ),
        (
            "Transfer-Encoding: identity\r\n",
            req_err(F::BadTransferEncoding),
            ok_resp(R::UntilClose),
        ),
        (
            "Transfer-Encoding: chunkedx\r\n",
            req_err(F::BadTransferEncoding),
            ok_resp(R::UntilClose),
        ),
        (
            "Transfer-Encoding: x-custom;q=1\r\n",
            req_err(F::BadTransferEncoding),
            ok_resp(R::UntilClose),
        ),
    ];
    let refused_both: &[(&str, F)] = &[
        ("Content-Length: 5, 6\r\n", F::BadContentLength),
        (
            "Content-Length: 5\r\nContent-Length: 6\r\n",
            F::BadContentLength,
        ),
        ("Content-Length: 1, 2\r\n", F::BadContentLength),
        ("Content-Length: abc\r\n", F::BadContentLength),
        ("Content-Length: -1\r\n", F::BadContentLength),
        ("Content-Length: +5\r\n", F::BadContentLength),
        ("Content-Length: 0x10\r\n", F::BadContentLength),
        ("Content-Length: 1e3\r\n", F::BadContentLength),
        ("Content-Length: 5 5\r\n", F::BadContentLength),
        ("Content-Length: 5,\r\n", F::BadContentLength),
        ("Content-Length:\r\n", F::BadContentLength),
        ("Content-Length: \r\n", F::BadContentLength),
        (
            "Content-Length: 18446744073709551616\r\n",
            F::BadContentLength,
        ),
        (
            "Content-Length: 99999999999999999999999\r\n",
            F::BadContentLength,
        ),
        (
            "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
            F::LengthAndTransferEncoding,
        ),
        (
            "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
            F::LengthAndTransferEncoding,
        ),
        (
            "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            F::LengthAndTransferEncoding,
        ),
        // An invalid Content-Length next to Transfer-Encoding is still the pair.
        (
            "Content-Length: x\r\nTransfer-Encoding: chunked\r\n",
            F::LengthAndTransferEncoding,
        ),
        (
            "Transfer-Encoding: chunked, identity\r\n",
            F::BadTransferEncoding,
        ),
        (
            "Transfer-Encoding: chunked, gzip\r\n",
            F::BadTransferEncoding,
        ),
        (
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
            F::BadTransferEncoding,
        ),
        (
            "Transfer-Encoding: chunked, chunked\r\n",
            F::BadTransferEncoding,
        ),
        ("Transfer-Encoding:\r\n", F::BadTransferEncoding),
        ("Transfer-Encoding: ,\r\n", F::BadTransferEncoding),
        ("Transfer-Encoding: \"chunked\"\r\n", F::BadTransferEncoding),
        (
            "Transfer-Encoding: g zip, chunked\r\n",
            F::BadTransferEncoding,
        ),
        (
            "Transfer-Encoding: b@d, chunked\r\n",
            F::BadTransferEncoding,
        ),
        ("Transfer-Encoding: chunked;x=1\r\n", F::BadTransferEncoding),
        // chunked with a parameter is chunked, so this applies it twice.
        (
            "Transfer-Encoding: chunked;x=1, chunked\r\n",
            F::BadTransferEncoding,
        ),
    ];
    let all = cases.iter().cloned().chain(
        refused_both
            .iter()
            .map(|&(f, e)| (f, req_err(e), resp_err(e))),
    );
    for (fields, want_req, want_resp) in all {
        assert_eq!(request(fields), want_req, "request with {fields:?}");
        assert_eq!(response(fields), want_resp, "response with {fields:?}");
    }
}

/// HTTP/1.0 with `Transfer-Encoding`: faulty framing on both sides (RFC 9112 §6.1).
#[test]
fn http10_transfer_encoding() {
    let mut fields = FieldBuf::new();
    assert_eq!(
        parse_request(
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            &mut fields
        )
        .err(),
        Some(RequestError::BadTransferEncoding)
    );
    assert_eq!(
        parse_response_head(
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false
        )
        .err(),
        Some(ResponseError::BadTransferEncoding)
    );
}
