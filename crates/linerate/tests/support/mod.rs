//! Test support for end-to-end tests: start the real `linerate` binary on 127.0.0.1
//! with a temporary configuration, speak raw HTTP/1.1 to it over real sockets, and stop
//! it (SIGTERM, then kill on drop so no test leaves a server behind).
#![allow(dead_code, reason = "each test binary uses a different subset")]
#![allow(
    clippy::unwrap_used,
    reason = "test harness: a failed step should fail the test loudly"
)]

pub mod dns;
pub mod kit;
pub mod netns;
pub mod origin;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the server gets to announce its listener.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running server process.
pub struct Server {
    child: Option<Child>,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Every line it logged so far.
    pub log: Arc<Mutex<Vec<String>>>,
    _config: tempfile::NamedTempFile,
}

/// The path of the built binary: `LINERATE_BIN` when set (the kTLS VM test runs a
/// static copy inside the guest, where cargo's path does not exist), else cargo's.
pub fn binary() -> PathBuf {
    std::env::var_os("LINERATE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_linerate")))
}

impl Server {
    /// Serve `root` with two workers on an ephemeral loopback port; `extra` is TOML
    /// appended to the generated configuration (sections other than [server] and
    /// [appliance], or use [`Server::start_with`]).
    pub fn start(root: &Path, extra: &str) -> Server {
        Server::start_with(root, "workers = 2\n", extra, &[])
    }

    /// Full control: `server_keys` go under `[server]`, `extra` after, `env` to the process.
    pub fn start_with(root: &Path, server_keys: &str, extra: &str, env: &[(&str, &str)]) -> Server {
        let text = format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\n{server_keys}\n[appliance]\nroot = {:?}\n{extra}\n",
            root.to_str().unwrap()
        );
        Server::start_text(&text, env)
    }

    /// Start with this whole configuration file (an ephemeral admin port is added unless
    /// it has an `[admin]` section). [`Server::addr`] is the first plain listener; the
    /// others are in [`Server::listening`].
    pub fn start_text(text: &str, env: &[(&str, &str)]) -> Server {
        Server::start_text_in(text, env, None)
    }

    /// [`Server::start_text`] inside network namespace `netns` (`ip netns exec`, which
    /// execs the binary: the child's pid is the server's).
    pub fn start_text_in(text: &str, env: &[(&str, &str)], netns: Option<&str>) -> Server {
        let mut config = tempfile::NamedTempFile::new().unwrap();
        // The admin API defaults to 127.0.0.1:9090; tests run in parallel, so each
        // server gets an ephemeral admin port unless the test configures [admin] itself.
        let admin = if text.contains("[admin]") {
            ""
        } else {
            "[admin]\nlisten = \"127.0.0.1:0\"\n"
        };
        write!(config, "{admin}{text}").unwrap();
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(binary());
                c
            }
            None => Command::new(binary()),
        };
        cmd.arg("serve").arg("--config").arg(config.path());
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.env("RUST_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let Some(addr) = wait_for_listening(child.stderr.take().unwrap(), log.clone()) else {
            // Never leave a server behind, even when it failed to announce itself.
            let _ = child.kill();
            let _ = child.wait();
            panic!("no listening line; log: {:?}", log.lock().unwrap());
        };
        Server {
            child: Some(child),
            addr,
            log,
            _config: config,
        }
    }

    /// A new connection with sane test timeouts.
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Send raw bytes on a new connection and read until the server closes it.
    pub fn raw(&self, bytes: &[u8]) -> Vec<u8> {
        let mut s = self.connect();
        s.write_all(bytes).unwrap();
        read_to_close(&mut s)
    }

    /// GET `path` with extra header lines (each without CRLF) on a new connection.
    pub fn get(&self, path: &str, headers: &[&str]) -> Response {
        self.request("GET", path, headers)
    }

    /// Any method on a new connection, `Connection: close`. `Host: test` unless
    /// `headers` has a `Host` line of its own.
    pub fn request(&self, method: &str, path: &str, headers: &[&str]) -> Response {
        let mut s = self.connect();
        let has_host = headers
            .iter()
            .any(|h| h.len() > 5 && h[..5].eq_ignore_ascii_case("host:"));
        let host = if has_host { "" } else { "Host: test\r\n" };
        let mut req = format!("{method} {path} HTTP/1.1\r\n{host}Connection: close\r\n");
        for h in headers {
            req.push_str(h);
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        read_response(&mut s, method == "HEAD").unwrap()
    }

    /// The OS process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Send a signal by name (TERM, INT...).
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// SIGTERM and wait (bounded) for exit.
    pub fn stop(mut self) -> ExitStatus {
        self.signal("TERM");
        let mut child = self.child.take().unwrap();
        wait_timeout(&mut child, Duration::from_secs(20))
            .expect("server did not exit after SIGTERM")
    }

    /// Wait (bounded) for exit after a signal was already sent.
    pub fn stop_waiting(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        wait_timeout(&mut child, Duration::from_secs(20)).expect("server did not exit")
    }

    /// The admin API's address (from its "admin api at http://ADDR" line, logged before
    /// the listening line).
    pub fn admin_addr(&self) -> SocketAddr {
        let log = self.log.lock().unwrap();
        let line = log
            .iter()
            .find(|l| l.contains("admin api at http://"))
            .expect("no admin api line");
        let rest = line.split("admin api at http://").nth(1).unwrap();
        let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
        addr.parse().unwrap()
    }

    /// The configuration file the server was started with (tests rewrite it to reload).
    pub fn config_path(&self) -> &Path {
        self._config.path()
    }

    /// Every plain listener's address, in configuration order (from the "listening on
    /// http://ADDR" lines, which are logged before the server counts as started).
    pub fn listening(&self) -> Vec<SocketAddr> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| l.split("listening on http://").nth(1))
            .map(|rest| {
                let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
                addr.parse().unwrap()
            })
            .collect()
    }

    /// How many logged lines contain `needle`.
    pub fn logged_count(&self, needle: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Every line logged so far.
    pub fn logged_lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Whether any logged line contains `needle`.
    pub fn logged(&self, needle: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(needle))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Wait for a child with a deadline.
pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    None
}

/// Collect the child's stderr in a thread; return the address from "listening on http://ADDR".
pub fn wait_for_listening(
    stderr: impl Read + Send + 'static,
    log: Arc<Mutex<Vec<String>>>,
) -> Option<SocketAddr> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
                if let Some(tx) = tx.take() {
                    let _ = tx.send(addr.parse::<SocketAddr>().ok());
                }
            }
            log.lock().unwrap().push(line);
        }
    });
    rx.recv_timeout(START_TIMEOUT).ok().flatten()
}

/// Read until the peer closes the connection (EOF) or resets it, and return every byte
/// received. The socket's read timeout running out is a test failure, not a close:
/// callers use this where the server must end the connection (RFC 9112 §6.3), and a
/// server that leaves it open must not pass for one that closed it.
pub fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!(
                    "read_to_close: the connection was still open when the read timeout ({:?}) ran out; \
                     the peer never closed it. {} bytes received: {:?}",
                    s.read_timeout().ok().flatten(),
                    out.len(),
                    String::from_utf8_lossy(&out[..out.len().min(300)])
                );
            }
            // A reset (or another error) ends the connection too.
            Err(_) => return out,
        }
    }
}

/// A parsed response.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Interim (1xx) responses that came before it: status and fields.
    pub interim: Vec<(u16, Vec<(String, String)>)>,
    /// Fields (lower-case names), in order.
    pub headers: Vec<(String, String)>,
    /// Body: exactly Content-Length bytes, the decoded chunks of a chunked body, or
    /// empty for HEAD/204/304.
    pub body: Vec<u8>,
}

impl Response {
    /// First value of a field (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a field (name case-insensitive), in order.
    pub fn values(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Read one head (up to the blank line) byte by byte, so nothing after it is consumed.
fn read_head(s: &mut impl Read) -> Option<(u16, Vec<(String, String)>)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let mut fields = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Response::new(&mut fields);
    parsed.parse(&head).unwrap();
    let status = parsed.code.unwrap();
    let headers = parsed
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    Some((status, headers))
}

/// Read one line ending in CRLF (without it).
fn read_line(s: &mut impl Read) -> Option<Vec<u8>> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        match s.read(&mut byte) {
            Ok(1) => line.push(byte[0]),
            _ => return None,
        }
    }
    line.truncate(line.len() - 2);
    Some(line)
}

/// Decode a chunked body (trailer fields are read and dropped). `None` if the
/// connection ends before the last chunk or the framing is broken.
fn read_chunked(s: &mut impl Read) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(s)?;
        let hex = String::from_utf8_lossy(&line);
        let size = usize::from_str_radix(hex.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            while !read_line(s)?.is_empty() {}
            return Some(body);
        }
        let start = body.len();
        body.resize(start + size, 0);
        s.read_exact(&mut body[start..]).ok()?;
        if !read_line(s)?.is_empty() {
            return None;
        }
    }
}

/// Read one response from a keep-alive connection, interim (1xx) responses first.
/// `None` on EOF before a head or inside a framed body.
pub fn read_response(s: &mut impl Read, head_only: bool) -> Option<Response> {
    let mut interim = Vec::new();
    let (status, headers) = loop {
        let (status, headers) = read_head(s)?;
        if (100..200).contains(&status) {
            interim.push((status, headers));
            continue;
        }
        break (status, headers);
    };
    let field = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let bodiless = head_only || status == 304 || status == 204;
    let body = if bodiless {
        Vec::new()
    } else if field("transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().ends_with("chunked"))
    {
        read_chunked(s)?
    } else {
        let len: usize = field("content-length").map_or(0, |v| v.parse().unwrap());
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).ok()?;
        body
    };
    Some(Response {
        status,
        interim,
        headers,
        body,
    })
}

/// Deterministic pseudo-random content of `len` bytes (so ranges are distinguishable).
pub fn content(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A temporary directory with files written from `(relative path, bytes)`.
pub fn library(files: &[(&str, &[u8])]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (rel, bytes) in files {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    dir
}

/// The value of one sample line (`name{labels}`) in a Prometheus scrape.
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l[series.len() + 1..].trim().parse().ok())
}

/// Poll until `check` holds, for at most 10 s (counters are written after the last byte
/// is handed to the kernel, so a client can see its response a moment before it is
/// counted).
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for: {what}");
}
