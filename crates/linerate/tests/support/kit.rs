//! The cache-mode test kit: one configuration builder ([`CacheConfig`]), the scripted
//! origin of [`super::origin`], the raw client of [`super::Server`], a reader for
//! `Cache-Status` ([`CacheStatus`]) and the matrix every spec-derived test runs in
//! ([`Variant`], [`matrix!`]): slicing off, and slicing on against an origin that
//! honours `Range` and one that ignores it.
//!
//! A test that passes because its feature was skipped is worse than none, so the kit
//! makes the three variants explicit in every test name and every test asserts the
//! origin's request count.
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failed step should fail the test loudly"
)]

use std::path::Path;

use super::origin::{Origin, RangeSupport, Reply, Request};
use super::{Response, Server};

/// The slice size of the "slicing on" variant: the smallest the configuration accepts,
/// so a body of a few hundred KiB already spans several slices.
pub const SLICE: u64 = 64 * 1024;

/// Slicing on the route under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slicing {
    /// `slice_bytes = 0`: objects are fetched and stored whole.
    Off,
    /// `slice_bytes = SLICE`: objects are fetched with `Range` requests, one per slice.
    On,
}

/// One cell of the test matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// Slicing on the route.
    pub slicing: Slicing,
    /// Whether the origin honours `Range`.
    pub ranges: RangeSupport,
}

impl Variant {
    /// Every cell of the matrix. With slicing off a fill never sends `Range` (the
    /// client's is the cache's to answer, RFC 9111 §3.4), so whether the origin honours
    /// it changes nothing there: that cell would repeat the first; relays, which forward
    /// a client's `Range`, are tested against both kinds of origin by name
    /// (`partial.rs`).
    pub const ALL: [Variant; 3] = [
        Variant {
            slicing: Slicing::Off,
            ranges: RangeSupport::Honoured,
        },
        Variant {
            slicing: Slicing::On,
            ranges: RangeSupport::Honoured,
        },
        Variant {
            slicing: Slicing::On,
            ranges: RangeSupport::Ignored,
        },
    ];

    /// A scripted origin answering with `handler`, honouring `Range` or not as this
    /// variant says.
    pub fn origin(&self, handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Origin {
        Origin::start_ranges(self.ranges, handler)
    }

    /// A cache-mode configuration in front of `origin` with this variant's slicing.
    pub fn config(&self, origin: &Origin) -> CacheConfig {
        let bytes = match self.slicing {
            Slicing::Off => 0,
            Slicing::On => SLICE,
        };
        CacheConfig::new(origin).route(&format!("slice_bytes = {bytes}"))
    }

    /// [`Variant::config`] started with no other change.
    pub fn start(&self, origin: &Origin) -> Cache {
        self.config(origin).start()
    }
}

/// Run a test body in every cell of the matrix, as three tests named after their cell:
///
/// ```ignore
/// matrix! {
///     /// RFC 9111 §4.2: a fresh response is reused.
///     fn fresh_is_reused(v) {
///         let origin = v.origin(|_| origin::ok(b"x", &[("Cache-Control", "max-age=60")]));
///         ...
///     }
/// }
/// ```
#[macro_export]
macro_rules! matrix {
    ($($(#[$meta:meta])* fn $name:ident($v:ident) $body:block)*) => {$(
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::support::kit::{Slicing, Variant};
            use $crate::support::origin::RangeSupport;

            fn body($v: Variant) $body

            #[test]
            fn slicing_off() {
                body(Variant { slicing: Slicing::Off, ranges: RangeSupport::Honoured });
            }
            #[test]
            fn slices_ranges_honoured() {
                body(Variant { slicing: Slicing::On, ranges: RangeSupport::Honoured });
            }
            #[test]
            fn slices_ranges_ignored() {
                body(Variant { slicing: Slicing::On, ranges: RangeSupport::Ignored });
            }
        }
    )*};
}

/// The `key = value` lines of one configuration section, in order; setting a key that
/// is already there replaces its line (TOML refuses a key given twice).
#[derive(Clone, Debug, Default)]
struct Keys(Vec<(String, String)>);

impl Keys {
    fn set(&mut self, lines: &str) {
        for line in lines.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let key = line.split('=').next().unwrap_or(line).trim().to_owned();
            match self.0.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = line.to_owned(),
                None => self.0.push((key, line.to_owned())),
            }
        }
    }

    fn text(&self) -> String {
        self.0.iter().map(|(_, l)| format!("{l}\n")).collect()
    }
}

/// A cache-mode configuration: one disk in a temporary directory, one origin named `o`,
/// one route to it; each part takes `key = value` lines, which replace the defaults
/// below or add to them.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    server_keys: Keys,
    cache_keys: Keys,
    origin_keys: Keys,
    route_keys: Keys,
    before_route: String,
    extra: String,
    disk_bytes: u64,
}

impl CacheConfig {
    /// In front of `origin`, with short origin timeouts (1-2 s) so failure tests are
    /// quick.
    pub fn new(origin: &Origin) -> CacheConfig {
        CacheConfig::for_url(&origin.url())
    }

    /// In front of the origin server at `url` (for an address where nothing listens).
    pub fn for_url(url: &str) -> CacheConfig {
        CacheConfig::for_urls(&[url])
    }

    /// In front of an origin with these servers.
    pub fn for_urls(urls: &[&str]) -> CacheConfig {
        let mut c = CacheConfig {
            server_keys: Keys::default(),
            cache_keys: Keys::default(),
            origin_keys: Keys::default(),
            route_keys: Keys::default(),
            before_route: String::new(),
            extra: String::new(),
            disk_bytes: 1 << 30,
        };
        c.server_keys.set("listen = [\"127.0.0.1:0\"]\nworkers = 2");
        c.cache_keys.set("durability = \"no_sync\"");
        let servers: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
        c.origin_keys.set(&format!(
            "name = \"o\"\nservers = [{}]\nconnect_timeout_ms = 1000\nfirst_byte_timeout_ms = 2000\nidle_timeout_ms = 2000",
            servers.join(", ")
        ));
        c.route_keys.set("path_prefix = \"/\"\norigin = \"o\"");
        c
    }

    /// Set `key = value` lines in `[server]`.
    pub fn server(mut self, keys: &str) -> CacheConfig {
        self.server_keys.set(keys);
        self
    }

    /// Set lines in `[cache]`.
    pub fn cache(mut self, keys: &str) -> CacheConfig {
        self.cache_keys.set(keys);
        self
    }

    /// Set lines in the `[[origin]]`.
    pub fn origin(mut self, keys: &str) -> CacheConfig {
        self.origin_keys.set(keys);
        self
    }

    /// Set lines in the `[[route]]` (plain keys only; sub-tables such as
    /// `[route.ttl_s]` go in [`CacheConfig::extra`], which follows the route).
    pub fn route(mut self, keys: &str) -> CacheConfig {
        self.route_keys.set(keys);
        self
    }

    /// Insert whole sections before the route (another `[[origin]]`, or a `[[route]]`
    /// that must match first: routes are tried in file order).
    pub fn before_route(mut self, toml: &str) -> CacheConfig {
        self.before_route = format!("{}{toml}\n", self.before_route);
        self
    }

    /// The disk's `max_bytes` (default 1 GiB).
    pub fn disk_bytes(mut self, bytes: u64) -> CacheConfig {
        self.disk_bytes = bytes;
        self
    }

    /// An `[access_log]` writing to `path`, flushed every 50 ms (tests wait for lines
    /// with `eventually`), with `keys` added to the section (e.g. `format = "json"`).
    pub fn access_log(self, path: &Path, keys: &str) -> CacheConfig {
        let path = path.to_str().expect("a UTF-8 temporary path");
        self.extra(&format!(
            "[access_log]\npath = {path:?}\nflush_ms = 50\n{keys}\n"
        ))
    }

    /// Append whole sections after the route.
    pub fn extra(mut self, toml: &str) -> CacheConfig {
        self.extra = format!("{}{toml}\n", self.extra);
        self
    }

    /// The configuration file's text with the disk under `dir`.
    pub fn text(&self, dir: &Path) -> String {
        format!(
            "[server]\n{server}\n[cache]\n{cache}\n\
             [[cache.disk]]\nname = \"d0\"\npath = {path:?}\nmax_bytes = {disk_bytes}\n\n\
             [[origin]]\n{origin}\n{before}[[route]]\n{route}\n{extra}\n",
            server = self.server_keys.text(),
            cache = self.cache_keys.text(),
            path = dir.join("cache").to_str().unwrap(),
            origin = self.origin_keys.text(),
            route = self.route_keys.text(),
            before = self.before_route,
            extra = self.extra,
            disk_bytes = self.disk_bytes,
        )
    }

    /// Start the real binary with this configuration.
    pub fn start(self) -> Cache {
        self.start_on(tempfile::tempdir().unwrap())
    }

    /// [`CacheConfig::start`] with the store under `dir`, which the test prepared (the
    /// disk is `dir/cache`).
    pub fn start_on(self, dir: tempfile::TempDir) -> Cache {
        let server = Server::start_text(&self.text(dir.path()), &[]);
        Cache {
            server,
            config: self,
            dir,
        }
    }
}

/// A running cache-mode server and its cache directory (removed on drop, after the
/// server is stopped).
pub struct Cache {
    /// The server.
    pub server: Server,
    /// What it was started with.
    pub config: CacheConfig,
    dir: tempfile::TempDir,
}

impl Cache {
    /// The cache directory's parent (to restart on the same store).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Stop the server (SIGTERM, waiting for it to exit); the cache directory goes too.
    pub fn stop(self) -> std::process::ExitStatus {
        self.server.stop()
    }

    /// Stop the server (SIGTERM) and start it again on the same store and configuration.
    pub fn restart(self) -> Cache {
        let Cache {
            server,
            config,
            dir,
        } = self;
        server.stop();
        let server = Server::start_text(&config.text(dir.path()), &[]);
        Cache {
            server,
            config,
            dir,
        }
    }
}

impl std::ops::Deref for Cache {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.server
    }
}

/// Our member of a `Cache-Status` field (RFC 9211), read back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheStatus {
    /// `hit`.
    pub hit: bool,
    /// `fwd=` token.
    pub fwd: Option<String>,
    /// `fwd-status=`.
    pub fwd_status: Option<u16>,
    /// `ttl=`.
    pub ttl: Option<i64>,
    /// `stored`.
    pub stored: bool,
    /// `collapsed`.
    pub collapsed: bool,
    /// `detail=`, unquoted.
    pub detail: Option<String>,
}

impl CacheStatus {
    /// Our member of `r`'s `Cache-Status` (RFC 9211 §2 puts the closest cache last; ours
    /// is named `linerate`). Panics when there is none: linerate sends it on every
    /// response of cache mode, so its absence is a failure, never "not a hit".
    #[track_caller]
    pub fn of(r: &Response) -> CacheStatus {
        let field = r.values("cache-status").join(", ");
        let Some(start) = field.rfind("linerate") else {
            panic!("no Cache-Status member of linerate; fields {:?}", r.headers);
        };
        // From our name to the end: a `detail` string may itself hold commas.
        let member = field[start..].trim().to_owned();
        let mut cs = CacheStatus::default();
        for param in member.split(';').skip(1) {
            let param = param.trim();
            let (k, v) = param.split_once('=').unwrap_or((param, ""));
            match k {
                "hit" => cs.hit = true,
                "fwd" => cs.fwd = Some(v.to_owned()),
                "fwd-status" => cs.fwd_status = v.parse().ok(),
                "ttl" => cs.ttl = v.parse().ok(),
                "stored" => cs.stored = true,
                "collapsed" => cs.collapsed = true,
                "detail" => cs.detail = Some(v.trim_matches('"').to_owned()),
                _ => {}
            }
        }
        cs
    }

    /// Whether the response was served from the store without going to the origin.
    pub fn is_hit(&self) -> bool {
        self.hit && self.fwd.is_none()
    }
}
