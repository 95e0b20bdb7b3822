//! Purges across a cluster (`[cluster]`): a purge on any node reaches every node.
//!
//! - The node that takes `POST /purge` on its admin API (the issuer) applies it, gives it
//!   a generation (unique per issuer: `max(last + 1, unix ms)`, so a node that lost its
//!   log still never reuses one), writes it to its purge log, and sends it to every
//!   other node of the membership in force (`POST /_linerate/purge?...` on the peer's
//!   data listener, signed like every peer request: `Linerate-Peer` with the cluster
//!   secret's MAC over the method and the target, which carries the whole purge).
//!   Each peer is tried [`ATTEMPTS`] times; the answer lists the nodes that applied it
//!   and those that have not (with why).
//! - Every node logs every purge it applied (its own and its peers'), bounded by
//!   [`LOG_MAX_ENTRIES`] and [`LOG_MAX_AGE`], in `purge-log.json` on the first disk.
//! - Catch-up: at start (before the listeners serve) and every [`SYNC_INTERVAL`] after,
//!   a node reads each peer's log (`GET /_linerate/purge-log?from=N`, signed) and applies
//!   every purge it has not applied. A node that was away longer than a peer's log
//!   reaches back (the peer's horizon: the age bound, or the newest entry it dropped for
//!   count) cannot know what it missed: it drops every object it holds (all were stored
//!   before it went away, so before the horizon), the safe answer for takedowns.
//!
//! Not here: what a purge removes (`ProxyShared::purge_url`, `purge_prefix`), the MAC
//! (`cluster::auth`), the admin API's parsing of `/purge` (`admin::api`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::admin::control::{Control, RunState};
use crate::cluster::{auth, Membership};
use crate::proxy::ProxyShared;

/// The data listener's path of a peer's purge (reserved when `[cluster]` is set).
use crate::purgelog::*;

/// Apply `e` to this node's store. Blocking (journal writes). Returns the objects removed.
pub(crate) fn apply(px: &ProxyShared, e: &Entry) -> u64 {
    let Some(key) = e.key_bytes() else { return 0 };
    if e.soft {
        return match e.kind {
            Kind::Url => soft_url(px, &key),
            Kind::Tag => soft_tag(px, &key),
            // Refused where it is issued; a forged one does nothing.
            Kind::Prefix => 0,
        };
    }
    match e.kind {
        Kind::Url => px.purge_url(&key),
        Kind::Prefix => px.purge_prefix(&key),
        Kind::Tag => apply_tag(px, &key),
    }
}

/// Longest a soft purge waits for the store's index to load (a hard purge waits as
/// long, in `Store::purge`).
const SOFT_LOAD_WAIT: Duration = Duration::from_secs(60);

/// Mark the stored object `key` stale: its exchange times are set to the epoch, so
/// its age is past every freshness lifetime and every stale-while-revalidate or
/// stale-if-error window, and the next request revalidates it with the origin
/// (`If-None-Match` / `If-Modified-Since` from its validators); a `304` makes it fresh
/// again with its body kept. A Vary stub is left alone (its variants are marked).
/// Blocking; costs a rewrite of the object (`Store::update_meta`). Whether it was
/// marked.
fn soft_one(px: &ProxyShared, key: &[u8]) -> bool {
    // A write of it that is not published yet (its body may be complete, waiting for
    // the disk's publisher) is waited for, up to [`SOFT_WAIT`]: marking it then is
    // what the purge asks.
    let until = Instant::now() + SOFT_WAIT;
    let h = loop {
        match px.store.peek(key) {
            linerate_cache::Lookup::Hit(h) => break h,
            _ if px.store.contains(key) && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => return false,
        }
    };
    if h.meta.header(crate::proxy::VARY_STUB).is_some() {
        return false;
    }
    let mut meta = (*h.meta).clone();
    meta.request_time_ms = 1;
    meta.response_time_ms = 1;
    px.store.update_meta(key, meta).unwrap_or(false)
}

/// Soft purge of a URL: the object, its variants and slices (found by walking the
/// index, like a prefix purge). Blocking. How many were marked.
pub(crate) fn soft_url(px: &ProxyShared, primary: &[u8]) -> u64 {
    // As a hard purge does (`Store::purge`): an index still loading would hide objects
    // that are on disk, and they would stay fresh.
    px.store.wait_loaded(SOFT_LOAD_WAIT);
    let under = linerate_http::cache::key::descendants(primary);
    let mut n = u64::from(soft_one(px, primary));
    for k in px.store.keys().iter().filter(|k| k.starts_with(&under)) {
        n += u64::from(soft_one(px, k));
    }
    n
}

/// Soft purge of a tag: every object under it stays indexed under it. Blocking.
pub(crate) fn soft_tag(px: &ProxyShared, tag: &[u8]) -> u64 {
    px.store.wait_loaded(SOFT_LOAD_WAIT);
    let keys = px.tags.ensure_ready(&px.store).keys(tag);
    keys.iter().map(|k| u64::from(soft_one(px, k))).sum()
}

/// Apply a purge taken by this node's admin API to this node. Blocking. How many
/// objects were removed (or marked, `soft`).
pub(crate) fn apply_local(px: &ProxyShared, kind: Kind, key: &[u8], soft: bool) -> u64 {
    match (kind, soft) {
        (Kind::Url, false) => px.purge_url(key),
        (Kind::Prefix, _) => px.purge_prefix(key),
        (Kind::Tag, false) => apply_tag(px, key),
        (Kind::Url, true) => soft_url(px, key),
        (Kind::Tag, true) => soft_tag(px, key),
    }
}

/// Purge every object tagged `tag` on this node. Blocking.
pub(crate) fn apply_tag(px: &ProxyShared, tag: &[u8]) -> u64 {
    px.tags
        .ensure_ready(&px.store)
        .take(tag)
        .iter()
        .map(|k| px.purge_url(k))
        .sum()
}

/// Apply `e` unless this node has; log it. Blocking. `Some(removed)` when applied now.
fn apply_new(
    px: &ProxyShared,
    log: &PurgeLog,
    self_name: &str,
    e: Entry,
    save: bool,
) -> Option<u64> {
    if !log.is_new(&e) {
        return None;
    }
    let removed = apply(px, &e);
    log.record(self_name, e, save);
    Some(removed)
}

/// One peer's outcome of a purge fan-out.
pub(crate) struct Outcome {
    pub(crate) node: String,
    /// `Ok`: the objects it removed (or marked); `Err`: why it has not applied it
    /// (after every try).
    pub(crate) result: Result<u64, String>,
}

/// Send `e` to every other node of `m`, each tried up to [`ATTEMPTS`] times, in
/// parallel. Blocking: at most about `ATTEMPTS × (connect + first byte timeout)` plus
/// the pauses.
pub(crate) fn fan_out(m: &Membership, e: &Entry) -> Vec<Outcome> {
    let target = format!(
        "{PEER_PURGE_PATH}?issuer={}&generation={}&at={}&kind={}&key={}&soft={}",
        e.issuer,
        e.generation,
        e.at_ms,
        e.kind.as_str(),
        e.key,
        u8::from(e.soft)
    );
    let peers: Vec<_> = m
        .opts
        .peers
        .iter()
        .filter(|p| p.name != m.opts.self_name)
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = peers
            .iter()
            .map(|p| {
                let target = &target;
                s.spawn(move || {
                    let mut last = String::new();
                    for attempt in 0..ATTEMPTS {
                        if attempt > 0 {
                            std::thread::sleep(RETRY_PAUSES[(attempt as usize - 1).min(1)]);
                        }
                        match call(m, &p.name, p.address, "POST", target) {
                            Ok((200, body)) => {
                                // Only this answer is proof: a node of an older version
                                // relays the path to its origin, which may say 200 too.
                                let v = serde_json::from_slice::<serde_json::Value>(&body)
                                    .unwrap_or_default();
                                if v["applied"] == true {
                                    return Ok(v["removed"].as_u64().unwrap_or(0));
                                }
                                // Not retried: the same node answers the same way.
                                return Err(
                                    "answered 200 without applying it (a node without cluster purges?)"
                                        .to_string(),
                                );
                            }
                            Ok((status, body)) => {
                                last = format!(
                                    "answered {status}: {}",
                                    String::from_utf8_lossy(&body).trim()
                                );
                            }
                            Err(e) => last = e,
                        }
                    }
                    Err(last)
                })
            })
            .collect();
        peers
            .iter()
            .zip(handles)
            .map(|(p, h)| Outcome {
                node: p.name.clone(),
                result: h
                    .join()
                    .unwrap_or_else(|_| Err("sender panicked".to_string())),
            })
            .collect()
    })
}

/// One signed request to peer `name` at `address`; its status and body. Blocking.
fn call(
    m: &Membership,
    name: &str,
    address: std::net::SocketAddr,
    method: &str,
    target: &str,
) -> Result<(u16, Vec<u8>), String> {
    let host = address.to_string();
    let covered = auth::Covered::with_fields(
        method.as_bytes(),
        target.as_bytes(),
        Some(host.as_bytes()),
        &[],
    )
    .to(name);
    let signed = m.sign(&covered);
    let mut s = TcpStream::connect_timeout(&address, m.opts.connect_timeout)
        .map_err(|e| format!("connect: {e}"))?;
    let _ = s.set_read_timeout(Some(m.opts.first_byte_timeout));
    let _ = s.set_write_timeout(Some(m.opts.connect_timeout));
    let length = if method == "POST" {
        "Content-Length: 0\r\n"
    } else {
        ""
    };
    let req = format!(
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\n{}: {signed}\r\n{length}Connection: close\r\n\r\n",
        crate::clusteropts::HOP_HEADER
    );
    s.write_all(req.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > MAX_PEER_ANSWER {
                    return Err("answer too large".into());
                }
                if let Some(done) = complete(&buf) {
                    buf.truncate(done);
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    let head_end = find(&buf, b"\r\n\r\n").ok_or("no answer")?;
    let status = std::str::from_utf8(buf.get(9..12).unwrap_or(b""))
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("malformed answer")?;
    Ok((status, buf[head_end + 4..].to_vec()))
}

/// The length of a whole answer in `buf` (head and `Content-Length` body), once there.
fn complete(buf: &[u8]) -> Option<usize> {
    let end = find(buf, b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let len: usize = head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())
            .flatten()
    })?;
    (buf.len() >= end + len).then_some(end + len)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Read every peer's log and apply what this node has not. Blocking; peers in parallel.
fn sync_once(px: &ProxyShared, log: &PurgeLog) {
    let Some(cluster) = &px.cluster else { return };
    if px.store.is_lent() {
        // Handed to the next process of an upgrade, which keeps the log from now on.
        return;
    }
    let m = cluster.membership();
    let self_name = m.opts.self_name.clone();
    let peers: Vec<_> = m
        .opts
        .peers
        .iter()
        .filter(|p| p.name != self_name)
        .collect();
    let froms: Vec<u64> = {
        let st = log.lock();
        peers
            .iter()
            .map(|p| st.read_from.get(&p.name).copied().unwrap_or(0))
            .collect()
    };
    let answers: Vec<Result<(u16, Vec<u8>), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = peers
            .iter()
            .zip(&froms)
            .map(|(p, from)| {
                let m = &m;
                s.spawn(move || {
                    call(
                        m,
                        &p.name,
                        p.address,
                        "GET",
                        &format!("{PEER_LOG_PATH}?from={from}"),
                    )
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
            .collect()
    });
    let mut answered = false;
    for ((p, from), answer) in peers.iter().zip(froms).zip(answers) {
        let a = match answer {
            Ok((200, body)) => match serde_json::from_slice::<LogAnswer>(&body) {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(peer = %p.name, error = %e, "peer purge log unreadable");
                    continue;
                }
            },
            Ok((status, _)) => {
                tracing::debug!(peer = %p.name, status, "peer purge log refused");
                continue;
            }
            Err(e) => {
                tracing::debug!(peer = %p.name, error = %e, "peer purge log not read");
                continue;
            }
        };
        let alive = log.lock().alive_ms;
        // Cut off while running (a partition) for longer than the peer's log keeps: the
        // entries from where this node read last up to the first one the peer still
        // has were dropped there, unread here.
        let gap = from > 0 && from < a.next && a.entries.first().is_none_or(|e| e.pos > from);
        if (from == 0 && alive < a.horizon_ms) || gap {
            // Away longer than the peer's log reaches back: purges may be missing.
            let removed = px.purge_prefix(b"");
            tracing::warn!(
                peer = %p.name,
                away_since_ms = alive,
                horizon_ms = a.horizon_ms,
                read_from = from,
                removed,
                "this node was away longer than the peer's purge log reaches back: every cached object dropped"
            );
            log.lock().alive_ms = now_ms();
        }
        let mut applied = 0usize;
        for e in a.entries {
            if let Some(removed) = apply_new(px, log, &self_name, e.clone(), false) {
                applied += 1;
                tracing::info!(
                    peer = %p.name,
                    issuer = %e.issuer,
                    generation = e.generation,
                    kind = e.kind.as_str(),
                    removed,
                    "purge caught up from a peer's log"
                );
            }
        }
        // A log that went back (the peer lost it) is read whole next time.
        let next = if a.next < from { 0 } else { a.next };
        log.lock().read_from.insert(p.name.clone(), next);
        if applied > 0 {
            log.flush();
            tracing::info!(peer = %p.name, applied, "purge log caught up");
        }
        answered = true;
    }
    // Current only when a peer's log was read (or there is no peer): a node that
    // heard from none may be cut off, and must still compare its last run with the
    // horizon of the first log it reads.
    if answered || peers.is_empty() {
        log.touch_alive();
    }
}

/// Catch up from the peers once now (before the listeners serve), then every
/// [`SYNC_INTERVAL`] on a thread of its own until the server stops.
/// The thread also rebuilds the tag index (at start, and when it outgrew its bound).
pub(crate) fn start(px: Arc<ProxyShared>, control: Arc<Control>) -> std::io::Result<()> {
    let log = px.purges.clone();
    if let Some(log) = &log {
        sync_once(&px, log);
    }
    std::thread::Builder::new()
        .name("linerate-purge".into())
        .spawn(move || {
            let mut last = Instant::now();
            while control.run_state() != RunState::Stopping {
                if !px.tags.is_ready() {
                    px.tags.ensure_ready(&px.store);
                }
                std::thread::sleep(Duration::from_millis(100));
                if let Some(log) = log.as_ref().filter(|_| last.elapsed() >= SYNC_INTERVAL) {
                    sync_once(&px, log);
                    last = Instant::now();
                }
            }
        })
        .map(|_| ())
}

/// A request on the data listener for a reserved path (`/_linerate/...`, with
/// `[cluster]` only): a peer's purge, or a peer reading this node's log. `None`: not
/// one of these (the request goes on as any other).
pub(crate) async fn serve_peer(
    worker: &crate::context::Worker,
    px: &Arc<ProxyShared>,
    req: &crate::exchange::Request<'_>,
) -> Option<crate::response::Response> {
    let (cluster, log) = (px.cluster.as_ref()?, px.purges.as_ref()?);
    let (head, from) = (req.head, req.peer);
    if !head.target.starts_with(RESERVED) {
        return None;
    }
    let persistence = if worker.stopping() {
        linerate_http::Persistence::Close
    } else {
        head.persistence
    };
    let (path, query) = head.path_and_query()?;
    let query = std::str::from_utf8(query.strip_prefix(b"?").unwrap_or(query)).unwrap_or("");
    let answer = |status: u16, body: String| Some(json(worker, status, persistence, &body));
    let path = std::str::from_utf8(path).unwrap_or("");
    if path != PEER_PURGE_PATH && path != PEER_LOG_PATH {
        return answer(404, "{\"error\":\"no such peer path\"}\n".into());
    }
    if let Err(why) = cluster.is_peer_call(head, from) {
        // Logged at most once a second (with every refused peer field): a client
        // sending these cannot flood the log.
        cluster.refused_peer_call(why, from);
        return answer(
            403,
            "{\"error\":\"peer calls need a valid Linerate-Peer field (signed with the cluster secret)\"}\n"
                .into(),
        );
    }
    let arg = |name: &str| {
        query.split('&').find_map(|p| {
            p.split_once('=')
                .filter(|(n, _)| *n == name)
                .map(|(_, v)| v)
        })
    };
    if path == PEER_LOG_PATH {
        if head.method_token != "GET" {
            return answer(405, "{\"error\":\"GET only\"}\n".into());
        }
        let from = arg("from").and_then(|v| v.parse().ok()).unwrap_or(0);
        // Off the event loop: the answer serialises up to a page of the log under its
        // lock.
        let log = Arc::clone(log);
        let body = tokio::task::spawn_blocking(move || log.answer(from))
            .await
            .unwrap_or_default();
        return answer(200, body);
    }
    if head.method_token != "POST" {
        return answer(405, "{\"error\":\"POST only\"}\n".into());
    }
    if px.store.is_lent() {
        return answer(
            503,
            "{\"error\":\"the store was handed to the next process of an upgrade\"}\n".into(),
        );
    }
    let entry = (|| {
        let e = Entry {
            issuer: arg("issuer")?.to_string(),
            generation: arg("generation")?.parse().ok()?,
            at_ms: arg("at")?.parse().ok()?,
            kind: Kind::parse(arg("kind")?)?,
            key: arg("key")?.to_string(),
            soft: match arg("soft") {
                None | Some("0") => false,
                Some("1") => true,
                Some(_) => return None,
            },
            pos: 0,
        };
        e.key_bytes().map(|_| e)
    })();
    let Some(e) = entry else {
        return answer(
            400,
            "{\"error\":\"a peer purge needs issuer, generation, at, kind (url or prefix) and key (hex)\"}\n".into(),
        );
    };
    let self_name = cluster.membership().opts.self_name.clone();
    let (shared, log) = (Arc::clone(px), Arc::clone(log));
    let issuer = e.issuer.clone();
    let generation = e.generation;
    let applied =
        tokio::task::spawn_blocking(move || apply_new(&shared, &log, &self_name, e, true))
            .await
            .ok()?;
    tracing::info!(
        %issuer,
        generation,
        removed = applied.unwrap_or(0),
        again = applied.is_none(),
        "purge from a peer applied"
    );
    answer(
        200,
        format!(
            "{{\"applied\":true,\"removed\":{}}}\n",
            applied.unwrap_or(0)
        ),
    )
}

/// A JSON answer on the data listener.
fn json(
    worker: &crate::context::Worker,
    status: u16,
    persistence: linerate_http::Persistence,
    body: &str,
) -> crate::response::Response {
    use linerate_http::{HeadWriter, Persistence, StatusCode};
    let status = match status {
        200 => StatusCode::Ok,
        400 => StatusCode::BadRequest,
        403 => StatusCode::Forbidden,
        404 => StatusCode::NotFound,
        405 => StatusCode::MethodNotAllowed,
        503 => StatusCode::ServiceUnavailable,
        n => StatusCode::Other(n),
    };
    let mut head = Vec::with_capacity(256 + body.len());
    let mut w = HeadWriter::new(&mut head, status);
    worker.date.with(|d| w.field("Date", d));
    w.field("Server", crate::response::SERVER);
    w.field("Content-Type", b"application/json");
    w.field("Cache-Control", b"no-store");
    w.field_u64("Content-Length", body.len() as u64);
    if matches!(persistence, Persistence::Close) {
        w.field("Connection", b"close");
    }
    w.finish();
    head.extend_from_slice(body.as_bytes());
    crate::response::Response {
        head,
        body: crate::response::Body::Empty,
        persistence,
        status,
        cache: crate::stats::CachePhase::Local,
        refusal: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    /// Guards the log's bounds and idempotence: an entry is applied once, generations
    /// only grow, and the log survives a reopen.
    #[test]
    fn log_records_once_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let log = PurgeLog::open(dir.path());
        let a = log.issue("a", Kind::Url, b"http://h/x", false);
        let b = log.issue("a", Kind::Prefix, b"http://h/", false);
        assert!(b.generation > a.generation);
        assert!(!log.is_new(&a));
        let from_peer = Entry {
            issuer: "b".into(),
            generation: 7,
            at_ms: now_ms(),
            kind: Kind::Url,
            key: hex_encode(b"http://h/y"),
            soft: false,
            pos: 0,
        };
        assert!(log.is_new(&from_peer));
        log.record("a", from_peer.clone(), true);
        assert!(!log.is_new(&from_peer));
        let again = PurgeLog::open(dir.path());
        assert!(!again.is_new(&from_peer));
        let c = again.issue("a", Kind::Url, b"http://h/z", true);
        assert!(c.generation > b.generation);
        let ans: LogAnswer = serde_json::from_str(&again.answer(1)).unwrap();
        assert_eq!(ans.next, 4);
        assert_eq!(ans.entries.len(), 3);
        // Older than the log keeps, and not seen: applied (perhaps again; a purge is
        // idempotent), never answered "applied" unapplied.
        let ancient = Entry {
            at_ms: 1,
            ..from_peer
        };
        assert!(again.is_new(&Entry {
            generation: 99,
            ..ancient
        }));
        assert_eq!(
            hex_decode(&hex_encode(b"\x00\xffab")).unwrap(),
            b"\x00\xffab"
        );
        assert!(hex_decode("abc").is_none());
    }

    fn fields(v: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![
            (b"Content-Type".to_vec(), b"video/mp2t".to_vec()),
            (b"surrogate-KEY".to_vec(), v.as_bytes().to_vec()),
        ]
    }

    /// Guards the tag index: the field is found case-insensitively and split on runs
    /// of spaces and tabs; a purge takes a tag's keys once; a rebuild reads the stored
    /// objects' fields and drops keys the store no longer holds.
    #[test]
    fn tag_index_notes_takes_and_rebuilds() {
        let tags = Tags::new("Surrogate-Key");
        assert_eq!(
            tags.of(&fields(" a  b\tc ")),
            [&b"a"[..], &b"b"[..], &b"c"[..]]
        );
        tags.note(b"k1", &fields("a b"));
        tags.note(b"k2", &fields("b"));
        let mut b = tags.take(b"b");
        b.sort();
        assert_eq!(b, [b"k1".to_vec().into(), b"k2".to_vec().into()]);
        assert!(tags.take(b"b").is_empty());
        assert_eq!(tags.keys(b"a"), [Box::<[u8]>::from(&b"k1"[..])]);

        let dir = tempfile::tempdir().unwrap();
        let disk = linerate_cache::DiskConfig {
            name: "d0".into(),
            path: dir.path().join("d0"),
            max_bytes: 64 << 20,
        };
        let mut cfg = linerate_cache::StoreConfig::new(vec![disk]);
        cfg.durability = linerate_cache::Durability::NoSync;
        let store = linerate_cache::Store::open(cfg).unwrap();
        let meta = linerate_cache::ObjectMeta {
            status: 200,
            headers: fields("show"),
            ..Default::default()
        };
        let mut w = store.begin_write(b"stored", meta, Some(1)).unwrap();
        w.append(b"x").unwrap();
        w.finish().unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while !matches!(store.peek(b"stored"), linerate_cache::Lookup::Hit(_)) {
            assert!(Instant::now() < until, "never published");
            std::thread::sleep(Duration::from_millis(10));
        }
        let fresh = Tags::new("Surrogate-Key");
        fresh.note(b"evicted", &fields("show"));
        fresh.ensure_ready(&store);
        assert!(fresh.is_ready());
        assert_eq!(fresh.keys(b"show"), [Box::<[u8]>::from(&b"stored"[..])]);
    }
}
