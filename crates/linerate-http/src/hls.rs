//! HLS media playlists (RFC 8216) as cache mode's segment prefetch reads them: the
//! segment URIs in playlist order ([`parse_media`]), and where a relative URI points,
//! resolved against the playlist's own target (RFC 3986 §5.2, [`resolve`]).
//!
//! Deliberately narrow: a playlist this module is not sure about gives nothing (no
//! prefetch), never a guess. Master playlists, a URI line without its `#EXTINF`, and a
//! byte range that cannot be placed (`#EXT-X-BYTERANGE` without an offset after a
//! segment of another resource or none, a bad number, an overflow) are refused whole;
//! `#EXT-X-GAP` segments are left out (there is nothing to fetch, but a gap's byte
//! range still places the next one); low-latency parts (`#EXT-X-PART`) are ignored.
//! Byte-range segments (RFC 8216 §4.3.2.2, single-file fMP4 and TS) come with their
//! range, an offset left out continuing the previous segment's range; `#EXT-X-MAP`s
//! come with theirs (§4.3.2.5, `BYTERANGE="n@o"`, an offset left out read as 0, as
//! libavformat reads it). References with a scheme or an authority (another
//! host, or the same one spelled absolutely) resolve to nothing: only references
//! relative to the playlist's own host are followed.

/// Largest playlist body parsed, bytes. A media playlist of a few thousand segments is
/// far below it; anything larger is not a playlist worth the memory.
pub const MAX_PLAYLIST_BYTES: usize = 1 << 20;

/// The media types a playlist is served with (RFC 8216 §4, and the older name).
pub const MEDIA_TYPES: [&[u8]; 2] = [b"application/vnd.apple.mpegurl", b"application/x-mpegurl"];

/// Whether a `Content-Type` value names a playlist (parameters and case ignored).
pub fn is_playlist_type(content_type: &[u8]) -> bool {
    let essence = crate::mime::essence(content_type);
    MEDIA_TYPES.iter().any(|t| essence.eq_ignore_ascii_case(t))
}

/// Whether a path (no query) ends in `.m3u8`, case ignored.
pub fn is_playlist_path(path: &[u8]) -> bool {
    path.len() >= 5 && path[path.len() - 5..].eq_ignore_ascii_case(b".m3u8")
}

/// A media playlist: its segments' URIs, as written, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaPlaylist<'a> {
    /// The URI line of each segment (gaps left out).
    pub segments: Vec<&'a [u8]>,
    /// The byte range of each segment (`#EXT-X-BYTERANGE`), in step with `segments`;
    /// `None`: the whole resource.
    pub ranges: Vec<Option<SubRange>>,
    /// Each `#EXT-X-MAP` (media initialization section): its URI, and its byte range
    /// when it has one.
    pub maps: Vec<(&'a [u8], Option<SubRange>)>,
    /// `#EXT-X-ENDLIST`: no segment will be added.
    pub ended: bool,
}

/// A byte range of a resource: `len` bytes from `offset` (never empty, never past
/// `u64::MAX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubRange {
    /// First byte.
    pub offset: u64,
    /// Length, at least 1.
    pub len: u64,
}

impl SubRange {
    /// One past the last byte.
    pub fn end(self) -> u64 {
        self.offset + self.len
    }
}

/// `n[@o]` (RFC 8216 §4.3.2.2): the length and the offset when given.
fn byterange(value: &[u8]) -> Option<(u64, Option<u64>)> {
    let num = |b: &[u8]| -> Option<u64> {
        if b.is_empty() || b.len() > 19 || !b.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(b).ok()?.parse().ok()
    };
    let value = value.trim_ascii();
    match value.iter().position(|&b| b == b'@') {
        Some(i) => Some((num(&value[..i])?, Some(num(&value[i + 1..])?))),
        None => Some((num(value)?, None)),
    }
}

/// A placed range, refused when empty or past `u64::MAX`.
fn sub_range(offset: u64, len: u64) -> Option<SubRange> {
    (len > 0 && offset.checked_add(len).is_some()).then_some(SubRange { offset, len })
}

/// The value of attribute `name` in a tag's attribute list (`URI="a",BYTERANGE="1@2"`):
/// quoted values without their quotes.
fn attribute<'a>(list: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let mut rest = list;
    while !rest.is_empty() {
        let eq = rest.iter().position(|&b| b == b'=')?;
        let key = rest[..eq].trim_ascii();
        let after = &rest[eq + 1..];
        let (value, next) = if let Some(q) = after.strip_prefix(b"\"") {
            let end = q.iter().position(|&b| b == b'"')?;
            let next = &q[end + 1..];
            (&q[..end], next.strip_prefix(b",").unwrap_or(next))
        } else {
            match after.iter().position(|&b| b == b',') {
                Some(c) => (&after[..c], &after[c + 1..]),
                None => (after, &after[after.len()..]),
            }
        };
        if key == name {
            return Some(value);
        }
        rest = next;
    }
    None
}

/// Parse a media playlist; `None` when `body` is not one this module handles (see the
/// module comment), or is larger than [`MAX_PLAYLIST_BYTES`].
pub fn parse_media(body: &[u8]) -> Option<MediaPlaylist<'_>> {
    if body.len() > MAX_PLAYLIST_BYTES {
        return None;
    }
    let mut lines = body
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    // RFC 8216 §4.3.1.1: the first line is #EXTM3U.
    if lines.next()?.trim_ascii_end() != b"#EXTM3U" {
        return None;
    }
    let mut out = MediaPlaylist {
        segments: Vec::new(),
        ranges: Vec::new(),
        maps: Vec::new(),
        ended: false,
    };
    let mut inf = false;
    let mut gap = false;
    // The next segment's `#EXT-X-BYTERANGE` (length, offset if given).
    let mut range: Option<(u64, Option<u64>)> = None;
    // The previous segment (gaps included): its URI and where its byte range ended,
    // for a byte range without an offset.
    let mut previous: Option<(&[u8], Option<u64>)> = None;
    for line in lines {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        if line.starts_with(b"#") {
            let tag = |name: &[u8]| {
                line.strip_prefix(name)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(b":"))
            };
            if tag(b"#EXT-X-STREAM-INF")
                || tag(b"#EXT-X-I-FRAME-STREAM-INF")
                || tag(b"#EXT-X-MEDIA")
            {
                return None;
            }
            if tag(b"#EXT-X-BYTERANGE") {
                range = Some(byterange(line.get(17..)?)?);
            } else if tag(b"#EXT-X-MAP") {
                let list = line.get(11..)?;
                let uri = attribute(list, b"URI").filter(|u| !u.is_empty())?;
                let map_range = match attribute(list, b"BYTERANGE") {
                    Some(v) => {
                        let (len, offset) = byterange(v)?;
                        Some(sub_range(offset.unwrap_or(0), len)?)
                    }
                    None => None,
                };
                out.maps.push((uri, map_range));
            } else if tag(b"#EXTINF") {
                inf = true;
            } else if tag(b"#EXT-X-GAP") {
                gap = true;
            } else if tag(b"#EXT-X-ENDLIST") {
                out.ended = true;
            }
            // Every other tag, and comments, change nothing here.
            continue;
        }
        // A URI line: a segment, which RFC 8216 §4.3.2.1 requires #EXTINF for.
        if !inf {
            return None;
        }
        let placed = match range.take() {
            None => None,
            Some((len, Some(offset))) => Some(sub_range(offset, len)?),
            // §4.3.2.2: no offset continues the previous segment's range, which must
            // be a range of the same resource.
            Some((len, None)) => match previous {
                Some((uri, Some(end))) if uri == line => Some(sub_range(end, len)?),
                _ => return None,
            },
        };
        previous = Some((line, placed.map(SubRange::end)));
        if !gap {
            out.segments.push(line);
            out.ranges.push(placed);
        }
        inf = false;
        gap = false;
    }
    Some(out)
}

/// The kind of rendition a master playlist lists: the renditions of one kind in one
/// master are the alternatives a player switches between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alternative {
    /// A variant stream (`#EXT-X-STREAM-INF`): the bit rates of the presentation.
    Variant,
    /// An `#EXT-X-MEDIA` rendition of this `TYPE` (`AUDIO`, `SUBTITLES`,
    /// `CLOSED-CAPTIONS`, `VIDEO`): one of a group of alternatives.
    Media(MediaType),
    /// An I-frame playlist (`#EXT-X-I-FRAME-STREAM-INF`, trick play).
    IFrames,
}

/// An `#EXT-X-MEDIA` `TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaType {
    /// `AUDIO`.
    Audio,
    /// `VIDEO`.
    Video,
    /// `SUBTITLES`.
    Subtitles,
    /// `CLOSED-CAPTIONS` (no URI: never listed).
    ClosedCaptions,
}

/// The renditions of a master playlist (RFC 8216 §4.3.4), each with the kind it is an
/// alternative of and its URI as written, in order; `None` when `body` is not a master
/// playlist (no `#EXT-X-STREAM-INF`), or is larger than [`MAX_PLAYLIST_BYTES`]. An
/// `#EXT-X-MEDIA` without a `URI` (its media is in the variant stream) or with an
/// unknown `TYPE` is left out, as is a variant tag with no URI line after it.
pub fn parse_master(body: &[u8]) -> Option<Vec<(Alternative, &[u8])>> {
    if body.len() > MAX_PLAYLIST_BYTES {
        return None;
    }
    let mut lines = body
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l).trim_ascii());
    if lines.next()? != b"#EXTM3U" {
        return None;
    }
    let mut out = Vec::new();
    let mut variant = false;
    let mut master = false;
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let tag = |name: &[u8]| line.strip_prefix(name).and_then(|r| r.strip_prefix(b":"));
        if tag(b"#EXT-X-STREAM-INF").is_some() {
            master = true;
            variant = true;
        } else if let Some(list) = tag(b"#EXT-X-I-FRAME-STREAM-INF") {
            if let Some(uri) = attribute(list, b"URI").filter(|u| !u.is_empty()) {
                out.push((Alternative::IFrames, uri));
            }
        } else if let Some(list) = tag(b"#EXT-X-MEDIA") {
            let kind = match attribute(list, b"TYPE") {
                Some(b"AUDIO") => MediaType::Audio,
                Some(b"VIDEO") => MediaType::Video,
                Some(b"SUBTITLES") => MediaType::Subtitles,
                Some(b"CLOSED-CAPTIONS") => MediaType::ClosedCaptions,
                _ => continue,
            };
            if let Some(uri) = attribute(list, b"URI").filter(|u| !u.is_empty()) {
                out.push((Alternative::Media(kind), uri));
            }
        } else if line.starts_with(b"#") {
            continue;
        } else if std::mem::take(&mut variant) {
            out.push((Alternative::Variant, line));
        }
    }
    master.then_some(out)
}

/// Resolve `reference` (a URI line) against `base`, the origin-form target
/// (`/path[?query]`) the playlist was requested with (RFC 3986 §5.2.2, dot segments
/// removed per §5.2.4). Returns the origin-form target it names on the same host, or
/// `None` for a reference with a scheme or an authority, with bytes outside visible
/// ASCII, with a backslash, or with a percent-encoded `.` or `/` in its path (which could
/// hide a dot segment from §5.2.4 and from the caller's prefix check; in the query, kept
/// as written, they are left alone). The fragment is
/// dropped; a result starting `//` is refused too. `..` above the root stays at the root, as §5.2.4 says; whether the result
/// is inside the part of the site the caller allows is the caller's check.
pub fn resolve(base: &[u8], reference: &[u8]) -> Option<Vec<u8>> {
    if !base.starts_with(b"/") {
        return None;
    }
    let reference = match reference.iter().position(|&b| b == b'#') {
        Some(i) => &reference[..i],
        None => reference,
    };
    if reference
        .iter()
        .any(|&b| !(0x21..=0x7e).contains(&b) || b == b'\\')
    {
        return None;
    }
    if reference.starts_with(b"//") {
        return None;
    }
    let (ref_path, ref_query) = split_query(reference);
    // Only the path has dot segments to hide: the query is kept byte for byte, so a
    // signed or tokenised URI (`seg1.ts?Signature=ab%2Fc%3D`, base64 percent-encoded)
    // is fetched exactly as the playlist names it, as the player will ask for it.
    let lower = ref_path.to_ascii_lowercase();
    if lower.windows(3).any(|w| w == b"%2e" || w == b"%2f") {
        return None;
    }
    // §4.2: a colon in the first segment means a scheme (a relative path would have to
    // be written `./a:b`).
    let first = ref_path.split(|&b| b == b'/').next().unwrap_or(b"");
    if first.contains(&b':') {
        return None;
    }
    let (base_path, base_query) = split_query(base);
    let (path, query) = if ref_path.is_empty() {
        // §5.2.2 takes the base path as it is; a base with dot segments (never one the
        // server parsed) is normalised too, so no result has any.
        (remove_dot_segments(base_path), ref_query.or(base_query))
    } else if ref_path.starts_with(b"/") {
        (remove_dot_segments(ref_path), ref_query)
    } else {
        // §5.2.3: the base path up to its last '/', then the reference.
        let dir = match base_path.iter().rposition(|&b| b == b'/') {
            Some(i) => &base_path[..=i],
            None => b"/",
        };
        (remove_dot_segments(&[dir, ref_path].concat()), ref_query)
    };
    // §5.2.4 keeps an empty segment, so `/.//g` becomes `//g`: read again as a
    // reference that would name a host.
    if path.starts_with(b"//") {
        return None;
    }
    let mut out = path;
    if let Some(q) = query {
        out.push(b'?');
        out.extend_from_slice(q);
    }
    Some(out)
}

fn split_query(target: &[u8]) -> (&[u8], Option<&[u8]>) {
    match target.iter().position(|&b| b == b'?') {
        Some(i) => (&target[..i], Some(&target[i + 1..])),
        None => (target, None),
    }
}

/// RFC 3986 §5.2.4 for an absolute path: `.` segments go, `..` removes the segment
/// before it (none above the root), and a path ending in either ends in `/`.
fn remove_dot_segments(path: &[u8]) -> Vec<u8> {
    let rest = path.strip_prefix(b"/").unwrap_or(path);
    let segments: Vec<&[u8]> = rest.split(|&b| b == b'/').collect();
    let mut out: Vec<&[u8]> = Vec::with_capacity(segments.len());
    let mut trailing_slash = false;
    for (i, s) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *s {
            b"." => trailing_slash |= last,
            b".." => {
                out.pop();
                trailing_slash |= last;
            }
            s => out.push(s),
        }
    }
    let mut r = Vec::with_capacity(path.len());
    for s in &out {
        r.push(b'/');
        r.extend_from_slice(s);
    }
    if trailing_slash || r.is_empty() {
        r.push(b'/');
    }
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;

    #[test]
    fn master_playlists_list_their_alternatives() {
        let body = b"#EXTM3U\r\n#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"en\",URI=\"audio/en.m3u8\"\n\
#EXT-X-MEDIA:TYPE=CLOSED-CAPTIONS,GROUP-ID=\"c\",NAME=\"en\",INSTREAM-ID=\"CC1\"\n\
#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"main\"\n\
#EXT-X-STREAM-INF:BANDWIDTH=1000,AUDIO=\"a\"\r\nlow/index.m3u8\r\n\
#EXT-X-I-FRAME-STREAM-INF:BANDWIDTH=100,URI=\"low/iframes.m3u8\"\n\
\n# a comment\n#EXT-X-STREAM-INF:BANDWIDTH=2000\nhigh/index.m3u8\n";
        let master = parse_master(body).unwrap();
        assert_eq!(
            master,
            vec![
                (Alternative::Media(MediaType::Audio), &b"audio/en.m3u8"[..]),
                (Alternative::Variant, b"low/index.m3u8"),
                (Alternative::IFrames, b"low/iframes.m3u8"),
                (Alternative::Variant, b"high/index.m3u8"),
            ]
        );
        assert!(
            parse_master(b"#EXTM3U\n#EXTINF:4,\ns.ts\n").is_none(),
            "a media playlist"
        );
        assert!(
            parse_master(b"#EXT-X-STREAM-INF:BANDWIDTH=1\na.m3u8\n").is_none(),
            "no #EXTM3U"
        );
    }
    use proptest::prelude::*;

    fn segs<'a>(p: &MediaPlaylist<'a>) -> Vec<&'a str> {
        p.segments
            .iter()
            .map(|s| std::str::from_utf8(s).unwrap_or("?"))
            .collect()
    }

    #[test]
    fn a_vod_playlist_lists_its_segments_in_order() {
        let body = b"#EXTM3U\r\n#EXT-X-VERSION:3\r\n#EXT-X-TARGETDURATION:4\r\n\
            #EXTINF:4.0,\r\nseg0.ts\r\n#EXTINF:4.0,\r\n\r\nseg1.ts?x=1\r\n\
            # a comment\r\n#EXT-X-DISCONTINUITY\r\n#EXTINF:3.2,\r\nsub/seg2.ts\r\n#EXT-X-ENDLIST\r\n";
        let p = parse_media(body).expect("a media playlist");
        assert_eq!(segs(&p), ["seg0.ts", "seg1.ts?x=1", "sub/seg2.ts"]);
        assert!(p.ended);
    }

    #[test]
    fn a_live_playlist_has_no_end_and_gaps_are_left_out() {
        let body = b"#EXTM3U\n#EXT-X-MEDIA-SEQUENCE:7\n#EXTINF:2,\na.ts\n#EXT-X-GAP\n#EXTINF:2,\nb.ts\n#EXTINF:2,\nc.ts\n";
        let p = parse_media(body).expect("a media playlist");
        assert_eq!(segs(&p), ["a.ts", "c.ts"]);
        assert!(!p.ended);
    }

    #[test]
    fn what_is_not_a_plain_media_playlist_gives_nothing() {
        // Master playlist.
        assert!(parse_media(b"#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\nlow.m3u8\n").is_none());
        assert!(parse_media(b"#EXTM3U\n#EXT-X-MEDIA:TYPE=AUDIO\n").is_none());
        // A byte range with no offset and no previous range to continue, or one of
        // another resource; bad numbers; an empty range; one past u64::MAX.
        for bad in [
            "#EXTINF:4,\n#EXT-X-BYTERANGE:100\nall.ts\n",
            "#EXTINF:4,\n#EXT-X-BYTERANGE:100@0\na.ts\n#EXTINF:4,\n#EXT-X-BYTERANGE:100\nb.ts\n",
            "#EXTINF:4,\na.ts\n#EXTINF:4,\n#EXT-X-BYTERANGE:100\na.ts\n",
            "#EXTINF:4,\n#EXT-X-BYTERANGE:1x@0\nall.ts\n",
            "#EXTINF:4,\n#EXT-X-BYTERANGE:-1@0\nall.ts\n",
            "#EXTINF:4,\n#EXT-X-BYTERANGE:\nall.ts\n",
            "#EXTINF:4,\n#EXT-X-BYTERANGE\nall.ts\n",
            "#EXTINF:4,\n#EXT-X-BYTERANGE:0@0\nall.ts\n",
            "#EXTINF:4,\n#EXT-X-BYTERANGE:2@18446744073709551615\nall.ts\n",
            "#EXT-X-MAP:BYTERANGE=\"1@0\"\n",
            "#EXT-X-MAP:URI=\"i.mp4\",BYTERANGE=\"x\"\n",
        ] {
            assert!(
                parse_media(format!("#EXTM3U\n{bad}").as_bytes()).is_none(),
                "{bad}"
            );
        }
        // No #EXTM3U first, or something else.
        assert!(parse_media(b"\n#EXTM3U\n#EXTINF:4,\na.ts\n").is_none());
        assert!(parse_media(b"<html>").is_none());
        assert!(parse_media(b"").is_none());
        // A URI without #EXTINF.
        assert!(parse_media(b"#EXTM3U\na.ts\n").is_none());
        // Too large.
        let mut big = b"#EXTM3U\n".to_vec();
        big.resize(MAX_PLAYLIST_BYTES + 1, b'\n');
        assert!(parse_media(&big).is_none());
        // A tag whose name only starts like a refused one is not refused.
        assert!(parse_media(b"#EXTM3U\n#EXT-X-MEDIA-SEQUENCE:1\n").is_some());
    }

    /// ffmpeg's `-hls_flags single_file` TS playlist (the bundled sample): every
    /// segment a range of one file, with its offset.
    #[test]
    fn byte_ranges_of_one_file() {
        let body = include_bytes!("../../../sample/hls-byterange/index.m3u8");
        let p = parse_media(body).expect("a media playlist");
        assert_eq!(segs(&p), ["media.ts"; 4]);
        let r = |offset, len| Some(SubRange { offset, len });
        assert_eq!(
            p.ranges,
            [
                r(0, 94376),
                r(94376, 95128),
                r(189504, 89112),
                r(278616, 92684)
            ]
        );
        assert!(p.maps.is_empty());
    }

    /// Single-file fMP4: the map's range, offsets left out continuing the previous
    /// segment's range (a gap's too), a plain segment between them.
    #[test]
    fn implied_offsets_and_maps() {
        let body = b"#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-MAP:URI=\"v.mp4\",BYTERANGE=\"720@0\"\n\
            #EXTINF:2,\n#EXT-X-BYTERANGE:1000@720\nv.mp4\n\
            #EXT-X-BYTERANGE:500\n#EXTINF:2,\nv.mp4\n\
            #EXTINF:2,\n#EXT-X-GAP\n#EXT-X-BYTERANGE:300\nv.mp4\n\
            #EXTINF:2,\n#EXT-X-BYTERANGE:200\nv.mp4\n\
            #EXTINF:2,\nother.ts\n\
            #EXT-X-MAP:URI=\"w.mp4\"\n#EXT-X-MAP:BYTERANGE=\"9\",URI=\"x.mp4\"\n#EXT-X-ENDLIST\n";
        let p = parse_media(body).expect("a media playlist");
        assert_eq!(segs(&p), ["v.mp4", "v.mp4", "v.mp4", "other.ts"]);
        let r = |offset, len| Some(SubRange { offset, len });
        assert_eq!(p.ranges, [r(720, 1000), r(1720, 500), r(2520, 200), None]);
        assert_eq!(
            p.maps,
            [
                (&b"v.mp4"[..], r(0, 720)),
                (&b"w.mp4"[..], None),
                (&b"x.mp4"[..], r(0, 9))
            ]
        );
        assert_eq!(SubRange { offset: 5, len: 2 }.end(), 7);
    }

    #[test]
    fn playlist_types_and_paths() {
        assert!(is_playlist_type(b"application/vnd.apple.mpegurl"));
        assert!(is_playlist_type(b"Application/X-MpegURL; charset=utf-8"));
        assert!(!is_playlist_type(b"video/mp2t"));
        assert!(is_playlist_path(b"/live/index.M3U8"));
        assert!(!is_playlist_path(b"/live/seg.ts"));
        assert!(!is_playlist_path(b"m3u8"));
    }

    /// RFC 3986 §5.4 (base `http://a/b/c/d;p?q`), the references without a scheme or
    /// authority, as origin-form targets.
    #[test]
    fn rfc3986_examples() {
        let base = b"/b/c/d;p?q";
        let cases: &[(&str, &str)] = &[
            ("g", "/b/c/g"),
            ("./g", "/b/c/g"),
            ("g/", "/b/c/g/"),
            ("/g", "/g"),
            ("?y", "/b/c/d;p?y"),
            ("g?y", "/b/c/g?y"),
            ("#s", "/b/c/d;p?q"),
            ("g#s", "/b/c/g"),
            ("g?y#s", "/b/c/g?y"),
            (";x", "/b/c/;x"),
            ("g;x", "/b/c/g;x"),
            ("g;x?y#s", "/b/c/g;x?y"),
            ("", "/b/c/d;p?q"),
            (".", "/b/c/"),
            ("./", "/b/c/"),
            ("..", "/b/"),
            ("../", "/b/"),
            ("../g", "/b/g"),
            ("../..", "/"),
            ("../../", "/"),
            ("../../g", "/g"),
            ("../../../g", "/g"),
            ("../../../../g", "/g"),
            ("/./g", "/g"),
            ("/../g", "/g"),
            ("g.", "/b/c/g."),
            (".g", "/b/c/.g"),
            ("g..", "/b/c/g.."),
            ("..g", "/b/c/..g"),
            ("./../g", "/b/g"),
            ("./g/.", "/b/c/g/"),
            ("g/./h", "/b/c/g/h"),
            ("g/../h", "/b/c/h"),
            ("g;x=1/./y", "/b/c/g;x=1/y"),
            ("g;x=1/../y", "/b/c/y"),
            ("g?y/./x", "/b/c/g?y/./x"),
            ("g?y/../x", "/b/c/g?y/../x"),
            ("g#s/./x", "/b/c/g"),
            ("g#s/../x", "/b/c/g"),
        ];
        for (r, want) in cases {
            let got = resolve(base, r.as_bytes()).map(|v| String::from_utf8(v).unwrap());
            assert_eq!(got.as_deref(), Some(*want), "reference {r:?}");
        }
    }

    #[test]
    fn other_hosts_and_disguised_dots_resolve_to_nothing() {
        let base = b"/v/index.m3u8";
        for r in [
            "g:h",
            "http://a/g",
            "https://other.example/seg.ts",
            "//other.example/seg.ts",
            "http:g",
            "%2e%2e/secret",
            "a/%2E%2E/b",
            "a%2fb",
            "a\\..\\b",
            "seg 1.ts",
            "s\u{e9}g.ts",
        ] {
            assert_eq!(resolve(base, r.as_bytes()), None, "reference {r:?}");
        }
        // A colon after the first segment is no scheme.
        assert_eq!(
            resolve(base, b"./a:b/c.ts").as_deref(),
            Some(&b"/v/a:b/c.ts"[..])
        );
        assert_eq!(resolve(b"relative", b"g"), None);
    }

    /// Signed and tokenised segment URIs: the query comes through byte for byte, its
    /// percent-encoded `/`, `+`, `=` and `.` included (base64 signatures, CDN tokens);
    /// only the path is checked for disguised dots.
    #[test]
    fn a_signed_uri_keeps_its_query_exactly() {
        let base = b"/v/index.m3u8?session=s1";
        for r in [
            "seg1.ts?token=abc",
            "seg1.ts?Expires=1700000000&Signature=ab%2Bc%2Fd%3D%3D&Key-Pair-Id=K2",
            "seg1.ts?hdnts=exp=1700000000~acl=%2Fv%2F*~hmac=0f3e",
            "seg1.ts?p=%2e%2e%2Fx",
        ] {
            let want = format!("/v/{r}");
            assert_eq!(
                resolve(base, r.as_bytes()).as_deref(),
                Some(want.as_bytes()),
                "{r}"
            );
        }
        assert_eq!(resolve(base, b"%2e%2e/x.ts?t=1"), None, "the path still is");
        assert_eq!(resolve(base, b"a%2Fb.ts?t=%2F"), None);
    }

    proptest! {
        /// Whatever the reference, a resolved target is an absolute path with no dot
        /// segment left in its path, and resolving it again (it is an absolute-path
        /// reference) gives itself.
        #[test]
        fn resolved_paths_have_no_dot_segments(
            base_dir in proptest::collection::vec("[a-z.]{1,3}", 0..4),
            reference in "[a-z./?;%2eE]{0,16}",
        ) {
            let base: String = base_dir.iter().map(|d| format!("/{d}")).collect::<String>() + "/index.m3u8";
            if let Some(t) = resolve(base.as_bytes(), reference.as_bytes()) {
                prop_assert!(t.starts_with(b"/"));
                let (path, _) = split_query(&t);
                for seg in path.split(|&b| b == b'/') {
                    prop_assert!(seg != b"." && seg != b"..", "{:?}", String::from_utf8_lossy(&t));
                }
                prop_assert_eq!(resolve(b"/x/y", &t), Some(t.clone()));
            }
        }

        /// A reference of plain names (no dots, slashes first or query) lands in the
        /// playlist's directory.
        #[test]
        fn plain_names_stay_in_the_playlist_directory(
            dir in "(/[a-z0-9]{1,4}){0,3}",
            name in "[a-z0-9_-]{1,8}(/[a-z0-9_-]{1,8}){0,2}",
        ) {
            let base = format!("{dir}/index.m3u8");
            let got = resolve(base.as_bytes(), name.as_bytes());
            prop_assert_eq!(got, Some(format!("{dir}/{name}").into_bytes()));
        }

        /// The parser never panics, and what it returns is lines of the body.
        #[test]
        fn parse_never_panics(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut with_header = b"#EXTM3U\n".to_vec();
            with_header.extend_from_slice(&body);
            for b in [&body, &with_header] {
                if let Some(p) = parse_media(b) {
                    prop_assert_eq!(p.segments.len(), p.ranges.len());
                    for r in p.ranges.iter().flatten() {
                        prop_assert!(r.len > 0 && r.offset.checked_add(r.len).is_some());
                    }
                    for s in p.segments {
                        prop_assert!(!s.is_empty() && !s.starts_with(b"#"));
                    }
                }
            }
        }
    }
}
