//! Uncached relays: the client's own request sent to the origin as it stands (minus
//! hop-by-hop and poisoning fields, see `linerate_http::forward`), with interim
//! responses passed on as they arrive, and the origin's answer relayed.

use std::rc::Rc;

use linerate_http::cache::{CacheStatus, Fwd};
use linerate_http::forward::Purpose;

use super::head;
use super::request::CacheRequest;
use super::shared::ProxyWorker;
use crate::context::Worker;
use crate::exchange::Interim;
use crate::origin::OriginRequest;
use crate::response::Response;

/// Send the client's own request to the origin (an uncached relay), forwarding interim
/// responses to the client as they arrive.
pub(crate) async fn send(
    pw: &ProxyWorker,
    req: &CacheRequest<'_>,
    body: &[u8],
    interim: &mut Interim<'_>,
) -> Result<crate::origin::OriginResponse, crate::origin::OriginError> {
    let origin = &pw.origins[pw.shared.routes[req.route].origin];
    let fields = req.forwarded(Purpose::Relay);
    let headers: Vec<(&[u8], &[u8])> = fields.iter().map(|(n, v)| (&**n, &**v)).collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let request = OriginRequest {
        method: req.head.method_token,
        target: &req.target,
        headers: &headers,
        body,
        idempotent: req.head.method.is_idempotent(),
        interim: interim.enabled().then_some(&tx),
    };
    interim.forward_while(origin.send(&request), &mut rx).await
}

/// Relay the client's own request, uncached, and answer with what the origin says.
pub(crate) async fn relay(
    worker: &Rc<Worker>,
    pw: &ProxyWorker,
    req: &CacheRequest<'_>,
    interim: &mut Interim<'_>,
    mut trace: CacheStatus,
) -> Response {
    trace.forward(Fwd::Bypass);
    match send(pw, req, &[], interim).await {
        Ok(r) => head::relayed(worker, req, r, trace, head::Shape::AsIs),
        Err(e) => head::error(worker, req, e.status(), trace, e.as_str()),
    }
}
