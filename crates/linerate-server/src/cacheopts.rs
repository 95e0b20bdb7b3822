//! Options of cache mode: the store, the origins and the routes that map requests to
//! them. Built by the binary from `[cache]`, `[[origin]]` and `[[route]]` (or from the
//! `--origin URL --cache-dir DIR` quick start); see docs/config.md.

use std::path::PathBuf;
use std::time::Duration;

/// Default connect timeout to an origin server. A LAN or same-region origin connects in
/// well under 100 ms; 3 s leaves room for a SYN retransmit (1 s) and then gives up.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Default wait from sending a request to the response head's first byte. Origins that
/// package or transcode on the fly can take seconds for the first segment.
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default longest pause between two reads of a response body (the slow-drip bound).
pub const DEFAULT_ORIGIN_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default longest time one fill (one object, or one slice) may take from request to
/// last byte: the bound on an origin that drips just fast enough to beat the idle
/// timeout. A 4 MiB slice in 5 minutes is 14 KB/s, far below any working origin.
pub const DEFAULT_FILL_TIMEOUT: Duration = Duration::from_secs(300);
/// Default connections one worker holds open to one origin (busy plus idle).
pub const DEFAULT_ORIGIN_MAX_CONNECTIONS: usize = 64;
/// Default consecutive failures after which an origin server is marked down.
pub const DEFAULT_DOWN_AFTER: u32 = 3;
/// Default time an origin server stays marked down before it is tried again.
pub const DEFAULT_DOWN_FOR: Duration = Duration::from_secs(10);
/// Prefetch fills in flight per origin, at most (all workers together).
pub const DEFAULT_PREFETCH_IN_FLIGHT: u32 = 4;
/// Most segments a route may prefetch ahead: more is a playlist's worth of bandwidth
/// spent on a guess.
pub const MAX_PREFETCH_SEGMENTS: u32 = 16;
/// Default slice size for large objects (nginx's slice module is usually run at 1 MiB;
/// 4 MiB keeps a typical 2-6 s HLS/DASH segment in one slice and one origin request).
pub const DEFAULT_SLICE_BYTES: u64 = 4 * 1024 * 1024;
/// The video profile's freshness for a response without freshness information whose
/// extension is not in its table.
pub const VIDEO_DEFAULT_TTL: Duration = Duration::from_secs(60);

/// The targeted cache-control fields obeyed by default (RFC 9213 §3: `CDN-Cache-Control`
/// is "targeted at all CDN caches", which an edge cache is).
pub const DEFAULT_TARGETED_FIELDS: [&str; 1] = ["CDN-Cache-Control"];
/// Default request body forwarded to the origin for unsafe methods (buffered).
pub const DEFAULT_MAX_FORWARDED_BODY: u64 = 1024 * 1024;

/// Cache mode as a whole.
#[derive(Debug, Clone)]
pub struct CacheOptions {
    /// The store (cache directories, sizes, durability).
    pub store: linerate_cache::StoreConfig,
    /// Origin groups, by name.
    pub origins: Vec<OriginOptions>,
    /// Routes, tried in order; the first whose host and path prefix match wins.
    pub routes: Vec<RouteOptions>,
    /// Honour the client's `Cache-Control` (`no-cache`, `max-age`, `only-if-cached`...).
    /// Default true. Off: clients cannot force origin fetches (a CDN's usual choice when
    /// players send `no-cache`).
    pub honour_request_cache_control: bool,
    /// Share of `now - Last-Modified` used as heuristic freshness (RFC 9111 §4.2.2);
    /// nginx and Varnish use none, Squid and ATS 10 %. Default 0.1.
    pub heuristic_fraction: f64,
    /// Longest heuristic freshness (Squid's default cap is a day). Default 1 day.
    pub heuristic_max: Duration,
    /// Largest request body forwarded (buffered) for unsafe methods; larger get 413.
    pub max_forwarded_body: u64,
    /// Prefetch fills (HLS segments fetched ahead of the clients) in flight per origin,
    /// all workers together; a prefetch that would exceed it is skipped, never queued.
    /// Client fills are never counted nor held back. Default 4.
    pub prefetch_in_flight: u32,
    /// Name in `Via` and `Cache-Status` (RFC 9211 §2). Default `linerate`.
    pub cache_name: String,
    /// Targeted cache-control fields this cache obeys, in order (RFC 9213 §2.2): the
    /// first one present with a valid value replaces `Cache-Control` and `Expires` for
    /// this cache's decisions. Default `["CDN-Cache-Control"]`; empty: none.
    pub targeted_fields: Vec<String>,
}

/// One origin group: one or more servers that hold the same content.
#[derive(Debug, Clone)]
pub struct OriginOptions {
    /// Name routes refer to.
    pub name: String,
    /// Servers, tried in turn (round robin, skipping those marked down).
    pub servers: Vec<OriginServer>,
    /// `Host` sent to the origin; `None` sends the server's own authority.
    pub host_header: Option<String>,
    /// TCP (and TLS) connect timeout.
    pub connect_timeout: Duration,
    /// From request sent to the first byte of the response head.
    pub first_byte_timeout: Duration,
    /// Longest wait between two reads of a response (head or body) once it has begun.
    pub idle_timeout: Duration,
    /// Longest a fill may take in all, request to last byte (the slow-drip bound).
    pub fill_timeout: Duration,
    /// Connections one worker holds to one server (busy plus idle in the pool).
    pub max_connections: usize,
    /// PEM CA bundle that https servers' certificates must chain to; `None`: the
    /// system's roots (webpki-roots are not bundled).
    pub ca_file: Option<PathBuf>,
    /// Consecutive failures that mark a server down.
    pub down_after: u32,
    /// How long a down server is skipped.
    pub down_for: Duration,
}

/// One origin server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginServer {
    /// https (TLS with certificate verification) or http.
    pub tls: bool,
    /// Host name or IP literal (no brackets), used for the connection, for SNI and for
    /// certificate verification.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Path prefix prepended to the request path (`""` or `/base`, no trailing slash).
    pub base_path: String,
}

impl OriginServer {
    /// Parse `http://host[:port][/base]` or `https://...`.
    pub fn parse(url: &str) -> Result<OriginServer, String> {
        let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else {
            return Err(format!(
                "{url}: origin URL must start with http:// or https://"
            ));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(format!("{url}: origin URL needs a host (and no user info)"));
        }
        if path.contains(['?', '#']) {
            return Err(format!("{url}: origin URL cannot have a query or fragment"));
        }
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("{url}: unclosed [ in host"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| format!("{url}: bad port"))?,
                None if after.is_empty() => default_port,
                None => return Err(format!("{url}: bad host")),
            };
            (h.to_owned(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_owned(),
                    p.parse().map_err(|_| format!("{url}: bad port"))?,
                ),
                None => (authority.to_owned(), default_port),
            }
        };
        if host.is_empty() || port == 0 {
            return Err(format!("{url}: bad host or port"));
        }
        Ok(OriginServer {
            tls,
            host,
            port,
            base_path: path.trim_end_matches('/').to_owned(),
        })
    }

    /// `host:port` as sent in `Host` (default ports omitted, IPv6 bracketed).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match (self.tls, self.port) {
            (false, 80) | (true, 443) => host,
            (_, p) => format!("{host}:{p}"),
        }
    }
}

impl OriginOptions {
    /// An origin with every default, for these servers.
    pub fn new(name: &str, servers: Vec<OriginServer>) -> OriginOptions {
        OriginOptions {
            name: name.to_owned(),
            servers,
            host_header: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: DEFAULT_ORIGIN_IDLE_TIMEOUT,
            fill_timeout: DEFAULT_FILL_TIMEOUT,
            max_connections: DEFAULT_ORIGIN_MAX_CONNECTIONS,
            ca_file: None,
            down_after: DEFAULT_DOWN_AFTER,
            down_for: DEFAULT_DOWN_FOR,
        }
    }
}

/// What of the query string goes into the cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryKey {
    /// The whole query, as sent (default: `?v=2` is another object).
    Include,
    /// None of it (tokens and session ids in segment URLs then share one object). The
    /// query is still forwarded to the origin.
    Ignore,
}

/// How a route treats responses that carry no freshness information.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// A standards-following shared cache (the default): only RFC 9111's heuristic
    /// freshness (a share of the time since `Last-Modified`), nothing without it.
    Standard,
    /// Video delivery: live manifests 2 s, segments and media files a day, anything else
    /// 60 s ([`video_ttl_by_extension`], [`VIDEO_DEFAULT_TTL`]), in place of the
    /// heuristic. Responses that carry freshness keep it.
    Video,
}

impl Profile {
    /// The name in the configuration file.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Standard => "standard",
            Profile::Video => "video",
        }
    }
}

/// One route: requests whose host and path prefix match go to `origin`.
#[derive(Debug, Clone)]
pub struct RouteOptions {
    /// Host to match (case-insensitive, port ignored); `*.example.com` matches
    /// subdomains; `None` matches any host.
    pub host: Option<String>,
    /// Path prefix to match (`/` matches everything).
    pub path_prefix: String,
    /// Name of the origin.
    pub origin: String,
    /// The profile the two fields below came from.
    pub profile: Profile,
    /// Freshness of a response that carries none (no max-age, s-maxage or Expires), in
    /// place of the heuristic; `None`: RFC 9111's heuristic only.
    pub default_ttl: Option<Duration>,
    /// The same, per lower-case extension (`m3u8` → 2 s, `m4s` → 1 day); wins over
    /// `default_ttl`.
    pub ttl_by_extension: Vec<(String, Duration)>,
    /// Query string in the key.
    pub query: QueryKey,
    /// Objects larger than this (or of unknown size) are fetched and stored in slices
    /// of this many bytes with Range requests; 0 turns slicing off.
    pub slice_bytes: u64,
    /// Serve stale while revalidating in the background, for this long past expiry, when
    /// the response does not say (`stale-while-revalidate` wins). Default 0.
    pub stale_while_revalidate: Duration,
    /// Serve stale when the origin fails, for this long past expiry, when the response
    /// does not say (`stale-if-error` wins). Default 0.
    pub stale_if_error: Duration,
    /// HLS segment prefetch: when a client is served a segment of a media playlist
    /// cache mode has read, fetch the next this many segments in the background; 0
    /// (the default) turns it off, and playlists on the route are not read either.
    pub prefetch_segments: u32,
}

impl RouteOptions {
    /// A catch-all route to `origin` with every default (the standard profile).
    pub fn new(origin: &str) -> RouteOptions {
        RouteOptions {
            host: None,
            path_prefix: "/".to_owned(),
            origin: origin.to_owned(),
            profile: Profile::Standard,
            default_ttl: None,
            ttl_by_extension: Vec::new(),
            query: QueryKey::Include,
            slice_bytes: DEFAULT_SLICE_BYTES,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            prefetch_segments: 0,
        }
    }
}

/// The video profile's TTLs for responses without freshness information: live manifests
/// change every target duration, segments never change once published. The extensions
/// are [`crate::media::MEDIA_EXTENSIONS`], the table appliance mode's `Cache-Control`
/// defaults come from too.
pub fn video_ttl_by_extension() -> Vec<(String, Duration)> {
    use crate::media::{MediaKind, MEDIA_EXTENSIONS};
    MEDIA_EXTENSIONS
        .iter()
        .map(|(e, kind)| {
            let ttl = match kind {
                MediaKind::Manifest => Duration::from_secs(2),
                MediaKind::Segment => Duration::from_secs(86_400),
            };
            ((*e).to_owned(), ttl)
        })
        .collect()
}

impl CacheOptions {
    /// Cache mode with every default over `store`, with these origins and routes.
    pub fn new(
        store: linerate_cache::StoreConfig,
        origins: Vec<OriginOptions>,
        routes: Vec<RouteOptions>,
    ) -> CacheOptions {
        CacheOptions {
            store,
            origins,
            routes,
            honour_request_cache_control: true,
            heuristic_fraction: 0.1,
            heuristic_max: Duration::from_secs(86_400),
            max_forwarded_body: DEFAULT_MAX_FORWARDED_BODY,
            prefetch_in_flight: DEFAULT_PREFETCH_IN_FLIGHT,
            cache_name: "linerate".to_owned(),
            targeted_fields: DEFAULT_TARGETED_FIELDS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_urls() {
        let s = OriginServer::parse("http://127.0.0.1:8081/base/").expect("valid");
        assert_eq!((s.tls, s.host.as_str(), s.port), (false, "127.0.0.1", 8081));
        assert_eq!(s.base_path, "/base");
        assert_eq!(s.authority(), "127.0.0.1:8081");
        let s = OriginServer::parse("https://origin.example").expect("valid");
        assert_eq!((s.tls, s.port, s.base_path.as_str()), (true, 443, ""));
        assert_eq!(s.authority(), "origin.example");
        let s = OriginServer::parse("http://[::1]:9000").expect("valid");
        assert_eq!((s.host.as_str(), s.port), ("::1", 9000));
        assert_eq!(s.authority(), "[::1]:9000");
        for bad in [
            "ftp://x",
            "http://",
            "http://h:0",
            "http://h:x",
            "http://u@h",
            "http://h/?q",
        ] {
            assert!(OriginServer::parse(bad).is_err(), "{bad}");
        }
    }
}
