//! Media types by file extension, for what a video edge serves (RFC 8216 HLS, ISO
//! 23009-1 DASH, ISO BMFF/MP4, MPEG-TS, WebVTT, ...).
//!
//! A fixed table, no configuration and no content sniffing: the bytes a player gets are
//! labelled by the name the packager gave them. Types follow the IANA registry where one
//! exists and what players expect where it does not (`audio/mpegurl` for `.m3u`,
//! `application/x-subrip` for `.srt`). No `charset` parameters are added: nginx's default
//! `mime.types` adds none either, and HLS/DASH/WebVTT are UTF-8 by definition. Not here:
//! per-extension cache policy (the server looks that up with [`extension`]).

/// Used when the extension is unknown.
pub const DEFAULT_TYPE: &str = "application/octet-stream";

/// Longest extension in the table, in bytes; longer ones are unknown without a lookup.
const MAX_EXTENSION: usize = 8;

/// The essence of a `Content-Type` value (RFC 9110 §8.3.1: type/subtype, without
/// parameters or surrounding whitespace); compare it case-insensitively.
pub fn essence(content_type: &[u8]) -> &[u8] {
    content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or(b"")
        .trim_ascii()
}

/// The `Content-Type` for a path (case-insensitive extension match on the last segment).
///
/// `seg.M3U8` and `seg.m3u8` get the same type. A name without a dot, a name ending in a
/// dot and a dot-file such as `.m3u8` (whose leading dot starts a name, not an extension)
/// get [`DEFAULT_TYPE`]. `init.mp4` is just `.mp4`: only the last extension counts.
pub fn content_type(path: &[u8]) -> &'static str {
    let Some(ext) = extension(path) else {
        return DEFAULT_TYPE;
    };
    if ext.len() > MAX_EXTENSION {
        return DEFAULT_TYPE;
    }
    let mut lower = [0u8; MAX_EXTENSION];
    let lower = &mut lower[..ext.len()];
    lower.copy_from_slice(ext);
    lower.make_ascii_lowercase();
    by_lowercase_extension(lower).unwrap_or(DEFAULT_TYPE)
}

/// The extension of the last segment, if any (no dot), for configuration lookups such as
/// per-extension `Cache-Control`.
///
/// The slice borrows from `path`, so it is returned as written, **not** lower-cased:
/// compare it with `eq_ignore_ascii_case` (or lower-case a copy) to match `TS` with `ts`.
/// `None` when the last segment has no dot, ends with a dot, or is a dot-file with no
/// other dot (`.hidden`); `a.b.c` gives `c`, `.hidden.ts` gives `ts`.
pub fn extension(path: &[u8]) -> Option<&[u8]> {
    let name = match path.iter().rposition(|&b| b == b'/') {
        Some(slash) => &path[slash + 1..],
        None => path,
    };
    let dot = name.iter().rposition(|&b| b == b'.')?;
    if dot == 0 || dot + 1 == name.len() {
        return None;
    }
    Some(&name[dot + 1..])
}

/// The table. Keys are lower-case.
fn by_lowercase_extension(ext: &[u8]) -> Option<&'static str> {
    Some(match ext {
        // Streaming manifests and playlists.
        b"m3u8" => "application/vnd.apple.mpegurl", // RFC 8216 §4
        b"m3u" => "audio/mpegurl",
        b"mpd" => "application/dash+xml", // ISO 23009-1 Annex C
        b"f4m" => "application/f4m+xml",
        b"ism" | b"isml" => "application/vnd.ms-sstr+xml",
        // Segments and progressive media.
        b"ts" | b"m2ts" | b"mts" => "video/mp2t",
        b"m4s" => "video/iso.segment", // IANA, for ISO BMFF media segments
        b"mp4" | b"m4v" | b"cmfv" => "video/mp4",
        b"m4a" | b"cmfa" => "audio/mp4",
        b"cmft" => "application/mp4", // CMAF text track (CTA-5000)
        b"mp4a" => "audio/mp4",
        b"aac" => "audio/aac",
        b"ac3" => "audio/ac3",
        b"ec3" => "audio/eac3",
        b"mp3" => "audio/mpeg",
        b"flac" => "audio/flac",
        b"opus" | b"ogg" | b"oga" => "audio/ogg",
        b"ogv" => "video/ogg",
        b"wav" => "audio/wav",
        b"webm" => "video/webm",
        b"weba" => "audio/webm",
        b"mkv" => "video/x-matroska",
        b"mka" => "audio/x-matroska",
        b"mov" => "video/quicktime",
        b"mpg" | b"mpeg" => "video/mpeg",
        b"3gp" => "video/3gpp",
        b"avi" => "video/x-msvideo",
        b"flv" => "video/x-flv",
        // Subtitles and captions.
        b"vtt" | b"webvtt" => "text/vtt",
        b"srt" => "application/x-subrip",
        b"ttml" | b"dfxp" => "application/ttml+xml",
        // Keys (AES-128 for HLS): opaque bytes.
        b"key" | b"bin" => DEFAULT_TYPE,
        // Player pages and their assets.
        b"json" => "application/json",
        b"xml" => "application/xml",
        b"html" | b"htm" => "text/html",
        b"txt" => "text/plain",
        b"css" => "text/css",
        b"js" | b"mjs" => "text/javascript", // RFC 9239
        b"wasm" => "application/wasm",
        b"map" => "application/json",
        b"pdf" => "application/pdf",
        b"woff" => "font/woff",
        b"woff2" => "font/woff2",
        // Thumbnails, posters, trick-play sprites.
        b"png" => "image/png",
        b"jpg" | b"jpeg" => "image/jpeg",
        b"gif" => "image/gif",
        b"webp" => "image/webp",
        b"avif" => "image/avif",
        b"ico" => "image/x-icon",
        b"svg" => "image/svg+xml",
        _ => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;

    #[test]
    fn video_types() {
        let cases: &[(&[u8], &str)] = &[
            (b"live/index.m3u8", "application/vnd.apple.mpegurl"),
            (b"a.m3u", "audio/mpegurl"),
            (b"vod/manifest.mpd", "application/dash+xml"),
            (b"seg-00001.ts", "video/mp2t"),
            (b"v/seg1.m4s", "video/iso.segment"),
            (b"v/init.mp4", "video/mp4"),
            (b"movie.m4v", "video/mp4"),
            (b"a/audio.m4a", "audio/mp4"),
            (b"a.aac", "audio/aac"),
            (b"a.mp3", "audio/mpeg"),
            (b"subs/en.vtt", "text/vtt"),
            (b"subs/en.webvtt", "text/vtt"),
            (b"subs/en.srt", "application/x-subrip"),
            (b"subs/en.ttml", "application/ttml+xml"),
            (b"c.cmfv", "video/mp4"),
            (b"c.cmfa", "audio/mp4"),
            (b"c.cmft", "application/mp4"),
            (b"a.webm", "video/webm"),
            (b"a.mkv", "video/x-matroska"),
            (b"a.mov", "video/quicktime"),
            (b"keys/k1.key", "application/octet-stream"),
            (b"a.json", "application/json"),
            (b"a.xml", "application/xml"),
            (b"index.html", "text/html"),
            (b"robots.txt", "text/plain"),
            (b"a.css", "text/css"),
            (b"a.js", "text/javascript"),
            (b"a.png", "image/png"),
            (b"a.jpg", "image/jpeg"),
            (b"a.jpeg", "image/jpeg"),
            (b"a.webp", "image/webp"),
            (b"favicon.ico", "image/x-icon"),
            (b"a.svg", "image/svg+xml"),
            (b"a.wasm", "application/wasm"),
        ];
        for (path, ty) in cases {
            assert_eq!(
                content_type(path),
                *ty,
                "{:?}",
                String::from_utf8_lossy(path)
            );
        }
    }

    #[test]
    fn case_insensitive() {
        assert_eq!(
            content_type(b"LIVE/INDEX.M3U8"),
            "application/vnd.apple.mpegurl"
        );
        assert_eq!(content_type(b"seg.Ts"), "video/mp2t");
        assert_eq!(content_type(b"subs.WebVTT"), "text/vtt");
    }

    #[test]
    fn unknown_and_edge_names() {
        for path in [
            &b""[..],
            b"README",
            b"dir.ts/file",
            b"a.",
            b".m3u8",
            b"dir/.ts",
            b"a.unknownext",
            b"a.mp4x",
            b"a.toolongextension",
            b"a.\xff\xfe",
        ] {
            assert_eq!(
                content_type(path),
                DEFAULT_TYPE,
                "{:?}",
                String::from_utf8_lossy(path)
            );
        }
        assert_eq!(content_type(b".hidden.ts"), "video/mp2t");
    }

    #[test]
    fn extensions() {
        assert_eq!(extension(b"a/b/c.TS"), Some(&b"TS"[..]));
        assert_eq!(extension(b"a.b.c"), Some(&b"c"[..]));
        assert_eq!(extension(b"seg.m4s"), Some(&b"m4s"[..]));
        assert_eq!(extension(b"x.d/file"), None);
        assert_eq!(extension(b"file."), None);
        assert_eq!(extension(b".hidden"), None);
        assert_eq!(extension(b"dir/"), None);
        assert_eq!(extension(b""), None);
        assert_eq!(extension(b"/.hidden.vtt"), Some(&b"vtt"[..]));
    }
}
