//! The one table of media file extensions and what each names (a manifest or a
//! segment): appliance mode's `Cache-Control` defaults
//! ([`crate::options::default_cache_control`]) and the video profile's freshness
//! ([`crate::cacheopts::video_ttl_by_extension`]) both come from it, so the two cannot
//! drift (they did: `webm` was in one only). Not here: media types, which
//! `linerate_http::mime` owns.

/// What a media file extension names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    /// A manifest (HLS playlist, DASH MPD): live ones change every segment duration.
    Manifest,
    /// A segment or media file: never changes once published.
    Segment,
}

/// Media file extensions (lower case, no dot) and what they are.
pub const MEDIA_EXTENSIONS: [(&str, MediaKind); 12] = [
    ("m3u8", MediaKind::Manifest),
    ("mpd", MediaKind::Manifest),
    ("ts", MediaKind::Segment),
    ("m4s", MediaKind::Segment),
    ("mp4", MediaKind::Segment),
    ("m4a", MediaKind::Segment),
    ("m4v", MediaKind::Segment),
    ("aac", MediaKind::Segment),
    ("cmfv", MediaKind::Segment),
    ("cmfa", MediaKind::Segment),
    ("vtt", MediaKind::Segment),
    ("webm", MediaKind::Segment),
];
