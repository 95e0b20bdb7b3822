//! The seam between a connection and what answers its requests. A worker serves in one
//! [`Mode`], fixed at start-up: appliance mode answers from files under the root
//! (`appliance`), cache mode from the store and the origins (`proxy`). The connection
//! loop (`conn`) reads and parses a request, reads its body when the mode forwards it,
//! and asks the mode for a [`Response`]; what happens in between is the mode's business.
//!
//! Not here: reading requests or sending responses (`conn`, `transport`).

use std::rc::Rc;

use linerate_http::Method;

use crate::context::Worker;
use crate::exchange::Request;
use crate::proxy::ProxyWorker;
use crate::response::Response;

/// What answers this worker's requests.
pub(crate) enum Mode {
    /// Files under `appliance.root`.
    Appliance,
    /// Cache mode: this worker's side of the cache (its origin clients).
    Cache(Rc<ProxyWorker>),
}

impl Mode {
    /// Largest request body this mode reads whole, for a request with this method, to
    /// forward it; `None` when the mode discards bodies instead (appliance mode, and
    /// GET/HEAD in cache mode).
    pub(crate) fn forwarded_body_limit(&self, method: Method) -> Option<u64> {
        match (self, method) {
            (Mode::Cache(_), Method::Get | Method::Head) | (Mode::Appliance, _) => None,
            (Mode::Cache(pw), _) => Some(pw.shared.opts.max_forwarded_body),
        }
    }

    /// Whether requests need the client's address (cache mode: `X-Forwarded-For`).
    pub(crate) fn wants_peer(&self) -> bool {
        matches!(self, Mode::Cache(_))
    }

    /// Answer one request.
    pub(crate) async fn respond(&self, worker: &Rc<Worker>, req: Request<'_>) -> Response {
        match self {
            Mode::Appliance => crate::appliance::respond_to(worker, req.head),
            Mode::Cache(pw) => {
                // With `[cluster]`, `/_linerate/...` is the peers' (purges, purge logs),
                // never an origin's.
                if let Some(r) = crate::purge::serve_peer(worker, &pw.shared, &req).await {
                    return r;
                }
                crate::proxy::respond(worker, pw, req).await
            }
        }
    }
}
