//! Test support for HTTPS end-to-end tests: throw-away certificates made with rcgen (no
//! private key is committed), the `[tls]` configuration that serves them, and a real
//! rustls client (ring provider) that records which certificate the server presented.
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failed step should fail the test loudly"
)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};

/// A self-signed certificate and its key, written to a temporary directory.
pub struct TestCert {
    /// PEM chain file.
    pub chain: PathBuf,
    /// PEM key file.
    pub key: PathBuf,
    /// The certificate, DER.
    pub der: CertificateDer<'static>,
    _dir: tempfile::TempDir,
}

impl TestCert {
    /// A certificate for `names` (DNS names).
    pub fn new(names: &[&str]) -> TestCert {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let ck = rcgen::generate_simple_self_signed(names).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let chain = dir.path().join("chain.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&chain, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
        TestCert {
            chain,
            key,
            der: ck.cert.der().clone(),
            _dir: dir,
        }
    }

    /// Overwrite this certificate's files with a new certificate for `names`.
    pub fn replace(&mut self, names: &[&str]) {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let ck = rcgen::generate_simple_self_signed(names).unwrap();
        std::fs::write(&self.chain, ck.cert.pem()).unwrap();
        std::fs::write(&self.key, ck.signing_key.serialize_pem()).unwrap();
        self.der = ck.cert.der().clone();
    }

    /// A `[[tls.certificates]]` entry.
    pub fn toml(&self, names: &[&str], default: bool) -> String {
        format!(
            "[[tls.certificates]]\nchain = {:?}\nkey = {:?}\nnames = {:?}\ndefault = {default}\n",
            self.chain.to_str().unwrap(),
            self.key.to_str().unwrap(),
            names
        )
    }
}

/// `[tls]` on an ephemeral port with `keys` (other `[tls]` keys), then `certs`.
pub fn tls_section(keys: &str, certs: &[String]) -> String {
    format!(
        "[tls]\nlisten = [\"127.0.0.1:0\"]\n{keys}\n{}",
        certs.concat()
    )
}

/// The HTTPS address a server logged ("listening on https://ADDR").
pub fn https_addr(log: &Arc<Mutex<Vec<String>>>) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for line in log.lock().unwrap().iter() {
            if let Some(rest) = line.split("listening on https://").nth(1) {
                let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
                return addr.parse().unwrap();
            }
        }
        assert!(Instant::now() < deadline, "no https listening line");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Accepts any certificate and records the one presented (SNI tests check which).
#[derive(Debug, Default)]
pub struct Recorder {
    /// The last end-entity certificate seen.
    pub seen: Mutex<Option<Vec<u8>>>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.seen.lock().unwrap() = Some(end_entity.to_vec());
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Protocol versions a client offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versions {
    /// TLS 1.3 only.
    Tls13,
    /// TLS 1.2 only.
    Tls12,
}

/// A client configuration that trusts `roots` (verifying names), offers ALPN http/1.1
/// and keeps sessions for resumption.
pub fn client(roots: &[&CertificateDer<'static>], versions: Versions) -> Arc<ClientConfig> {
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store.add((*r).clone()).unwrap();
    }
    let mut c = builder(versions)
        .with_root_certificates(store)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

/// A client that accepts any certificate and records it in `recorder`.
pub fn recording_client(recorder: Arc<Recorder>, versions: Versions) -> Arc<ClientConfig> {
    let mut c = builder(versions)
        .dangerous()
        .with_custom_certificate_verifier(recorder)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Every connection must show the certificate the server presents now: a resumed
    // session presents none, and a ticket that happened to arrive before an earlier
    // connection was dropped made the reload test see only the old certificate.
    c.resumption = rustls::client::Resumption::disabled();
    Arc::new(c)
}

/// A client offering one specific cipher suite.
pub fn client_with_suite(
    root: &CertificateDer<'static>,
    versions: Versions,
    suite: rustls::SupportedCipherSuite,
) -> Arc<ClientConfig> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = vec![suite];
    let mut store = rustls::RootCertStore::empty();
    store.add(root.clone()).unwrap();
    let v: &[&rustls::SupportedProtocolVersion] = match versions {
        Versions::Tls13 => &[&rustls::version::TLS13],
        Versions::Tls12 => &[&rustls::version::TLS12],
    };
    let mut c = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(v)
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

fn builder(versions: Versions) -> rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier> {
    let v: &[&rustls::SupportedProtocolVersion] = match versions {
        Versions::Tls13 => &[&rustls::version::TLS13],
        Versions::Tls12 => &[&rustls::version::TLS12],
    };
    ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(v)
        .unwrap()
}

/// A TLS connection (blocking) to `addr` with SNI `name`.
pub type Tls = StreamOwned<ClientConnection, TcpStream>;

/// Connect and complete the handshake; `Err` if the server refused it.
pub fn connect(addr: SocketAddr, name: &str, config: &Arc<ClientConfig>) -> std::io::Result<Tls> {
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(15)))?;
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let conn = ClientConnection::new(config.clone(), name).unwrap();
    let mut tls = StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// A parsed response: the plain-HTTP tests' type, read by the same reader.
pub type Resp = crate::support::Response;

/// Send a GET for `path` with extra header lines.
pub fn send_get(s: &mut impl Write, path: &str, headers: &[&str]) {
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: test\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.flush().unwrap();
}

/// Read one response (a body of Content-Length bytes). `None` at EOF before a head.
pub fn read_resp(s: &mut impl Read) -> Option<Resp> {
    crate::support::read_response(s, false)
}

/// GET on an established connection (keep-alive).
pub fn get(s: &mut Tls, path: &str, headers: &[&str]) -> Resp {
    send_get(s, path, headers);
    read_resp(s).unwrap()
}

/// Descriptors the process has open, except files under `root`: those are appliance
/// mode's open-file cache, held on purpose (bounded by `appliance.open_file_cache`),
/// not leaked; [`cached_files`] counts them.
pub fn open_fds(pid: u32, root: &std::path::Path) -> usize {
    fd_targets(pid)
        .into_iter()
        .filter(|t| !t.starts_with(root.canonicalize().unwrap()))
        .count()
}

/// Descriptors the process has open on files under `root` (its open-file cache).
pub fn cached_files(pid: u32, root: &std::path::Path) -> usize {
    fd_targets(pid)
        .into_iter()
        .filter(|t| t.starts_with(root.canonicalize().unwrap()))
        .count()
}

fn fd_targets(pid: u32) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .collect()
}
