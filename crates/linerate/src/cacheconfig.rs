//! Cache mode's sections of the configuration file: `[cache]` with its
//! `[[cache.disk]]` tables (reference: docs/config.md, "Cache mode"), what spans
//! `[cache]`, `[[origin]]` and `[[route]]`, and the `serve --origin URL --cache-dir DIR`
//! quick start. Same rules as the rest of the file: unknown keys and bad values are
//! errors naming the key and line; defaults and their reasons come from
//! `linerate_server::cacheopts` and `linerate_cache::StoreConfig`. `[[origin]]` and
//! `[[route]]` are [`OriginOptions`] and [`RouteOptions`] themselves, which read and
//! check their own keys.
//!
//! Checking happens in two places only: each value as it is read (the option types'
//! serde and the `deserialize_with` functions below), and what no single key can see
//! (names defined twice, a route's origin, watermarks, slices the store can hold) in
//! the one conversion `TryFrom<CacheSections> for CacheOptions`, which the file's
//! parser runs once. The server takes the result as it is.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use linerate_cache::{DiskConfig, Durability, StoreConfig};
use linerate_server::cacheopts::{CacheOptions, OriginOptions, OriginServer, RouteOptions};
use linerate_server::optserde::{self, is_tchar};
use serde::{Deserialize, Deserializer, Serialize};
use toml::Spanned;

pub use linerate_server::optserde::parse_size;

#[cfg(test)]
use linerate_server::cacheopts::{self, Profile, QueryKey};

/// Share of the filesystem's free space that `--cache-dir` uses when `--cache-size` is
/// not given: the rest is headroom for the filesystem, the store's temporary files and
/// whatever else writes there. Free space, not the filesystem's size: on a disk shared
/// with other data (the quick start's usual home) 90 % of the size overcommits it (a
/// new user saw 243 GB chosen where 84 GB were free), and the store would meet ENOSPC
/// long before eviction starts.
const QUICK_START_SHARE_PERCENT: u64 = 90;

/// Name of the origin the quick start defines.
pub const QUICK_START_ORIGIN: &str = "origin";

/// Name of the disk the quick start defines.
pub const QUICK_START_DISK: &str = "disk0";

/// `[cache]`: the store and cache-wide behaviour.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheSection {
    /// Honour the client's `Cache-Control`. Default true.
    pub honour_request_cache_control: bool,
    /// Share of `now - Last-Modified` used as heuristic freshness, 0.0-1.0. Default 0.1.
    #[serde(deserialize_with = "optserde::share")]
    pub heuristic_fraction: f64,
    /// Longest heuristic freshness, s. Default 86400.
    #[serde(deserialize_with = "optserde::lifetime_s")]
    pub heuristic_max_s: u64,
    /// Largest request body forwarded for unsafe methods, bytes. Default 1048576.
    #[serde(deserialize_with = "optserde::size")]
    pub max_forwarded_body: u64,
    /// Prefetch fills in flight per origin, all workers together. Default 4.
    pub prefetch_in_flight: u32,
    /// Name in `Via` and `Cache-Status`. Default `linerate`.
    #[serde(deserialize_with = "cache_name")]
    pub cache_name: String,
    /// Targeted cache-control fields obeyed, in order (RFC 9213). Default
    /// `["CDN-Cache-Control"]`.
    #[serde(deserialize_with = "field_names")]
    pub targeted_cache_control: Vec<String>,
    /// The response field whose space-separated keys tag an object for purges by tag.
    /// Default `Surrogate-Key`.
    #[serde(deserialize_with = "field_name")]
    pub tag_header: String,
    /// `sync_before_publish` or `no_sync`. Default `sync_before_publish`.
    pub durability: DurabilityName,
    /// Start evicting above this percentage of a disk's capacity. Default 95.
    pub high_watermark_percent: Spanned<u8>,
    /// Evict down to this percentage. Default 90.
    pub low_watermark_percent: Spanned<u8>,
    /// Largest object (or slice) stored, bytes. Default 4 GiB.
    #[serde(deserialize_with = "optserde::positive_size")]
    pub max_object_bytes: u64,
    /// Most stored objects whose file stays open between hits, all disks together.
    /// Default 4096; 0 opens the file on every hit.
    pub open_files: usize,
    /// Body bytes of complete objects waiting for their disk's flush and rename past
    /// which that disk stores nothing new until it catches up. Default 256 MiB.
    #[serde(deserialize_with = "optserde::size")]
    pub max_publish_backlog: u64,
    /// `[[cache.disk]]`: the cache directories.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disk: Vec<DiskSection>,
}

impl Default for CacheSection {
    fn default() -> Self {
        let store = StoreConfig::new(Vec::new());
        let o = CacheOptions::new(store.clone(), Vec::new(), Vec::new());
        CacheSection {
            honour_request_cache_control: o.honour_request_cache_control,
            heuristic_fraction: o.heuristic_fraction,
            heuristic_max_s: o.heuristic_max.as_secs(),
            max_forwarded_body: o.max_forwarded_body,
            prefetch_in_flight: o.prefetch_in_flight,
            cache_name: o.cache_name,
            targeted_cache_control: o.targeted_fields,
            tag_header: o.tag_header,
            durability: DurabilityName::from(store.durability),
            // Defaults have no position in the file.
            high_watermark_percent: Spanned::new(0..0, store.high_watermark_percent),
            low_watermark_percent: Spanned::new(0..0, store.low_watermark_percent),
            max_object_bytes: store.max_object_bytes,
            open_files: store.open_files,
            max_publish_backlog: store.max_publish_backlog,
            disk: Vec::new(),
        }
    }
}

/// Durability names as written in the file.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DurabilityName {
    /// `fdatasync` before an object becomes visible.
    SyncBeforePublish,
    /// No sync (fastest; objects may be lost on power loss).
    NoSync,
}

impl From<Durability> for DurabilityName {
    fn from(d: Durability) -> Self {
        match d {
            Durability::SyncBeforePublish => DurabilityName::SyncBeforePublish,
            Durability::NoSync => DurabilityName::NoSync,
        }
    }
}

/// `[[cache.disk]]`: one cache directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskSection {
    /// Stable name (placement input): letters, digits, `-`, `_`; at most 64 bytes.
    #[serde(deserialize_with = "spanned_name")]
    pub name: Spanned<String>,
    /// Directory the store owns; created if missing.
    pub path: PathBuf,
    /// Most bytes kept on this disk (and its placement weight).
    #[serde(deserialize_with = "optserde::positive_size")]
    pub max_bytes: u64,
}

/// Cache mode's part of the file, borrowed from the whole.
pub struct CacheSections<'a> {
    /// `[cache]`, if present.
    pub cache: Option<&'a CacheSection>,
    /// `[[origin]]`.
    pub origins: &'a [OriginOptions],
    /// `[[route]]`.
    pub routes: &'a [RouteOptions],
}

/// A value of `[[origin]]` or `[[route]]` that a cross-key error is about: the option
/// types carry no positions, so the file's parser looks its position up when it
/// reports the error ([`Place::span_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// `name` of the i-th `[[origin]]`.
    OriginName(usize),
    /// `origin` of the i-th `[[route]]`.
    RouteOrigin(usize),
}

impl Place {
    /// Where in `text` (the file) this value is written; `None` if it is not there.
    pub fn span_in(self, text: &str) -> Option<Range<usize>> {
        /// The file with only the positions of the values a [`Place`] names; every other
        /// key is ignored (the file was already read once, strictly).
        #[derive(Deserialize)]
        struct Positions {
            #[serde(default)]
            origin: Vec<Named>,
            #[serde(default)]
            route: Vec<Routed>,
        }
        #[derive(Deserialize)]
        struct Named {
            name: Option<Spanned<toml::Value>>,
        }
        #[derive(Deserialize)]
        struct Routed {
            origin: Option<Spanned<toml::Value>>,
        }
        let p: Positions = toml::from_str(text).ok()?;
        let spanned = match self {
            Place::OriginName(i) => p.origin.get(i)?.name.as_ref()?.span(),
            Place::RouteOrigin(i) => p.route.get(i)?.origin.as_ref()?.span(),
        };
        Some(spanned)
    }
}

/// A cross-key error, with the position of the value at fault when it came from the file.
pub struct CrossKeyError {
    /// Where in the file; `None` for errors about the file as a whole.
    pub span: Option<Range<usize>>,
    /// The value of `[[origin]]` or `[[route]]` at fault, whose position the parser
    /// looks up.
    pub place: Option<Place>,
    /// What is wrong, naming the keys.
    pub message: String,
}

impl CrossKeyError {
    fn whole(message: String) -> CrossKeyError {
        CrossKeyError {
            span: None,
            place: None,
            message,
        }
    }

    fn of(place: Place, message: String) -> CrossKeyError {
        CrossKeyError {
            span: None,
            place: Some(place),
            message,
        }
    }

    fn at<T>(value: &Spanned<T>, message: String) -> CrossKeyError {
        let span = value.span();
        CrossKeyError {
            // Values made by the quick start have no position.
            span: Some(span).filter(|s| !s.is_empty()),
            place: None,
            message,
        }
    }
}

impl CacheSections<'_> {
    /// Cache mode is on when the file has `[cache]`, an `[[origin]]` or a `[[route]]`.
    pub fn is_on(&self) -> bool {
        self.cache.is_some() || !self.origins.is_empty() || !self.routes.is_empty()
    }
}

impl TryFrom<CacheSections<'_>> for CacheOptions {
    type Error = CrossKeyError;

    /// Check what single keys cannot (unique names, routes naming defined origins, at
    /// least one disk, origin and route, slices the store can hold, the store's own
    /// rules such as watermarks) and build the typed options. Run once, when the file
    /// is parsed, and only when cache mode is on.
    fn try_from(sections: CacheSections<'_>) -> Result<CacheOptions, CrossKeyError> {
        let default = CacheSection::default();
        let cache = sections.cache.unwrap_or(&default);
        if cache.disk.is_empty() {
            return Err(CrossKeyError::whole(
                "cache mode needs at least one [[cache.disk]] (or `serve --cache-dir DIR`)"
                    .to_owned(),
            ));
        }
        for (i, d) in cache.disk.iter().enumerate() {
            if cache.disk[..i]
                .iter()
                .any(|o| o.name.get_ref() == d.name.get_ref())
            {
                return Err(CrossKeyError::at(
                    &d.name,
                    format!("cache.disk: name {:?} is used twice", d.name.get_ref()),
                ));
            }
        }
        if sections.origins.is_empty() {
            return Err(CrossKeyError::whole(
                "cache mode needs at least one [[origin]] (or `serve --origin URL`)".to_owned(),
            ));
        }
        for (i, o) in sections.origins.iter().enumerate() {
            if sections.origins[..i].iter().any(|p| p.name == o.name) {
                return Err(CrossKeyError::of(
                    Place::OriginName(i),
                    format!("origin {:?} is defined twice", o.name),
                ));
            }
        }
        if sections.routes.is_empty() {
            return Err(CrossKeyError::whole(
                "cache mode needs at least one [[route]] (path_prefix = \"/\" matches everything)"
                    .to_owned(),
            ));
        }
        for (i, r) in sections.routes.iter().enumerate() {
            if !sections.origins.iter().any(|o| o.name == r.origin) {
                let known: Vec<&str> = sections.origins.iter().map(|o| o.name.as_str()).collect();
                return Err(CrossKeyError::of(
                    Place::RouteOrigin(i),
                    format!(
                        "route {:?}: origin {:?} is not defined (origins: {})",
                        r.path_prefix,
                        r.origin,
                        known.join(", ")
                    ),
                ));
            }
            if r.slice_bytes > cache.max_object_bytes {
                return Err(CrossKeyError::whole(format!(
                    "route {:?}: slice_bytes {} is larger than cache.max_object_bytes {}, so no slice could be stored",
                    r.path_prefix, r.slice_bytes, cache.max_object_bytes
                )));
            }
        }
        let mut store = StoreConfig::new(
            cache
                .disk
                .iter()
                .map(|d| DiskConfig {
                    name: d.name.get_ref().clone(),
                    path: d.path.clone(),
                    max_bytes: d.max_bytes,
                })
                .collect(),
        );
        store.durability = match cache.durability {
            DurabilityName::SyncBeforePublish => Durability::SyncBeforePublish,
            DurabilityName::NoSync => Durability::NoSync,
        };
        store.high_watermark_percent = *cache.high_watermark_percent.get_ref();
        store.low_watermark_percent = *cache.low_watermark_percent.get_ref();
        store.max_object_bytes = cache.max_object_bytes;
        store.open_files = cache.open_files;
        store.max_publish_backlog = cache.max_publish_backlog;
        store.validate().map_err(|e| {
            let message = format!("cache mode: {e}");
            match e {
                // At the watermark written in the file (the high one first), if any.
                linerate_cache::ConfigError::Watermarks => {
                    let high = CrossKeyError::at(&cache.high_watermark_percent, message.clone());
                    match high.span {
                        Some(_) => high,
                        None => CrossKeyError::at(&cache.low_watermark_percent, message),
                    }
                }
                _ => CrossKeyError::whole(message),
            }
        })?;
        let mut o = CacheOptions::new(store, sections.origins.to_vec(), sections.routes.to_vec());
        o.honour_request_cache_control = cache.honour_request_cache_control;
        o.heuristic_fraction = cache.heuristic_fraction;
        o.heuristic_max = Duration::from_secs(cache.heuristic_max_s);
        o.max_forwarded_body = cache.max_forwarded_body;
        o.prefetch_in_flight = cache.prefetch_in_flight;
        o.cache_name = cache.cache_name.clone();
        o.targeted_fields = cache.targeted_cache_control.clone();
        o.tag_header = cache.tag_header.clone();
        Ok(o)
    }
}

/// What [`check_disk_dirs`] leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirCheck {
    /// Directories it created stay (`serve`: the store uses them next).
    Keep,
    /// Directories it created are removed again (`check-config` changes nothing).
    Undo,
}

/// That the store can work in every `[[cache.disk]]` directory: it is a directory, or
/// can be created as one, and this process can create files in it (checked by
/// creating and removing one). Run by `serve` before the store opens and by
/// `check-config`, so a bad path is reported with its disk and key rather than as the
/// store's lock-file error. Not run on every parse: `linerate drain --config` reads the
/// same file.
pub fn check_disk_dirs(cache: &CacheOptions, leave: DirCheck) -> Result<(), String> {
    for d in &cache.store.disks {
        let at =
            |what: String| format!("cache.disk {:?}: path {}: {what}", d.name, d.path.display());
        // The ancestors that do not exist yet, deepest first, to undo their creation.
        let missing: Vec<&Path> = d.path.ancestors().take_while(|a| !a.exists()).collect();
        std::fs::create_dir_all(&d.path)
            .map_err(|e| at(format!("cannot create the directory: {e}")))?;
        if !d.path.is_dir() {
            return Err(at("not a directory".to_owned()));
        }
        let probe = d
            .path
            .join(format!(".linerate-write-check-{}", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .map(|_| std::fs::remove_file(&probe));
        if leave == DirCheck::Undo {
            for dir in &missing {
                let _ = std::fs::remove_dir(dir);
            }
        }
        match written {
            Ok(_) => {}
            Err(e) => return Err(at(format!("cannot create files in it: {e}"))),
        }
    }
    Ok(())
}

/// `serve --origin URL... --cache-dir DIR [--cache-size BYTES]`, resolved: it replaces
/// the file's `[[origin]]`, `[[route]]` and `[[cache.disk]]` with one origin named
/// `origin` (these servers), one catch-all route to it and one disk named `disk0`.
#[derive(Debug, Clone)]
pub struct QuickStart {
    /// The origin's servers.
    pub servers: Vec<OriginServer>,
    /// The cache directory.
    pub dir: PathBuf,
    /// Its capacity, bytes.
    pub max_bytes: u64,
}

impl QuickStart {
    /// Create `dir` if missing and size it: `size`, or 90 % of the free space of the
    /// filesystem holding it (said in the log).
    pub fn resolve(
        servers: &[String],
        dir: &Path,
        size: Option<u64>,
    ) -> anyhow::Result<QuickStart> {
        let servers = servers
            .iter()
            .map(|s| OriginServer::parse(s).map_err(|e| anyhow::anyhow!("--origin {e}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("--cache-dir {}: {e}", dir.display()))?;
        let space = linerate_sys::fs::fs_space(dir)
            .map_err(|e| anyhow::anyhow!("--cache-dir {}: {e}", dir.display()))?;
        if space.read_only {
            anyhow::bail!(
                "--cache-dir {}: the filesystem is mounted read-only",
                dir.display()
            );
        }
        let max_bytes = match size {
            Some(n) => n,
            None => {
                let n = space.available_bytes / 100 * QUICK_START_SHARE_PERCENT;
                if n == 0 {
                    anyhow::bail!(
                        "--cache-dir {}: the filesystem has no free space (give --cache-size)",
                        dir.display()
                    );
                }
                tracing::info!(
                    dir = %dir.display(),
                    max_bytes = n,
                    free_bytes = space.available_bytes,
                    filesystem_bytes = space.total_bytes,
                    "cache size: {QUICK_START_SHARE_PERCENT}% of the filesystem's free space (--cache-size to set)"
                );
                n
            }
        };
        if max_bytes == 0 {
            anyhow::bail!("--cache-size: must be greater than 0");
        }
        Ok(QuickStart {
            servers,
            dir: dir.to_owned(),
            max_bytes,
        })
    }

    /// Replace the file's origins, routes and disks with the quick start's; `[cache]`'s
    /// other keys stay.
    pub fn apply(
        &self,
        cache: &mut Option<CacheSection>,
        origins: &mut Vec<OriginOptions>,
        routes: &mut Vec<RouteOptions>,
    ) {
        *origins = vec![OriginOptions::new(QUICK_START_ORIGIN, self.servers.clone())];
        *routes = vec![RouteOptions::new(QUICK_START_ORIGIN)];
        cache.get_or_insert_with(CacheSection::default).disk = vec![DiskSection {
            name: Spanned::new(0..0, QUICK_START_DISK.to_owned()),
            path: self.dir.clone(),
            max_bytes: self.max_bytes,
        }];
    }
}

/// Disk names ([`optserde::check_name`]), with their position for the cross-key errors.
fn spanned_name<'de, D: Deserializer<'de>>(d: D) -> Result<Spanned<String>, D::Error> {
    let name = Spanned::<String>::deserialize(d)?;
    optserde::check_name(name.get_ref()).map_err(serde::de::Error::custom)?;
    Ok(name)
}

fn cache_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() || s.len() > 64 || !s.bytes().all(is_tchar) {
        return Err(serde::de::Error::custom(
            "1-64 token characters (letters, digits and !#$%&'*+-.^_`|~; no spaces), as Via and Cache-Status carry it",
        ));
    }
    Ok(s)
}

/// A field name (`tag_header`): a token (RFC 9110 §5.1) of at most 64 bytes.
fn field_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let n = String::deserialize(d)?;
    if n.is_empty() || n.len() > 64 || !n.bytes().all(is_tchar) {
        return Err(serde::de::Error::custom(format!(
            "field name {n:?}: 1-64 token characters"
        )));
    }
    Ok(n)
}

/// Field names for `targeted_cache_control`: tokens (RFC 9110 §5.1), at most 64 bytes,
/// and never `Cache-Control` itself (RFC 9213 §2.4: a targeted field is a separate
/// field).
fn field_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    for n in &names {
        if n.is_empty() || n.len() > 64 || !n.bytes().all(is_tchar) {
            return Err(serde::de::Error::custom(format!(
                "field name {n:?}: 1-64 token characters"
            )));
        }
        if n.eq_ignore_ascii_case("cache-control") {
            return Err(serde::de::Error::custom(
                "Cache-Control is always obeyed when no targeted field applies; list only targeted fields such as CDN-Cache-Control",
            ));
        }
    }
    Ok(names)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::config::Config;

    const FULL: &str = r#"
[cache]
honour_request_cache_control = false
heuristic_fraction = 0.05
heuristic_max_s = 3600
max_forwarded_body = "2M"
prefetch_in_flight = 2
cache_name = "edge-1"
durability = "no_sync"
high_watermark_percent = 90
low_watermark_percent = 80
max_object_bytes = "1G"
targeted_cache_control = ["Edge-Cache-Control", "CDN-Cache-Control"]

[[cache.disk]]
name = "nvme0"
path = "/var/cache/linerate/nvme0"
max_bytes = "900G"

[[cache.disk]]
name = "nvme1"
path = "/var/cache/linerate/nvme1"
max_bytes = 1000000000000

[[origin]]
name = "vod"
servers = ["http://10.0.0.1:8080", "https://origin.example/base/"]
host_header = "origin.example"
connect_timeout_ms = 1000
first_byte_timeout_ms = 20000
idle_timeout_ms = 5000
max_connections = 32
ca_file = "/etc/linerate/origin-ca.pem"
down_after = 5
down_for_ms = 30000

[[origin]]
name = "live"
servers = ["http://[::1]:9000"]

[[route]]
host = "CDN.example.com"
path_prefix = "/vod/"
origin = "vod"
default_ttl_s = 300
query = "ignore"
slice_bytes = "1M"
stale_while_revalidate_s = 10
stale_if_error_s = 600
prefetch_segments = 3
slice_readahead = 2

[route.ttl_s]
M3U8 = 2
m4s = 86400

[[route]]
origin = "live"
profile = "video"
"#;

    fn err(text: &str) -> String {
        Config::parse(text).unwrap_err().to_string()
    }

    const MINIMAL: &str = "[[cache.disk]]\nname = \"d\"\npath = \"/tmp/c\"\nmax_bytes = 1000000\n[[origin]]\nname = \"o\"\nservers = [\"http://127.0.0.1:8081\"]\n[[route]]\norigin = \"o\"\n";

    #[test]
    fn full_example_converts() {
        let c = Config::parse(FULL).unwrap();
        let o = c.to_options().cache.unwrap();
        assert!(!o.honour_request_cache_control);
        assert_eq!(o.heuristic_fraction, 0.05);
        assert_eq!(o.heuristic_max, Duration::from_secs(3600));
        assert_eq!(o.max_forwarded_body, 2 << 20);
        assert_eq!(o.prefetch_in_flight, 2);
        assert_eq!(o.cache_name, "edge-1");
        assert_eq!(o.store.durability, Durability::NoSync);
        assert_eq!(
            (
                o.store.high_watermark_percent,
                o.store.low_watermark_percent
            ),
            (90, 80)
        );
        assert_eq!(o.store.max_object_bytes, 1 << 30);
        assert_eq!(o.store.disks.len(), 2);
        assert_eq!(o.store.disks[0].max_bytes, 900 << 30);
        assert_eq!(o.store.disks[1].max_bytes, 1_000_000_000_000);
        assert_eq!(
            o.store.disks[0].path,
            PathBuf::from("/var/cache/linerate/nvme0")
        );

        let vod = &o.origins[0];
        assert_eq!(vod.name, "vod");
        assert_eq!(vod.servers.len(), 2);
        assert!(vod.servers[1].tls && vod.servers[1].base_path == "/base");
        assert_eq!(vod.host_header.as_deref(), Some("origin.example"));
        assert_eq!(vod.connect_timeout, Duration::from_secs(1));
        assert_eq!(vod.first_byte_timeout, Duration::from_secs(20));
        assert_eq!(vod.idle_timeout, Duration::from_secs(5));
        assert_eq!(vod.max_connections, 32);
        assert_eq!(
            vod.ca_file,
            Some(PathBuf::from("/etc/linerate/origin-ca.pem"))
        );
        assert_eq!((vod.down_after, vod.down_for), (5, Duration::from_secs(30)));
        let live = &o.origins[1];
        assert_eq!(live.connect_timeout, cacheopts::DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(
            live.max_connections,
            cacheopts::DEFAULT_ORIGIN_MAX_CONNECTIONS
        );

        let r = &o.routes[0];
        assert_eq!(r.host.as_deref(), Some("cdn.example.com"));
        assert_eq!(
            (r.path_prefix.as_str(), r.origin.as_str()),
            ("/vod/", "vod")
        );
        assert_eq!(r.default_ttl, Some(Duration::from_secs(300)));
        assert_eq!(r.prefetch_segments, 3);
        assert_eq!(o.routes[1].prefetch_segments, 0);
        assert_eq!(r.slice_readahead, 2);
        assert_eq!(o.routes[1].slice_readahead, 0);
        assert_eq!(r.profile, Profile::Standard);
        assert_eq!(r.query, QueryKey::Ignore);
        assert_eq!(r.slice_bytes, 1 << 20);
        assert_eq!(r.stale_while_revalidate, Duration::from_secs(10));
        assert_eq!(r.stale_if_error, Duration::from_secs(600));
        // A given table replaces the built-in one.
        assert_eq!(
            r.ttl_by_extension,
            vec![
                ("m3u8".to_owned(), Duration::from_secs(2)),
                ("m4s".to_owned(), Duration::from_secs(86_400))
            ]
        );
        let d = &o.routes[1];
        assert_eq!((d.host.as_deref(), d.path_prefix.as_str()), (None, "/"));
        assert_eq!(d.slice_bytes, cacheopts::DEFAULT_SLICE_BYTES);
        // The video profile's table and default, unless the route gives its own.
        assert_eq!(d.profile, Profile::Video);
        assert_eq!(d.ttl_by_extension, cacheopts::video_ttl_by_extension());
        assert_eq!(d.default_ttl, Some(cacheopts::VIDEO_DEFAULT_TTL));
        assert_eq!(
            o.targeted_fields,
            vec![
                "Edge-Cache-Control".to_owned(),
                "CDN-Cache-Control".to_owned()
            ]
        );

        // Printed back, it parses to the same thing.
        let printed = c.to_toml();
        let again = Config::parse(&printed).unwrap();
        assert_eq!(again.to_toml(), printed, "{printed}");
    }

    /// Automatic workers: one per CPU serving files, two per CPU caching (a miss can
    /// block its worker in the file system); a count given is kept as it is.
    #[test]
    fn cache_mode_runs_two_workers_per_cpu_unless_told() {
        let cpus = linerate_server::options::default_workers();
        assert_eq!(Config::parse("").unwrap().to_options().workers, cpus);
        let cache = Config::parse(MINIMAL).unwrap().to_options();
        assert_eq!(cache.workers, crate::config::CACHE_WORKERS_PER_CPU * cpus);
        assert_eq!(crate::config::CACHE_WORKERS_PER_CPU, 2);
        let told = Config::parse(&format!("[server]\nworkers = 3\n{MINIMAL}")).unwrap();
        assert_eq!(told.to_options().workers, 3);
    }

    #[test]
    fn defaults_and_mode_switch() {
        assert!(Config::parse("").unwrap().to_options().cache.is_none());
        let c = Config::parse(MINIMAL).unwrap();
        let o = c.to_options().cache.unwrap();
        let store = StoreConfig::new(Vec::new());
        assert_eq!(o.store.durability, store.durability);
        assert_eq!(o.store.high_watermark_percent, store.high_watermark_percent);
        assert_eq!(o.store.max_object_bytes, store.max_object_bytes);
        assert!(o.honour_request_cache_control);
        assert_eq!(o.cache_name, "linerate");
        assert_eq!(o.heuristic_max, Duration::from_secs(86_400));
        // The default profile follows RFC 9111 alone: no operator TTLs at all.
        assert_eq!(o.routes[0].profile, Profile::Standard);
        assert_eq!(o.routes[0].default_ttl, None);
        assert!(o.routes[0].ttl_by_extension.is_empty());
        assert_eq!(o.routes[0].query, QueryKey::Include);
        assert_eq!(o.targeted_fields, vec!["CDN-Cache-Control".to_owned()]);
        let printed = c.to_toml();
        assert!(
            printed.contains("[cache]") && printed.contains("profile = \"standard\""),
            "{printed}"
        );
        assert_eq!(Config::parse(&printed).unwrap().to_toml(), printed);
        // An empty ttl table under the video profile means no per-extension TTLs, and
        // survives printing.
        let c = Config::parse(&format!("{MINIMAL}profile = \"video\"\n[route.ttl_s]\n")).unwrap();
        let r = &c.to_options().cache.unwrap().routes[0];
        assert!(r.ttl_by_extension.is_empty());
        assert_eq!(r.default_ttl, Some(cacheopts::VIDEO_DEFAULT_TTL));
        let again = Config::parse(&c.to_toml()).unwrap();
        assert!(again.to_options().cache.unwrap().routes[0]
            .ttl_by_extension
            .is_empty());
        // [cache] alone turns cache mode on, and then everything else is needed.
        let e = err("[cache]\ndurability = \"no_sync\"\n");
        assert!(e.contains("[[cache.disk]]"), "{e}");
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_line() {
        for (text, line, key) in [
            ("[cache]\ndurabilty = \"no_sync\"\n", "line 2", "durabilty"),
            (
                "[[cache.disk]]\nname = \"d\"\npath = \"/x\"\nmax_bytes = 1\nsize = 2\n",
                "line 5",
                "size",
            ),
            (
                "[[origin]]\nname = \"o\"\nservers = [\"http://a\"]\ntimeout_ms = 5\n",
                "line 4",
                "timeout_ms",
            ),
            (
                "[[route]]\norigin = \"o\"\nprefix = \"/\"\n",
                "line 3",
                "prefix",
            ),
            ("[[orgin]]\nname = \"o\"\n", "line 1", "orgin"),
        ] {
            let e = err(text);
            assert!(e.contains(line) && e.contains(key), "{text:?} -> {e}");
        }
    }

    #[test]
    fn cross_references_name_the_key_and_line() {
        let undefined = MINIMAL.replace("[[route]]\norigin = \"o\"", "[[route]]\norigin = \"vdo\"");
        let e = err(&undefined);
        assert!(
            e.contains("line 9")
                && e.contains("\"vdo\" is not defined")
                && e.contains("origins: o"),
            "{e}"
        );
        let twice = format!("{MINIMAL}[[origin]]\nname = \"o\"\nservers = [\"http://b\"]\n");
        let e = err(&twice);
        assert!(
            e.contains("line 11") && e.contains("\"o\" is defined twice"),
            "{e}"
        );
        let disks =
            format!("{MINIMAL}[[cache.disk]]\nname = \"d\"\npath = \"/y\"\nmax_bytes = 1\n");
        let e = err(&disks);
        assert!(e.contains("line 11") && e.contains("used twice"), "{e}");
        let e = err("[[origin]]\nname = \"o\"\nservers = [\"http://a\"]\n[[cache.disk]]\nname = \"d\"\npath = \"/x\"\nmax_bytes = 1\n");
        assert!(e.contains("[[route]]"), "{e}");
        let e = err(&format!("{MINIMAL}[cache]\nhigh_watermark_percent = 50\n"));
        assert!(e.contains("cache mode") && e.contains("watermarks"), "{e}");
        let e = err(&format!("{MINIMAL}[cache]\nmax_object_bytes = 65536\n"));
        assert!(
            e.contains("slice_bytes") && e.contains("max_object_bytes"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_name_the_key_and_line() {
        for (text, line, what) in [
            (
                "[[origin]]\nname = \"o\"\nservers = [\"ftp://a\"]\n",
                "line 3",
                "http:// or https://",
            ),
            ("[[origin]]\nname = \"o\"\nservers = [\"http://a:0\"]\n", "line 3", "port"),
            ("[[origin]]\nname = \"o\"\nservers = []\n", "line 3", "at least one"),
            ("[[origin]]\nname = \"o o\"\nservers = [\"http://a\"]\n", "line 2", "letters"),
            (
                "[[origin]]\nname = \"o\"\nservers = [\"http://a\"]\nconnect_timeout_ms = 0\n",
                "line 4",
                "between 1",
            ),
            (
                "[[origin]]\nname = \"o\"\nservers = [\"http://a\"]\nhost_header = \"a\\r\\nX: y\"\n",
                "line 4",
                "host",
            ),
            ("[[route]]\norigin = \"o\"\npath_prefix = \"vod\"\n", "line 3", "starting with"),
            ("[[route]]\norigin = \"o\"\npath_prefix = \"/a/./%7e/\"\n", "line 3", "write \"/a/~/\""),
            ("[[route]]\norigin = \"o\"\npath_prefix = \"/a/../../\"\n", "line 3", "escapes_root"),
            ("[[route]]\norigin = \"o\"\nhost = \"a.com:80\"\n", "line 3", "without port"),
            ("[[route]]\norigin = \"o\"\nkey_host = \"a.com:80\"\n", "line 3", "without port"),
            ("[[route]]\norigin = \"o\"\nkey_host = \"*.a.com\"\n", "line 3", "wildcard"),
            ("[[route]]\norigin = \"o\"\nquery = \"some\"\n", "line 3", "include"),
            ("[[route]]\norigin = \"o\"\nslice_bytes = 100\n", "line 3", "at least"),
            ("[[route]]\norigin = \"o\"\nprefetch_segments = 17\n", "line 3", "at most 16"),
            ("[[route]]\norigin = \"o\"\nslice_readahead = 9\n", "line 3", "at most 8"),
            ("[[route]]\norigin = \"o\"\nslice_readahead = -1\n", "line 3", ""),
            ("[[route]]\norigin = \"o\"\n[route.ttl_s]\n\"m.ts\" = 1\n", "line 4", "no dot"),
            ("[[route]]\norigin = \"o\"\n[route.ttl_s]\nts = -1\n", "line 4", ""),
            ("[cache]\nheuristic_fraction = 2.0\n", "line 2", "between 0.0"),
            ("[cache]\ncache_name = \"a b\"\n", "line 2", "token"),
            ("[cache]\ntargeted_cache_control = [\"a b\"]\n", "line 2", "token"),
            ("[cache]\ntargeted_cache_control = [\"cache-control\"]\n", "line 2", "targeted"),
            ("[[route]]\norigin = \"o\"\nprofile = \"vod\"\n", "line 3", "standard"),
            ("[cache]\ndurability = \"fast\"\n", "line 2", "no_sync"),
            ("[cache]\nhigh_watermark_percent = 300\n", "line 2", ""),
            (
                "[[cache.disk]]\nname = \"d\"\npath = \"/x\"\nmax_bytes = \"9Q\"\n",
                "line 4",
                "900G",
            ),
            (
                "[[cache.disk]]\nname = \"d\"\npath = \"/x\"\nmax_bytes = 0\n",
                "line 4",
                "greater than 0",
            ),
        ] {
            let e = err(text);
            assert!(e.contains(line) && e.contains(what), "{text:?} -> {e}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("900G"), Ok(900 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        for bad in ["", "G", "1.5G", "-1", "1 G", "1P", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quick_start_replaces_origins_routes_and_disks() {
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("new/cache");
        let q = QuickStart::resolve(
            &[
                "http://127.0.0.1:8081".to_owned(),
                "http://127.0.0.1:8082".to_owned(),
            ],
            &cache_dir,
            None,
        )
        .unwrap();
        assert!(cache_dir.is_dir(), "created");
        assert!(q.max_bytes > 0);
        // Over a file with its own cache mode: the file's [cache] keys stay.
        let c = Config::parse_with(FULL, Some(&q)).unwrap();
        let o = c.to_options().cache.unwrap();
        assert_eq!(o.store.durability, Durability::NoSync);
        assert_eq!(o.store.disks.len(), 1);
        assert_eq!(o.store.disks[0].name, QUICK_START_DISK);
        assert_eq!(o.store.disks[0].path, cache_dir);
        assert_eq!(o.origins.len(), 1);
        assert_eq!(o.origins[0].name, QUICK_START_ORIGIN);
        assert_eq!(o.origins[0].servers[1].port, 8082);
        assert_eq!(o.routes.len(), 1);
        assert_eq!(o.routes[0].path_prefix, "/");
        // With no file at all.
        let q = QuickStart::resolve(&["http://h".to_owned()], &cache_dir, Some(1 << 20)).unwrap();
        let o = Config::parse_with("", Some(&q))
            .unwrap()
            .to_options()
            .cache
            .unwrap();
        assert_eq!(o.store.disks[0].max_bytes, 1 << 20);
        assert_eq!(o.routes[0].profile, Profile::Standard);
        assert!(QuickStart::resolve(&["h".to_owned()], &cache_dir, None).is_err());
    }
}
