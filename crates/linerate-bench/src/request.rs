//! What to ask for next: the request bytes of each workload and the response it
//! expects, produced into a caller-owned buffer so a request costs no allocation.
//!
//! Owns path validation (a path goes onto the request line verbatim, so it must not
//! carry whitespace or control bytes), uniform random choice (a seeded xorshift, so two
//! runs with the same `--seed` ask for the same sequence), and the `Range` header of the
//! ranges workload. Does not touch sockets or decide when to send.

use std::io::Write as _;

use anyhow::{bail, Result};

/// A small, fast, seeded PRNG (xorshift64*, Vigna 2016). Statistical quality far beyond
/// what "pick a file uniformly" needs, one multiply per number, and reproducible from
/// the seed, which a benchmark wants and `rand`'s OS-seeded generators do not give.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (any value; 0 is remapped, xorshift's one bad state).
    pub fn new(seed: u64) -> Self {
        // SplitMix64 step so nearby seeds give unrelated streams.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 0x2545_F491_4F6C_DD1D } else { z })
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias for n < 2^32 is below 2^-32).
    /// Returns 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// What the generator asks for.
#[derive(Debug, Clone)]
pub enum RequestKind {
    /// `GET` of one of these paths, chosen uniformly; expects 200 and any length.
    Files {
        /// Request paths (each starts with `/`).
        paths: Vec<String>,
    },
    /// `GET` of `range_size` bytes at a uniformly random offset within the first
    /// `file_size` bytes of `path`; expects 206 and exactly `range_size` bytes.
    Ranges {
        /// Request path.
        path: String,
        /// Size of the file in bytes (at least `range_size`).
        file_size: u64,
        /// Bytes per request (at least 1).
        range_size: u64,
    },
}

/// The response a request should get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// Status code that counts as success.
    pub status: u16,
    /// Exact body length, when the workload knows it.
    pub body_len: Option<u64>,
    /// The request is for one of the first `--hot-count` paths (the most popular under
    /// `--zipf`): its latency is also recorded on its own.
    pub hot: bool,
}

/// Produces requests: one per call, into a reused buffer.
#[derive(Debug)]
pub struct RequestGen {
    kind: RequestKind,
    host: String,
    /// Overrides the workload's expected status (e.g. to measure 404s on purpose).
    expect_status: Option<u16>,
    /// For `Files`: each path's complete request, built once.
    prebuilt: Vec<Box<[u8]>>,
    /// For `Files` with [`RequestGen::unique_queries`]: the paths, and the number of
    /// the next request, which its query carries.
    unique: Option<(Vec<String>, u64)>,
    seed: u64,
    rng: Rng,
    /// For `Files` with [`RequestGen::zipf`]: cumulative weights of the paths in order
    /// (path `i` weighs `1 / (i + 1)^s`), so a choice is one binary search.
    zipf_cdf: Option<Vec<f64>>,
    /// Requests for paths `0..hot_count` are marked [`Expect::hot`].
    hot_count: usize,
}

impl RequestGen {
    /// Check the workload and pre-build what can be pre-built. `host` is the `Host`
    /// header value.
    pub fn new(
        kind: RequestKind,
        host: &str,
        expect_status: Option<u16>,
        seed: u64,
    ) -> Result<Self> {
        check_header_value("Host", host)?;
        let mut prebuilt = Vec::new();
        match &kind {
            RequestKind::Files { paths } => {
                if paths.is_empty() {
                    bail!("the files workload needs at least one path");
                }
                for p in paths {
                    check_path(p)?;
                    prebuilt.push(
                        format!("GET {p} HTTP/1.1\r\nHost: {host}\r\n\r\n")
                            .into_bytes()
                            .into(),
                    );
                }
            }
            RequestKind::Ranges {
                path,
                file_size,
                range_size,
            } => {
                check_path(path)?;
                if *range_size == 0 || range_size > file_size {
                    bail!("--range-size ({range_size}) must be between 1 and --file-size ({file_size})");
                }
            }
        }
        Ok(RequestGen {
            kind,
            host: host.to_owned(),
            expect_status,
            prebuilt,
            unique: None,
            seed,
            rng: Rng::new(seed),
            zipf_cdf: None,
            hot_count: 0,
        })
    }

    /// Choose `Files` paths by Zipf popularity instead of uniformly: the path at index
    /// `i` (0-based, in the order given: the first is the most popular) is asked with
    /// probability proportional to `1 / (i + 1)^s`. `s` must be finite and positive
    /// (the caller checks; a non-positive `s` would make every weight 1 or more, i.e.
    /// not a popularity ranking).
    pub fn zipf(mut self, s: f64) -> Self {
        if let RequestKind::Files { paths } = &self.kind {
            let mut total = 0.0;
            let cdf = (0..paths.len())
                .map(|i| {
                    total += 1.0 / ((i + 1) as f64).powf(s);
                    total
                })
                .collect();
            self.zipf_cdf = Some(cdf);
        }
        self
    }

    /// Mark requests for the first `k` paths as hot ([`Expect::hot`]).
    pub fn hot_count(mut self, k: usize) -> Self {
        self.hot_count = k;
        self
    }

    /// The index of the next `Files` path: uniform, or by the Zipf weights.
    fn pick(&mut self) -> usize {
        let n = self.prebuilt.len();
        match &self.zipf_cdf {
            None => self.rng.below(n as u64) as usize,
            Some(cdf) => {
                let total = cdf.last().copied().unwrap_or(0.0);
                // 53 random bits as a fraction in [0, 1), scaled to the total weight.
                let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
                cdf.partition_point(|&c| c <= u).min(n.saturating_sub(1))
            }
        }
    }

    /// Make every `Files` request a URL never asked before: the chosen path with
    /// `?u=SEED.N` (`&u=` after a query), N counting up. A cache then misses on every
    /// request while an origin serving files by path answers them all. Paths that
    /// already hold a `u` argument are the caller's business.
    pub fn unique_queries(mut self) -> Self {
        if let RequestKind::Files { paths } = &self.kind {
            self.unique = Some((paths.clone(), 0));
        }
        self
    }

    /// A path to use for one-off requests (the idle connections' first request): the
    /// first path of the workload.
    pub fn first_request(&self, out: &mut Vec<u8>) -> Expect {
        out.clear();
        match &self.kind {
            RequestKind::Files { .. } => {
                if let Some(req) = self.prebuilt.first() {
                    out.extend_from_slice(req);
                }
                self.expect(None)
            }
            RequestKind::Ranges {
                path, range_size, ..
            } => {
                self.write_range(out, path, 0, *range_size);
                self.expect(Some(*range_size))
            }
        }
    }

    /// Write the next request into `out` (cleared first; its capacity is reused) and
    /// return what its response should be.
    pub fn next_request(&mut self, out: &mut Vec<u8>) -> Expect {
        out.clear();
        match &self.kind {
            RequestKind::Files { .. } => {
                let i = self.pick();
                let hot = i < self.hot_count;
                if let Some((paths, n)) = &mut self.unique {
                    let p = &paths[i];
                    let sep = if p.contains('?') { '&' } else { '?' };
                    let _ = write!(
                        out,
                        "GET {p}{sep}u={}.{n} HTTP/1.1\r\nHost: {}\r\n\r\n",
                        self.seed, self.host
                    );
                    *n += 1;
                } else if let Some(req) = self.prebuilt.get(i) {
                    out.extend_from_slice(req);
                }
                Expect {
                    hot,
                    ..self.expect(None)
                }
            }
            RequestKind::Ranges {
                path,
                file_size,
                range_size,
            } => {
                let (size, len) = (*file_size, *range_size);
                let start = self.rng.below(size - len + 1);
                self.write_range(out, path, start, len);
                self.expect(Some(len))
            }
        }
    }

    fn write_range(&self, out: &mut Vec<u8>, path: &str, start: u64, len: u64) {
        // Writing into a Vec cannot fail; `let _` rather than unwrap (STYLE.md #10).
        let _ = write!(
            out,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nRange: bytes={start}-{}\r\n\r\n",
            self.host,
            start + len - 1
        );
    }

    fn expect(&self, body_len: Option<u64>) -> Expect {
        let default = match self.kind {
            RequestKind::Files { .. } => 200,
            RequestKind::Ranges { .. } => 206,
        };
        match self.expect_status {
            // Another status than the workload's own: its body length is unknown.
            Some(s) if s != default => Expect {
                status: s,
                body_len: None,
                hot: false,
            },
            _ => Expect {
                status: default,
                body_len,
                hot: false,
            },
        }
    }
}

/// A request path must be origin-form (RFC 9112 §3.2.1: starts with `/`) and contain
/// only visible ASCII, so it cannot break the request line.
fn check_path(p: &str) -> Result<()> {
    if !p.starts_with('/') {
        bail!("request path {p:?} must start with '/'");
    }
    if let Some(b) = p.bytes().find(|b| !b.is_ascii_graphic()) {
        bail!("request path {p:?} contains byte {b:#04x}; percent-encode it");
    }
    Ok(())
}

/// A header value must not contain CR, LF or other controls (RFC 9110 §5.5).
fn check_header_value(name: &str, v: &str) -> Result<()> {
    if v.is_empty() || v.bytes().any(|b| b.is_ascii_control()) {
        bail!("{name} header value {v:?} is empty or contains control characters");
    }
    Ok(())
}

/// Read a paths file: one request path per line; blank lines and lines starting with
/// `#` are skipped, surrounding whitespace is trimmed.
pub fn parse_paths_file(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// Paths `{prefix}{i}{suffix}` for i in `0..count`.
pub fn generated_paths(prefix: &str, count: usize, suffix: &str) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}{i}{suffix}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;

    #[test]
    fn files_requests_are_uniform_and_well_formed() {
        let paths = generated_paths("/bench/small/", 4, ".bin");
        assert_eq!(paths[3], "/bench/small/3.bin");
        let mut gen =
            RequestGen::new(RequestKind::Files { paths }, "127.0.0.1:8080", None, 7).unwrap();
        let mut out = Vec::new();
        let mut seen = [0u32; 4];
        for _ in 0..4000 {
            let e = gen.next_request(&mut out);
            assert_eq!(
                e,
                Expect {
                    status: 200,
                    body_len: None,
                    hot: false
                }
            );
            let text = std::str::from_utf8(&out).unwrap();
            assert!(
                text.ends_with(" HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"),
                "{text}"
            );
            let i: usize = text["GET /bench/small/".len()..]
                .split('.')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            seen[i] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
    }

    /// Guards `--zipf`: the path at index i must be asked ~1/(i+1)^s as often as the
    /// first (uniform choice, or an off-by-one in the search, fails this), and
    /// `--hot-count` must mark exactly the requests for the first k paths.
    #[test]
    fn zipf_requests_follow_the_ranking() {
        let paths = generated_paths("/v/", 100, ".bin");
        let mut gen = RequestGen::new(RequestKind::Files { paths }, "h", None, 5)
            .unwrap()
            .zipf(1.0)
            .hot_count(2);
        let mut out = Vec::new();
        let mut seen = [0u32; 100];
        let n = 200_000;
        for _ in 0..n {
            let e = gen.next_request(&mut out);
            let text = std::str::from_utf8(&out).unwrap();
            let i: usize = text["GET /v/".len()..]
                .split('.')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(e.hot, i < 2, "{text}");
            seen[i] += 1;
        }
        // H(100, 1) = 5.187...: path 0 gets 19.3 % of the requests, path 1 9.6 %,
        // path 9 1.93 %, path 99 0.193 %.
        let h: f64 = (1..=100).map(|k| 1.0 / f64::from(k)).sum();
        for (i, want) in [(0usize, 1.0), (1, 0.5), (9, 0.1), (99, 0.01)] {
            let expected = f64::from(n) * want / h;
            let got = f64::from(seen[i]);
            assert!(
                (got - expected).abs() < 0.1 * expected,
                "path {i}: {got} requests, expected ~{expected:.0}; {seen:?}"
            );
        }
        assert!(seen.iter().all(|&c| c > 0), "every path is reachable");
    }

    #[test]
    fn unique_queries_never_repeat_a_url() {
        let paths = vec!["/a.bin".to_owned(), "/b?x=1".to_owned()];
        let mut g = RequestGen::new(RequestKind::Files { paths }, "h", None, 9)
            .unwrap()
            .unique_queries();
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for _ in 0..200 {
            g.next_request(&mut out);
            let line = String::from_utf8(out.clone()).unwrap();
            let target = line.split(' ').nth(1).unwrap().to_owned();
            assert!(
                target.starts_with("/a.bin?u=9.") || target.starts_with("/b?x=1&u=9."),
                "{target}"
            );
            assert!(line.ends_with(" HTTP/1.1\r\nHost: h\r\n\r\n"), "{line}");
            assert!(seen.insert(target), "a URL repeated");
        }
    }

    #[test]
    fn ranges_stay_inside_the_file() {
        let kind = RequestKind::Ranges {
            path: "/big".into(),
            file_size: 10,
            range_size: 4,
        };
        let mut gen = RequestGen::new(kind, "h", None, 1).unwrap();
        let mut out = Vec::new();
        let mut starts = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            assert_eq!(
                gen.next_request(&mut out),
                Expect {
                    status: 206,
                    body_len: Some(4),
                    hot: false
                }
            );
            let text = String::from_utf8(out.clone()).unwrap();
            let range = text
                .split("Range: bytes=")
                .nth(1)
                .unwrap()
                .split("\r\n")
                .next()
                .unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
            assert_eq!(b - a + 1, 4);
            assert!(b < 10);
            starts.insert(a);
        }
        assert_eq!(starts.len(), 7, "every start 0..=6 is reachable");
    }

    #[test]
    fn rejects_bad_input() {
        let files = |p: &str| RequestKind::Files {
            paths: vec![p.to_owned()],
        };
        assert!(RequestGen::new(files("no-slash"), "h", None, 1).is_err());
        assert!(RequestGen::new(files("/a b"), "h", None, 1).is_err());
        assert!(RequestGen::new(files("/a\r\nX: y"), "h", None, 1).is_err());
        assert!(RequestGen::new(files("/ok"), "h\r\nX: y", None, 1).is_err());
        assert!(RequestGen::new(RequestKind::Files { paths: vec![] }, "h", None, 1).is_err());
        let ranges = |f, r| RequestKind::Ranges {
            path: "/x".into(),
            file_size: f,
            range_size: r,
        };
        assert!(RequestGen::new(ranges(10, 11), "h", None, 1).is_err());
        assert!(RequestGen::new(ranges(10, 0), "h", None, 1).is_err());
        assert!(RequestGen::new(ranges(10, 10), "h", None, 1).is_ok());
    }

    #[test]
    fn paths_file_format() {
        let text = "# comment\n/a\n\n  /b  \r\n";
        assert_eq!(
            parse_paths_file(text),
            vec!["/a".to_owned(), "/b".to_owned()]
        );
    }

    #[test]
    fn rng_is_seeded_and_bounded() {
        let (mut a, mut b) = (Rng::new(3), Rng::new(3));
        assert_eq!(a.next_u64(), b.next_u64());
        assert_ne!(Rng::new(3).next_u64(), Rng::new(4).next_u64());
        assert_eq!(a.below(0), 0);
        assert!((0..1000).all(|_| a.below(5) < 5));
    }
}
