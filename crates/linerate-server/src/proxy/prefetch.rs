//! Segment prefetch: when a route has `prefetch_segments = k`, an HLS media playlist or
//! a DASH manifest (MPD) served on it is read (once per stored copy), and a client
//! served segment `i` of a playlist, or of one of the MPD's representations, starts
//! fills of segments `i+1..=i+k` in the background, so sequential playback hits.
//!
//! Ranged requests count (libavformat asks for everything with `Range: bytes=0-`): a
//! playlist or MPD is read from its stored copy, so whatever range a client asked, it
//! is read when that copy is whole. A segment is played when it is read as a player
//! reads it (`linerate_http::playback::classify`): whole, from its start past a probe,
//! or continuing the range the same client (by address) was last sent of it; a `HEAD`,
//! a probe (`bytes=0-1`) or a tail read moves nothing on.
//!
//! A prefetch is an ordinary fill: it claims its key in the one table every worker
//! uses (`fills`), so a client asking meanwhile joins it, and a key already stored,
//! being written or being fetched is never fetched again. It never waits: at most
//! `cache.prefetch_in_flight` prefetches run per origin, and one that would exceed that
//! is skipped. Client fills take no slot and are never held back.
//!
//! What is followed: only URIs relative to the playlist's host (no scheme, no
//! authority), resolved per RFC 3986 (`linerate_http::hls::resolve`; the query, a
//! signed URL's token included, kept byte for byte and keyed as the route's `query`
//! setting keys a client's request, so a prefetched object is the one the player then
//! asks for with the same URI), then normalised
//! as a client's request is (`linerate_http::path::normalize_proxy_target`), whose path
//! stays under the playlist route's `path_prefix` and which a route serves (for an MPD:
//! each `BaseURL` resolved in turn, then the segment). The parsing is `linerate_http::hls`
//! and `linerate_http::dash` (pure, tested); the memory is `ahead`.
//!
//! A request's CMCD `nor` hint (`CMCD-Request` header, CTA-5004) names one more object
//! to prefetch, under the same rules.
//!
//! Not prefetched: a segment whose URL has a `Vary` stub or anything stored (even
//! stale: prefetch never revalidates), a URL remembered as uncacheable, requests with
//! `no-store`. On a sliced route the first slice is prefetched (the whole segment when
//! it fits one slice, as segments usually do).

use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::sync::Arc;

use linerate_cache::Lookup;
use linerate_http::cache::key::{self, Scheme};
use linerate_http::cache::RequestCacheControl;
use linerate_http::{dash, hls, path, playback, Method};

use super::ahead::{Next, Target};
use super::fill::{self, Job, SliceJob};
use super::fills::{Claim, Phase};
use super::request::CacheRequest;
use super::shared::{ProxyShared, ProxyWorker, VARY_STUB};
use crate::response::Response;

/// Longest segment target remembered, bytes: what the memory holds per segment is
/// bounded, whatever a playlist says.
const MAX_TARGET: usize = 2048;

/// After a GET or HEAD was answered: count a prefetched object's use, read a playlist
/// that was served, or prefetch the segments after one that was.
pub(crate) fn after_get(pw: &Rc<ProxyWorker>, req: &CacheRequest<'_>, response: &Response) {
    let px = &pw.shared;
    let status = response.status.code();
    if !(200..300).contains(&status) {
        return;
    }
    let k = px.routes[req.route].opts.prefetch_segments;
    if k == 0 {
        // Nothing on this route is ever prefetched: no shared lock on its requests.
        return;
    }
    px.prefetch.served(&req.key);
    if req.head.method != Method::Get || req.cc.no_store {
        return;
    }
    let path = req.target.split(|&b| b == b'?').next().unwrap_or(b"");
    let content_type = response_field(&response.head, b"content-type");
    let manifest = if hls::is_playlist_path(path) || content_type.is_some_and(hls::is_playlist_type)
    {
        Some(Manifest::Hls)
    } else if dash::is_mpd_path(path) || content_type.is_some_and(dash::is_mpd_type) {
        Some(Manifest::Dash)
    } else {
        None
    };
    if let Some(kind) = manifest {
        // Whatever range was asked (a 206 to libavformat's `bytes=0-`, or a probe): what
        // is read is the stored copy, and only when it is whole (`read_playlist`).
        tokio::task::spawn_local(read_playlist(
            Rc::clone(pw),
            kind,
            req.scheme,
            req.host.clone(),
            req.target.clone(),
            req.key.clone(),
            req.route,
        ));
        return;
    }
    if let Some(next) = px.prefetch.next(&req.key) {
        // A segment of a playlist read: played, or only probed? The memory of each
        // client's last range is kept for known segments only, so it holds no more
        // than the segments being read in ranges now.
        let content_range = response_field(&response.head, b"content-range");
        // Only a 206 continues or is continued: a whole answer takes no lock here.
        let previous_end = if status == 206 {
            px.prefetch.swap_range_end(
                &client_key(req, &req.key),
                playback::range_end(status, content_range),
            )
        } else {
            None
        };
        let read = playback::classify(req.head_only, status, content_range, previous_end);
        if read.plays() {
            for t in next.iter().take(k as usize) {
                start(pw, req, t);
            }
        } else {
            tracing::debug!(key = %String::from_utf8_lossy(&req.key), read = read.as_str(), "segment not played");
        }
    }
    // CTA-5004 `nor`: the player names its next object itself (a rendition switch, a
    // playlist the cache has not read). Held to the same rules as a playlist's URIs.
    let nor = linerate_http::cmcd::next_object(req.head.values(b"cmcd-request"))
        .or_else(|| linerate_http::cmcd::next_object_in_query(&req.target));
    if let Some(nor) = nor {
        let prefix = px.routes[req.route].opts.path_prefix.as_bytes();
        if let Some(t) = segment(px, req.scheme, &req.host, &req.target, prefix, &nor) {
            start(pw, req, &t);
        }
    }
}

/// The memory key of `req`'s client's ranges of the object keyed `key`: the client's
/// address (no other identity: clients behind one address share it, and then a range
/// may count as continuing another's, which at worst prefetches what that address is
/// playing anyway) and the key.
fn client_key(req: &CacheRequest<'_>, key: &[u8]) -> Vec<u8> {
    let mut out = match req.peer {
        Some(ip) => ip.to_string().into_bytes(),
        None => Vec::new(),
    };
    out.push(b' ');
    out.extend_from_slice(key);
    out
}

/// A field of an encoded response head (the first one named `name`).
fn response_field<'h>(head: &'h [u8], name: &[u8]) -> Option<&'h [u8]> {
    head.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(name)
            .then(|| line[colon + 1..].trim_ascii())
    })
}

/// What kind of manifest a response is.
#[derive(Clone, Copy)]
enum Manifest {
    Hls,
    Dash,
}

/// Read the stored copy of the playlist or MPD keyed `key` (requested as `target` on
/// `route`) once it is complete, and remember what follows each of its segments.
async fn read_playlist(
    pw: Rc<ProxyWorker>,
    kind: Manifest,
    scheme: Scheme,
    host: Vec<u8>,
    target: Vec<u8>,
    key: Vec<u8>,
    route: usize,
) {
    let px = &pw.shared;
    // Just filled by this request: wait for the copy to be complete.
    if let Some(mut rx) = px.fills.watch(&key) {
        super::fills::finished(&mut rx).await;
    }
    let Lookup::Hit(h) = px.store.lookup(&key) else {
        return;
    };
    let Some(len) = h.body_len() else {
        return;
    };
    if h.meta.status != 200
        || h.meta.header(VARY_STUB).is_some()
        || len > hls::MAX_PLAYLIST_BYTES as u64
        || !px.prefetch.first_read(&key, h.created_ms)
    {
        return;
    }
    let body = tokio::task::spawn_blocking(move || {
        let mut buf = vec![0; usize::try_from(len).ok()?];
        h.file.read_exact_at(&mut buf, h.body_offset).ok()?;
        Some(buf)
    })
    .await;
    let Ok(Some(body)) = body else {
        return;
    };
    // Each sequence: the target its URIs are relative to, and the URIs in order.
    let sequences: Vec<(Vec<u8>, Vec<Vec<u8>>)> = match kind {
        Manifest::Hls => match hls::parse_media(&body) {
            Some(p) => vec![(
                target.clone(),
                p.segments.iter().map(|s| s.to_vec()).collect(),
            )],
            None => Vec::new(),
        },
        // Origin-form targets already (BaseURLs applied, absolute ones refused): each
        // resolves to itself below, under the same prefix and route checks.
        Manifest::Dash => match dash::representations(&body, &target, true) {
            Ok(reps) => reps
                .into_iter()
                .map(|rep| (target.clone(), rep.media))
                .collect(),
            Err(why) => {
                tracing::debug!(key = %String::from_utf8_lossy(&key), why, "MPD not read");
                Vec::new()
            }
        },
    };
    if sequences.is_empty() {
        tracing::debug!(key = %String::from_utf8_lossy(&key), "no segments prefetch can read");
        px.prefetch.playlist_read();
        return;
    }
    let opts = &px.routes[route].opts;
    let k = opts.prefetch_segments as usize;
    for (base, uris) in &sequences {
        let targets: Vec<Option<Arc<Target>>> = uris
            .iter()
            .map(|uri| segment(px, scheme, &host, base, opts.path_prefix.as_bytes(), uri))
            .collect();
        for (i, t) in targets.iter().enumerate() {
            let Some(t) = t else { continue };
            let next: Next = targets[i + 1..].iter().take(k).flatten().cloned().collect();
            if !next.is_empty() {
                px.prefetch.set_next(&t.key, next);
            }
        }
    }
    // Counted once its segments are known (see `playlist_read`).
    px.prefetch.playlist_read();
}

/// The segment `uri` names in a playlist requested as `base` on `host`, when prefetch
/// may fetch it: relative to that host, under `prefix`, served by a route.
fn segment(
    px: &ProxyShared,
    scheme: Scheme,
    host: &[u8],
    base: &[u8],
    prefix: &[u8],
    uri: &[u8],
) -> Option<Arc<Target>> {
    let resolved = hls::resolve(base, uri).filter(|t| t.len() <= MAX_TARGET)?;
    // The form a client's request for it is routed, keyed and forwarded in, so a
    // prefetched copy is the one the client then hits (and a URI the normaliser refuses
    // is not fetched: a client could not ask for it either).
    let target = path::normalize_proxy_target(&resolved).ok()?;
    if !target.path().starts_with(prefix) || target.as_bytes().len() > MAX_TARGET {
        return None;
    }
    let (key, route) = px.key_for(scheme, host, &target)?;
    Some(Arc::new(Target {
        target: target.into_bytes().into(),
        key: key.into(),
        route,
    }))
}

/// Start the prefetch of `t` unless it is stored, being fetched, uncacheable, or over
/// its origin's budget. `req`: the client request whose segment came before, whose
/// fields the prefetch sends (as that client's own request for `t` would).
fn start(pw: &Rc<ProxyWorker>, req: &CacheRequest<'_>, t: &Arc<Target>) {
    let px = &pw.shared;
    let route = &px.routes[t.route];
    if route.opts.prefetch_segments == 0 || px.is_pass(&t.key) {
        return;
    }
    // Index only: a lookup would open each stored segment's file on the event loop and
    // count a use for eviction, for every segment a client is served.
    if px.store.contains(&t.key) {
        return;
    }
    let slice_bytes = route.opts.slice_bytes;
    let claim_key = if slice_bytes > 0 {
        let first = key::slice(&t.key, 0);
        if px.store.contains(&first) {
            return;
        }
        first
    } else {
        t.key.to_vec()
    };
    if px.fills.watch(&claim_key).is_some() {
        return;
    }
    let origin = route.origin;
    if !px.prefetch.try_acquire(origin, px.opts.prefetch_in_flight) {
        return;
    }
    let slot = Slot {
        px: Arc::clone(px),
        origin,
    };
    let Claim::Leader(guard) = px.fills.claim(&claim_key) else {
        return;
    };
    px.prefetch.issued(&t.key);
    let fetch = req.fetch_of(t.route, &t.key, &t.target, RequestCacheControl::default());
    let job = Job {
        px: Arc::clone(px),
        guard,
        fetch: Rc::new(fetch),
        base: t.key.to_vec(),
        stale: None,
        slice: (slice_bytes > 0).then_some(SliceJob {
            index: 0,
            start: 0,
            len: slice_bytes,
            if_match: None,
            total: None,
        }),
        handoff: None,
        interim: None,
    };
    tracing::debug!(key = %String::from_utf8_lossy(&t.key), "prefetch");
    let pw = Rc::clone(pw);
    let key = t.key.clone();
    tokio::task::spawn_local(async move {
        let px = Arc::clone(&pw.shared);
        let end = fill::run(pw, job).await;
        if !matches!(end, Phase::Stored | Phase::Writing | Phase::Elsewhere) {
            px.prefetch.failed(&key);
        }
        drop(slot);
    });
}

/// One prefetch slot of an origin, given back on drop (however the fill ends).
struct Slot {
    px: Arc<ProxyShared>,
    origin: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.px.prefetch.release(self.origin);
    }
}

#[cfg(test)]
mod tests {
    use super::response_field;

    #[test]
    fn fields_of_an_encoded_head() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\ncontent-type:  application/x-mpegURL \r\n\r\n";
        assert_eq!(
            response_field(head, b"Content-Type"),
            Some(&b"application/x-mpegURL"[..])
        );
        assert_eq!(response_field(head, b"etag"), None);
    }
}
