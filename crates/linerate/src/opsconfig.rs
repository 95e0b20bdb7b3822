//! The operating sections of the configuration file: `[admin]` and `[tcp]` (reference:
//! docs/config.md); `[access_log]` is [`linerate_server::operate::AccessLogOptions`]
//! itself. Same rules as the rest of the file: unknown keys and bad values are errors
//! naming the key and line; defaults come from `linerate_server::operate`.

use std::net::SocketAddr;
use std::path::PathBuf;

use std::collections::BTreeMap;

use linerate_server::operate::{self, AdminOptions, ListenerTcp, Metrics, TcpOptions, TcpTuning};
use serde::{Deserialize, Deserializer, Serialize};
use toml::Spanned;

/// Shortest admin token accepted: a guessable token would make the commands public to
/// anyone who can reach the admin address.
const MIN_TOKEN_LEN: usize = 16;

/// `[admin]`: the admin API.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSection {
    /// `"ip:port"` or `"off"`. Default `"127.0.0.1:9090"`. Restart needed to change.
    #[serde(deserialize_with = "admin_listen")]
    pub listen: String,
    /// Bearer token for the commands; empty disables them (unless `token_file` gives
    /// one). Default empty. Never printed: `check-config` shows its length only.
    pub token: Token,
    /// File holding the token (a Kubernetes Secret mounted as a file), read at start and
    /// on every reload; trailing CR/LF removed. Exclusive with `token`. Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// Host names the admin API answers to besides its own address and loopback names
    /// (DNS-rebinding defence; see docs/config.md). Default none.
    #[serde(deserialize_with = "allowed_hosts")]
    pub allowed_hosts: Vec<String>,
    /// Let `POST /upgrade?binary=PATH` start another program. Default false (403).
    pub allow_upgrade_binary: bool,
    /// Count per-request metrics; false makes `/metrics` and `/stats.json` answer 404.
    /// Default true. Restart needed to change.
    pub metrics: bool,
    /// The token `token_file` held when the file was parsed (see
    /// [`AdminSection::load_token_file`]).
    #[serde(skip)]
    file_token: Token,
}

impl Default for AdminSection {
    fn default() -> Self {
        AdminSection {
            listen: operate::DEFAULT_ADMIN_LISTEN.to_owned(),
            token: Token::default(),
            token_file: None,
            allowed_hosts: Vec::new(),
            allow_upgrade_binary: false,
            metrics: true,
            file_token: Token::default(),
        }
    }
}

/// The admin token: a secret, so neither `Debug` nor `Serialize` (what `check-config`
/// prints) shows it, only its length; and a bad one is refused without echoing it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// The token itself, for the server and the CLI's `Authorization` field only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What is printed instead of the token.
    fn redacted(&self) -> String {
        format!("<redacted: {} bytes>", self.0.len())
    }

    /// Check a token's text; the error never contains it.
    fn check(s: String) -> Result<Token, String> {
        if s.is_empty() {
            return Ok(Token(s));
        }
        if s.len() < MIN_TOKEN_LEN || !s.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(format!(
                "must be empty (commands off) or at least {MIN_TOKEN_LEN} visible ASCII characters without spaces (the value is not shown: it is a secret)"
            ));
        }
        Ok(Token(s))
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl Serialize for Token {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_empty() {
            s.serialize_str("")
        } else {
            s.serialize_str(&self.redacted())
        }
    }
}

impl<'de> Deserialize<'de> for Token {
    /// Any TOML value is taken in, so that serde's "invalid type: integer `123`" (which
    /// quotes the value) never describes a token; the message is ours alone.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'v> serde::de::Visitor<'v> for V {
            type Value = Token;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Token, E> {
                Token::check(v.to_owned()).map_err(E::custom)
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Token, E> {
                Err(E::custom(NOT_A_STRING))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Token, E> {
                Err(E::custom(NOT_A_STRING))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Token, E> {
                Err(E::custom(NOT_A_STRING))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Token, E> {
                Err(E::custom(NOT_A_STRING))
            }
            fn visit_seq<A: serde::de::SeqAccess<'v>>(self, _: A) -> Result<Token, A::Error> {
                Err(serde::de::Error::custom(NOT_A_STRING))
            }
            fn visit_map<A: serde::de::MapAccess<'v>>(self, _: A) -> Result<Token, A::Error> {
                Err(serde::de::Error::custom(NOT_A_STRING))
            }
        }
        d.deserialize_any(V)
    }
}

/// The error for a token that is not a TOML string (its value is not quoted).
const NOT_A_STRING: &str = "must be a string (the value is not shown: it is a secret)";

/// Longest `token_file` read: a token is a line; a larger file is the wrong file.
const MAX_TOKEN_FILE: u64 = 4096;

/// `[tcp]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TcpSection {
    /// Congestion control for every listener without an override (`bbr`, `cubic`...);
    /// empty = system default. Default empty.
    #[serde(deserialize_with = "congestion")]
    pub congestion: String,
    /// Pacing cap per connection, bytes/s, for listeners without an override; 0 = none.
    /// Default 0.
    pub max_pacing_rate: u64,
    /// Share of connections whose TCP_INFO is sampled, 0.0-1.0. Default 0.01.
    #[serde(deserialize_with = "share")]
    pub info_sample: f64,
    /// `[tcp.listeners."ip:port"]`: overrides for one listen address (plain or TLS),
    /// which must be configured in `server.listen` or `tls.listen`. Default none.
    /// The keys keep their position in the file for the error that names them.
    #[serde(
        deserialize_with = "listener_overrides",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub listeners: BTreeMap<Spanned<SocketAddr>, ListenerTcpSection>,
}

/// `[tcp.listeners."ip:port"]`: a key left out takes the `[tcp]` value.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTcpSection {
    /// Congestion control on this listener; empty = system default. Default: `tcp.congestion`.
    #[serde(
        default,
        deserialize_with = "congestion_override",
        skip_serializing_if = "Option::is_none"
    )]
    pub congestion: Option<String>,
    /// Pacing cap per connection on this listener, bytes/s; 0 = none. Default:
    /// `tcp.max_pacing_rate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pacing_rate: Option<u64>,
    /// h2c with prior knowledge on this plain listener (TLS listeners: `[tls] http2`).
    /// Default: `server.http2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2: Option<bool>,
}

impl Default for TcpSection {
    fn default() -> Self {
        TcpSection {
            congestion: String::new(),
            max_pacing_rate: 0,
            info_sample: operate::DEFAULT_TCP_INFO_SAMPLE,
            listeners: BTreeMap::new(),
        }
    }
}

impl AdminSection {
    /// Read `token_file` (at start and on every reload, which parse the file again):
    /// exactly one of `token` and `token_file`; trailing CR and LF removed (`echo` and
    /// editors add one); the same rule as `token`. Errors name the file, never its text.
    pub fn load_token_file(&mut self) -> Result<(), String> {
        let Some(path) = &self.token_file else {
            return Ok(());
        };
        if !self.token.0.is_empty() {
            return Err("admin: give token or token_file, not both".into());
        }
        let shown = path.display();
        let mut text = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| {
                std::io::Read::read_to_end(
                    &mut std::io::Read::take(f, MAX_TOKEN_FILE + 1),
                    &mut text,
                )
            })
            .map_err(|e| format!("admin.token_file {shown}: {e}"))?;
        if text.len() as u64 > MAX_TOKEN_FILE {
            return Err(format!(
                "admin.token_file {shown}: larger than {MAX_TOKEN_FILE} bytes, not a token"
            ));
        }
        while text.last().is_some_and(|&b| b == b'\n' || b == b'\r') {
            text.pop();
        }
        let text = String::from_utf8(text).map_err(|_| {
            format!("admin.token_file {shown}: not text (the content is not shown: it is a secret)")
        })?;
        if text.is_empty() {
            return Err(format!("admin.token_file {shown}: empty"));
        }
        self.file_token =
            Token::check(text).map_err(|e| format!("admin.token_file {shown}: {e}"))?;
        Ok(())
    }

    /// Take the token from `path` instead of `token` or `token_file` (`serve
    /// --token-file`), read now.
    pub fn use_token_file(&mut self, path: PathBuf) -> Result<(), String> {
        self.token = Token::default();
        self.token_file = Some(path);
        self.load_token_file()
    }

    /// The token in effect: `token`, or what `token_file` held.
    pub fn effective_token(&self) -> &Token {
        if self.token_file.is_some() {
            &self.file_token
        } else {
            &self.token
        }
    }

    /// Typed options.
    pub fn to_options(&self) -> AdminOptions {
        AdminOptions {
            listen: self.listen.parse::<SocketAddr>().ok(),
            token: self.effective_token().expose().to_owned(),
            allowed_hosts: self.allowed_hosts.clone(),
            allow_upgrade_binary: self.allow_upgrade_binary,
            metrics: if self.metrics {
                Metrics::On
            } else {
                Metrics::Off
            },
        }
    }
}

impl TcpSection {
    /// Typed options; each override is resolved against the `[tcp]` defaults.
    pub fn to_options(&self) -> TcpOptions {
        let tuning = |congestion: &str, rate: u64| TcpTuning {
            congestion: Some(congestion.to_owned()).filter(|c| !c.is_empty()),
            max_pacing_rate: Some(rate).filter(|&r| r > 0),
        };
        let default = tuning(&self.congestion, self.max_pacing_rate);
        TcpOptions {
            congestion: default.congestion,
            max_pacing_rate: default.max_pacing_rate,
            listeners: self
                .listeners
                .iter()
                .map(|(listen, o)| ListenerTcp {
                    listen: *listen.get_ref(),
                    tuning: tuning(
                        o.congestion.as_deref().unwrap_or(&self.congestion),
                        o.max_pacing_rate.unwrap_or(self.max_pacing_rate),
                    ),
                    http2: o.http2,
                })
                .collect(),
            info_sample: self.info_sample,
        }
    }

    /// The first override whose address is not among `listen` (the plain and TLS listen
    /// addresses), with its position in the file when it came from one.
    pub fn unknown_listener(&self, listen: &[SocketAddr]) -> Option<&Spanned<SocketAddr>> {
        self.listeners
            .keys()
            .find(|k| !listen.contains(k.get_ref()))
    }
}

/// The override table, refusing two keys that spell the same address differently
/// (`"[::1]:80"` and `"[0:0:0:0:0:0:0:1]:80"` would otherwise silently merge).
fn listener_overrides<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<Spanned<SocketAddr>, ListenerTcpSection>, D::Error> {
    struct Overrides;
    impl<'de> serde::de::Visitor<'de> for Overrides {
        type Value = BTreeMap<Spanned<SocketAddr>, ListenerTcpSection>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a table of \"ip:port\" = { congestion, max_pacing_rate, http2 }")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((k, v)) = m.next_entry::<Spanned<SocketAddr>, ListenerTcpSection>()? {
                let addr = *k.get_ref();
                if out.insert(k, v).is_some() {
                    return Err(serde::de::Error::custom(format!(
                        "tcp.listeners: {addr} is listed twice"
                    )));
                }
            }
            Ok(out)
        }
    }
    d.deserialize_map(Overrides)
}

fn congestion_override<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    congestion(d).map(Some)
}

fn admin_listen<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    check_admin_listen(&s).map_err(serde::de::Error::custom)?;
    Ok(s)
}

/// `admin.listen` (and `serve --admin`): `"ip:port"` or `"off"`.
pub fn check_admin_listen(s: &str) -> Result<(), String> {
    if s == "off" || s.parse::<SocketAddr>().is_ok() {
        Ok(())
    } else {
        Err("must be \"ip:port\" or \"off\"".to_owned())
    }
}

/// `allowed_hosts`: host names or IP literals (IPv6 in brackets), no port (the admin API
/// compares the host part of `Host` only), stored lower-case.
fn allowed_hosts<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let hosts = Vec::<String>::deserialize(d)?;
    hosts
        .into_iter()
        .map(|h| {
            let ok = !h.is_empty()
                && match h.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
                    Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
                    None => h
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_'),
                };
            if ok {
                Ok(h.to_ascii_lowercase())
            } else {
                Err(serde::de::Error::custom(format!(
                    "allowed_hosts: {h:?} is not a host name or IP literal (no port; IPv6 in brackets)"
                )))
            }
        })
        .collect()
}

fn share<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if !(0.0..=1.0).contains(&v) {
        return Err(serde::de::Error::custom("must be between 0.0 and 1.0"));
    }
    Ok(v)
}

fn congestion<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.len() >= linerate_sys_name_max()
        || !s
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(serde::de::Error::custom(
            "an algorithm name such as \"bbr\" or \"cubic\" (lower-case letters, digits, _; under 16 characters)",
        ));
    }
    Ok(s)
}

/// The kernel's `TCP_CA_NAME_MAX` (16, including the terminating NUL).
const fn linerate_sys_name_max() -> usize {
    16
}
