//! The byte layout of a `multipart/byteranges` body (RFC 9110 §14.6), computed up front
//! so the server knows `Content-Length` and can send each part's bytes with sendfile
//! between small in-memory part heads.
//!
//! Layout (RFC 2046 §5.1.1, with RFC 9110 §14.6's part fields):
//!
//! ```text
//! --B\r\nContent-Type: T\r\nContent-Range: bytes a-b/len\r\n\r\n<bytes a..=b>
//! \r\n--B\r\nContent-Type: T\r\nContent-Range: bytes c-d/len\r\n\r\n<bytes c..=d>
//! \r\n--B--\r\n
//! ```
//!
//! The CRLF before each later delimiter belongs to the delimiter (RFC 2046: "the CRLF
//! preceding the boundary delimiter line is conceptually attached to the boundary"), so
//! it lives at the start of the next part's head and of the trailer; the first part
//! needs none because there is no preamble. Not here: choosing the boundary (the server
//! does, from a per-worker counter) or reading the file.

use crate::range::ByteRange;

/// One part: its head (boundary line + part fields + blank line) then the file range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// `\r\n--BOUNDARY\r\nContent-Type: ...\r\nContent-Range: bytes a-b/len\r\n\r\n`
    /// (the first part's head omits the leading CRLF).
    pub head: Vec<u8>,
    /// The file bytes of this part.
    pub range: ByteRange,
}

/// A whole multipart body: parts, then the closing delimiter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartPlan {
    /// Value for the response `Content-Type`: `multipart/byteranges; boundary=...`.
    pub content_type: String,
    /// Parts in order.
    pub parts: Vec<Part>,
    /// `\r\n--BOUNDARY--\r\n`.
    pub trailer: Vec<u8>,
    /// Exact body length: sum of heads, ranges and trailer. Saturates at `u64::MAX`
    /// rather than overflowing on nonsensical input (resolved ranges never get close).
    pub body_len: u64,
}

/// Lay out the body for `ranges` of a representation of `total_len` bytes of type
/// `part_type`. `boundary` must be 1-70 bchars (§5.1.1 of RFC 2046); the server derives
/// it from a per-worker counter. Neither is checked here: both come from the server, not
/// the client. `ranges` are used in the order given (the output of
/// [`crate::range::resolve`] is ascending).
pub fn plan(
    ranges: &[ByteRange],
    total_len: u64,
    part_type: &str,
    boundary: &str,
) -> MultipartPlan {
    let mut parts = Vec::with_capacity(ranges.len());
    let mut body_len: u64 = 0;
    for (i, range) in ranges.iter().enumerate() {
        let mut head = Vec::with_capacity(boundary.len() + part_type.len() + 96);
        if i > 0 {
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"--");
        head.extend_from_slice(boundary.as_bytes());
        head.extend_from_slice(b"\r\nContent-Type: ");
        head.extend_from_slice(part_type.as_bytes());
        head.extend_from_slice(b"\r\nContent-Range: bytes ");
        crate::response::push_u64(&mut head, range.start);
        head.push(b'-');
        crate::response::push_u64(&mut head, range.last());
        head.push(b'/');
        crate::response::push_u64(&mut head, total_len);
        head.extend_from_slice(b"\r\n\r\n");
        body_len = body_len
            .saturating_add(head.len() as u64)
            .saturating_add(range.len);
        parts.push(Part {
            head,
            range: *range,
        });
    }
    let mut trailer = Vec::with_capacity(boundary.len() + 8);
    trailer.extend_from_slice(b"\r\n--");
    trailer.extend_from_slice(boundary.as_bytes());
    trailer.extend_from_slice(b"--\r\n");
    body_len = body_len.saturating_add(trailer.len() as u64);
    MultipartPlan {
        content_type: format!("multipart/byteranges; boundary={boundary}"),
        parts,
        trailer,
        body_len,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;

    /// The body a server following the plan would send, with the file as `file`.
    fn render(plan: &MultipartPlan, file: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for part in &plan.parts {
            out.extend_from_slice(&part.head);
            let start = part.range.start as usize;
            out.extend_from_slice(&file[start..start + part.range.len as usize]);
        }
        out.extend_from_slice(&plan.trailer);
        out
    }

    #[test]
    fn exact_layout() {
        let file: Vec<u8> = (b'a'..=b'z').collect();
        let ranges = [
            ByteRange { start: 0, len: 3 },
            ByteRange { start: 10, len: 2 },
        ];
        let p = plan(&ranges, 26, "video/mp2t", "LR0001");
        assert_eq!(p.content_type, "multipart/byteranges; boundary=LR0001");
        let expected: &[u8] = b"--LR0001\r\n\
Content-Type: video/mp2t\r\n\
Content-Range: bytes 0-2/26\r\n\
\r\n\
abc\r\n\
--LR0001\r\n\
Content-Type: video/mp2t\r\n\
Content-Range: bytes 10-11/26\r\n\
\r\n\
kl\r\n\
--LR0001--\r\n";
        let body = render(&p, &file);
        assert_eq!(
            String::from_utf8_lossy(&body),
            String::from_utf8_lossy(expected)
        );
        assert_eq!(p.body_len, expected.len() as u64);
        assert_eq!(p.trailer, b"\r\n--LR0001--\r\n");
        assert!(p.parts[0].head.starts_with(b"--LR0001\r\n"));
        assert!(p.parts[1].head.starts_with(b"\r\n--LR0001\r\n"));
        assert_eq!(p.parts[1].range, ranges[1]);
    }

    #[test]
    fn large_offsets() {
        let r = ByteRange {
            start: 10_000_000_000,
            len: 5,
        };
        let p = plan(&[r], u64::MAX, "video/mp4", "b");
        assert_eq!(
            p.parts[0].head,
            b"--b\r\nContent-Type: video/mp4\r\nContent-Range: bytes 10000000000-10000000004/18446744073709551615\r\n\r\n"
        );
    }

    #[test]
    fn no_ranges_is_just_the_trailer() {
        let p = plan(&[], 10, "x/y", "b");
        assert!(p.parts.is_empty());
        assert_eq!(p.body_len, p.trailer.len() as u64);
    }

    #[test]
    fn body_len_saturates() {
        let r = ByteRange {
            start: 0,
            len: u64::MAX,
        };
        assert_eq!(plan(&[r, r], u64::MAX, "x/y", "b").body_len, u64::MAX);
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            /// `body_len` is exactly the size of everything the server will send, and each
            /// part head names its own range.
            #[test]
            fn body_len_is_exact(
                raw in proptest::collection::vec((0u64..1_000_000, 1u64..10_000), 0..20),
                total_extra in 0u64..1_000_000,
                boundary in "[0-9A-Za-z'()+_,./:=?-]{1,70}",
                part_type in "[a-z]{1,10}/[a-z0-9.+-]{1,20}",
            ) {
                let ranges: Vec<ByteRange> =
                    raw.iter().map(|&(start, len)| ByteRange { start, len }).collect();
                let total = ranges.iter().map(|r| r.start + r.len).max().unwrap_or(0) + total_extra;
                let p = plan(&ranges, total, &part_type, &boundary);
                let mut size = p.trailer.len() as u64;
                for (part, r) in p.parts.iter().zip(&ranges) {
                    size += part.head.len() as u64 + r.len;
                    let line = format!("Content-Range: bytes {}-{}/{}\r\n\r\n", r.start, r.start + r.len - 1, total);
                    prop_assert!(part.head.ends_with(line.as_bytes()));
                }
                prop_assert_eq!(p.parts.len(), ranges.len());
                prop_assert_eq!(p.body_len, size);
            }
        }
    }
}
