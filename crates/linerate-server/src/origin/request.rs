//! The request as the origin sees it, and its bytes on the wire (RFC 9112 §3). Pure:
//! values in, bytes out.

/// One request to an origin.
pub(crate) struct OriginRequest<'a> {
    /// Method, as received (RFC 9110 §9.1: case-sensitive).
    pub(crate) method: &'a str,
    /// Path and query, starting with `/`; the server's `base_path` is prepended.
    pub(crate) target: &'a [u8],
    /// Fields, sent as given: the caller has removed hop-by-hop fields. `Host`,
    /// `Content-Length` and `Transfer-Encoding` are the client's own and are skipped
    /// here if present.
    pub(crate) headers: &'a [(&'a [u8], &'a [u8])],
    /// Body (buffered whole); sent with `Content-Length`.
    pub(crate) body: &'a [u8],
    /// Whether sending the request twice is harmless (RFC 9110 §9.2.2), which allows a
    /// retry on another server, or after it was written to a pooled connection.
    pub(crate) idempotent: bool,
    /// Where interim (1xx) responses go as they arrive (to be forwarded to the client);
    /// `None`: dropped.
    pub(crate) interim: Option<&'a super::InterimSink>,
}

impl OriginRequest<'_> {
    /// Whether the response will have no body whatever its fields say (RFC 9110 §9.3.2).
    pub(super) fn is_head(&self) -> bool {
        self.method == "HEAD"
    }

    /// The request's bytes: request line, `Host`, the caller's fields, `Content-Length`
    /// when there is a body or the method defines one (RFC 9110 §8.6: a user agent
    /// SHOULD send it for POST, PUT and PATCH even when 0), then the body; one buffer, so
    /// one write.
    pub(super) fn encode(&self, base_path: &str, host: &str) -> Vec<u8> {
        let fields: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.len() + v.len() + 4)
            .sum();
        let mut w = Vec::with_capacity(
            64 + self.method.len()
                + base_path.len()
                + self.target.len()
                + host.len()
                + fields
                + self.body.len(),
        );
        w.extend_from_slice(self.method.as_bytes());
        w.push(b' ');
        push_target(&mut w, base_path.as_bytes());
        push_target(&mut w, self.target);
        w.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        push_value(&mut w, host.as_bytes());
        w.extend_from_slice(b"\r\n");
        for (name, value) in self.headers {
            if is_ours(name) || !is_token(name) {
                continue;
            }
            w.extend_from_slice(name);
            w.extend_from_slice(b": ");
            push_value(&mut w, value);
            w.extend_from_slice(b"\r\n");
        }
        if !self.body.is_empty() || matches!(self.method, "POST" | "PUT" | "PATCH") {
            w.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        w.extend_from_slice(b"\r\n");
        w.extend_from_slice(self.body);
        w
    }
}

/// Fields whose values the client decides.
fn is_ours(name: &[u8]) -> bool {
    [&b"host"[..], b"content-length", b"transfer-encoding"]
        .iter()
        .any(|f| name.eq_ignore_ascii_case(f))
}

/// `token` (RFC 9110 §5.6.2), for field names.
fn is_token(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `target` as [`OriginRequest::encode`] writes it on the request line (what a peer
/// request's MAC covers: the receiver sees these bytes).
pub(crate) fn wire_target(target: &[u8]) -> Vec<u8> {
    let mut w = Vec::with_capacity(target.len());
    push_target(&mut w, target);
    w
}

/// Append a request-target, percent-encoding (RFC 3986 §2.1) any byte that cannot
/// appear in one (controls, space, non-ASCII), so a target that slipped past the
/// parser cannot split the request line.
fn push_target(w: &mut Vec<u8>, target: &[u8]) {
    for &b in target {
        if b <= b' ' || b >= 0x7f {
            w.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            w.push(b);
        }
    }
}

/// Append a field value with CR, LF and NUL replaced by SP (RFC 9110 §5.5 lets a
/// recipient do so; here it keeps a bad value from splitting the request).
fn push_value(w: &mut Vec<u8>, value: &[u8]) {
    w.extend(value.iter().map(|&b| {
        if matches!(b, b'\r' | b'\n' | 0) {
            b' '
        } else {
            b
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_request() {
        let req = OriginRequest {
            method: "GET",
            target: b"/a b?x=\xff",
            headers: &[
                (b"Accept", b"*/*"),
                (b"host", b"evil"),
                (b"X-Bad", b"a\r\nInjected: 1"),
                (b"Bad Name", b"x"),
            ],
            body: b"",
            idempotent: true,
            interim: None,
        };
        assert_eq!(
            req.encode("/base", "origin:8080"),
            b"GET /base/a%20b?x=%FF HTTP/1.1\r\nHost: origin:8080\r\nAccept: */*\r\n\
X-Bad: a  Injected: 1\r\n\r\n"
        );
        let post = OriginRequest {
            method: "POST",
            target: b"/p",
            headers: &[(b"content-length", b"99")],
            body: b"",
            idempotent: false,
            interim: None,
        };
        assert_eq!(
            post.encode("", "o"),
            b"POST /p HTTP/1.1\r\nHost: o\r\nContent-Length: 0\r\n\r\n"
        );
        let put = OriginRequest {
            method: "DELETE",
            target: b"/p",
            headers: &[],
            body: b"xyz",
            idempotent: true,
            interim: None,
        };
        assert_eq!(
            put.encode("", "o"),
            b"DELETE /p HTTP/1.1\r\nHost: o\r\nContent-Length: 3\r\n\r\nxyz"
        );
    }
}
