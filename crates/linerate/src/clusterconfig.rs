//! `[cluster]`: this node's name and its peers, inline or in a `peers_file` (re-read on
//! every reload, so SIGHUP applies a new peer list), and the shared secret(s) that
//! authenticate peer requests, inline (`secret`) or in files (`secret_file`, also
//! re-read on every reload), into [`linerate_server::ClusterOptions`].
//!
//! A secret is never printed: `check-config` shows `"<redacted>"` in its place, and no
//! error message quotes it (the inline value is taken as any TOML value and checked
//! here, so a wrong type is not echoed with its line by the TOML parser).
//!
//! Not here: what the cluster does (`linerate_server`'s `cluster` and `proxy::peer`).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use linerate_server::clusteropts::{
    self as defaults, ClusterOptions, ClusterSecret, PeerOptions, MAX_SECRETS, NEEDS_SECRET,
};
use serde::{Deserialize, Serialize, Serializer};

/// What `check-config` prints in place of a secret.
const REDACTED: &str = "<redacted>";

/// `[cluster]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// This node's name; one of the peers.
    #[serde(rename = "self")]
    pub self_name: String,
    /// Every node, this one included (or use `peers_file`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<PeerEntry>,
    /// A file listing the peers: TOML (`peers = [{ name, address, weight }]`) or one
    /// per line (`name address [weight]`, `#` comments). Re-read on reload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers_file: Option<PathBuf>,
    /// Bounded-load factor c. Default 1.25.
    #[serde(default = "default_load_factor")]
    pub load_factor: f64,
    /// Failures in a row before a peer is down. Default 3.
    #[serde(default = "default_down_after")]
    pub down_after: u32,
    /// Successful probes in a row before a down peer is up. Default 2.
    #[serde(default = "default_up_after")]
    pub up_after: u32,
    /// Milliseconds between probes of a down peer. Default 1000.
    #[serde(default = "default_probe_interval_ms")]
    pub probe_interval_ms: u64,
    /// Seconds after start or a membership change during which an owner's miss asks
    /// the previous owner's cache first; 0 = never. Default 600.
    #[serde(default = "default_previous_owner_window_s")]
    pub previous_owner_window_s: u64,
    /// Milliseconds to connect to a peer. Default 1000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Milliseconds to wait for a peer's response head. Default 15000.
    #[serde(default = "default_first_byte_timeout_ms")]
    pub first_byte_timeout_ms: u64,
    /// The shared secret, inline: a string, or a list of two (the first signs, both
    /// verify: a rotation). At least 32 bytes each. Give this or `secret_file`.
    /// Kept as any TOML value until checked, so no parse error echoes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<InlineSecret>,
    /// A file holding the shared secret (one trailing newline is not part of it), or a
    /// list of two files (the first signs). Read at start and on every reload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<SecretFiles>,
    /// Transition setting: addresses of peers whose unsigned `Linerate-Peer` fields
    /// (nodes from before authentication) are accepted. Default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accept_unsigned_from: Vec<IpAddr>,
}

/// `secret_file`: one path, or a list (the first signs).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SecretFiles {
    /// One file.
    One(PathBuf),
    /// One or two files, the first signing.
    List(Vec<PathBuf>),
}

/// `secret` as written: any TOML value (checked in [`ClusterSection::to_options`], so
/// no parse error quotes it). `Debug` and `Serialize` show only its shape.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct InlineSecret(toml::Value);

impl std::fmt::Debug for InlineSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InlineSecret(<redacted>)")
    }
}

impl Serialize for InlineSecret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            toml::Value::Array(a) => s.collect_seq(a.iter().map(|_| REDACTED)),
            _ => s.serialize_str(REDACTED),
        }
    }
}

/// One node, as listed.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerEntry {
    /// Its name (the same on every node's list).
    pub name: String,
    /// Its cache-mode listener, `ip:port`.
    pub address: SocketAddr,
    /// Relative share of the keys. Default 1.
    #[serde(default = "default_weight")]
    pub weight: f64,
}

/// A peers file in TOML form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PeersFile {
    peers: Vec<PeerEntry>,
}

fn default_weight() -> f64 {
    1.0
}
fn default_load_factor() -> f64 {
    defaults::DEFAULT_LOAD_FACTOR
}
fn default_down_after() -> u32 {
    defaults::DEFAULT_DOWN_AFTER
}
fn default_up_after() -> u32 {
    defaults::DEFAULT_UP_AFTER
}
fn default_probe_interval_ms() -> u64 {
    defaults::DEFAULT_PROBE_INTERVAL.as_millis() as u64
}
fn default_previous_owner_window_s() -> u64 {
    defaults::DEFAULT_PREVIOUS_OWNER_WINDOW.as_secs()
}
fn default_connect_timeout_ms() -> u64 {
    defaults::DEFAULT_PEER_CONNECT_TIMEOUT.as_millis() as u64
}
fn default_first_byte_timeout_ms() -> u64 {
    defaults::DEFAULT_PEER_FIRST_BYTE_TIMEOUT.as_millis() as u64
}

impl ClusterSection {
    /// The options, reading `peers_file` now; every check of
    /// [`ClusterOptions::check`] applied.
    pub fn to_options(&self) -> Result<ClusterOptions, String> {
        let entries = match (&self.peers_file, self.peers.is_empty()) {
            (Some(_), false) => {
                return Err("cluster: give peers or peers_file, not both".into());
            }
            (Some(path), true) => read_peers_file(path)?,
            (None, _) => self.peers.clone(),
        };
        let peers = entries
            .into_iter()
            .map(|e| PeerOptions {
                name: e.name,
                address: e.address,
                weight: e.weight,
            })
            .collect();
        let mut o = ClusterOptions::new(&self.self_name, peers);
        o.secrets = self.secrets()?;
        o.accept_unsigned_from = self.accept_unsigned_from.clone();
        o.load_factor = self.load_factor;
        o.down_after = self.down_after;
        o.up_after = self.up_after;
        o.probe_interval = Duration::from_millis(self.probe_interval_ms.max(1));
        o.previous_owner_window = Duration::from_secs(self.previous_owner_window_s);
        o.connect_timeout = Duration::from_millis(self.connect_timeout_ms.max(1));
        o.first_byte_timeout = Duration::from_millis(self.first_byte_timeout_ms.max(1));
        o.check()?;
        Ok(o)
    }
}

impl ClusterSection {
    /// The secrets, inline or read from their files now. No message quotes one.
    fn secrets(&self) -> Result<Vec<ClusterSecret>, String> {
        let secrets = match (&self.secret, &self.secret_file) {
            (Some(_), Some(_)) => {
                return Err("cluster: give secret or secret_file, not both".into());
            }
            (None, None) => return Err(NEEDS_SECRET.into()),
            (Some(InlineSecret(value)), None) => inline_secrets(value)?,
            (None, Some(SecretFiles::One(path))) => vec![read_secret_file(path)?],
            (None, Some(SecretFiles::List(paths))) => {
                if paths.is_empty() || paths.len() > MAX_SECRETS {
                    return Err(format!(
                        "cluster: secret_file lists 1 to {MAX_SECRETS} files (the one that signs first)"
                    ));
                }
                paths
                    .iter()
                    .map(|p| read_secret_file(p))
                    .collect::<Result<_, _>>()?
            }
        };
        Ok(secrets)
    }
}

/// `secret = "..."` or `secret = ["...", "..."]`.
fn inline_secrets(value: &toml::Value) -> Result<Vec<ClusterSecret>, String> {
    let shape =
        || format!("cluster: secret must be a string or a list of 1 to {MAX_SECRETS} strings");
    match value {
        toml::Value::String(s) => Ok(vec![ClusterSecret::new(s.as_bytes().to_vec())]),
        toml::Value::Array(list) if !list.is_empty() && list.len() <= MAX_SECRETS => list
            .iter()
            .map(|v| match v {
                toml::Value::String(s) => Ok(ClusterSecret::new(s.as_bytes().to_vec())),
                _ => Err(shape()),
            })
            .collect(),
        _ => Err(shape()),
    }
}

/// A secret file's bytes, less one trailing newline (`\n` or `\r\n`: what `echo` and
/// editors add).
fn read_secret_file(path: &Path) -> Result<ClusterSecret, String> {
    let mut bytes =
        std::fs::read(path).map_err(|e| format!("cluster.secret_file {}: {e}", path.display()))?;
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    Ok(ClusterSecret::new(bytes))
}

/// Read a peers file: TOML (`peers = [...]`) or lines of `name address [weight]`.
fn read_peers_file(path: &std::path::Path) -> Result<Vec<PeerEntry>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cluster.peers_file {}: {e}", path.display()))?;
    if text.trim_start().starts_with("peers") || text.contains("[[peers]]") {
        return toml::from_str::<PeersFile>(&text)
            .map(|f| f.peers)
            .map_err(|e| format!("cluster.peers_file {}: {e}", path.display()));
    }
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |what: &str| {
            format!(
                "cluster.peers_file {} line {}: {what}",
                path.display(),
                n + 1
            )
        };
        let mut words = line.split_whitespace();
        let (Some(name), Some(address)) = (words.next(), words.next()) else {
            return Err(bad("expected `name address [weight]`"));
        };
        let address = address
            .parse()
            .map_err(|_| bad("address must be ip:port"))?;
        let weight = match words.next() {
            Some(w) => w.parse().map_err(|_| bad("weight must be a number"))?,
            None => 1.0,
        };
        if words.next().is_some() {
            return Err(bad("expected `name address [weight]`"));
        }
        out.push(PeerEntry {
            name: name.to_string(),
            address,
            weight,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret for the tests that are not about secrets.
    const KEY: &str = "secret = \"0123456789abcdef0123456789abcdef\"\n";

    fn parse(text: &str) -> Result<ClusterOptions, String> {
        parse_bare(&format!("{KEY}{text}"))
    }

    fn parse_bare(text: &str) -> Result<ClusterOptions, String> {
        toml::from_str::<ClusterSection>(text)
            .map_err(|e| e.to_string())?
            .to_options()
    }

    #[test]
    fn secrets_inline_in_files_rotated_and_never_printed() {
        let peers = "self = \"a\"\npeers = [{ name = \"a\", address = \"10.0.0.1:80\" }, { name = \"b\", address = \"10.0.0.2:80\" }]\n";
        // No secret: the error says what to add.
        let e = parse_bare(peers).expect_err("no secret");
        assert!(
            e.contains("secret_file = \"/etc/linerate/cluster.key\""),
            "{e}"
        );
        // Inline, one or two (the first signs).
        let long = "x".repeat(32);
        let o =
            parse_bare(&format!("{peers}secret = \"{long}\"")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            o.secrets,
            vec![ClusterSecret::new(long.clone().into_bytes())]
        );
        let two = format!("{peers}secret = [\"{long}\", \"{}\"]", "y".repeat(40));
        let o = parse_bare(&two).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.secrets[1].bytes().len(), 40);
        // Printed back redacted, in the same shape.
        let section: ClusterSection = toml::from_str(&two).unwrap_or_else(|e| panic!("{e}"));
        let printed = toml::to_string(&section).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            printed.contains("secret = [\"<redacted>\", \"<redacted>\"]"),
            "{printed}"
        );
        assert!(!printed.contains(&long), "{printed}");
        assert!(!format!("{section:?}").contains(&long));
        // Bad ones: named, not quoted.
        for (bad, needle) in [
            (format!("{peers}secret = \"short-xyzzy\""), "has 11 bytes"),
            (format!("{peers}secret = 12345678"), "must be a string"),
            (
                format!("{peers}secret = [\"{long}xyzzy\", \"a\", \"b\"]"),
                "must be a string",
            ),
            (
                format!("{peers}secret = \"{long}xyzzy\"\nsecret_file = \"/k\""),
                "not both",
            ),
        ] {
            let e = parse_bare(&bad).expect_err(&bad);
            assert!(e.contains(needle), "{e}");
            assert!(!e.contains("xyzzy") && !e.contains("12345678"), "{e}");
        }
        // Files: one trailing newline dropped; two files rotate; read on every parse
        // (a reload).
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (new, old) = (dir.path().join("new.key"), dir.path().join("old.key"));
        std::fs::write(&new, format!("{long}\n")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&old, "z".repeat(33)).unwrap_or_else(|e| panic!("{e}"));
        let one = format!("{peers}secret_file = {:?}", new.display().to_string());
        let o = parse_bare(&one).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            o.secrets,
            vec![ClusterSecret::new(long.clone().into_bytes())]
        );
        let both = format!(
            "{peers}secret_file = [{:?}, {:?}]",
            new.display().to_string(),
            old.display().to_string()
        );
        let o = parse_bare(&both).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.secrets[1].bytes(), "z".repeat(33).as_bytes());
        std::fs::write(&new, "short-xyzzy\n").unwrap_or_else(|e| panic!("{e}"));
        let e = parse_bare(&one).expect_err("short file");
        assert!(e.contains("has 11 bytes") && !e.contains("xyzzy"), "{e}");
        let missing = format!("{peers}secret_file = \"/nonexistent/linerate.key\"");
        assert!(parse_bare(&missing)
            .expect_err("missing")
            .contains("/nonexistent/linerate.key"));
        // The transition list names peers only.
        let listed = format!("{peers}secret = \"{long}\"\naccept_unsigned_from = [\"10.0.0.2\"]");
        let o = parse_bare(&listed).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.accept_unsigned_from.len(), 1);
        let stranger = listed.replace("10.0.0.2\"]", "10.0.0.9\"]");
        assert!(parse_bare(&stranger)
            .expect_err("not a peer")
            .contains("10.0.0.9"));
    }

    #[test]
    fn inline_peers_with_defaults() {
        let o = parse(
            r#"self = "a"
peers = [{ name = "a", address = "10.0.0.1:80" }, { name = "b", address = "10.0.0.2:80", weight = 2 }]"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.self_name, "a");
        assert_eq!(o.peers.len(), 2);
        assert_eq!(o.peers[1].weight, 2.0);
        assert_eq!(o.load_factor, 1.25);
        assert_eq!((o.down_after, o.up_after), (3, 2));
    }

    #[test]
    fn peers_file_in_both_forms_and_errors() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let lines = dir.path().join("peers");
        std::fs::write(&lines, "# nodes\na 10.0.0.1:80\nb 10.0.0.2:80 3 # big\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let text = format!(
            "self = \"b\"\npeers_file = {:?}",
            lines.display().to_string()
        );
        let o = parse(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.peers[1].weight, 3.0);
        let t = dir.path().join("peers.toml");
        std::fs::write(
            &t,
            "peers = [{ name = \"a\", address = \"10.0.0.1:80\" }]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let text = format!("self = \"a\"\npeers_file = {:?}", t.display().to_string());
        assert_eq!(
            parse(&text).unwrap_or_else(|e| panic!("{e}")).peers.len(),
            1
        );
        std::fs::write(&lines, "a not-an-address\n").unwrap_or_else(|e| panic!("{e}"));
        let text = format!(
            "self = \"a\"\npeers_file = {:?}",
            lines.display().to_string()
        );
        assert!(parse(&text).expect_err("bad address").contains("line 1"));
        assert!(
            parse("self = \"x\"\npeers = [{ name = \"a\", address = \"10.0.0.1:80\" }]")
                .expect_err("self not listed")
                .contains("not one of the peers")
        );
        assert!(parse("self = \"a\"\nbogus = 1").is_err());
    }
}
