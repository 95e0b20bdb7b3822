//! Options of cache mode: the store, the origins and the routes that map requests to
//! them. Origins and routes read and print themselves in the file's shape (`[[origin]]`,
//! `[[route]]`, serde): each key is checked as it is read and unknown keys are errors,
//! which the binary's parser places at their line. The binary builds `[cache]`, checks
//! what spans sections (a route's origin defined, names unique) and runs the
//! `--origin URL --cache-dir DIR` quick start; see docs/config.md.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::optserde;

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

/// Most slices `slice_readahead` may fetch ahead of a client.
pub const MAX_SLICE_READAHEAD: u32 = 8;
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
    /// The response field whose space-separated keys tag a stored object, for
    /// `POST /purge?tag=` (the Fastly and Varnish xkey convention). Default
    /// `Surrogate-Key`.
    pub tag_header: String,
}

/// One origin group (`[[origin]]`): one or more servers that hold the same content.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginOptions {
    /// Name routes refer to: 1-64 letters, digits, `-`, `_`. Required.
    #[serde(deserialize_with = "optserde::name")]
    pub name: String,
    /// Servers, tried in turn (round robin, skipping those marked down); at least one.
    /// Required.
    #[serde(with = "server_urls")]
    pub servers: Vec<OriginServer>,
    /// `Host` sent to the origin; `None` (the default) sends the server's own authority.
    #[serde(
        default,
        deserialize_with = "host_header",
        skip_serializing_if = "Option::is_none"
    )]
    pub host_header: Option<String>,
    /// TCP (and TLS) connect timeout (`connect_timeout_ms`, 1 to 600000). Default
    /// [`DEFAULT_CONNECT_TIMEOUT`].
    #[serde(
        rename = "connect_timeout_ms",
        default = "origin_default::connect_timeout",
        deserialize_with = "optserde::timeout_ms",
        serialize_with = "optserde::ms::serialize"
    )]
    pub connect_timeout: Duration,
    /// From request sent to the first byte of the response head
    /// (`first_byte_timeout_ms`). Default [`DEFAULT_FIRST_BYTE_TIMEOUT`].
    #[serde(
        rename = "first_byte_timeout_ms",
        default = "origin_default::first_byte_timeout",
        deserialize_with = "optserde::timeout_ms",
        serialize_with = "optserde::ms::serialize"
    )]
    pub first_byte_timeout: Duration,
    /// Longest wait between two reads of a response (head or body) once it has begun
    /// (`idle_timeout_ms`). Default [`DEFAULT_ORIGIN_IDLE_TIMEOUT`].
    #[serde(
        rename = "idle_timeout_ms",
        default = "origin_default::idle_timeout",
        deserialize_with = "optserde::timeout_ms",
        serialize_with = "optserde::ms::serialize"
    )]
    pub idle_timeout: Duration,
    /// Longest a fill may take in all, request to last byte (the slow-drip bound;
    /// `fill_timeout_ms`). Default [`DEFAULT_FILL_TIMEOUT`].
    #[serde(
        rename = "fill_timeout_ms",
        default = "origin_default::fill_timeout",
        deserialize_with = "optserde::timeout_ms",
        serialize_with = "optserde::ms::serialize"
    )]
    pub fill_timeout: Duration,
    /// Connections one worker holds to one server (busy plus idle in the pool).
    /// Default [`DEFAULT_ORIGIN_MAX_CONNECTIONS`].
    #[serde(
        default = "origin_default::max_connections",
        deserialize_with = "optserde::positive"
    )]
    pub max_connections: usize,
    /// PEM CA bundle that https servers' certificates must chain to; `None` (the
    /// default): the system's roots (webpki-roots are not bundled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// Consecutive failures that mark a server down. Default [`DEFAULT_DOWN_AFTER`].
    #[serde(
        default = "origin_default::down_after",
        deserialize_with = "optserde::positive"
    )]
    pub down_after: u32,
    /// How long a down server is skipped (`down_for_ms`, 1 to 3600000). Default
    /// [`DEFAULT_DOWN_FOR`].
    #[serde(
        rename = "down_for_ms",
        default = "origin_default::down_for",
        deserialize_with = "optserde::down_for_ms",
        serialize_with = "optserde::ms::serialize"
    )]
    pub down_for: Duration,
}

/// The defaults of `[[origin]]`'s optional keys (serde needs a function for each; each
/// is the documented constant).
mod origin_default {
    use super::*;

    pub(super) fn connect_timeout() -> Duration {
        DEFAULT_CONNECT_TIMEOUT
    }
    pub(super) fn first_byte_timeout() -> Duration {
        DEFAULT_FIRST_BYTE_TIMEOUT
    }
    pub(super) fn idle_timeout() -> Duration {
        DEFAULT_ORIGIN_IDLE_TIMEOUT
    }
    pub(super) fn fill_timeout() -> Duration {
        DEFAULT_FILL_TIMEOUT
    }
    pub(super) fn max_connections() -> usize {
        DEFAULT_ORIGIN_MAX_CONNECTIONS
    }
    pub(super) fn down_after() -> u32 {
        DEFAULT_DOWN_AFTER
    }
    pub(super) fn down_for() -> Duration {
        DEFAULT_DOWN_FOR
    }
}

/// `servers`: URLs, at least one, each parsed as it is read; printed back as URLs.
mod server_urls {
    use super::*;

    pub(super) fn serialize<S: Serializer>(v: &[OriginServer], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(OriginServer::url))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<OriginServer>, D::Error> {
        let v = Vec::<OriginServer>::deserialize(d)?;
        if v.is_empty() {
            return Err(serde::de::Error::custom(
                "at least one server URL (\"http://host:port\" or \"https://host\")",
            ));
        }
        Ok(v)
    }
}

impl<'de> Deserialize<'de> for OriginServer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        OriginServer::parse(&text).map_err(serde::de::Error::custom)
    }
}

fn host_chars(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:[]".contains(&b))
}

fn host_header<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    if !host_chars(&s) {
        return Err(serde::de::Error::custom(
            "a host[:port] (letters, digits, `-._:[]`)",
        ));
    }
    Ok(Some(s))
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

    /// The URL this server is reached at (`http://host[:port][/base]`), as
    /// `check-config` prints it: [`OriginServer::parse`] of it gives this server back.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority(), self.base_path)
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

/// What of the query string goes into the cache key (`query = "include"` or
/// `"ignore"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryKey {
    /// The whole query, as sent (default: `?v=2` is another object).
    #[default]
    Include,
    /// None of it (tokens and session ids in segment URLs then share one object). The
    /// query is still forwarded to the origin.
    Ignore,
}

/// How a route treats responses that carry no freshness information (`profile =
/// "standard"` or `"video"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// A standards-following shared cache (the default): only RFC 9111's heuristic
    /// freshness (a share of the time since `Last-Modified`), nothing without it.
    #[default]
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

    /// The freshness of a response without any, and the per-extension table, that
    /// this profile gives a route that sets neither.
    fn ttls(self) -> (Option<Duration>, Vec<(String, Duration)>) {
        match self {
            Profile::Standard => (None, Vec::new()),
            Profile::Video => (Some(VIDEO_DEFAULT_TTL), video_ttl_by_extension()),
        }
    }
}

/// One route (`[[route]]`): requests whose host and path prefix match go to `origin`.
/// Read from [`RawRoute`], the keys as written, which the profile's defaults complete.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "RawRoute", into = "RawRoute")]
pub struct RouteOptions {
    /// Host to match (case-insensitive, port ignored); `*.example.com` matches
    /// subdomains; `None` matches any host.
    pub host: Option<String>,
    /// Path prefix to match (`/` matches everything).
    pub path_prefix: String,
    /// Host every object of the route is keyed under, whatever host a request names
    /// (lower-case, no port); `None`: the request's own.
    pub key_host: Option<String>,
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
    /// Progressive read-ahead on a sliced route: a client reading an object front to
    /// back (the same rule as a segment being played) makes the cache fetch the next
    /// this many slices after each one its response reads; 0 (the default) turns it off.
    pub slice_readahead: u32,
}

impl RouteOptions {
    /// A catch-all route to `origin` with every default (the standard profile).
    pub fn new(origin: &str) -> RouteOptions {
        RouteOptions {
            host: None,
            path_prefix: "/".to_owned(),
            key_host: None,
            origin: origin.to_owned(),
            profile: Profile::Standard,
            default_ttl: None,
            ttl_by_extension: Vec::new(),
            query: QueryKey::Include,
            slice_bytes: DEFAULT_SLICE_BYTES,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            prefetch_segments: 0,
            slice_readahead: 0,
        }
    }
}

/// `[[route]]` as written: what [`RouteOptions`] reads and prints. `default_ttl_s` and
/// `ttl_s` left out take the profile's value; printed, they are left out where they
/// are the profile's.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    #[serde(
        default,
        deserialize_with = "route_host",
        skip_serializing_if = "Option::is_none"
    )]
    host: Option<String>,
    #[serde(default = "root_prefix", deserialize_with = "path_prefix")]
    path_prefix: String,
    #[serde(
        default,
        deserialize_with = "key_host",
        skip_serializing_if = "Option::is_none"
    )]
    key_host: Option<String>,
    origin: String,
    #[serde(default)]
    profile: Profile,
    #[serde(
        default,
        deserialize_with = "optional_lifetime_s",
        skip_serializing_if = "Option::is_none"
    )]
    default_ttl_s: Option<u64>,
    #[serde(default)]
    query: QueryKey,
    #[serde(
        default = "default_slice_bytes",
        deserialize_with = "optserde::slice_bytes"
    )]
    slice_bytes: u64,
    #[serde(default, deserialize_with = "optserde::lifetime_s")]
    stale_while_revalidate_s: u64,
    #[serde(default, deserialize_with = "optserde::lifetime_s")]
    stale_if_error_s: u64,
    #[serde(default, deserialize_with = "prefetch_segments")]
    prefetch_segments: u32,
    #[serde(default, deserialize_with = "slice_readahead")]
    slice_readahead: u32,
    #[serde(
        default,
        deserialize_with = "ttl_table",
        skip_serializing_if = "Option::is_none"
    )]
    ttl_s: Option<BTreeMap<String, u64>>,
}

/// `path_prefix`'s default: everything.
fn root_prefix() -> String {
    "/".to_owned()
}

/// `slice_bytes`'s default.
fn default_slice_bytes() -> u64 {
    DEFAULT_SLICE_BYTES
}

impl From<RawRoute> for RouteOptions {
    fn from(raw: RawRoute) -> RouteOptions {
        // The profile gives the defaults; keys given in the file replace them.
        let (default_ttl, table) = raw.profile.ttls();
        RouteOptions {
            host: raw.host,
            path_prefix: raw.path_prefix,
            key_host: raw.key_host,
            origin: raw.origin,
            profile: raw.profile,
            default_ttl: raw.default_ttl_s.map(Duration::from_secs).or(default_ttl),
            ttl_by_extension: match raw.ttl_s {
                Some(t) => t
                    .into_iter()
                    .map(|(e, s)| (e, Duration::from_secs(s)))
                    .collect(),
                None => table,
            },
            query: raw.query,
            slice_bytes: raw.slice_bytes,
            stale_while_revalidate: Duration::from_secs(raw.stale_while_revalidate_s),
            stale_if_error: Duration::from_secs(raw.stale_if_error_s),
            prefetch_segments: raw.prefetch_segments,
            slice_readahead: raw.slice_readahead,
        }
    }
}

impl From<RouteOptions> for RawRoute {
    fn from(r: RouteOptions) -> RawRoute {
        let (default_ttl, table) = r.profile.ttls();
        RawRoute {
            host: r.host,
            path_prefix: r.path_prefix,
            key_host: r.key_host,
            origin: r.origin,
            profile: r.profile,
            default_ttl_s: r
                .default_ttl
                .filter(|d| Some(*d) != default_ttl)
                .map(|d| d.as_secs()),
            ttl_s: (r.ttl_by_extension != table).then(|| {
                r.ttl_by_extension
                    .iter()
                    .map(|(e, d)| (e.clone(), d.as_secs()))
                    .collect()
            }),
            query: r.query,
            slice_bytes: r.slice_bytes,
            stale_while_revalidate_s: r.stale_while_revalidate.as_secs(),
            stale_if_error_s: r.stale_if_error.as_secs(),
            prefetch_segments: r.prefetch_segments,
            slice_readahead: r.slice_readahead,
        }
    }
}

fn prefetch_segments<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = u32::deserialize(d)?;
    if n > MAX_PREFETCH_SEGMENTS {
        return Err(serde::de::Error::custom(format!(
            "must be at most {MAX_PREFETCH_SEGMENTS}"
        )));
    }
    Ok(n)
}

fn slice_readahead<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = u32::deserialize(d)?;
    if n > MAX_SLICE_READAHEAD {
        return Err(serde::de::Error::custom(format!(
            "must be at most {MAX_SLICE_READAHEAD}"
        )));
    }
    Ok(n)
}

fn route_host<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?.to_ascii_lowercase();
    let bare = s.strip_prefix("*.").unwrap_or(&s);
    let ok = if let Some(v6) = bare.strip_prefix('[').and_then(|b| b.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok() && bare.len() == s.len()
    } else {
        !bare.is_empty()
            && bare.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
    };
    if !ok {
        return Err(serde::de::Error::custom(
            "a host name without port (`cdn.example.com`, `*.example.com`, an IP address)",
        ));
    }
    Ok(Some(s))
}

/// `key_host`: a host as `host` takes one, without its `*.` wildcard (a key names
/// one host).
fn key_host<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let host = route_host(d)?;
    if host.as_deref().is_some_and(|h| h.starts_with("*.")) {
        return Err(serde::de::Error::custom(
            "one host name without port or wildcard (`cdn.example.com`, an IP address)",
        ));
    }
    Ok(host)
}

fn path_prefix<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if !s.starts_with('/')
        || !s
            .bytes()
            .all(|b| (0x21..0x7f).contains(&b) && b != b'?' && b != b'#')
    {
        return Err(serde::de::Error::custom(
            "a path starting with `/` (visible ASCII, no spaces, `?` or `#`)",
        ));
    }
    // Requests are routed by their normalised path (`normalize_proxy_target`): a prefix
    // in another spelling (`/a/./`, `/%7Euser/`) would never match one.
    match linerate_http::path::normalize_proxy_target(s.as_bytes()) {
        Ok(n) if n.as_bytes() == s.as_bytes() => Ok(s),
        Ok(n) => Err(serde::de::Error::custom(format!(
            "a path in normal form, as requests are matched: write {:?}",
            String::from_utf8_lossy(n.as_bytes())
        ))),
        Err(e) => Err(serde::de::Error::custom(format!(
            "a path a request could have (this one is refused: {})",
            e.as_str()
        ))),
    }
}

fn ttl_table<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, u64>>, D::Error> {
    let m = BTreeMap::<optserde::Extension, optserde::Lifetime>::deserialize(d)?;
    Ok(Some(m.into_iter().map(|(k, v)| (k.0, v.0)).collect()))
}

fn optional_lifetime_s<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    optserde::lifetime_s(d).map(Some)
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
            tag_header: "Surrogate-Key".to_owned(),
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
