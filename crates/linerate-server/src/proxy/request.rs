//! A request as cache mode handles it: routed, keyed and with its directives read, once
//! (`CacheRequest`); the owned part a fill needs, which outlives the request that
//! started it (`Fetch`). What cache mode did with it is its
//! `linerate_http::cache::CacheStatus` (one phase value, feeding `Cache-Status`, logs and
//! metrics).
//!
//! Every part of a key that comes from request fields (the `Vary` secondary key) and
//! every storing decision read from them comes from the request as forwarded
//! (`CacheRequest::as_forwarded`), at lookup and at store: what the origin never saw
//! cannot have selected its answer.
//!
//! Not here: what to do with the request (`flow`), or the bytes of the forwarded request
//! (`linerate_http::forward`).

use std::net::IpAddr;

use linerate_http::cache::key::{self, Scheme};
use linerate_http::cache::RequestCacheControl;
use linerate_http::forward::{self, Client, Purpose};
use linerate_http::{Method, Persistence, RequestHead};

use super::shared::ProxyShared;
use crate::clusteropts::HOP_HEADER;

/// One request in cache mode.
pub(crate) struct CacheRequest<'a> {
    /// Cache mode's shared state.
    pub(crate) px: &'a ProxyShared,
    /// The parsed head.
    pub(crate) head: &'a RequestHead<'a>,
    /// Index of the route it matched.
    pub(crate) route: usize,
    /// The host as keyed (lower-case, no port).
    pub(crate) host: Vec<u8>,
    /// Path and query as sent to the origin (origin-form): the path normalised
    /// (`linerate_http::path::normalize_proxy_target`), the query as the client sent it.
    /// Routed and keyed in this same form.
    pub(crate) target: Vec<u8>,
    /// Primary cache key.
    pub(crate) key: Vec<u8>,
    /// The scheme of the listener it came in on.
    pub(crate) scheme: Scheme,
    /// The client's address.
    pub(crate) peer: Option<IpAddr>,
    /// Its `Cache-Control` (and `Pragma`), as honoured by configuration.
    pub(crate) cc: RequestCacheControl,
    /// Whether the connection continues after the response.
    pub(crate) persistence: Persistence,
    /// HEAD: the response has no body.
    pub(crate) head_only: bool,
    /// It came from a cluster peer (it carries the hop header): it is filled from the
    /// origin, never forwarded to another peer.
    pub(crate) from_peer: bool,
    /// It came over HTTP/2: a body of unknown length is sent unframed (its stream's end
    /// ends it), never chunked.
    pub(crate) http2: bool,
}

impl CacheRequest<'_> {
    /// The fields to send to the origin for `purpose` (see `linerate_http::forward`).
    pub(crate) fn forwarded(&self, purpose: Purpose) -> Vec<forward::Field<'_>> {
        let client = Client {
            peer: self.peer,
            scheme: self.scheme,
            host: &self.host,
            via: self.px.via.as_bytes(),
        };
        let mut fields = forward::request_fields(self.head, purpose, &client);
        // The hop header is between two nodes; the origin never sees it (a fill to a
        // peer adds this node's own).
        fields.retain(|(n, _)| !n.eq_ignore_ascii_case(HOP_HEADER.as_bytes()));
        fields
    }

    /// What a fill of this request needs, owned.
    pub(crate) fn fetch(&self) -> Fetch {
        self.fetch_of(self.route, &self.key, &self.target, self.cc.clone())
    }

    /// What a fill of another URL on this request's behalf needs (a prefetch): the
    /// route, primary key and target are that URL's; the forwarded fields and what the
    /// storing decision reads of the request are this request's, with directives `cc`.
    pub(crate) fn fetch_of(
        &self,
        route: usize,
        primary: &[u8],
        target: &[u8],
        cc: RequestCacheControl,
    ) -> Fetch {
        let fields: Vec<(Vec<u8>, Vec<u8>)> = self
            .as_forwarded()
            .into_iter()
            .map(|(n, v)| (n.into_owned(), v.into_owned()))
            .collect();
        // §3.5 is about the request the origin answered: an `Authorization` the client
        // named in `Connection` never reached it, so the response is not personalised.
        let authorization = !forward::values_of(&fields, b"authorization").is_empty();
        Fetch {
            origin: self.px.routes[route].origin,
            route,
            primary: primary.to_vec(),
            host: self.host.clone(),
            from_peer: self.from_peer,
            target: target.to_vec(),
            fields,
            policy: linerate_http::cache::policy::Request {
                method: Method::Get,
                cc,
                authorization,
            },
        }
    }

    /// The request as a fill forwards it to the origin (before the range and
    /// validators the fill adds of its own): the one source of every request field
    /// the cache keys on or decides from, at lookup and at store alike (see
    /// `forward::values_of`).
    pub(crate) fn as_forwarded(&self) -> Vec<forward::Field<'_>> {
        self.forwarded(Purpose::Fill)
    }

    /// The key of the variant of this request's URL selected by `Vary` names `names`
    /// (as a stub stores them), or the primary key when they do not parse. Computed
    /// from the request as forwarded, as the fill that stores the variant computes it.
    pub(crate) fn variant_key(&self, names: &[u8]) -> Vec<u8> {
        let fields = self.as_forwarded();
        variant_key(&self.key, names, |n| forward::values_of(&fields, n))
    }
}

/// The key of the variant of `primary` that a request with fields `values(name)`
/// selects, for `Vary` names `names` as a stub stores them (RFC 9111 §4.1); the
/// primary key when they do not parse.
pub(crate) fn variant_key<'v>(
    primary: &[u8],
    names: &[u8],
    values: impl Fn(&[u8]) -> Vec<&'v [u8]>,
) -> Vec<u8> {
    match linerate_http::cache::Vary::parse([names]) {
        linerate_http::cache::Vary::Names(names) => variant_of(primary, &names, values),
        _ => primary.to_vec(),
    }
}

/// The key of the variant of `primary` for parsed `Vary` names `names`: the one place
/// a variant key is built, by a lookup (through the stub) and by the fill that stores
/// the variant alike. The primary key is built in one place too
/// (`ProxyShared::key_on`).
pub(crate) fn variant_of<'v>(
    primary: &[u8],
    names: &[Vec<u8>],
    values: impl Fn(&[u8]) -> Vec<&'v [u8]>,
) -> Vec<u8> {
    key::variant(primary, &linerate_http::cache::vary_key(names, values))
}

/// A request as a fill sends it, owned: a fill runs as its own task and outlives the
/// client that started it.
#[derive(Debug)]
pub(crate) struct Fetch {
    /// Index of the origin.
    pub(crate) origin: usize,
    /// Index of the route.
    pub(crate) route: usize,
    /// The URL's primary key.
    pub(crate) primary: Vec<u8>,
    /// The host as keyed (a request to a peer names it in absolute form, so the peer
    /// routes and keys it alike).
    pub(crate) host: Vec<u8>,
    /// The request came from a cluster peer: fill from the origin only.
    pub(crate) from_peer: bool,
    /// Path and query.
    pub(crate) target: Vec<u8>,
    /// The fields forwarded (`CacheRequest::as_forwarded`): sent to the origin, and the
    /// fields a variant is keyed by (RFC 9111 §4.1), as lookups key it.
    pub(crate) fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// What of the request the storing decision reads.
    pub(crate) policy: linerate_http::cache::policy::Request,
}

impl Fetch {
    /// Every value of request field `name`, as forwarded.
    pub(crate) fn values<'s>(&'s self, name: &[u8]) -> Vec<&'s [u8]> {
        forward::values_of(&self.fields, name)
    }
}
