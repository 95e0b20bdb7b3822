//! TLS server configuration: certificates loaded from PEM files, chosen by SNI name with
//! a default, protocol versions, ALPN and session resumption, built into one rustls
//! `ServerConfig` that every worker shares read-only.
//!
//! Choices, and why:
//! - TLS 1.3 and 1.2 only, with the ring provider's suites, which are exactly the AEADs
//!   kernel TLS can carry (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305): a connection
//!   never negotiates a cipher that forces it off the kernel path.
//! - Server cipher order (`ignore_client_order`): AES-GCM first, which CPUs accelerate.
//! - ALPN `h2` then `http/1.1` (`[tls] http2 = false`: `http/1.1` only; RFC 7301
//!   §3.2: a client that offers ALPN with neither gets `no_application_protocol`).
//! - Resumption by stateless tickets (RFC 5077 for 1.2, RFC 8446 §4.6.1 for 1.3), one
//!   ticket key set for the process, kept across certificate reloads, so a resumed
//!   client can land on any worker. No server-side session cache: it would be a shared
//!   lock taken on handshakes.
//! - `enable_secret_extraction`, which the kernel TLS hand-over needs.
//!
//! Reloading builds a whole new `ServerConfig` from the same files; connections already
//! established keep theirs. Not here: the handshake itself (`tls::conn`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use linerate_sys::ktls::Support;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, NoServerSessionStorage, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio::sync::watch;

use crate::options::{KtlsMode, TlsOptions, UnknownSni};

/// The ALPN protocol we speak (RFC 7301; registry name for HTTP/1.1).
const ALPN_HTTP11: &[u8] = b"http/1.1";

/// The ALPN name of HTTP/2 over TLS (RFC 9113 §3.2), offered first when enabled.
pub(crate) const ALPN_H2: &[u8] = b"h2";

/// TLS 1.3 tickets sent after a full handshake. Two lets a player open two parallel
/// connections (manifest + segments) that both resume; rustls's default too.
const TLS13_TICKETS: usize = 2;

/// A certificate problem, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// A PEM file could not be read or held nothing usable.
    #[error("{path}: {what}")]
    File {
        /// The file.
        path: String,
        /// What was wrong.
        what: String,
    },
    /// The configuration as a whole is unusable.
    #[error("{0}")]
    Invalid(String),
}

/// Certificates by SNI name.
#[derive(Debug)]
struct CertStore {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// Keyed by the part after `*.`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    default: Arc<CertifiedKey>,
    unknown: UnknownSni,
}

impl CertStore {
    fn lookup(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(c) = self.exact.get(&name) {
            return Some(c.clone());
        }
        // A wildcard covers exactly one label (RFC 6125 §6.4.3).
        let parent = name.split_once('.').map(|(_, p)| p)?;
        self.wildcard.get(parent).cloned()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match hello.server_name() {
            // No SNI (IP-address clients, old players): the default certificate.
            None => Some(self.default.clone()),
            Some(name) => match self.lookup(name) {
                Some(c) => Some(c),
                None => match self.unknown {
                    UnknownSni::Default => Some(self.default.clone()),
                    // rustls then aborts the handshake with a fatal alert.
                    UnknownSni::Refuse => {
                        tracing::debug!(sni = name, "unknown SNI name refused");
                        None
                    }
                },
            },
        }
    }
}

/// The provider every TLS config uses (client and server).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Keeps what must survive certificate reloads (the ticket keys).
pub struct TlsConfigBuilder {
    options: TlsOptions,
    ticketer: Arc<dyn rustls::server::ProducesTickets>,
}

impl TlsConfigBuilder {
    /// Validate `options` shape and create the ticket keys.
    pub fn new(options: TlsOptions) -> Result<TlsConfigBuilder, TlsConfigError> {
        if options.certificates.is_empty() {
            return Err(TlsConfigError::Invalid(
                "TLS listeners need at least one certificate".into(),
            ));
        }
        if options.certificates.iter().filter(|c| c.default).count() > 1 {
            return Err(TlsConfigError::Invalid(
                "only one certificate may be the default".into(),
            ));
        }
        let ticketer = rustls::crypto::ring::Ticketer::new()
            .map_err(|e| TlsConfigError::Invalid(format!("session ticket keys: {e}")))?;
        Ok(TlsConfigBuilder { options, ticketer })
    }

    /// Read every certificate and key from disk and build a server config (start-up).
    pub fn build(&self) -> Result<Arc<ServerConfig>, TlsConfigError> {
        self.build_from(None)
    }

    /// Like [`TlsConfigBuilder::build`] with the certificates and SNI policy of
    /// `reloaded` (a reloaded configuration; `None`: the start-up ones). The ticket
    /// keys stay, so sessions resume across reloads. A failure changes nothing.
    pub fn build_from(
        &self,
        reloaded: Option<&TlsOptions>,
    ) -> Result<Arc<ServerConfig>, TlsConfigError> {
        let options = reloaded.unwrap_or(&self.options);
        if options.certificates.is_empty() {
            return Err(TlsConfigError::Invalid(
                "TLS listeners need at least one certificate".into(),
            ));
        }
        let provider = provider();
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        let mut default = None;
        let any_default = options.certificates.iter().any(|c| c.default);
        for (i, c) in options.certificates.iter().enumerate() {
            let key = load_certified_key(&provider, &c.chain, &c.key)?;
            if c.default || (i == 0 && !any_default) {
                default = Some(key.clone());
            }
            for name in &c.names {
                let name = name.to_ascii_lowercase();
                let table = match name.strip_prefix("*.") {
                    Some(rest) => (&mut wildcard, rest.to_owned()),
                    None => (&mut exact, name.clone()),
                };
                if table.0.insert(table.1, key.clone()).is_some() {
                    return Err(TlsConfigError::Invalid(format!(
                        "server name {name} is listed for two certificates"
                    )));
                }
            }
        }
        let default = default.ok_or_else(|| TlsConfigError::Invalid("no certificate".into()))?;
        let store = CertStore {
            exact,
            wildcard,
            default,
            unknown: options.unknown_sni,
        };
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| TlsConfigError::Invalid(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(store));
        config.alpn_protocols = if options.http2 {
            vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()]
        } else {
            vec![ALPN_HTTP11.to_vec()]
        };
        config.ignore_client_order = true;
        config.enable_secret_extraction = true;
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.ticketer = self.ticketer.clone();
        config.send_tls13_tickets = TLS13_TICKETS;
        Ok(Arc::new(config))
    }
}

fn load_certified_key(
    provider: &CryptoProvider,
    chain: &Path,
    key: &Path,
) -> Result<Arc<CertifiedKey>, TlsConfigError> {
    let file_err = |path: &Path, what: String| TlsConfigError::File {
        path: path.display().to_string(),
        what,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(chain)
        .map_err(|e| file_err(chain, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_err(chain, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_err(chain, "no CERTIFICATE block".into()));
    }
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| file_err(key, e.to_string()))?;
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| file_err(key, e.to_string()))?;
    let certified = CertifiedKey::new(certs, signing);
    match certified.keys_match() {
        // A key type that cannot report its public half is accepted unchecked.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(Arc::new(certified))
        }
        Err(e) => Err(file_err(
            key,
            format!("does not match {}: {e}", chain.display()),
        )),
    }
}

/// TLS state shared read-only by the workers.
pub(crate) struct SharedTls {
    /// What the kernel's kTLS accepts (probed once at start-up).
    pub(crate) support: Support,
    /// Whether kTLS may be used at all.
    pub(crate) mode: KtlsMode,
    /// Whole-handshake deadline.
    pub(crate) handshake_timeout: Duration,
    /// The current server configuration; replaced when certificates are reloaded.
    pub(crate) configs: watch::Receiver<Arc<ServerConfig>>,
    /// Where a reload publishes the new configuration.
    pub(crate) publish: watch::Sender<Arc<ServerConfig>>,
    /// Rebuilds configurations (keeps the session-ticket keys across reloads).
    pub(crate) builder: Arc<TlsConfigBuilder>,
}
