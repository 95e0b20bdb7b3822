//! Helpers shared by the spec modules: HTTP-dates, numbered origin answers, body sizes,
//! what a fill may cost in each cell, and assertions that print something useful.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::support::kit::{Slicing, Variant, SLICE};
use crate::support::origin::{Origin, RangeSupport, Reply, Request};
use crate::support::{Response, Server};

/// A body that spans several slices in the slicing cells (3 whole slices and a tail).
pub const BIG: usize = 3 * SLICE as usize + 123;

/// Seconds since the Unix epoch, now.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `unix` as an IMF-fixdate (RFC 9110 §5.6.7), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn http_date(unix: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[m as usize - 1],
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The HTTP-date `offset` seconds from now (negative: in the past).
pub fn date(offset: i64) -> String {
    http_date(now() + offset)
}

/// Parse an IMF-fixdate back to Unix seconds (`None` for anything else).
pub fn parse_http_date(s: &str) -> Option<i64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let parts: Vec<&str> = s.split(' ').collect();
    if parts.len() != 6 || parts[5] != "GMT" {
        return None;
    }
    let d: i64 = parts[1].parse().ok()?;
    let m = MONTHS.iter().position(|x| *x == parts[2])? as i64 + 1;
    let y: i64 = parts[3].parse().ok()?;
    let hms: Vec<i64> = parts[4]
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if hms.len() != 3 {
        return None;
    }
    Some(days_from_civil(y, m, d) * 86_400 + hms[0] * 3600 + hms[1] * 60 + hms[2])
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m as u32, d as u32)
}

/// (year, month, day) → days since 1970-01-01.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A value a test sets and its origin handler reads, to change the origin's answers
/// between client requests (robust where one client request costs several origin
/// requests, as with slicing).
#[derive(Clone, Debug, Default)]
pub struct Phase(Arc<AtomicUsize>);

impl Phase {
    /// Starts at 1.
    pub fn new() -> Phase {
        Phase(Arc::new(AtomicUsize::new(1)))
    }

    /// The current phase.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    /// Move to phase `n`.
    pub fn set(&self, n: usize) {
        self.0.store(n, Ordering::SeqCst);
    }
}

/// The body of the `n`th origin answer for `path` from a [`numbered`] origin.
pub fn nth(n: usize, path: &str) -> Vec<u8> {
    format!("response {n} of {path}").into_bytes()
}

/// An origin handler whose answers to each path are numbered: the `n`th request for a
/// path gets the body `response n of PATH` (see [`nth`]) with the status and fields
/// `head` returns for that request. So a test can tell a stored answer (`response 1`)
/// from a new one (`response 2`). 204 and 304 answers have no body.
pub fn numbered(
    head: impl Fn(&Request) -> (u16, Vec<(String, String)>) + Send + Sync + 'static,
) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    let seen: Mutex<HashMap<String, usize>> = Mutex::new(HashMap::new());
    move |req: &Request| {
        let n = {
            let mut seen = seen.lock().unwrap();
            let n = seen.entry(req.path().to_owned()).or_insert(0);
            *n += 1;
            *n
        };
        let (status, headers) = head(req);
        let body = if status == 204 || status == 304 {
            Vec::new()
        } else {
            nth(n, req.path())
        };
        Reply::Full {
            status,
            headers,
            body,
            chunked: false,
        }
    }
}

/// A head for [`numbered`] from a table of `(path, fields)`: status 200 and that
/// path's fields (none for a path not in the table).
pub fn by_path(
    table: Vec<(&'static str, Vec<(String, String)>)>,
) -> impl Fn(&Request) -> (u16, Vec<(String, String)>) + Send + Sync + 'static {
    move |req| {
        let f = table
            .iter()
            .find(|(p, _)| *p == req.path())
            .map(|(_, f)| f.clone())
            .unwrap_or_default();
        (200, f)
    }
}

/// `&[("a", "b")]` as owned pairs (shorthand for handlers).
pub fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    crate::support::origin::owned(pairs)
}

/// How many slices a body of `len` bytes spans in the slicing cells.
pub fn slices(len: usize) -> usize {
    len.div_ceil(SLICE as usize).max(1)
}

/// How many origin requests filling a cacheable object of `len` bytes costs in cell
/// `v`, exactly: one with slicing off; one per slice from an origin that honours
/// `Range`; one from an origin that ignores it (its `200` to the first slice's request
/// is the whole object, stored whole).
pub fn fill_requests(v: Variant, len: usize) -> usize {
    match (v.slicing, v.ranges) {
        (Slicing::Off, _) | (Slicing::On, RangeSupport::Ignored) => 1,
        (Slicing::On, RangeSupport::Honoured) => slices(len),
    }
}

/// How many origin requests relaying one uncacheable response (`status`, `len` bytes)
/// costs on the first request for its URL in cell `v`, exactly: one, except with
/// slicing on against an origin that honours `Range`, where a `200` larger than one
/// slice costs one extra request: the cache asked for the first slice before it knew
/// the response was not storable, the origin's `206` for that slice does not answer a
/// request for the whole, so the client's own request follows. (An origin answers a
/// ranged request for an error with the whole error, which answers the client.)
pub fn first_relay_cost(v: Variant, status: u16, len: usize) -> usize {
    if v.slicing == Slicing::On
        && v.ranges == RangeSupport::Honoured
        && status == 200
        && len > SLICE as usize
    {
        2
    } else {
        1
    }
}

/// Requests the origin received for `path` with `method`.
pub fn count_method(origin: &Origin, method: &str, path: &str) -> usize {
    origin
        .requests()
        .iter()
        .filter(|r| r.method.eq_ignore_ascii_case(method) && r.path() == path)
        .count()
}

/// The last request the origin received for `path`.
#[track_caller]
pub fn last_request(origin: &Origin, path: &str) -> Request {
    origin
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path() == path)
        .unwrap_or_else(|| panic!("the origin never received {path}"))
}

/// Assert a response's status and exact body (without dumping large bodies).
#[track_caller]
pub fn assert_response(r: &Response, status: u16, body: &[u8]) {
    assert_eq!(r.status, status, "status; fields {:?}", r.headers);
    if r.body != body {
        let first_diff = r.body.iter().zip(body).position(|(a, b)| a != b);
        if body.len() <= 200 && r.body.len() <= 200 {
            panic!(
                "body {:?}, want {:?}; fields {:?}",
                String::from_utf8_lossy(&r.body),
                String::from_utf8_lossy(body),
                r.headers
            );
        }
        panic!(
            "body differs: {} bytes, want {}; first difference at {first_diff:?}; fields {:?}",
            r.body.len(),
            body.len(),
            r.headers
        );
    }
}

/// The expected body of answer `n` for `path` with `status` (none for 204 and 304).
pub fn nth_for(status: u16, n: usize, path: &str) -> Vec<u8> {
    if status == 204 || status == 304 {
        Vec::new()
    } else {
        nth(n, path)
    }
}

/// Two GETs of `path` (with `headers`) against a [`numbered`] origin, the path not
/// requested before: the second is answered from the store (`response 1`, one origin
/// request in all).
#[track_caller]
pub fn expect_reused(cache: &Server, origin: &Origin, path: &str, status: u16) {
    let first = cache.get(path, &[]);
    assert_eq!(
        origin.count(path),
        1,
        "{path}: the first request must cost exactly one origin request"
    );
    assert_response(&first, status, &nth_for(status, 1, path));
    let second = cache.get(path, &[]);
    assert_eq!(
        origin.count(path),
        1,
        "{path}: the second request must be answered from the store; Cache-Status {:?}",
        second.header("cache-status")
    );
    assert_response(&second, status, &nth_for(status, 1, path));
}

/// Two GETs of `path` against a [`numbered`] origin, the path not requested before: the
/// second goes to the origin again (`response 2`, two origin requests in all).
#[track_caller]
pub fn expect_not_reused(cache: &Server, origin: &Origin, path: &str, status: u16) {
    let first = cache.get(path, &[]);
    assert_eq!(
        origin.count(path),
        1,
        "{path}: the first request must cost exactly one origin request (a body of one \
         slice at most is relayed with a single request even when it is not stored)"
    );
    assert_response(&first, status, &nth_for(status, 1, path));
    let second = cache.get(path, &[]);
    assert_eq!(
        origin.count(path),
        2,
        "{path}: the second request must reach the origin, once; Cache-Status {:?}",
        second.header("cache-status")
    );
    assert_response(&second, status, &nth_for(status, 2, path));
}

/// The `Age` of a response as an integer (panics if absent or not a non-negative integer).
#[track_caller]
pub fn age_of(r: &Response) -> u64 {
    let age = r
        .header("age")
        .unwrap_or_else(|| panic!("no Age; fields {:?}", r.headers));
    age.trim()
        .parse()
        .unwrap_or_else(|_| panic!("Age {age:?} is not delta-seconds"))
}

/// Every value of field `name` in `req`, joined with ", " (a combined field value).
pub fn joined(req: &Request, name: &str) -> String {
    let name = name.to_ascii_lowercase();
    req.headers
        .iter()
        .filter(|(n, _)| *n == name)
        .map(|(_, v)| v.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A raw response's parts: status, fields (lower-case names), body, and whether the
/// body was complete (a chunked body's last chunk arrived).
pub type RawParts = (u16, Vec<(String, String)>, Vec<u8>, bool);

/// A response read from raw bytes (up to the connection's close): status, fields (lower-
/// case names) and the body, decoded when chunked and otherwise everything after the
/// head. `None` if there is no complete head.
pub fn parse_raw(bytes: &[u8]) -> Option<RawParts> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let mut fields = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Response::new(&mut fields);
    parsed.parse(&bytes[..end]).ok()?;
    let status = parsed.code?;
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let rest = &bytes[end..];
    let chunked = headers.iter().any(|(n, v)| {
        n == "transfer-encoding" && v.to_ascii_lowercase().trim_end().ends_with("chunked")
    });
    if !chunked {
        return Some((status, headers, rest.to_vec(), true));
    }
    // Decode chunks; `complete` says whether the last chunk arrived.
    let mut body = Vec::new();
    let mut i = 0;
    loop {
        let Some(nl) = rest[i..].windows(2).position(|w| w == b"\r\n") else {
            return Some((status, headers, body, false));
        };
        let line = String::from_utf8_lossy(&rest[i..i + nl]).into_owned();
        let Ok(size) = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
        else {
            return Some((status, headers, body, false));
        };
        i += nl + 2;
        if size == 0 {
            return Some((status, headers, body, true));
        }
        if rest.len() < i + size + 2 {
            body.extend_from_slice(&rest[i.min(rest.len())..]);
            return Some((status, headers, body, false));
        }
        body.extend_from_slice(&rest[i..i + size]);
        i += size + 2;
    }
}

/// `method path` with a body (`Content-Length` framed), `Host: test` and
/// `Connection: close`, on a new connection; the response (body read unless HEAD).
#[track_caller]
pub fn send_with_body(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &[u8],
) -> Response {
    use std::io::Write;
    let mut s = server.connect();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    crate::support::read_response(&mut s, method == "HEAD")
        .unwrap_or_else(|| panic!("no complete response to {method} {path}"))
}
