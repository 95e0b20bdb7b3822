//! The `[tls]` section of the configuration file: HTTPS listeners, their certificates
//! (`[[tls.certificates]]`), the unknown-SNI policy, the handshake timeout and kernel
//! TLS (reference: docs/config.md). Same rules as the rest of the file: unknown keys and
//! bad values are errors naming the key and line. Certificate files are read by the
//! server at start-up and on reload (and by `check-config`), not here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use linerate_server::options::{
    CertificateOptions, KtlsMode, TlsOptions, UnknownSni, DEFAULT_HANDSHAKE_TIMEOUT,
};
use serde::{Deserialize, Deserializer, Serialize};

/// Longest handshake timeout accepted: past a minute the slowloris defence is gone.
const MAX_HANDSHAKE_TIMEOUT_MS: u64 = 60_000;

/// `[tls]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSection {
    /// HTTPS addresses. Default none (no TLS).
    pub listen: Vec<SocketAddr>,
    /// `"default"` (serve the default certificate) or `"refuse"`. Default `"default"`.
    #[serde(deserialize_with = "unknown_sni")]
    pub unknown_sni: String,
    /// Whole-handshake deadline, ms. Default 10000.
    #[serde(deserialize_with = "handshake_timeout")]
    pub handshake_timeout_ms: u64,
    /// Use kernel TLS when the kernel supports the cipher. Default true.
    pub ktls: bool,
    /// `[[tls.certificates]]`.
    pub certificates: Vec<CertificateSection>,
}

impl Default for TlsSection {
    fn default() -> Self {
        TlsSection {
            listen: Vec::new(),
            unknown_sni: "default".into(),
            handshake_timeout_ms: DEFAULT_HANDSHAKE_TIMEOUT.as_millis() as u64,
            ktls: true,
            certificates: Vec::new(),
        }
    }
}

/// `[[tls.certificates]]`: one chain and key.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateSection {
    /// PEM chain, leaf first.
    pub chain: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// SNI names served with this certificate. Default none.
    #[serde(default, deserialize_with = "server_names")]
    pub names: Vec<String>,
    /// The certificate for clients without SNI. Default false (the first one is).
    #[serde(default)]
    pub default: bool,
}

impl TlsSection {
    /// Typed options; `None` when no TLS listener is configured.
    pub fn to_options(&self) -> Option<TlsOptions> {
        if self.listen.is_empty() {
            return None;
        }
        Some(TlsOptions {
            listen: self.listen.clone(),
            certificates: self
                .certificates
                .iter()
                .map(|c| CertificateOptions {
                    chain: c.chain.clone(),
                    key: c.key.clone(),
                    names: c.names.clone(),
                    default: c.default,
                })
                .collect(),
            unknown_sni: if self.unknown_sni == "refuse" {
                UnknownSni::Refuse
            } else {
                UnknownSni::Default
            },
            handshake_timeout: Duration::from_millis(self.handshake_timeout_ms),
            ktls: if self.ktls {
                KtlsMode::Auto
            } else {
                KtlsMode::Off
            },
        })
    }

    /// Cross-key checks the per-key ones cannot make.
    pub fn validate(&self) -> Result<(), String> {
        if !self.listen.is_empty() && self.certificates.is_empty() {
            return Err("tls.listen is set but there is no [[tls.certificates]] entry".into());
        }
        if self.certificates.iter().filter(|c| c.default).count() > 1 {
            return Err("only one [[tls.certificates]] entry may have default = true".into());
        }
        let mut seen = std::collections::HashSet::new();
        for name in self.certificates.iter().flat_map(|c| &c.names) {
            if !seen.insert(name) {
                return Err(format!(
                    "tls server name {name} is listed for two certificates"
                ));
            }
        }
        Ok(())
    }
}

fn unknown_sni<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    match s.as_str() {
        "default" | "refuse" => Ok(s),
        _ => Err(serde::de::Error::custom(
            "must be \"default\" (serve the default certificate) or \"refuse\"",
        )),
    }
}

fn handshake_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = u64::deserialize(d)?;
    if n == 0 || n > MAX_HANDSHAKE_TIMEOUT_MS {
        return Err(serde::de::Error::custom(format!(
            "must be between 1 and {MAX_HANDSHAKE_TIMEOUT_MS}"
        )));
    }
    Ok(n)
}

/// DNS names as SNI carries them (RFC 6066 §3: no IP literals, no trailing dot), lower
/// case; a leading `*.` label is a one-label wildcard.
fn server_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    names
        .into_iter()
        .map(|n| {
            let lower = n.to_ascii_lowercase();
            let bare = lower.strip_prefix("*.").unwrap_or(&lower);
            let ok = !bare.is_empty()
                && bare.len() <= 253
                && bare.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                })
                && bare.parse::<std::net::IpAddr>().is_err();
            if ok {
                Ok(lower)
            } else {
                Err(serde::de::Error::custom(format!(
                    "server name `{n}`: a DNS name (letters, digits, hyphens, dots; optional leading `*.`)"
                )))
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use crate::config::Config;

    #[test]
    fn tls_section_parses_and_defaults() {
        let c = Config::parse(
            "[tls]\nlisten = [\"127.0.0.1:8443\"]\n[[tls.certificates]]\nchain = \"a.pem\"\nkey = \"a.key\"\nnames = [\"Example.com\", \"*.example.com\"]\n",
        )
        .unwrap();
        let o = c.to_options().tls.unwrap();
        assert_eq!(
            o.certificates[0].names,
            vec!["example.com", "*.example.com"]
        );
        assert_eq!(o.unknown_sni, linerate_server::UnknownSni::Default);
        assert_eq!(o.ktls, linerate_server::KtlsMode::Auto);
        assert!(Config::parse("").unwrap().to_options().tls.is_none());
    }

    #[test]
    fn bad_tls_values_name_the_line() {
        for (text, line, what) in [
            ("[tls]\nunknown_sni = \"maybe\"\n", "line 2", "refuse"),
            ("[tls]\nhandshake_timeout_ms = 0\n", "line 2", "between 1"),
            (
                "[tls]\n[[tls.certificates]]\nchain = \"a\"\nkey = \"b\"\nnames = [\"a b\"]\n",
                "line 5",
                "DNS name",
            ),
            (
                "[tls]\n[[tls.certificates]]\nchain = \"a\"\nkey = \"b\"\nkye = 1\n",
                "line 5",
                "kye",
            ),
        ] {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.contains(line) && e.contains(what), "{text:?} -> {e}");
        }
        let e = Config::parse("[tls]\nlisten = [\"127.0.0.1:1\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls.certificates"), "{e}");
    }
}
