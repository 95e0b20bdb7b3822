//! A cache-mode response body, produced piece by piece for the send paths: file ranges
//! of a stored object (sent with sendfile, like appliance mode), and small byte pieces
//! (multipart part heads, chunk framing, bytes relayed from an origin).
//!
//! An object still being written is followed through its [`BodyProgress`]: a piece is
//! handed out only once the store says its bytes are on disk, and the waiting is on the
//! writer's channel, never a timer. The last byte of an object is held back until the
//! writer has published it: if the fill fails at the very end (a body longer than its
//! Content-Length, a broken final chunk), the client's connection closes one byte
//! short, so a truncated or unverified body never looks complete.

use std::collections::VecDeque;
use std::fs::File;
use std::sync::Arc;

use linerate_cache::{BodyProgress, Progress, Readable};
use linerate_http::range::ByteRange;

use crate::origin::OriginResponse;
use crate::response::{NextPiece, Piece, Pieces, TransferError};

/// Relayed origin bytes per piece.
const RELAY_CHUNK: usize = 256 * 1024;

/// What is left to send of a stored object, in body coordinates.
#[derive(Debug)]
pub(crate) enum Segment {
    /// Literal bytes (multipart part head or trailer).
    Bytes(Vec<u8>),
    /// `len` body bytes from `start`.
    Range {
        /// First body byte.
        start: u64,
        /// Bytes.
        len: u64,
    },
    /// Every body byte from `start` to the end, which is not known yet: sent as HTTP/1.1
    /// chunks (`chunked`) or until the connection closes (HTTP/1.0).
    ToEnd {
        /// Next body byte.
        start: u64,
        /// Frame with chunked transfer coding.
        chunked: bool,
    },
}

/// A stored object being sent.
pub(crate) struct Stored {
    pub(crate) file: Arc<File>,
    pub(crate) body_offset: u64,
    /// The writer's progress; `None` once the object is known complete.
    pub(crate) progress: Option<BodyProgress>,
    /// The body length when known (Content-Length of the fill, or complete).
    pub(crate) object_len: Option<u64>,
    pub(crate) segments: VecDeque<Segment>,
    /// The literal handed out last (kept here so the piece can borrow it).
    pub(crate) literal: Vec<u8>,
}

/// An origin response relayed as it arrives (not stored).
pub(crate) struct Relay {
    pub(crate) response: OriginResponse,
    pub(crate) chunked: bool,
    pub(crate) buf: Vec<u8>,
    pub(crate) done: bool,
}

impl Pieces for Stored {
    fn next(&mut self) -> NextPiece<'_> {
        Box::pin(self.next_piece())
    }

    fn ready(&self) -> bool {
        self.progress.is_none()
    }

    fn len_hint(&self) -> u64 {
        segments_len(&self.segments)
    }
}

impl Pieces for Relay {
    fn next(&mut self) -> NextPiece<'_> {
        Box::pin(self.next_piece())
    }

    fn ready(&self) -> bool {
        false
    }

    fn len_hint(&self) -> u64 {
        self.response.content_length().unwrap_or(0)
    }
}

/// The segments of a multipart body: each part's head, then its range; the trailer.
pub(crate) fn multipart_segments(
    parts: Vec<linerate_http::multipart::Part>,
    trailer: Vec<u8>,
) -> VecDeque<Segment> {
    let mut segments = VecDeque::with_capacity(2 * parts.len() + 1);
    for part in parts {
        segments.push_back(Segment::Bytes(part.head));
        segments.push_back(Segment::Range {
            start: part.range.start,
            len: part.range.len,
        });
    }
    segments.push_back(Segment::Bytes(trailer));
    segments
}

/// Bytes `segments` will send (a segment of unknown length counts 0).
pub(crate) fn segments_len(segments: &VecDeque<Segment>) -> u64 {
    segments
        .iter()
        .map(|seg| match seg {
            Segment::Bytes(b) => b.len() as u64,
            Segment::Range { len, .. } => *len,
            Segment::ToEnd { .. } => 0,
        })
        .sum()
}

impl Stored {
    async fn next_piece(&mut self) -> Result<Option<Piece<'_>>, TransferError> {
        loop {
            let Some(front) = self.segments.front() else {
                return Ok(None);
            };
            match *front {
                Segment::Bytes(_) => {
                    if let Some(Segment::Bytes(b)) = self.segments.pop_front() {
                        self.literal = b;
                    }
                    return Ok(Some(Piece::Bytes(&self.literal)));
                }
                Segment::Range { len: 0, .. } => {
                    self.segments.pop_front();
                }
                Segment::Range { start, len } => {
                    let end = start + len;
                    let hold_last = self.object_len == Some(end);
                    let written = self.progress.is_some();
                    let upto = available(&mut self.progress, start, end, hold_last).await?;
                    if upto == end {
                        self.segments.pop_front();
                    } else if let Some(Segment::Range { start: s, len: l }) =
                        self.segments.front_mut()
                    {
                        *s = upto;
                        *l = end - upto;
                    }
                    let range = ByteRange {
                        start: self.body_offset + start,
                        len: upto - start,
                    };
                    return Ok(Some(if written {
                        Piece::Written(&self.file, range)
                    } else {
                        Piece::File(&self.file, range)
                    }));
                }
                Segment::ToEnd { start, chunked } => {
                    let upto = match &mut self.progress {
                        None => None,
                        Some(p) => match p.wait_for(start).await {
                            Ok(Readable::UpTo(n)) => Some(n),
                            Ok(Readable::End { .. }) => None,
                            Err(e) => return Err(TransferError::Upstream(e.reason.as_str())),
                        },
                    };
                    let Some(upto) = upto else {
                        // Complete and all sent: end the chunked body.
                        self.segments.pop_front();
                        if chunked {
                            self.literal.clear();
                            self.literal.extend_from_slice(b"0\r\n\r\n");
                            return Ok(Some(Piece::Bytes(&self.literal)));
                        }
                        continue;
                    };
                    if let Some(Segment::ToEnd { start: s, .. }) = self.segments.front_mut() {
                        *s = upto;
                    }
                    let len = upto - start;
                    if chunked {
                        // Chunk head now; then the data (already on disk) and its CRLF.
                        self.segments.push_front(Segment::Bytes(b"\r\n".to_vec()));
                        self.segments.push_front(Segment::Range { start, len });
                        self.literal.clear();
                        self.literal
                            .extend_from_slice(format!("{len:x}\r\n").as_bytes());
                        return Ok(Some(Piece::Bytes(&self.literal)));
                    }
                    return Ok(Some(Piece::File(
                        &self.file,
                        ByteRange {
                            start: self.body_offset + start,
                            len,
                        },
                    )));
                }
            }
        }
    }
}

/// Wait until body bytes from `start` (of a range ending at `end`) are on disk; returns
/// how far the caller may send now (> `start`). With `hold_last` (the range ends at the
/// object's end) the final byte is released only once the object is published.
pub(crate) async fn available(
    progress: &mut Option<BodyProgress>,
    start: u64,
    end: u64,
    hold_last: bool,
) -> Result<u64, TransferError> {
    let Some(p) = progress else {
        return Ok(end);
    };
    match p.wait_for(start).await {
        Ok(Readable::UpTo(n)) => {
            if matches!(p.current(), Progress::Complete { .. }) {
                *progress = None;
                return Ok(n.min(end));
            }
            let limit = n.min(end);
            if !hold_last || limit < end {
                return Ok(limit);
            }
            if end - 1 > start {
                return Ok(end - 1);
            }
            // Only the final byte is left: wait for publication (or failure).
            match p.wait_for(end).await {
                Ok(_) if matches!(p.current(), Progress::Complete { .. }) => {
                    *progress = None;
                    Ok(end)
                }
                // More than the announced length, still unpublished: the writer will
                // refuse it (and waiting again would return at once: never spin).
                Ok(_) => Err(TransferError::Upstream("length_mismatch")),
                Err(e) => Err(TransferError::Upstream(e.reason.as_str())),
            }
        }
        Ok(Readable::End { .. }) => Err(TransferError::Truncated),
        Err(e) => Err(TransferError::Upstream(e.reason.as_str())),
    }
}

impl Relay {
    async fn next_piece(&mut self) -> Result<Option<Piece<'_>>, TransferError> {
        if self.done {
            return Ok(None);
        }
        self.buf.clear();
        if self.chunked {
            // Room for the chunk head in front of the data.
            self.buf.extend_from_slice(&[0u8; 18]);
        }
        let offset = self.buf.len();
        let n = match self.response.read(&mut self.buf, RELAY_CHUNK).await {
            Ok(n) => n,
            // Every declared byte was relayed, then the origin sent more: the client has
            // the body as declared, complete (nginx and Varnish deliver the same).
            Err(crate::origin::OriginError::BodyLong) => 0,
            Err(e) => return Err(TransferError::Upstream(e.as_str())),
        };
        if n == 0 {
            self.done = true;
            if self.chunked {
                self.buf.clear();
                self.buf.extend_from_slice(b"0\r\n\r\n");
                return Ok(Some(Piece::Bytes(&self.buf)));
            }
            return Ok(None);
        }
        if self.chunked {
            let head = format!("{n:x}\r\n");
            let begin = offset - head.len();
            self.buf[begin..offset].copy_from_slice(head.as_bytes());
            self.buf.extend_from_slice(b"\r\n");
            return Ok(Some(Piece::Bytes(&self.buf[begin..])));
        }
        Ok(Some(Piece::Bytes(&self.buf[offset..])))
    }
}
