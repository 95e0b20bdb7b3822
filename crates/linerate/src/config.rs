//! The configuration file (TOML) → [`ServerOptions`]. Parsed once, at the edge: unknown
//! keys and bad values are errors that name the key and its line (the `toml` crate puts
//! the span in every deserialisation error, including the custom ones raised here), and
//! the result is a typed value with every default filled in, which `check-config`
//! prints back. Reference: docs/config.md.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cacheconfig::{CacheSections, QuickStart};
use crate::clusterconfig::LoadCluster;
use linerate_server::cacheopts::CacheOptions;
use linerate_server::options::{self as defaults, Pinning, ServerOptions, Timeouts};
use serde::{Deserialize, Deserializer, Serialize};

/// Most workers accepted: far above any CPU count we would pin to, low enough to catch
/// a typo like `workers = 40000`.
const MAX_WORKERS: u64 = 1024;

/// The bundled sample library of the checkout this binary was built from: served when
/// no root is configured, while the binary is still in that checkout (`cargo run`,
/// `target/release/linerate`); see [`sample_root`].
pub const SAMPLE_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../sample");

/// The bundled sample library, served when no root is configured. Looked for where it
/// ships relative to the running binary (a binary moved elsewhere no longer finds, or
/// names, the build tree): `sample/` beside it (an unpacked release), the install
/// prefix's `share/linerate/sample` (`bin/linerate`), and, while the binary still lies
/// in the checkout it was built from, that checkout's `sample/`. `Err`: the places
/// looked, for the error that asks for `--root`.
pub fn sample_root() -> Result<PathBuf, Vec<PathBuf>> {
    let exe = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .unwrap_or_default();
    let mut places = Vec::new();
    if let Some(dir) = exe.parent() {
        places.push(dir.join("sample"));
        if let Some(prefix) = dir.parent() {
            places.push(prefix.join("share/linerate/sample"));
        }
    }
    let checkout = Path::new(SAMPLE_ROOT)
        .parent()
        .and_then(|p| p.canonicalize().ok());
    if checkout.is_some_and(|c| exe.starts_with(c)) {
        places.push(PathBuf::from(SAMPLE_ROOT));
    }
    places.iter().find(|p| p.is_dir()).cloned().ok_or(places)
}

/// What the default root is when no sample library is found: a path that says so (the
/// server is then refused before it starts, see [`Config::check_root`]).
const NO_SAMPLE: &str = "<no bundled sample library found: give --root DIR or appliance.root>";

/// The whole file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[server]`
    pub server: ServerSection,
    /// `[timeouts]`
    pub timeouts: Timeouts,
    /// `[appliance]`
    pub appliance: ApplianceSection,
    /// `[cache_control]`
    pub cache_control: CacheControlSection,
    /// `[admin]`
    pub admin: crate::opsconfig::AdminSection,
    /// `[access_log]`
    pub access_log: linerate_server::operate::AccessLogOptions,
    /// `[tcp]`
    pub tcp: crate::opsconfig::TcpSection,
    /// `[tls]`
    pub tls: linerate_server::TlsOptions,
    /// `[fill]` (fill jobs, cache mode).
    pub fill: linerate_server::fillopts::FillOptions,
    /// `[cache]` (cache mode; see [`crate::cacheconfig`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::cacheconfig::CacheSection>,
    /// `[[origin]]` (cache mode).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub origin: Vec<linerate_server::cacheopts::OriginOptions>,
    /// `[[route]]` (cache mode).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub route: Vec<linerate_server::cacheopts::RouteOptions>,
    /// `[cluster]` (cache mode; see [`crate::clusterconfig`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<toml::Spanned<linerate_server::ClusterOptions>>,
    /// Cache mode's options, converted (and so checked) once when the file was parsed;
    /// `None` when cache mode is off.
    #[serde(skip)]
    cache_options: Option<CacheOptions>,
    /// `[cluster]` with the files it names read, and checked, when the file was parsed.
    #[serde(skip)]
    cluster_options: Option<linerate_server::clusteropts::CheckedCluster>,
}

/// Workers per allowed CPU in cache mode when `server.workers` is 0. A miss blocks its
/// worker in the file system now and then (an off-CPU trace: creates waiting for
/// journal commits, 3 % of the time) and every connection of that worker waits with it;
/// a second event loop pinned to the same CPU runs meanwhile. Measured on one core
/// against one worker: 64 KiB misses +10 %, 2 MiB misses +2-6 %, warm hits level
/// (docs/benchmarks.md, "Two workers per core"). Appliance mode creates no files.
pub const CACHE_WORKERS_PER_CPU: usize = 2;

/// `[server]`: listeners and workers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    /// Addresses to listen on. Default `["127.0.0.1:8080"]`.
    pub listen: Vec<SocketAddr>,
    /// Worker threads; 0 = one per allowed CPU, two in cache mode
    /// ([`CACHE_WORKERS_PER_CPU`]). Default 0.
    #[serde(deserialize_with = "workers")]
    pub workers: u64,
    /// Pin workers to CPUs. Default true.
    pub pin_workers: bool,
    /// Connections per worker. Default 16384.
    #[serde(deserialize_with = "positive")]
    pub max_connections_per_worker: u64,
    /// listen(2) backlog per worker socket. Default 1024.
    #[serde(deserialize_with = "positive")]
    pub backlog: u64,
    /// Blocking threads per disk for cold reads. Default 8.
    #[serde(deserialize_with = "positive")]
    pub cold_threads_per_disk: u64,
    /// Largest GET/HEAD request body read and dropped, bytes. Default 65536.
    pub max_discarded_body: u64,
    /// HTTP/2 with prior knowledge (h2c) on the plain listeners. Default true.
    pub http2: bool,
}

impl Default for ServerSection {
    fn default() -> Self {
        let o = ServerOptions::new(PathBuf::new());
        ServerSection {
            listen: o.listen,
            workers: 0,
            pin_workers: true,
            max_connections_per_worker: o.max_connections_per_worker as u64,
            backlog: u64::from(o.backlog),
            cold_threads_per_disk: o.cold_threads_per_disk as u64,
            max_discarded_body: o.max_discarded_body,
            http2: o.http2,
        }
    }
}

/// `[appliance]`: the library served from local disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApplianceSection {
    /// Directory served. Default: the bundled sample library.
    pub root: PathBuf,
    /// Open files cached per worker; 0 disables the cache. Default 16384.
    #[serde(deserialize_with = "open_file_cache")]
    pub open_file_cache: u64,
    /// Milliseconds a cached open file is trusted before its path is checked again.
    /// Default 1000.
    pub open_file_cache_valid_ms: u64,
    /// Watch the directories of cached files with inotify (changes drop entries at
    /// once; watched entries need no `stat`). Default true.
    pub open_file_cache_watch: bool,
    /// `Access-Control-Allow-Origin` on file responses; empty = none. Default `*`.
    #[serde(deserialize_with = "field_value")]
    pub cors_allow_origin: String,
}

impl Default for ApplianceSection {
    fn default() -> Self {
        ApplianceSection {
            root: sample_root().unwrap_or_else(|_| PathBuf::from(NO_SAMPLE)),
            open_file_cache: defaults::DEFAULT_OPEN_FILE_CACHE as u64,
            open_file_cache_valid_ms: defaults::DEFAULT_OPEN_FILE_CACHE_VALID.as_millis() as u64,
            open_file_cache_watch: true,
            cors_allow_origin: defaults::DEFAULT_CORS_ALLOW_ORIGIN.to_owned(),
        }
    }
}

/// `[cache_control]`: the `Cache-Control` sent per file extension.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheControlSection {
    /// For extensions not listed; empty = no header. Default empty.
    #[serde(deserialize_with = "field_value")]
    pub default: String,
    /// Extension (no dot, case-insensitive) → value; merged over the built-in table;
    /// an empty value removes the header for that extension.
    #[serde(deserialize_with = "extension_map")]
    pub extensions: std::collections::BTreeMap<String, String>,
}

impl Default for CacheControlSection {
    fn default() -> Self {
        CacheControlSection {
            default: String::new(),
            extensions: defaults::default_cache_control().into_iter().collect(),
        }
    }
}

impl Config {
    /// Read and parse a file. The error text names the file, key and line.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        Config::load_with(path, None)
    }

    /// Read and parse a file, with the quick start (`serve --origin --cache-dir`)
    /// replacing its origins, routes and disks before cache mode is checked.
    pub fn load_with(path: &Path, quick: Option<&QuickStart>) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Config::parse_with(&text, quick).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// Parse TOML text (the tests' entry; the binary always goes through `parse_with`).
    #[cfg(test)]
    pub fn parse(text: &str) -> Result<Config, toml::de::Error> {
        Config::parse_with(text, None)
    }

    /// Parse TOML text, then apply the quick start (if any) and check cache mode.
    pub fn parse_with(text: &str, quick: Option<&QuickStart>) -> Result<Config, toml::de::Error> {
        let mut config: Config = toml::from_str(text).map_err(|e| redact_secret(text, e))?;
        config
            .admin
            .load_token_file()
            .map_err(<toml::de::Error as serde::de::Error>::custom)?;
        config
            .tls
            .check()
            .map_err(<toml::de::Error as serde::de::Error>::custom)?;
        if let Some(key) = config.tcp.unknown_listener(&config.listen_addresses()) {
            return Err(error_at(
                text,
                key.span(),
                &config.unknown_listener_message(*key.get_ref()),
            ));
        }
        // h2c is a plain listener's: a TLS listener offers h2 by ALPN (`[tls] http2`).
        let tls_listen = &config.tls.listen;
        if let Some((key, _)) = config
            .tcp
            .listeners
            .iter()
            .find(|(k, o)| o.http2.is_some() && tls_listen.contains(k.get_ref()))
        {
            return Err(error_at(
                text,
                key.span(),
                &format!(
                    "tcp.listeners.\"{}\": http2 is for plain listeners (h2c); a TLS listener offers h2 by ALPN, set [tls] http2",
                    key.get_ref()
                ),
            ));
        }
        // Configured extensions merge over the built-in table.
        let mut merged: std::collections::BTreeMap<String, String> =
            defaults::default_cache_control().into_iter().collect();
        merged.extend(std::mem::take(&mut config.cache_control.extensions));
        config.cache_control.extensions = merged;
        if let Some(q) = quick {
            q.apply(&mut config.cache, &mut config.origin, &mut config.route);
        }
        let cache = config.cache_sections();
        if cache.is_on() {
            let options = CacheOptions::try_from(cache).map_err(|e| {
                // The quick start's origins and routes are not the file's.
                let place = e.place.filter(|_| quick.is_none());
                match e.span.or_else(|| place.and_then(|p| p.span_in(text))) {
                    Some(span) => error_at(text, span, &e.message),
                    None => <toml::de::Error as serde::de::Error>::custom(e.message),
                }
            })?;
            config.cache_options = Some(options);
        }
        if let Some(c) = &config.cluster {
            if config.cache_options.is_none() {
                return Err(serde::de::Error::custom(
                    "[cluster] needs cache mode ([cache], [[origin]] and [[route]])",
                ));
            }
            if c.get_ref().self_name.is_empty() && c.get_ref().self_env.is_none() {
                // Required, though every other key has a default: said as the TOML
                // parser says a missing key, at the section's line.
                return Err(error_at(
                    text,
                    c.span(),
                    "missing field `self` (or `self_env`)",
                ));
            }
            config.cluster_options = Some(c.get_ref().load().map_err(serde::de::Error::custom)?);
        }
        Ok(config)
    }

    /// Cache mode's sections.
    pub fn cache_sections(&self) -> CacheSections<'_> {
        CacheSections {
            cache: self.cache.as_ref(),
            origins: &self.origin,
            routes: &self.route,
        }
    }

    /// Whether the file (with the quick start) turns cache mode on.
    pub fn cache_mode(&self) -> bool {
        self.cache_sections().is_on()
    }

    /// Every listen address, plain then TLS: what `tcp.listeners` keys may name.
    fn listen_addresses(&self) -> Vec<SocketAddr> {
        self.server
            .listen
            .iter()
            .chain(self.tls.listen.iter())
            .copied()
            .collect()
    }

    fn unknown_listener_message(&self, addr: SocketAddr) -> String {
        let known: Vec<String> = self
            .listen_addresses()
            .iter()
            .map(|a| a.to_string())
            .collect();
        format!(
            "tcp.listeners.\"{addr}\": not a listen address (server.listen and tls.listen are: {})",
            known.join(", ")
        )
    }

    /// Check `tcp.listeners` again after the command line replaced `server.listen`
    /// (`--listen`): every override must still name a listener.
    pub fn check_listener_overrides(&self) -> Result<(), String> {
        match self.tcp.unknown_listener(&self.listen_addresses()) {
            Some(key) => Err(self.unknown_listener_message(*key.get_ref())),
            None => Ok(()),
        }
    }

    /// In appliance mode, that there is a library to serve: `appliance.root` is a
    /// directory. The error says how to give one (`--root DIR` or `appliance.root`), and
    /// where the bundled sample was looked for when the root was left at its default.
    pub fn check_root(&self) -> Result<(), String> {
        let root = &self.appliance.root;
        if self.cache_mode() || root.is_dir() {
            return Ok(());
        }
        if root.as_os_str() == NO_SAMPLE {
            let looked: Vec<String> = sample_root()
                .err()
                .unwrap_or_default()
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            return Err(format!(
                "no library to serve: the bundled sample library is not where this binary looks for it ({}); give --root DIR (or appliance.root in a --config file), or cache mode with --origin URL --cache-dir DIR",
                looked.join(", ")
            ));
        }
        Err(format!(
            "appliance.root {} is not a directory (give the library to serve with --root DIR or appliance.root)",
            root.display()
        ))
    }

    /// The effective configuration as TOML (what `check-config` prints).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot print configuration: {e}\n"))
    }

    /// Typed server options.
    pub fn to_options(&self) -> ServerOptions {
        let mut o = ServerOptions::new(self.appliance.root.clone());
        o.listen = self.server.listen.clone();
        if self.server.workers > 0 {
            o.workers = self.server.workers as usize;
        } else if self.cache_mode() {
            o.workers = CACHE_WORKERS_PER_CPU * defaults::default_workers();
        }
        o.pin_workers = if self.server.pin_workers {
            Pinning::Pinned
        } else {
            Pinning::Unpinned
        };
        o.max_connections_per_worker = self.server.max_connections_per_worker as usize;
        o.backlog = u32::try_from(self.server.backlog).unwrap_or(u32::MAX);
        o.cold_threads_per_disk = self.server.cold_threads_per_disk as usize;
        o.max_discarded_body = self.server.max_discarded_body;
        o.http2 = self.server.http2;
        o.timeouts = self.timeouts;
        o.open_file_cache = usize::try_from(self.appliance.open_file_cache).unwrap_or(usize::MAX);
        o.open_file_cache_valid = Duration::from_millis(self.appliance.open_file_cache_valid_ms);
        o.open_file_cache_watch = self.appliance.open_file_cache_watch;
        o.cors_allow_origin =
            Some(self.appliance.cors_allow_origin.clone()).filter(|v| !v.is_empty());
        o.cache_control = self
            .cache_control
            .extensions
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect();
        o.default_cache_control =
            Some(self.cache_control.default.clone()).filter(|v| !v.is_empty());
        o.admin = self.admin.to_options();
        o.access_log = self.access_log.clone();
        o.tcp = self.tcp.to_options();
        o.tls = Some(self.tls.clone()).filter(|t| !t.listen.is_empty());
        o.cache = self.cache_options.clone();
        o.cluster = self.cluster_options.clone();
        o.fill = self.fill.clone();
        o
    }
}

/// Keys whose values are secrets (`admin.token`; the cluster's secrets): an error on their
/// line is reported without the line, which the `toml` crate otherwise quotes, so that a
/// secret never reaches `check-config`'s output or the log of a rejected reload.
const SECRET_KEYS: &[&str] = &["token", "secret", "secrets"];

/// Whether `line` assigns one of [`SECRET_KEYS`] (`token = ...`, `admin.token = ...`,
/// `admin = { token = ... }`).
fn assigns_secret(line: &str) -> bool {
    let b = line.as_bytes();
    SECRET_KEYS.iter().any(|key| {
        line.match_indices(key).any(|(at, _)| {
            let before = at.checked_sub(1).map(|i| b[i]);
            let key_starts =
                before.is_none_or(|c| matches!(c, b' ' | b'\t' | b'{' | b',' | b'.' | b'"'));
            let rest = line[at + key.len()..].trim_start_matches('"').trim_start();
            key_starts && rest.starts_with('=')
        })
    })
}

/// `e` as it is, unless it is about a line that assigns a secret: then the line number
/// and the message only, and the message too is replaced if it quotes the value.
fn redact_secret(text: &str, e: toml::de::Error) -> toml::de::Error {
    let Some(span) = e.span() else { return e };
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    if !assigns_secret(line) {
        return e;
    }
    let line_no = text[..start].matches('\n').count() + 1;
    let value = line
        .split_once('=')
        .map_or("", |(_, v)| v.trim().trim_matches(['"', '\'']));
    let message = if value.len() >= 4 && e.message().contains(value) {
        "invalid value (not shown: it is a secret)"
    } else {
        e.message()
    };
    <toml::de::Error as serde::de::Error>::custom(format!(
        "TOML parse error at line {line_no} (the line is not shown: it holds a secret)\n{message}"
    ))
}

/// An error for a check made after deserialisation (across sections), laid out as the
/// `toml` crate lays out its own: line, column, the line itself and a caret.
fn error_at(text: &str, span: std::ops::Range<usize>, message: &str) -> toml::de::Error {
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_no = text[..start].matches('\n').count() + 1;
    let column = text[line_start..start].chars().count() + 1;
    let line = text[line_start..].lines().next().unwrap_or("");
    let gutter = " ".repeat(line_no.to_string().len());
    let width = span
        .end
        .saturating_sub(span.start)
        .clamp(1, line.len().max(1));
    <toml::de::Error as serde::de::Error>::custom(format!(
        "TOML parse error at line {line_no}, column {column}\n{gutter} |\n{line_no} | {line}\n{gutter} | {}{}\n{message}",
        " ".repeat(column - 1),
        "^".repeat(width)
    ))
}

fn workers<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = u64::deserialize(d)?;
    if n > MAX_WORKERS {
        return Err(serde::de::Error::custom(format!(
            "must be between 0 (one per CPU) and {MAX_WORKERS}"
        )));
    }
    Ok(n)
}

/// Largest `appliance.open_file_cache`: one descriptor each, per worker; the server
/// also caps it at start-up to a quarter of the descriptor limit shared by the workers.
const MAX_OPEN_FILE_CACHE: u64 = 1 << 20;

fn open_file_cache<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = u64::deserialize(d)?;
    if n > MAX_OPEN_FILE_CACHE {
        return Err(serde::de::Error::custom(format!(
            "must be between 0 (off) and {MAX_OPEN_FILE_CACHE}"
        )));
    }
    Ok(n)
}

fn positive<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = u64::deserialize(d)?;
    if n == 0 {
        return Err(serde::de::Error::custom("must be greater than 0"));
    }
    Ok(n)
}

/// A header field value we will send verbatim: visible ASCII and spaces only (RFC 9110
/// §5.5), so configuration can never inject a CR/LF into a response.
fn field_value<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    check_field_value(&s).map_err(serde::de::Error::custom)?;
    Ok(s)
}

fn check_field_value(s: &str) -> Result<(), &'static str> {
    if s.bytes()
        .all(|b| b == b' ' || b == b'\t' || (0x21..0x7f).contains(&b))
    {
        Ok(())
    } else {
        Err("header values may contain only visible ASCII, spaces and tabs")
    }
}

/// A configured file extension: letters and digits, no dot. Its own type so that the
/// error span points at the offending key, not at the table header.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
struct Extension(String);

impl<'de> Deserialize<'de> for Extension {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let k = String::deserialize(d)?;
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(serde::de::Error::custom(format!(
                "extension `{k}`: letters and digits only, no dot"
            )));
        }
        Ok(Extension(k))
    }
}

/// A `Cache-Control` value, validated where it is written (see [`check_field_value`]).
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
struct FieldValue(String);

impl<'de> Deserialize<'de> for FieldValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        field_value(d).map(FieldValue)
    }
}

fn extension_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<std::collections::BTreeMap<String, String>, D::Error> {
    let m = std::collections::BTreeMap::<Extension, FieldValue>::deserialize(d)?;
    Ok(m.into_iter().map(|(k, v)| (k.0, v.0)).collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_all_defaults() {
        let c = Config::parse("").unwrap();
        let o = c.to_options();
        assert_eq!(o.listen, vec!["127.0.0.1:8080".parse().unwrap()]);
        assert_eq!(o.root, PathBuf::from(SAMPLE_ROOT));
        assert_eq!(
            o.timeouts.request_head,
            defaults::DEFAULT_REQUEST_HEAD_TIMEOUT
        );
        assert!(o.cache_control.iter().any(|(e, _)| e == "m3u8"));
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let e = Config::parse("[server]\nworkers = 2\nworkres = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3"), "{e}");
        assert!(e.contains("workres"), "{e}");
        let e = Config::parse("[sever]\n").unwrap_err().to_string();
        assert!(e.contains("sever") && e.contains("line 1"), "{e}");
    }

    #[test]
    fn bad_values_name_the_line() {
        for (text, line, what) in [
            (
                "[server]\nlisten = [\"nope\"]\n",
                "line 2",
                "invalid socket address",
            ),
            ("\n[server]\n\nworkers = 5000\n", "line 4", "between 0"),
            ("[timeouts]\nsend_ms = 0\n", "line 2", "greater than 0"),
            ("[timeouts]\nsend_ms = -1\n", "line 2", ""),
            (
                "[cache_control.extensions]\n\"m3.u8\" = \"x\"\n",
                "line 2",
                "letters and digits",
            ),
            (
                "[cache_control]\ndefault = \"a\\r\\nSet-Cookie: x\"\n",
                "line 2",
                "visible ASCII",
            ),
        ] {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.contains(line) && e.contains(what), "{text:?} -> {e}");
        }
    }

    #[test]
    fn operating_sections_validate_and_convert() {
        for (text, line, what) in [
            ("[admin]\nlisten = \"nowhere\"\n", "line 2", "ip:port"),
            ("[admin]\ntoken = \"short\"\n", "line 2", "at least 16"),
            (
                "[access_log]\nsample = 1.5\n",
                "line 2",
                "between 0.0 and 1.0",
            ),
            ("[access_log]\nformat = \"xml\"\n", "line 2", "combined"),
            ("[access_log]\nflush_ms = 0\n", "line 2", "between 1"),
            ("[tcp]\ncongestion = \"BBR!\"\n", "line 2", "algorithm"),
            ("[tcp]\ninfo_sampel = 0.5\n", "line 2", "info_sampel"),
        ] {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.contains(line) && e.contains(what), "{text:?} -> {e}");
        }
        let c = Config::parse(
            "[admin]\nlisten = \"off\"\ntoken = \"0123456789abcdef\"\n[access_log]\npath = \"/tmp/a.log\"\nformat = \"json\"\n[tcp]\ncongestion = \"cubic\"\ninfo_sample = 1.0\n",
        )
        .unwrap();
        let o = c.to_options();
        assert_eq!(o.admin.listen, None);
        assert_eq!(o.access_log.path, Some(PathBuf::from("/tmp/a.log")));
        assert_eq!(o.tcp.congestion.as_deref(), Some("cubic"));
        assert_eq!(o.tcp.info_sample, 1.0);
        let d = Config::parse("").unwrap().to_options();
        assert_eq!(d.admin.listen, Some("127.0.0.1:9090".parse().unwrap()));
        assert_eq!(d.access_log.path, None);
        assert_eq!(d.tcp.max_pacing_rate, None);
    }

    /// Finding 4 of issue 19: a token never appears in an error (the `toml` crate quotes
    /// the line it failed on), in the printed configuration, or in `Debug`.
    #[test]
    fn the_admin_token_is_never_printed() {
        const SECRET: &str = "s3cr3t-t0k3n-XYZ";
        for text in [
            // Too short, with a space, not a string, a syntax error on its line, inline.
            "[admin]\ntoken = \"s3cr3t\"\n".to_owned(),
            format!("[admin]\ntoken = \"{SECRET} x\"\n"),
            "[admin]\ntoken = 31415926535897932\n".to_owned(),
            format!("[admin]\ntoken = {SECRET}\n"),
            format!("[admin]\ntoken = \"{SECRET}\n"),
            format!("admin = {{ token = \"{SECRET} x\" }}\n"),
            format!("[admin]\ntoken = [\"{SECRET}\"]\n"),
        ] {
            let e = Config::parse(&text).unwrap_err().to_string();
            for leak in [SECRET, "s3cr3t", "31415926535897932"] {
                assert!(!e.contains(leak), "{text:?} -> {e}");
            }
            assert!(e.contains("line "), "{text:?} -> {e}");
        }
        let c = Config::parse(&format!("[admin]\ntoken = \"{SECRET}\"\n")).unwrap();
        assert_eq!(c.admin.effective_token().expose(), SECRET);
        assert_eq!(c.to_options().admin.token, SECRET);
        let printed = c.to_toml();
        assert!(
            printed.contains("token = \"<redacted: 16 bytes>\""),
            "{printed}"
        );
        for shown in [printed, format!("{c:?}"), format!("{:?}", c.to_options())] {
            assert!(!shown.contains(SECRET), "{shown}");
        }
        // Other keys' errors still quote their line.
        let e = Config::parse("[admin]\nlisten = \"nowhere\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("nowhere"), "{e}");
    }

    #[test]
    fn token_file_is_read_trimmed_checked_and_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "from-a-secret-file-1234\r\n").unwrap();
        let text = format!("[admin]\ntoken_file = {:?}\n", file.to_str().unwrap());
        let c = Config::parse(&text).unwrap();
        assert_eq!(c.to_options().admin.token, "from-a-secret-file-1234");
        assert!(!c.to_toml().contains("from-a-secret"));
        // Re-read on every parse (a reload parses the file again).
        std::fs::write(&file, "rotated-secret-file-5678\n").unwrap();
        assert_eq!(
            Config::parse(&text).unwrap().to_options().admin.token,
            "rotated-secret-file-5678"
        );
        for (content, what) in [
            ("short-tok\n", "at least 16"),
            ("", "empty"),
            ("a tok with spaces in it\n", "at least 16"),
        ] {
            std::fs::write(&file, content).unwrap();
            let e = Config::parse(&text).unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("token_file"), "{e}");
            assert!(content.is_empty() || !e.contains(content.trim()), "{e}");
        }
        let both = format!("{text}token = \"0123456789abcdef\"\n");
        let e = Config::parse(&both).unwrap_err().to_string();
        assert!(e.contains("not both"), "{e}");
        let missing = "[admin]\ntoken_file = \"/nonexistent/linerate-token\"\n";
        let e = Config::parse(missing).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/linerate-token"), "{e}");
    }

    #[test]
    fn allowed_hosts_are_names_or_literals_without_ports() {
        let c = Config::parse(
            "[admin]\nallowed_hosts = [\"Admin.Example\", \"10.0.0.1\", \"[fd00::1]\"]\nallow_upgrade_binary = true\n",
        )
        .unwrap();
        let o = c.to_options().admin;
        assert_eq!(o.allowed_hosts, ["admin.example", "10.0.0.1", "[fd00::1]"]);
        assert!(o.allow_upgrade_binary);
        assert!(
            !Config::parse("")
                .unwrap()
                .to_options()
                .admin
                .allow_upgrade_binary
        );
        for bad in ["admin.example:9090", "fd00::1", "", "a/b"] {
            let text = format!("[admin]\nallowed_hosts = [{bad:?}]\n");
            let e = Config::parse(&text).unwrap_err().to_string();
            assert!(e.contains("allowed_hosts"), "{bad} -> {e}");
        }
    }

    #[test]
    fn per_listener_tcp_overrides_validate_and_resolve() {
        let c = Config::parse(
            "[server]\nlisten = [\"127.0.0.1:8080\"]\n[tls]\nlisten = [\"127.0.0.1:8443\"]\n[[tls.certificates]]\nchain = \"a\"\nkey = \"b\"\n[tcp]\ncongestion = \"cubic\"\nmax_pacing_rate = 1000\n[tcp.listeners.\"127.0.0.1:8443\"]\ncongestion = \"bbr\"\n",
        )
        .unwrap();
        let tcp = c.to_options().tcp;
        let plain = tcp.tuning_for("127.0.0.1:8080".parse().unwrap());
        let tls = tcp.tuning_for("127.0.0.1:8443".parse().unwrap());
        assert_eq!(plain.congestion.as_deref(), Some("cubic"));
        assert_eq!(tls.congestion.as_deref(), Some("bbr"));
        // A key the override leaves out comes from [tcp]; 0 turns the cap off.
        assert_eq!(tls.max_pacing_rate, Some(1000));
        let c = Config::parse(
            "[tcp]\nmax_pacing_rate = 1000\n[tcp.listeners.\"127.0.0.1:8080\"]\nmax_pacing_rate = 0\n",
        )
        .unwrap();
        let t = c
            .to_options()
            .tcp
            .tuning_for("127.0.0.1:8080".parse().unwrap());
        assert_eq!((t.congestion, t.max_pacing_rate), (None, None));
        // Printed back, it parses to the same thing.
        assert_eq!(Config::parse(&c.to_toml()).unwrap().to_toml(), c.to_toml());

        for (text, line, what) in [
            (
                "[tcp]\n[tcp.listeners.\"127.0.0.1:9\"]\ncongestion = \"reno\"\n",
                "line 2",
                "not a listen address",
            ),
            (
                "[tcp.listeners.\"nowhere\"]\ncongestion = \"reno\"\n",
                "line 1",
                "socket address",
            ),
            (
                "[tcp.listeners.\"127.0.0.1:8080\"]\ncongestoin = \"reno\"\n",
                "line 2",
                "congestoin",
            ),
            (
                "[tcp.listeners.\"127.0.0.1:8080\"]\ncongestion = \"BBR!\"\n",
                "line 2",
                "algorithm",
            ),
        ] {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.contains(line) && e.contains(what), "{text:?} -> {e}");
        }
        // `--listen` replaces server.listen after parsing: checked again then.
        let mut c =
            Config::parse("[tcp.listeners.\"127.0.0.1:8080\"]\ncongestion = \"reno\"\n").unwrap();
        assert!(c.check_listener_overrides().is_ok());
        c.server.listen = vec!["127.0.0.1:1".parse().unwrap()];
        let e = c.check_listener_overrides().unwrap_err();
        assert!(e.contains("127.0.0.1:8080"), "{e}");
    }

    #[test]
    fn metrics_switch() {
        use linerate_server::operate::Metrics;
        assert_eq!(
            Config::parse("").unwrap().to_options().admin.metrics,
            Metrics::On
        );
        let c = Config::parse("[admin]\nmetrics = false\n").unwrap();
        assert_eq!(c.to_options().admin.metrics, Metrics::Off);
        let e = Config::parse("[admin]\nmetrics = \"no\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn extensions_merge_over_defaults_and_empty_removes() {
        let c = Config::parse(
            "[cache_control.extensions]\nts = \"max-age=5\"\nmpd = \"\"\nbin = \"no-store\"\n",
        )
        .unwrap();
        let o = c.to_options();
        let get = |e: &str| {
            o.cache_control
                .iter()
                .find(|(k, _)| k == e)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("ts").as_deref(), Some("max-age=5"));
        assert_eq!(get("mpd"), None);
        assert_eq!(get("bin").as_deref(), Some("no-store"));
        assert!(get("m3u8").is_some());
    }

    #[test]
    fn printed_config_parses_back_identically() {
        let c = Config::parse("[server]\nworkers = 3\nlisten = [\"127.0.0.1:0\", \"[::1]:0\"]\n")
            .unwrap();
        let again = Config::parse(&c.to_toml()).unwrap();
        assert_eq!(c.to_toml(), again.to_toml());
        assert_eq!(again.server.workers, 3);
    }
}
