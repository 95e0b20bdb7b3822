//! `[cluster]`: the files it names. The section is
//! [`linerate_server::ClusterOptions`] itself, which reads and checks its keys; here the
//! peers of a `peers_file` and the secrets of `secret` or `secret_file` are read (at
//! start and on every reload, so SIGHUP applies a new peer list or a rotated secret),
//! and the result is checked once, into the [`CheckedCluster`] the server takes.
//!
//! A secret is never printed: `check-config` shows `"<redacted>"` in its place, and no
//! error message quotes it (the inline value is read whatever its type and checked by
//! [`linerate_server::clusteropts::InlineSecret::secrets`], so a wrong type is not
//! echoed with its line by the TOML parser).
//!
//! `self_env` names the environment variable that holds `self` (a pod's name), read
//! here on every load.
//!
//! Not here: what the cluster does (`linerate_server`'s `cluster` and `proxy::peer`).

use std::path::Path;

use linerate_server::clusteropts::{
    CheckedCluster, ClusterOptions, ClusterSecret, PeerOptions, SecretFiles, MAX_SECRETS,
    NEEDS_SECRET,
};
use serde::Deserialize;

/// `[cluster]` as written: the option type itself (the tests' name for it).
#[cfg(test)]
pub type ClusterSection = ClusterOptions;

/// A peers file in TOML form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PeersFile {
    peers: Vec<PeerOptions>,
}

/// Reading the files `[cluster]` names.
pub trait LoadCluster {
    /// The options with `peers_file` and the secrets read now, checked.
    fn load(&self) -> Result<CheckedCluster, String>;

    /// [`LoadCluster::load`], as plain options (the tests' entry).
    #[cfg(test)]
    fn to_options(&self) -> Result<ClusterOptions, String> {
        self.load().map(CheckedCluster::into_options)
    }
}

impl LoadCluster for ClusterOptions {
    fn load(&self) -> Result<CheckedCluster, String> {
        let mut o = self.clone();
        if self.peers_dns.is_some() && !self.peers.is_empty() {
            return Err("cluster: give peers or peers_dns, not both".into());
        }
        if self.peers_dns.is_some() && self.peers_file.is_some() {
            return Err("cluster: give peers_dns or peers_file, not both".into());
        }
        if let Some(var) = &self.self_env {
            o.self_name = self_from_env(&self.self_name, var)?;
        }
        match (&self.peers_file, self.peers.is_empty()) {
            (Some(_), false) => {
                return Err("cluster: give peers or peers_file, not both".into());
            }
            (Some(path), true) => o.peers = read_peers_file(path)?,
            (None, _) => {}
        }
        o.secrets = secrets(self)?;
        o.into_checked()
    }
}

/// This node's name from environment variable `var` (`self_env`), which must be set
/// and non-empty; `self` must not be given too.
fn self_from_env(self_name: &str, var: &str) -> Result<String, String> {
    if !self_name.is_empty() {
        return Err("cluster: give self or self_env, not both".into());
    }
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(v),
        Ok(_) => Err(format!("cluster: self_env = {var:?}: the variable is empty")),
        Err(e) => Err(format!(
            "cluster: self_env = {var:?}: {e} (on Kubernetes: env {var} from fieldRef metadata.name)"
        )),
    }
}

/// The secrets, inline or read from their files now. No message quotes one.
fn secrets(c: &ClusterOptions) -> Result<Vec<ClusterSecret>, String> {
    match (&c.secret, &c.secret_file) {
        (Some(_), Some(_)) => Err("cluster: give secret or secret_file, not both".into()),
        (None, None) => Err(NEEDS_SECRET.into()),
        (Some(inline), None) => inline.secrets(),
        (None, Some(SecretFiles::One(path))) => Ok(vec![read_secret_file(path)?]),
        (None, Some(SecretFiles::List(paths))) => {
            if paths.is_empty() || paths.len() > MAX_SECRETS {
                return Err(format!(
                    "cluster: secret_file lists 1 to {MAX_SECRETS} files (the one that signs first)"
                ));
            }
            paths.iter().map(|p| read_secret_file(p)).collect()
        }
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
fn read_peers_file(path: &Path) -> Result<Vec<PeerOptions>, String> {
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
        if let Some(p) = out.iter().find(|p: &&PeerOptions| p.address == address) {
            return Err(bad(&format!(
                "{name:?} has the address {address} of {:?}: two nodes cannot share one",
                p.name
            )));
        }
        out.push(PeerOptions {
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

    /// `peers_dns` and `self_env`: `self` from the environment (which must hold it),
    /// no peers before DNS answers, and every mix with the other ways refused.
    #[test]
    fn peers_dns_and_self_env() {
        let dns = "peers_dns = \"_http._tcp.linerate.video.svc.cluster.local\"\n";
        // An unset variable; then one cargo sets for every test process (this crate
        // sets none: it forbids unsafe code).
        let unset = "LINERATE_TEST_UNSET_POD_NAME";
        let e = parse(&format!("{dns}self_env = \"{unset}\"\n")).expect_err("unset");
        assert!(
            e.contains(unset) && e.contains("fieldRef metadata.name"),
            "{e}"
        );
        let env = "self_env = \"CARGO_PKG_NAME\"\n";
        let o = parse(&format!(
            "{dns}{env}dns_server = \"127.0.0.1:5353\"\npeers_dns_interval_ms = 0"
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.self_name, "linerate");
        assert!(o.peers.is_empty());
        assert_eq!(
            o.dns_server,
            Some("127.0.0.1:5353".parse().unwrap_or_else(|_| unreachable!()))
        );
        assert_eq!(o.peers_dns_interval, std::time::Duration::from_millis(1));
        for (bad, needle) in [
            (format!("{dns}{env}self = \"a\""), "self or self_env"),
            (
                format!("{dns}{env}peers = [{{ name = \"a\", address = \"10.0.0.1:80\" }}]"),
                "peers or peers_dns",
            ),
            (
                format!("{dns}{env}peers_file = \"/p\""),
                "peers_dns or peers_file",
            ),
            (format!("peers_dns = \"a..b\"\n{env}"), "not a DNS name"),
            (
                format!("{dns}{env}accept_unsigned_from = [\"10.0.0.2\"]"),
                "needs listed peers",
            ),
            (format!("{dns}{env}dns_server = \"nowhere\""), "dns_server"),
        ] {
            let e = parse(&bad).expect_err(&bad);
            assert!(e.contains(needle), "{bad}: {e}");
        }
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
