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
//! What a played segment starts is its viewer's queue ([`queue`]): the segments after
//! it, issued one origin wait at a time, dropped when the viewer switches to another
//! rendition of the same master playlist or AdaptationSet ([`viewer`],
//! `ahead::Memory::still`; master playlists are read for their groups of alternatives,
//! `hls::parse_master`).
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
//! A playlist is read after its answer went out (waiting for its fill to end, then on
//! the blocking pool), so a client asking for a segment the moment it has the playlist
//! can be answered before the read ends, and then nothing would follow that segment
//! (a rendition's first segment, on a loaded machine). So reads in flight are counted,
//! from before the playlist's body goes out until the read returns however it ends
//! ([`Reading`]), and a `2xx` GET of an object no read has named, answered while some
//! are, has its played-or-not decision ([`played`]) made by a task ([`played_later`])
//! once a read names it, or once every read in flight when it was answered has ended,
//! or after [`READ_WAIT`]. The response itself never waits. Cost: while no read is in
//! flight, one lock to see that; while some are, one task per such answer, woken at
//! each read's end and gone when the reads it waits for are (a second at most).
//!
//! A request's CMCD `nor` hint (`CMCD-Request` header, CTA-5004) names one more object
//! to prefetch, under the same rules.
//!
//! Files played in byte ranges (`#EXT-X-BYTERANGE` playlists, DASH `SegmentURL@mediaRange`
//! and `SegmentBase`, whose ranges are in the file's `sidx`, read from the store once
//! the player's index read stored it) are remembered as their ranges in sequence order
//! (`ahead::Ranged`): a `206` playing range `i` (`playback::classify_part`) prefetches
//! ranges `i+1..=i+k`, on a sliced route as the slices holding them, each under the key a
//! client's range miss on it fills (`key::slice`), with the file's length and strong
//! ETag from the response. Route `slice_readahead` ([`reads_ahead`], [`read_ahead`],
//! called by `slices`) prefetches the slices after each one a front-to-back reader's
//! response opens, through the same budget and counters.
//!
//! Not prefetched: a segment whose URL has a `Vary` stub or anything stored (even
//! stale: prefetch never revalidates), a URL remembered as uncacheable, requests with
//! `no-store`. On a sliced route the first slice is prefetched (the whole segment when
//! it fits one slice, as segments usually do).

use std::collections::HashSet;
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use linerate_cache::Lookup;
use linerate_http::cache::key::{self, Scheme};
use linerate_http::cache::{parse_content_range, RequestCacheControl};
use linerate_http::hls::SubRange;
use linerate_http::{dash, hls, path, playback, sidx, Method};

use super::ahead::{Follow, Next, Ranged, Still, Target};
use super::fill::{self, Job, SliceJob};
use super::fills::{Claim, Phase};
use super::request::{CacheRequest, Fetch};
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
        // Counted in flight from now, before the playlist's body goes out: a segment
        // the client asks for once it has the playlist finds the read running.
        let reading = Reading {
            px: Arc::clone(px),
            n: px.prefetch.read_start(),
        };
        tokio::task::spawn_local(read_playlist(
            Rc::clone(pw),
            (reading, kind),
            req.scheme,
            req.host.clone(),
            req.target.clone(),
            req.key.clone(),
            req.route,
        ));
        return;
    }
    let ranged = px.prefetch.ranged(&req.key);
    let follow = match ranged {
        Some(_) => None,
        None => px.prefetch.next(&req.key),
    };
    if ranged.is_some() || follow.is_some() {
        played(
            pw,
            &Served::of(req, response),
            ranged,
            follow,
            k as usize,
            &|t| fetch_for(req, t),
        );
    } else if let Some(newest) = px
        .prefetch
        .newest_read()
        .filter(|_| pw.deferred.get() < MAX_DEFERRED)
    {
        // Not known, or not yet: a playlist read in flight (the one this client just
        // had the playlist from, still on the blocking pool or waiting for the
        // playlist's fill to end) may name it. Decided once the reads running now end.
        let template = req.fetch_of(
            req.route,
            &req.key,
            &req.target,
            RequestCacheControl::default(),
        );
        tokio::task::spawn_local(played_later(
            Rc::clone(pw),
            Served::of(req, response),
            newest,
            k as usize,
            template,
        ));
    }
    // CTA-5004 `nor`: the player names its next object itself (a rendition switch, a
    // playlist the cache has not read). Held to the same rules as a playlist's URIs.
    let nor = linerate_http::cmcd::next_object(req.head.values(b"cmcd-request"))
        .or_else(|| linerate_http::cmcd::next_object_in_query(&req.target));
    if let Some(nor) = nor {
        let prefix = px.routes[req.route].opts.path_prefix.as_bytes();
        if let Some(t) = segment(px, req.scheme, &req.host, &req.target, prefix, &nor, None) {
            start(pw, &t, &|| fetch_for(req, &t), None);
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

/// A `2xx` answer to a GET of an object that may be a segment (or a range of a file
/// played in ranges), owned: what deciding whether it played one reads, so the
/// decision can wait for a playlist read in flight ([`played_later`]).
struct Served {
    /// The object's key.
    key: Vec<u8>,
    /// Its client's memory key for the object's ranges ([`client_key`]).
    client: Vec<u8>,
    status: u16,
    head_only: bool,
    /// The answer's `Content-Range`.
    content_range: Option<Vec<u8>>,
    /// The file's version, for a range of it.
    version: FileVersion,
    /// Who the viewer is ([`viewer`]).
    who: Vec<u8>,
}

impl Served {
    fn of(req: &CacheRequest<'_>, response: &Response) -> Served {
        let status = response.status.code();
        Served {
            key: req.key.clone(),
            client: client_key(req, &req.key),
            status,
            head_only: req.head_only,
            content_range: response_field(&response.head, b"content-range").map(<[u8]>::to_vec),
            version: if status == 206 {
                FileVersion::of(&response.head)
            } else {
                FileVersion::default()
            },
            who: who(req),
        }
    }
}

/// `served` was answered of an object that a playlist read said is a segment (`follow`:
/// what comes after it) or a file played in ranges (`ranged`): if it played one,
/// prefetch the `k` after it, each fetched as `fetch` says.
fn played(
    pw: &Rc<ProxyWorker>,
    served: &Served,
    ranged: Option<Arc<Ranged>>,
    follow: Option<Follow>,
    k: usize,
    fetch: &dyn Fn(&Target) -> Rc<Fetch>,
) {
    let px = &pw.shared;
    if let Some(ranged) = ranged {
        // A file played in byte ranges (a byte-range playlist's, a DASH SegmentBase
        // representation's): the ranges after the one read.
        ranged_read(pw, served, &ranged, k, fetch);
    } else if let Some(follow) = follow {
        // A segment of a playlist read: played, or only probed? The memory of each
        // client's last range is kept for known segments only, so it holds no more
        // than the segments being read in ranges now.
        let status = served.status;
        let content_range = served.content_range.as_deref();
        // Only a 206 continues or is continued: a whole answer takes no lock here.
        let previous_end = if status == 206 {
            px.prefetch
                .swap_range_end(&served.client, playback::range_end(status, content_range))
        } else {
            None
        };
        let read = playback::classify(served.head_only, status, content_range, previous_end);
        if read.plays() {
            let items = follow
                .next
                .iter()
                .take(k)
                .map(|t| Queued {
                    t: Arc::clone(t),
                    fetch: fetch(t),
                    version: None,
                })
                .collect();
            let viewer = viewer(px, &served.who, &follow.seq);
            queue(pw, viewer, follow.seq, items);
        } else {
            tracing::debug!(key = %String::from_utf8_lossy(&served.key), read = read.as_str(), "segment not played");
        }
    }
}

/// Longest a segment's [`played_later`] waits for the playlist reads in flight when
/// it was answered: a read waits for its playlist's fill to end (a client acting on
/// the playlist has had it whole, or nearly, by then), then reads it on the blocking
/// pool and parses it, well under this even on a loaded machine.
const READ_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Most decisions a worker defers at once ([`played_later`]): each lives at most
/// [`READ_WAIT`] and is woken at each read's end, so a client making reads and
/// answers fast (random playlist URLs, say) costs a bounded number of tasks; past it, an
/// answer is decided at once (as before reads were waited for: no prefetch after it).
const MAX_DEFERRED: usize = 256;

/// Counts a deferred decision for its worker while it lives.
struct Deferred(Rc<ProxyWorker>);

impl Deferred {
    fn new(pw: Rc<ProxyWorker>) -> Deferred {
        pw.deferred.set(pw.deferred.get() + 1);
        Deferred(pw)
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        self.0.deferred.set(self.0.deferred.get().saturating_sub(1));
    }
}

/// [`played`] for `served`, once it is known what `served` is: when a playlist read says, or when
/// every read up to number `newest` (those in flight when it was answered) has ended,
/// or after [`READ_WAIT`]. `template`: the request's own fill, each prefetch's being it
/// for another target ([`retarget`]).
async fn played_later(pw: Rc<ProxyWorker>, served: Served, newest: u64, k: usize, template: Fetch) {
    let counted = Deferred::new(pw);
    let pw = &counted.0;
    let px = Arc::clone(&pw.shared);
    let deadline = tokio::time::Instant::now() + READ_WAIT;
    loop {
        // Registered before looking, so a read ending in between still wakes it.
        let ended = px.prefetch.read_ended();
        let ranged = px.prefetch.ranged(&served.key);
        let follow = match ranged {
            Some(_) => None,
            None => px.prefetch.next(&served.key),
        };
        if ranged.is_some() || follow.is_some() {
            played(pw, &served, ranged, follow, k, &|t| {
                retarget(&px, &template, t)
            });
            return;
        }
        if px.prefetch.reads_ended_through(newest)
            || tokio::time::timeout_at(deadline, ended).await.is_err()
        {
            tracing::debug!(key = %String::from_utf8_lossy(&served.key), "not a segment of a playlist read");
            return;
        }
    }
}

/// What a prefetch of `t` sends, from `template`, the fill of another target for the
/// same request (`CacheRequest::fetch_of`, whose fields and storing decision are the
/// request's whatever the target): as [`fetch_for`] makes it.
fn retarget(px: &ProxyShared, template: &Fetch, t: &Target) -> Rc<Fetch> {
    Rc::new(Fetch {
        origin: px.routes[t.route].origin,
        route: t.route,
        primary: t.key.to_vec(),
        host: template.host.clone(),
        from_peer: template.from_peer,
        target: t.target.to_vec(),
        fields: template.fields.clone(),
        policy: template.policy.clone(),
    })
}

/// A playlist read in flight ([`Memory::read_start`](super::ahead::Memory::read_start)),
/// ended when dropped, however [`read_playlist`] ends.
struct Reading {
    px: Arc<ProxyShared>,
    n: u64,
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.px.prefetch.read_end(self.n);
    }
}

/// Who `req`'s client is as a viewer: the player's CMCD `sid` when it sends one, else
/// the client's address.
fn who(req: &CacheRequest<'_>) -> Vec<u8> {
    let sid = linerate_http::cmcd::session_id(req.head.values(b"cmcd-session"))
        .or_else(|| linerate_http::cmcd::session_id_in_query(&req.target));
    match (sid, req.peer) {
        (Some(sid), _) => [&b"sid "[..], &sid].concat(),
        (None, Some(ip)) => format!("ip {ip}").into_bytes(),
        (None, None) => b"ip".to_vec(),
    }
}

/// The viewer `who` (see [`who`]) is, playing the sequence `seq`: who, and which group
/// of alternatives (the one a master playlist or an MPD put `seq` in, else `seq`
/// alone). One viewer plays one sequence of a group at a time (module `ahead`): clients
/// behind one address that send no `sid` are one viewer, so two of them playing
/// different renditions of a stream stop each other's queues (fewer prefetches, never a
/// wrong object).
fn viewer(px: &ProxyShared, who: &[u8], seq: &[u8]) -> Vec<u8> {
    let mut out = who.to_vec();
    out.push(b'\n');
    match px.prefetch.group(seq) {
        Some(group) => out.extend_from_slice(&group),
        None => out.extend_from_slice(seq),
    }
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

/// One sequence of a playlist or MPD, as read.
struct Sequence {
    /// Its name in the memory: the media playlist's key, or the MPD's key and the
    /// representation's number.
    seq: Arc<[u8]>,
    /// The target its URIs are relative to.
    base: Vec<u8>,
    /// Its URIs in order, each with its byte range when it is a range of a file.
    items: Vec<(Vec<u8>, Option<SubRange>)>,
    /// A DASH SegmentBase file's `indexRange`.
    index: Option<(u64, u64)>,
}

/// Read the stored copy of the playlist or MPD keyed `key` (requested as `target` on
/// `route`) once it is complete, and remember what follows each of its segments.
/// `_reading`: counts it in flight until it returns.
async fn read_playlist(
    pw: Rc<ProxyWorker>,
    (_reading, kind): (Reading, Manifest),
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
    let Lookup::Hit(h) = super::shared::lookup(px, &key, false).await else {
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
    // Each sequence: the target its URIs are relative to, the URIs in order (each with
    // its byte range when it is a range of a file), and a DASH SegmentBase file's index.
    let sequences: Vec<Sequence> = match kind {
        Manifest::Hls => match hls::parse_media(&body) {
            Some(p) => vec![Sequence {
                seq: key.clone().into(),
                base: target.clone(),
                items: p
                    .segments
                    .iter()
                    .zip(&p.ranges)
                    .map(|(s, r)| (s.to_vec(), *r))
                    .collect(),
                index: None,
            }],
            None => {
                // A master playlist: what its renditions are alternatives of.
                if let Some(master) = hls::parse_master(&body) {
                    let prefix = px.routes[route].opts.path_prefix.as_bytes();
                    for (alternative, uri) in master {
                        let Some(t) = segment(px, scheme, &host, &target, prefix, uri, None) else {
                            continue;
                        };
                        let label = match alternative {
                            hls::Alternative::Variant => "variant",
                            hls::Alternative::IFrames => "i-frames",
                            hls::Alternative::Media(hls::MediaType::Audio) => "audio",
                            hls::Alternative::Media(hls::MediaType::Video) => "video",
                            hls::Alternative::Media(hls::MediaType::Subtitles) => "subtitles",
                            hls::Alternative::Media(hls::MediaType::ClosedCaptions) => "captions",
                        };
                        let group: Arc<[u8]> = [&key[..], b"#", label.as_bytes()].concat().into();
                        px.prefetch.set_group(&t.key, group);
                    }
                }
                Vec::new()
            }
        },
        // Origin-form targets already (BaseURLs applied, absolute ones refused): each
        // resolves to itself below, under the same prefix and route checks.
        Manifest::Dash => match dash::representations(&body, &target, true) {
            Ok(reps) => reps
                .into_iter()
                .enumerate()
                .map(|(i, rep)| {
                    let seq: Arc<[u8]> = [&key[..], format!("#rep{i}").as_bytes()].concat().into();
                    let group = [&key[..], format!("#set{}", rep.set).as_bytes()].concat();
                    px.prefetch.set_group(&seq, group.into());
                    Sequence {
                        seq,
                        base: target.clone(),
                        items: rep.media.into_iter().zip(rep.ranges).collect(),
                        index: rep.index,
                    }
                })
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
    for seq in &sequences {
        let items: Arc<[Option<Arc<Target>>]> = seq
            .items
            .iter()
            .map(|(uri, range)| {
                segment(
                    px,
                    scheme,
                    &host,
                    &seq.base,
                    opts.path_prefix.as_bytes(),
                    uri,
                    *range,
                )
            })
            .collect();
        let mut files: HashSet<&[u8]> = HashSet::new();
        for (i, t) in items.iter().enumerate() {
            let Some(t) = t else { continue };
            if t.range.is_some() {
                // A range of a file: what follows it is found by the range a client
                // reads (`ranged_read`), the file's key being the same for all.
                files.insert(&t.key);
                continue;
            }
            // The last one too (nothing after it): playing it still tells which
            // sequence its viewer is on.
            let next: Next = items[i + 1..].iter().take(k).flatten().cloned().collect();
            px.prefetch.set_next(
                &t.key,
                Follow {
                    seq: Arc::clone(&seq.seq),
                    next,
                },
            );
        }
        for file in files {
            px.prefetch.set_ranged(
                file,
                Ranged::known(file, Arc::clone(&seq.seq), Arc::clone(&items)),
            );
        }
        if let (Some((first, last)), [Some(file)]) = (seq.index, &*items) {
            px.prefetch.set_ranged(
                &file.key,
                Ranged::Index {
                    seq: Arc::clone(&seq.seq),
                    file: Arc::clone(file),
                    first,
                    last,
                    reading: AtomicBool::new(false),
                },
            );
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
    range: Option<SubRange>,
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
        range,
    }))
}

/// What a prefetch of `t` sends: `req`'s fields (as that client's own request for `t`
/// would), with no directives of its own.
fn fetch_for(req: &CacheRequest<'_>, t: &Target) -> Rc<Fetch> {
    Rc::new(req.fetch_of(t.route, &t.key, &t.target, RequestCacheControl::default()))
}

/// The version of a file a client is being served in ranges: its complete length and
/// its strong ETag, which the slices prefetched after the client's range must have (as
/// the client's own response moving on to them checks).
#[derive(Debug, Clone, Default)]
struct FileVersion {
    total: Option<u64>,
    etag: Option<Vec<u8>>,
}

impl FileVersion {
    fn of(response_head: &[u8]) -> FileVersion {
        FileVersion {
            total: response_field(response_head, b"content-range")
                .and_then(parse_content_range)
                .and_then(|cr| cr.complete),
            etag: response_field(response_head, b"etag")
                .filter(|t| !t.starts_with(b"W/"))
                .map(<[u8]>::to_vec),
        }
    }
}

/// Start the prefetch of `t` unless it is stored, being fetched, uncacheable, or over
/// its origin's budget. `fetch`: what the prefetch sends. `version`: what is known of
/// `t`'s file when a client is being served a range of it.
///
/// A range of a file on a sliced route: the slices holding it, each under the key a
/// client's range request missing that slice fills (`key::slice`), so the client's
/// request for the range is then a hit. Anything else: the object as a client's plain
/// request fills it (on a sliced route its first slice; a range of a file on a route
/// without slices: the whole file, which the first client request for any range of it
/// fetches anyway, so it is stored or being fetched by then).
///
/// Returns the keys its fills claim (started now or running already), for a queue to
/// wait on.
fn start(
    pw: &Rc<ProxyWorker>,
    t: &Arc<Target>,
    fetch: &dyn Fn() -> Rc<Fetch>,
    version: Option<&FileVersion>,
) -> Vec<Vec<u8>> {
    let fills = fills_of(&pw.shared, t, version);
    let mut claims = Vec::with_capacity(fills.len());
    for f in fills {
        let used = if f.used_is_base {
            &t.key[..]
        } else {
            &f.claim[..]
        };
        launch(pw, t.route, &f.claim, &t.key, fetch, f.slice, used);
        claims.push(f.claim);
    }
    claims
}

/// One fill a prefetch of a target is (see [`start`]).
struct PrefetchFill {
    /// The key it claims: the object's, or a slice's.
    claim: Vec<u8>,
    /// Its use is counted by the object's key (its first slice standing for it), not
    /// by `claim`.
    used_is_base: bool,
    slice: Option<SliceJob>,
}

/// The fills a prefetch of `t` starts, stored or running ones included (`launch`
/// skips those); none when its route prefetches nothing, it is uncacheable or stored
/// whole.
fn fills_of(px: &ProxyShared, t: &Target, version: Option<&FileVersion>) -> Vec<PrefetchFill> {
    let route = &px.routes[t.route];
    if route.opts.prefetch_segments == 0 || px.is_pass(&t.key) {
        return Vec::new();
    }
    // Index only: a lookup would open each stored segment's file on the event loop and
    // count a use for eviction, for every segment a client is served.
    if px.store.contains(&t.key) {
        return Vec::new();
    }
    let slice_bytes = route.opts.slice_bytes;
    match t.range {
        Some(r) if slice_bytes > 0 => {
            let total = version.and_then(|v| v.total);
            let if_match = version.and_then(|v| v.etag.clone());
            let (first, mut last) = (r.offset / slice_bytes, (r.end() - 1) / slice_bytes);
            if version.is_none() && !px.store.contains(&key::slice(&t.key, 0)) {
                // Another file, not known here yet: its first slice needed only, since
                // the origin's answer decides whether the file is sliced at all (an
                // origin ignoring ranges sends it whole, once).
                last = first;
            }
            let mut out = Vec::new();
            for n in first..=last {
                if total.is_some_and(|total| n * slice_bytes >= total) {
                    break;
                }
                out.push(PrefetchFill {
                    claim: key::slice(&t.key, n),
                    used_is_base: false,
                    slice: Some(SliceJob {
                        index: n,
                        start: n * slice_bytes,
                        len: slice_bytes,
                        if_match: if_match.clone(),
                        total,
                    }),
                });
            }
            out
        }
        _ if slice_bytes > 0 => vec![PrefetchFill {
            claim: key::slice(&t.key, 0),
            used_is_base: true,
            slice: Some(SliceJob {
                index: 0,
                start: 0,
                len: slice_bytes,
                if_match: None,
                total: None,
            }),
        }],
        _ => vec![PrefetchFill {
            claim: t.key.to_vec(),
            used_is_base: true,
            slice: None,
        }],
    }
}

/// Whether a prefetch of `t` would fetch anything now: some fill of it neither stored
/// nor running.
fn would_fetch(px: &ProxyShared, t: &Target, version: Option<&FileVersion>) -> bool {
    fills_of(px, t, version).iter().any(|f| {
        !(f.claim[..] != t.key[..] && px.store.contains(&f.claim))
            && px.fills.watch(&f.claim).is_none()
    })
}

/// A prefetch waiting its turn in a viewer's queue.
struct Queued {
    t: Arc<Target>,
    fetch: Rc<Fetch>,
    version: Option<FileVersion>,
}

/// `viewer` (see [`viewer`]) played a segment of `seq`, after which come `items`:
/// prefetch them in order, one origin wait at a time (each once the fills of the one
/// before, whoever started them, have the origin's answer: its head, or a failure), as
/// long as this is the viewer's last play (`Memory::still`). When the viewer plays on in the same sequence, the queue its new
/// play starts takes over; when it plays another sequence of the group (a rendition
/// switch), what is left here is dropped, never issued, and counted.
fn queue(pw: &Rc<ProxyWorker>, viewer: Vec<u8>, seq: Arc<[u8]>, items: Vec<Queued>) {
    let ticket = pw.shared.prefetch.play(&viewer, &seq);
    let Some(first) = items.first() else {
        return;
    };
    // The first now, before the response that played the segment goes on (a response
    // reading on past its first slice then joins the prefetch rather than racing it).
    let waits = start(
        pw,
        &first.t,
        &|| Rc::clone(&first.fetch),
        first.version.as_ref(),
    );
    if items.len() < 2 {
        return;
    }
    let pw = Rc::clone(pw);
    tokio::task::spawn_local(async move {
        let px = Arc::clone(&pw.shared);
        let mut waits = waits;
        for (i, q) in items.iter().enumerate().skip(1) {
            // The one before has its origin's answer (its head, or a failure): an
            // origin wait at a time, so what is still queued when the viewer switches
            // was never asked for.
            for claim in waits {
                if let Some(mut rx) = px.fills.watch(&claim) {
                    super::fills::settled(&mut rx).await;
                }
            }
            match px.prefetch.still(&viewer, &seq, ticket) {
                Still::Current => {}
                Still::Superseded => return,
                Still::Switched => {
                    let left = items[i..]
                        .iter()
                        .filter(|q| would_fetch(&px, &q.t, q.version.as_ref()))
                        .count();
                    px.prefetch.dropped_on_switch(left as u64);
                    tracing::debug!(
                        seq = %String::from_utf8_lossy(&seq),
                        dropped = left,
                        "rendition switch: prefetch queue dropped"
                    );
                    return;
                }
            }
            waits = start(&pw, &q.t, &|| Rc::clone(&q.fetch), q.version.as_ref());
        }
    });
}

/// Start one prefetch fill claiming `claim_key` (the object `base`, or one of its
/// slices) unless it is stored, being fetched or over the budget of `route`'s origin.
/// `used_key`: the key its use is counted by (`Memory::served`).
fn launch(
    pw: &Rc<ProxyWorker>,
    route: usize,
    claim_key: &[u8],
    base: &[u8],
    fetch: &dyn Fn() -> Rc<Fetch>,
    slice: Option<SliceJob>,
    used_key: &[u8],
) {
    let px = &pw.shared;
    if claim_key != base && px.store.contains(claim_key) {
        return;
    }
    if px.fills.watch(claim_key).is_some() {
        return;
    }
    let origin = px.routes[route].origin;
    if !px.prefetch.try_acquire(origin, px.opts.prefetch_in_flight) {
        return;
    }
    let slot = Slot {
        px: Arc::clone(px),
        origin,
    };
    let Claim::Leader(guard) = px.fills.claim(claim_key) else {
        return;
    };
    px.prefetch.issued(used_key, route);
    let job = Job {
        px: Arc::clone(px),
        guard,
        fetch: fetch(),
        base: base.to_vec(),
        stale: None,
        slice,
        handoff: None,
        interim: None,
    };
    tracing::debug!(key = %String::from_utf8_lossy(claim_key), "prefetch");
    let pw = Rc::clone(pw);
    let key = used_key.to_vec();
    tokio::task::spawn_local(async move {
        let px = Arc::clone(&pw.shared);
        let end = fill::run(pw, job).await;
        if !matches!(end, Phase::Stored | Phase::Writing | Phase::Elsewhere) {
            px.prefetch.failed(&key);
        }
        drop(slot);
    });
}

/// Route `slice_readahead`: whether a sliced response of `req` (status `code`, bytes
/// `from..to` of `total`) reads its object as a player plays a file front to back
/// (`playback::classify`: the whole of it, a range from byte 0 past a probe, or a range
/// starting where the last one this client address was sent of the object ended). Its
/// end is remembered for the client's next range.
pub(crate) fn reads_ahead(
    pw: &Rc<ProxyWorker>,
    req: &CacheRequest<'_>,
    code: linerate_http::StatusCode,
    (from, to, total): (u64, u64, u64),
) -> bool {
    if req.head_only || to <= from {
        return false;
    }
    let status = code.code();
    if status != 206 {
        return true;
    }
    let content_range = format!("bytes {from}-{}/{total}", to - 1);
    // Its own memory entries (the segment memory keys the same clients by `client_key`
    // after the response: one object is never both).
    let mut memory_key = b"readahead ".to_vec();
    memory_key.extend_from_slice(&client_key(req, &req.key));
    let previous_end = pw.shared.prefetch.swap_range_end(&memory_key, Some(to));
    let read = playback::classify(false, status, Some(content_range.as_bytes()), previous_end);
    if !read.plays() {
        tracing::debug!(key = %String::from_utf8_lossy(&req.key), read = read.as_str(), "no read-ahead");
    }
    read.plays()
}

/// Route `slice_readahead`: prefetch the `n` slices after slice `index` (of
/// `slice_bytes`) of the object whose slices are under `base` (its primary key, or the
/// variant a `Vary` selected), as slices a client's response moving on to them would
/// fetch (`total`, `if_match`: the object's length and strong ETag), each unless stored,
/// being fetched or over the origin's prefetch budget.
pub(crate) fn read_ahead(
    pw: &Rc<ProxyWorker>,
    route: usize,
    base: &[u8],
    fetch: &Rc<Fetch>,
    (index, n, slice_bytes): (u64, u32, u64),
    (total, if_match): (u64, Option<Vec<u8>>),
) {
    for next in index.saturating_add(1)..=index.saturating_add(u64::from(n)) {
        let Some(start) = next.checked_mul(slice_bytes).filter(|&s| s < total) else {
            break;
        };
        let slice = SliceJob {
            index: next,
            start,
            len: slice_bytes,
            if_match: if_match.clone(),
            total: Some(total),
        };
        let key = key::slice(base, next);
        launch(
            pw,
            route,
            &key,
            base,
            &|| Rc::clone(fetch),
            Some(slice),
            &key,
        );
    }
}

/// A client was answered a GET of a file played in byte ranges (`served`): if the
/// response plays one of its ranges, prefetch the `k` after it (each fetched as `fetch`
/// says); if the file's ranges are in a DASH index not read yet, read it first.
fn ranged_read(
    pw: &Rc<ProxyWorker>,
    served: &Served,
    ranged: &Arc<Ranged>,
    k: usize,
    fetch: &dyn Fn(&Target) -> Rc<Fetch>,
) {
    let px = &pw.shared;
    let status = served.status;
    if status != 206 || served.head_only {
        // The whole file (its own response reads every byte of it), or a HEAD.
        return;
    }
    let content_range = served.content_range.as_deref();
    let previous_end = px
        .prefetch
        .swap_range_end(&served.client, playback::range_end(status, content_range));
    let read = RangeRead {
        content_range: served.content_range.clone(),
        previous_end,
        version: served.version.clone(),
    };
    match &**ranged {
        Ranged::Known { seq, .. } => {
            let viewer = viewer(px, &served.who, seq);
            play_range(pw, &served.key, ranged, &read, k, fetch, viewer);
        }
        Ranged::Index {
            seq,
            file,
            first,
            last,
            reading,
        } => {
            if reading.swap(true, Ordering::AcqRel) {
                return;
            }
            let fetch = fetch(file);
            let viewer = viewer(px, &served.who, seq);
            tokio::task::spawn_local(read_index(
                Rc::clone(pw),
                Arc::clone(ranged),
                Arc::clone(file),
                (*first, *last),
                fetch,
                read,
                (k, viewer),
            ));
        }
    }
}

/// What a response sent of a file played in ranges, owned.
struct RangeRead {
    content_range: Option<Vec<u8>>,
    /// Where the client's previous range of the file ended.
    previous_end: Option<u64>,
    version: FileVersion,
}

/// If `read` plays a range of the file keyed `file_key` (`playback::classify_part`),
/// queue the prefetch of the `k` items after it in its sequence for `viewer`.
fn play_range(
    pw: &Rc<ProxyWorker>,
    file_key: &[u8],
    ranged: &Ranged,
    read: &RangeRead,
    k: usize,
    fetch: &dyn Fn(&Target) -> Rc<Fetch>,
    viewer: Vec<u8>,
) {
    let Ranged::Known { seq, items, .. } = ranged else {
        return;
    };
    let content_range = read.content_range.as_deref();
    let Some(first) = content_range
        .and_then(parse_content_range)
        .map(|cr| cr.first)
    else {
        return;
    };
    let Some((i, start_byte, end_byte)) = ranged.at(first) else {
        return;
    };
    let how = playback::classify_part(
        false,
        206,
        content_range,
        (start_byte, end_byte),
        read.previous_end,
    );
    if !how.plays() {
        tracing::debug!(key = %String::from_utf8_lossy(file_key), read = how.as_str(), "range not played");
        return;
    }
    let queued = items[i + 1..]
        .iter()
        .take(k)
        .flatten()
        .map(|t| Queued {
            t: Arc::clone(t),
            fetch: fetch(t),
            version: (&*t.key == file_key).then(|| read.version.clone()),
        })
        .collect();
    queue(pw, viewer, Arc::clone(seq), queued);
}

/// Read the `sidx` at bytes `first..=last` of the DASH SegmentBase `file` from the
/// store (the client's request for the index range stored it: a player reads it before
/// any subsegment), remember the file's subsegments, and play `read` against them.
/// Not stored: forgotten, so a later request tries again; not an index this reader
/// takes (`linerate_http::sidx`): the file is not prefetched.
async fn read_index(
    pw: Rc<ProxyWorker>,
    ranged: Arc<Ranged>,
    file: Arc<Target>,
    (first, last): (u64, u64),
    fetch: Rc<Fetch>,
    read: RangeRead,
    (k, viewer): (usize, Vec<u8>),
) {
    let px = Arc::clone(&pw.shared);
    let slice_bytes = px.routes[file.route].opts.slice_bytes;
    let Some(bytes) = stored_bytes(&px, &file.key, slice_bytes, first, last).await else {
        if let Ranged::Index { reading, .. } = &*ranged {
            reading.store(false, Ordering::Release);
        }
        return;
    };
    let Some(subsegments) = sidx::subsegments(&bytes, first) else {
        tracing::debug!(key = %String::from_utf8_lossy(&file.key), "no sidx prefetch can read");
        return;
    };
    let items: Arc<[Option<Arc<Target>>]> = subsegments
        .into_iter()
        .map(|r| {
            Some(Arc::new(Target {
                target: file.target.clone(),
                key: file.key.clone(),
                route: file.route,
                range: Some(r),
            }))
        })
        .collect();
    let Ranged::Index { seq, .. } = &*ranged else {
        return;
    };
    let known = Ranged::known(&file.key, Arc::clone(seq), items);
    play_range(
        &pw,
        &file.key,
        &known,
        &read,
        k,
        &|_| Rc::clone(&fetch),
        viewer,
    );
    px.prefetch.set_ranged(&file.key, known);
    // An index is read like a playlist: counted once its ranges are known.
    px.prefetch.playlist_read();
}

/// Longest `SegmentBase@indexRange` read, bytes (an index of hours of 1 s subsegments is
/// well under it).
const MAX_INDEX_BYTES: u64 = 1 << 20;

/// Bytes `first..=last` of the object keyed `key`, from its stored copy: whole, or the
/// slices holding them (`slice_bytes`, 0 when the route has none). Fills of it still
/// running are waited for; `None` when any byte is not stored.
async fn stored_bytes(
    px: &Arc<ProxyShared>,
    key: &[u8],
    slice_bytes: u64,
    first: u64,
    last: u64,
) -> Option<Vec<u8>> {
    if last < first || last - first >= MAX_INDEX_BYTES {
        return None;
    }
    let slices = || (first / slice_bytes)..=(last / slice_bytes);
    let mut keys = vec![key.to_vec()];
    if slice_bytes > 0 {
        keys.extend(slices().map(|n| key::slice(key, n)));
    }
    for k in &keys {
        if let Some(mut rx) = px.fills.watch(k) {
            super::fills::finished(&mut rx).await;
        }
    }
    // Each part: the stored copy, where in its body, how many bytes.
    let mut parts = Vec::new();
    match super::shared::lookup(px, key, false).await {
        Lookup::Hit(h) => {
            let len = h.body_len()?;
            if h.meta.status != 200 || h.meta.header(VARY_STUB).is_some() || last >= len {
                return None;
            }
            parts.push((h, first, last - first + 1));
        }
        _ if slice_bytes > 0 => {
            for n in slices() {
                let Lookup::Hit(h) = super::shared::lookup(px, &key::slice(key, n), false).await
                else {
                    return None;
                };
                let at = n * slice_bytes;
                let end = at + h.body_len()?;
                let (from, to) = (first.max(at), (last + 1).min(end));
                if to <= from {
                    return None;
                }
                parts.push((h, from - at, to - from));
            }
        }
        _ => return None,
    }
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        for (h, at, len) in parts {
            let start = out.len();
            out.resize(start + usize::try_from(len).ok()?, 0);
            h.file
                .read_exact_at(&mut out[start..], h.body_offset + at)
                .ok()?;
        }
        (out.len() as u64 == last - first + 1).then_some(out)
    })
    .await
    .ok()
    .flatten()
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
