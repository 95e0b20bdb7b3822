//! Where a fill's request goes in a cluster, and how a broken peer body is continued.
//!
//! [`send`] follows the cluster's plan for the claim key (`cluster::Membership::plan`):
//! the owner peer (or the next node in rank when the owner is down or loaded past the
//! bound) with the hop header, so it fills from its origin and never forwards again;
//! or the origin, when this node is the owner, after asking the previous owner for
//! its cached copy (`only-if-cached`) within the window after a membership change. A
//! request that came from a peer is never forwarded to fill (one hop only): it goes to
//! the origin, after the previous-owner ask when this node owns the key. A peer that
//! cannot be reached or gives no head is counted against its health and the next in
//! rank is tried.
//!
//! [`resume`] continues a peer body broken off (the peer died mid-transfer) from the
//! next node or the origin with `Range: bytes=N-` and `If-Range`, so followers of the
//! fill get the rest of the same representation; the caller checks the answer is the
//! exact `206` asked for and otherwise fails the fill (a body is never spliced from
//! two versions).
//!
//! Not here: the fill's storing decisions (`fill`), placement (`cluster`).

use std::sync::Arc;

use crate::cluster::auth::Covered;
use crate::cluster::{InFlight, Membership, Peer, Plan};
use crate::clusteropts::HOP_HEADER;
use crate::origin::{OriginError, OriginRequest, OriginResponse};

use super::request::Fetch;
use super::shared::ProxyWorker;

/// Where an answer came from.
pub(crate) enum Source {
    /// The route's origin.
    Origin,
    /// A peer; the request counts as in flight to it while this lives.
    Peer {
        /// The peer.
        peer: Arc<Peer>,
        /// Held while the body is read (bounded load counts it).
        _in_flight: InFlight,
    },
}

impl Source {
    /// The peer, when it came from one.
    pub(crate) fn peer(&self) -> Option<&Arc<Peer>> {
        match self {
            Source::Origin => None,
            Source::Peer { peer, .. } => Some(peer),
        }
    }
}

/// A response head and where it came from.
pub(crate) struct Opened {
    pub(crate) response: OriginResponse,
    pub(crate) source: Source,
}

/// Send a fill's `request` for claim key `key` where the cluster's plan says (the
/// origin when there is no cluster).
pub(crate) async fn send(
    pw: &ProxyWorker,
    fetch: &Fetch,
    key: &[u8],
    request: &OriginRequest<'_>,
) -> Result<Opened, OriginError> {
    let cluster = pw.shared.cluster.as_ref();
    let Some(cluster) = cluster.filter(|_| !fetch.host.is_empty()) else {
        return from_origin(pw, fetch, request).await;
    };
    let m = cluster.membership();
    let mut tried = Vec::new();
    loop {
        let plan = match m.plan(key, &tried) {
            // A peer's request is never forwarded (one hop): whoever this node thinks
            // owns the key, it fills from the origin. Only as the owner does it still
            // ask the previous owner's cache, which never forwards or fills either.
            Plan::Peer(..) if fetch.from_peer => Plan::Origin { previous: None },
            plan => plan,
        };
        match plan {
            Plan::Origin { previous } => {
                if let Some(p) = previous {
                    let asked = to_peer(
                        pw,
                        &m,
                        &p,
                        fetch,
                        request,
                        &[(b"Cache-Control", b"only-if-cached")],
                    )
                    .await;
                    match asked {
                        Ok(o) if o.response.head.status != 504 => {
                            cluster.count_previous_hit();
                            return Ok(o);
                        }
                        _ => {}
                    }
                }
                return from_origin(pw, fetch, request).await;
            }
            Plan::Peer(p, role) => match to_peer(pw, &m, &p, fetch, request, &[]).await {
                Ok(o) => return Ok(o),
                Err(e) => {
                    tracing::debug!(peer = %p.name, role = role.as_str(), error = e.as_str(), "peer fill failed before its head; next in rank");
                    tried.push(p);
                }
            },
        }
    }
}

/// Continue a body broken off by `failed` at absolute byte `from` (through `last`):
/// the same request with `Range` and `If-Range: validator`, to the next node in rank
/// (skipping those `tried`) or the origin. The caller checks the answer.
#[allow(clippy::too_many_arguments)] // One resume's facts, passed once.
pub(crate) async fn resume(
    pw: &ProxyWorker,
    fetch: &Fetch,
    key: &[u8],
    request: &OriginRequest<'_>,
    tried: &mut Vec<Arc<Peer>>,
    from: u64,
    last: u64,
    validator: &[u8],
) -> Result<Opened, OriginError> {
    let range = format!("bytes={from}-{last}");
    let mut headers: Vec<(&[u8], &[u8])> = request
        .headers
        .iter()
        .filter(|(n, _)| {
            ![
                &b"range"[..],
                b"if-range",
                b"if-match",
                b"if-none-match",
                b"if-modified-since",
            ]
            .iter()
            .any(|f| n.eq_ignore_ascii_case(f))
        })
        .copied()
        .collect();
    headers.push((b"Range", range.as_bytes()));
    headers.push((b"If-Range", validator));
    let ranged = OriginRequest {
        headers: &headers,
        interim: None,
        ..*request
    };
    if let Some(cluster) = pw.shared.cluster.as_ref() {
        if !fetch.from_peer && !fetch.host.is_empty() {
            let m = cluster.membership();
            while let Plan::Peer(p, _) = m.plan(key, tried) {
                match to_peer(pw, &m, &p, fetch, &ranged, &[]).await {
                    Ok(o) if o.response.head.status == 206 => return Ok(o),
                    // A peer that cannot give the range: the origin can.
                    Ok(_) | Err(_) => tried.push(p),
                }
            }
        }
    }
    from_origin(pw, fetch, &ranged).await
}

async fn from_origin(
    pw: &ProxyWorker,
    fetch: &Fetch,
    request: &OriginRequest<'_>,
) -> Result<Opened, OriginError> {
    pw.origins[fetch.origin]
        .send(request)
        .await
        .map(|response| Opened {
            response,
            source: Source::Origin,
        })
}

/// `request` to peer `p`: in absolute form (the peer routes and keys by the URL's
/// host, as this node did), with `extra` fields and the hop header signed with the
/// cluster secret (`cluster::auth`).
async fn to_peer(
    pw: &ProxyWorker,
    m: &Membership,
    p: &Arc<Peer>,
    fetch: &Fetch,
    request: &OriginRequest<'_>,
    extra: &[(&[u8], &[u8])],
) -> Result<Opened, OriginError> {
    // The scheme of the key (the client's listener), so the peer keys it alike and
    // forwards the client's `X-Forwarded-Proto` (`proxy::respond`); the connection to
    // the peer is plain HTTP either way.
    let mut target = if fetch.primary.starts_with(b"https://") {
        b"https://".to_vec()
    } else {
        b"http://".to_vec()
    };
    target.extend_from_slice(&fetch.host);
    target.extend_from_slice(&fetch.target);
    let mut headers: Vec<(&[u8], &[u8])> = request
        .headers
        .iter()
        .filter(|(n, _)| {
            !extra.iter().any(|(e, _)| n.eq_ignore_ascii_case(e))
                && !n.eq_ignore_ascii_case(HOP_HEADER.as_bytes())
        })
        .copied()
        .collect();
    headers.extend_from_slice(extra);
    // The peer field is signed over what the peer will read: the request line as
    // written, the authority of the absolute-form target and the covered fields, and
    // for that peer alone (its name).
    let wire = crate::origin::wire_target(&target);
    let signed = m.sign(
        &Covered::with_fields(
            request.method.as_bytes(),
            &wire,
            Some(&fetch.host),
            &headers,
        )
        .to(&p.name),
    );
    headers.push((HOP_HEADER.as_bytes(), signed.as_bytes()));
    let req = OriginRequest {
        target: &target,
        headers: &headers,
        ..*request
    };
    let in_flight = p.start();
    let client = pw.peers.client(m, p);
    match client.send(&req).await {
        Ok(response) => {
            p.record_success();
            Ok(Opened {
                response,
                source: Source::Peer {
                    peer: Arc::clone(p),
                    _in_flight: in_flight,
                },
            })
        }
        Err(e) => {
            p.record_failure(m.opts.down_after);
            Err(e)
        }
    }
}
