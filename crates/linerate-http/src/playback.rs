//! Whether a response to a GET read a segment the way a player playing it does, for
//! cache mode's segment prefetch (a segment being played moves the prefetch window on).
//!
//! Players do not all ask for a segment with a plain GET. libavformat (ffmpeg, mpv, Kodi,
//! many smart-TV and set-top stacks) asks for every segment with `Range: bytes=0-` and
//! gets a 206; Apple's AVPlayer probes with `bytes=0-1` before reading; some readers
//! take a segment in chunks (`0-65535`, `65536-131071`, ...); a progressive-MP4 reader
//! looks at the `moov` at the end first. So what counts is what the response served
//! ([`classify`]): the whole object, a range from its first byte longer than a probe,
//! or a range that starts where the previous range the same client was sent of the same
//! object ended. A `HEAD`, a short read from the start (a probe or a sniff) and a read
//! elsewhere (a tail read, a seek, several ranges) do not count.
//!
//! Pure: the caller gives the response's status and `Content-Range`, and where the
//! client's previous range of the object ended (it keeps that memory); not here: which
//! objects are segments, or what is fetched ahead (the server's `proxy/prefetch`).

use crate::cache::parse_content_range;

/// A range from byte 0 shorter than this (and not the whole object) is a probe or a
/// sniff, not a read: AVPlayer probes with `bytes=0-1`, others with `bytes=0-0`, and
/// format sniffers read a first page (4 KiB). A chunked reader whose first chunk is
/// this short still counts from its second chunk on ([`Read::Continues`]).
pub const PROBE_BYTES: u64 = 4096;

/// How a response read an object, as segment prefetch sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// The whole object (200, or a range covering all of it), or a range from its first
    /// byte of at least [`PROBE_BYTES`] (`bytes=0-` included): being played.
    FromStart,
    /// A range starting right after the previous range the client was sent of this
    /// object (a chunked reader, or a read after a probe): being played.
    Continues,
    /// `HEAD`, or a range from byte 0 shorter than [`PROBE_BYTES`] that is not the whole
    /// object: a probe, not a read.
    Probe,
    /// Any other partial read: from elsewhere than the start and not continuing (a tail
    /// read such as an MP4's `moov`, a seek), several ranges (multipart), or a `206`
    /// whose `Content-Range` cannot be read.
    Elsewhere,
}

impl Read {
    /// Whether the object is being played: it moves segment prefetch on.
    pub fn plays(self) -> bool {
        matches!(self, Read::FromStart | Read::Continues)
    }

    /// Short stable name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Read::FromStart => "from_start",
            Read::Continues => "continues",
            Read::Probe => "probe",
            Read::Elsewhere => "elsewhere",
        }
    }
}

/// How a `2xx` response read its object. `head_only`: the request was a `HEAD`.
/// `status`: the response's. `content_range`: its `Content-Range` value (a single-part
/// `206` has one, RFC 9110 §14.4; a multipart one has none at the top). `previous_end`:
/// one past the last byte of the previous range this client was sent of this object,
/// when the caller remembers one.
pub fn classify(
    head_only: bool,
    status: u16,
    content_range: Option<&[u8]>,
    previous_end: Option<u64>,
) -> Read {
    if head_only {
        return Read::Probe;
    }
    if status != 206 {
        // 200 (and the other 2xx a GET of a segment may get): the whole representation
        // was sent (RFC 9110 §14.2: a server may ignore Range).
        return Read::FromStart;
    }
    let Some(cr) = content_range.and_then(parse_content_range) else {
        return Read::Elsewhere;
    };
    if cr.first == 0 {
        let whole = cr.complete.is_some_and(|c| cr.last + 1 == c);
        // `last < complete <= u64::MAX`, so `last + 1` cannot overflow when `whole` is
        // read; below, `saturating_add` keeps a `/*` range from overflowing.
        return if whole || cr.last.saturating_add(1) >= PROBE_BYTES {
            Read::FromStart
        } else {
            Read::Probe
        };
    }
    if previous_end == Some(cr.first) {
        Read::Continues
    } else {
        Read::Elsewhere
    }
}

/// How a `2xx` response read a part of its object that is played as a segment of its
/// own (bytes `start..end`: a byte range a playlist names, a DASH subsegment), as
/// [`classify`] reads a whole segment: a range from the part's first byte that covers
/// the part or at least [`PROBE_BYTES`] of it (an open-ended `bytes=start-` included)
/// is [`Read::FromStart`], a range continuing the client's previous one
/// [`Read::Continues`], a shorter range from the part's start a [`Read::Probe`]. A
/// response with the whole file (a `200`: it is not played range by range) and any
/// other range are [`Read::Elsewhere`].
pub fn classify_part(
    head_only: bool,
    status: u16,
    content_range: Option<&[u8]>,
    (start, end): (u64, u64),
    previous_end: Option<u64>,
) -> Read {
    if head_only {
        return Read::Probe;
    }
    if status != 206 {
        return Read::Elsewhere;
    }
    let Some(cr) = content_range.and_then(parse_content_range) else {
        return Read::Elsewhere;
    };
    if cr.first == start {
        let sent = cr.last.saturating_add(1);
        return if sent >= end || sent - start >= PROBE_BYTES {
            Read::FromStart
        } else {
            Read::Probe
        };
    }
    if previous_end == Some(cr.first) {
        Read::Continues
    } else {
        Read::Elsewhere
    }
}

/// One past the last byte a single-part `206` sent (what [`classify`] takes as
/// `previous_end` for the client's next range of the object); `None` for anything else.
pub fn range_end(status: u16, content_range: Option<&[u8]>) -> Option<u64> {
    if status != 206 {
        return None;
    }
    let cr = parse_content_range(content_range?)?;
    cr.last.checked_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(status: u16, cr: Option<&str>, previous_end: Option<u64>) -> Read {
        classify(false, status, cr.map(str::as_bytes), previous_end)
    }

    #[test]
    fn whole_reads_and_reads_from_the_start_play() {
        // A plain GET, and a Range ignored (200).
        assert_eq!(read(200, None, None), Read::FromStart);
        // libavformat: `bytes=0-` of a segment, served whole as a 206.
        assert_eq!(
            read(206, Some("bytes 0-94375/94376"), None),
            Read::FromStart
        );
        // A tiny segment read with `bytes=0-`: all of it, whatever its size.
        assert_eq!(read(206, Some("bytes 0-899/900"), None), Read::FromStart);
        // `bytes=0-N` past a probe: the first chunk of a chunked reader.
        assert_eq!(
            read(206, Some("bytes 0-65535/1000000"), None),
            Read::FromStart
        );
        assert_eq!(
            read(
                206,
                Some(&format!("bytes 0-{}/1000000", PROBE_BYTES - 1)),
                None
            ),
            Read::FromStart
        );
        // Length unknown to the client (`/*`): the size decides.
        assert_eq!(read(206, Some("bytes 0-65535/*"), None), Read::FromStart);
    }

    #[test]
    fn probes_and_head_do_not_play() {
        assert_eq!(classify(true, 200, None, None), Read::Probe, "HEAD");
        assert_eq!(
            classify(true, 206, Some(b"bytes 0-94375/94376"), None),
            Read::Probe,
            "HEAD, even of everything"
        );
        for cr in [
            "bytes 0-0/94376",
            "bytes 0-1/94376",
            "bytes 0-1023/94376",
            "bytes 0-1/*",
        ] {
            assert_eq!(read(206, Some(cr), None), Read::Probe, "{cr}");
        }
        assert_eq!(
            read(
                206,
                Some(&format!("bytes 0-{}/1000000", PROBE_BYTES - 2)),
                None
            ),
            Read::Probe
        );
    }

    #[test]
    fn a_continuing_range_plays_and_other_ranges_do_not() {
        // After a probe of 0-1, the rest; after a first chunk, the next one.
        assert_eq!(
            read(206, Some("bytes 2-94375/94376"), Some(2)),
            Read::Continues
        );
        assert_eq!(
            read(206, Some("bytes 65536-131071/1000000"), Some(65536)),
            Read::Continues
        );
        // A tail read (an MP4's moov, `bytes=-1000`), a seek, a gap or an overlap: no.
        assert_eq!(
            read(206, Some("bytes 999000-999999/1000000"), None),
            Read::Elsewhere
        );
        assert_eq!(
            read(206, Some("bytes 999000-999999/1000000"), Some(65536)),
            Read::Elsewhere
        );
        assert_eq!(
            read(206, Some("bytes 65535-131071/1000000"), Some(65536)),
            Read::Elsewhere
        );
        // Multipart (no top-level Content-Range), or one that cannot be read.
        assert_eq!(read(206, None, Some(0)), Read::Elsewhere);
        assert_eq!(read(206, Some("bytes */1000"), None), Read::Elsewhere);
        assert_eq!(read(206, Some("items 0-9/10"), None), Read::Elsewhere);
    }

    #[test]
    fn plays_and_names() {
        assert!(Read::FromStart.plays() && Read::Continues.plays());
        assert!(!Read::Probe.plays() && !Read::Elsewhere.plays());
        assert_eq!(Read::Probe.as_str(), "probe");
    }

    #[test]
    fn parts_of_a_file_are_read_like_segments() {
        let part = (94376, 189504);
        let read = |cr: &str, previous_end| {
            classify_part(false, 206, Some(cr.as_bytes()), part, previous_end)
        };
        // Exactly the listed range (hls.js, AVPlayer, libavformat), or open-ended.
        assert_eq!(read("bytes 94376-189503/371300", None), Read::FromStart);
        assert_eq!(read("bytes 94376-371299/371300", None), Read::FromStart);
        assert_eq!(read("bytes 94376-98471/371300", None), Read::FromStart);
        assert_eq!(read("bytes 94376-94377/371300", None), Read::Probe);
        // A chunked reader's next chunk, after a probe or a first chunk.
        assert_eq!(
            read("bytes 94378-189503/371300", Some(94378)),
            Read::Continues
        );
        assert_eq!(read("bytes 100000-189503/371300", None), Read::Elsewhere);
        // A short last part, read whole, plays whatever its size.
        assert_eq!(
            classify_part(false, 206, Some(b"bytes 10-19/20"), (10, 20), None),
            Read::FromStart
        );
        // The whole file, a HEAD, a multipart answer: not a play of a part.
        assert_eq!(classify_part(false, 200, None, part, None), Read::Elsewhere);
        assert_eq!(
            classify_part(true, 206, Some(b"bytes 94376-189503/371300"), part, None),
            Read::Probe
        );
        assert_eq!(
            classify_part(false, 206, None, part, Some(0)),
            Read::Elsewhere
        );
    }

    #[test]
    fn range_end_is_one_past_the_last_byte_sent() {
        assert_eq!(range_end(206, Some(b"bytes 0-1/94376")), Some(2));
        assert_eq!(range_end(206, Some(b"bytes 10-19/*")), Some(20));
        assert_eq!(range_end(200, Some(b"bytes 0-1/94376")), None);
        assert_eq!(range_end(206, None), None);
        assert_eq!(range_end(206, Some(b"garbage")), None);
    }
}
