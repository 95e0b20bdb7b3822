//! Appliance mode's handler: from a parsed request to a response plan for a file under
//! the root: method check, target → path, open beneath the root, preconditions, ranges,
//! and the response head. The plan owns everything
//! the transfer needs (head bytes, the open file, the ranges), so sending it involves no
//! further decisions.
//!
//! Not here: sockets, or opening the file (the worker's open-file cache, `openfiles`,
//! gives it with its validators).

use std::io;
use std::os::fd::AsFd;

use linerate_http::conditional::{self, IfRange, Precondition, Validators};
use linerate_http::multipart;
use linerate_http::range::{self, ByteRange, RangeOutcome};
use linerate_http::{mime, path, HeadWriter, Method, Persistence, RequestHead, StatusCode};

use crate::context::Worker;
use crate::openfiles::OpenError;
use crate::response::{error, persistence_field, refused, simple, Body, Response, SERVER};
use crate::stats::CachePhase;

/// Decide the response to one request.
pub(crate) fn respond_to(worker: &Worker, req: &RequestHead<'_>) -> Response {
    let persistence = if worker.stopping() {
        Persistence::Close
    } else {
        req.persistence
    };
    let head_only = match req.method {
        Method::Get => false,
        Method::Head => true,
        _ => return method_not_allowed(worker, persistence),
    };
    let target = match path::normalize_target(req.target) {
        Ok(t) => t,
        Err(e) => return refused(worker, e.into(), Persistence::Close),
    };
    if target.is_directory_form {
        // Directories are never listed.
        return error(worker, StatusCode::NotFound, persistence);
    }
    let open = match worker
        .open_file_cache
        .open(worker.shared.root.as_fd(), &target.relative)
    {
        Ok(f) => f,
        Err(OpenError::Open(e)) => {
            return error(worker, open_error_status(&e, &target.relative), persistence)
        }
        Err(OpenError::NotAFile) => return error(worker, StatusCode::NotFound, persistence),
        Err(OpenError::Stat(e)) => {
            tracing::warn!(error = %e, "fstat failed");
            return error(worker, StatusCode::InternalServerError, persistence);
        }
    };
    let len = open.len();
    let mtime = open.mtime();
    let etag = &open.etag;
    let validators = Validators {
        etag,
        last_modified: mtime,
    };
    let last_modified = &open.last_modified;
    let content_type = open.content_type;
    let file = open.file.clone();
    let live = worker.live();
    let cache_control = mime::extension(&target.relative)
        .and_then(|ext| live.cache_control.get(&ext.to_ascii_lowercase()))
        .or(live.options.default_cache_control.as_ref());

    let mut head = Vec::with_capacity(512);
    let common = |w: &mut HeadWriter<'_>| {
        worker.date.with(|d| w.field("Date", d));
        w.field("Server", SERVER);
        w.field("ETag", etag.as_bytes());
        w.field("Last-Modified", last_modified.as_bytes());
        if let Some(cc) = cache_control {
            w.field("Cache-Control", cc.as_bytes());
        }
        if let Some(origin) = &live.options.cors_allow_origin {
            w.field("Access-Control-Allow-Origin", origin.as_bytes());
        }
        persistence_field(w, req, persistence);
    };

    match conditional::evaluate(req, &validators) {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            // RFC 9110 §15.4.5: a 304 carries the fields a 200 would have had that
            // describe the representation's validators and caching, but no content.
            let mut w = HeadWriter::new(&mut head, StatusCode::NotModified);
            common(&mut w);
            w.finish();
            return Response {
                head,
                body: Body::Empty,
                persistence,
                status: StatusCode::NotModified,
                cache: CachePhase::Local,
                refusal: None,
            };
        }
        Precondition::Failed => return error(worker, StatusCode::PreconditionFailed, persistence),
    }

    // RFC 9110 §14.2: Range is defined only for GET; ignored on HEAD.
    let outcome = match (head_only, req.range) {
        (false, Some(value))
            if conditional::if_range(req.if_range, &validators) == IfRange::Apply =>
        {
            match range::parse_range(value) {
                Some(specs) => range::resolve(&specs, len),
                None => RangeOutcome::Full,
            }
        }
        _ => RangeOutcome::Full,
    };

    let (status, body, body_len) = match outcome {
        RangeOutcome::Full => (
            StatusCode::Ok,
            Body::File {
                file,
                range: ByteRange { start: 0, len },
                hot: open.hot.clone(),
            },
            len,
        ),
        RangeOutcome::Single(r) => (
            StatusCode::PartialContent,
            Body::File {
                file,
                range: r,
                hot: open.hot.clone(),
            },
            r.len,
        ),
        RangeOutcome::Multi(ranges) => {
            let plan = multipart::plan(&ranges, len, content_type, &worker.next_boundary());
            let body_len = plan.body_len;
            (
                StatusCode::PartialContent,
                Body::Multipart { file, plan },
                body_len,
            )
        }
        RangeOutcome::Unsatisfiable => {
            let mut w = HeadWriter::new(&mut head, StatusCode::RangeNotSatisfiable);
            common(&mut w);
            w.content_range_unsatisfied(len);
            w.field_u64("Content-Length", 0);
            w.finish();
            return Response {
                head,
                body: Body::Empty,
                persistence,
                status: StatusCode::RangeNotSatisfiable,
                cache: CachePhase::Local,
                refusal: None,
            };
        }
    };
    let mut w = HeadWriter::new(&mut head, status);
    common(&mut w);
    w.field("Accept-Ranges", b"bytes");
    match &body {
        Body::Multipart { plan, .. } => {
            w.field("Content-Type", plan.content_type.as_bytes());
        }
        Body::File { range: r, .. } => {
            w.field("Content-Type", content_type.as_bytes());
            if status == StatusCode::PartialContent {
                w.content_range(r.start, r.last(), len);
            }
        }
        Body::Empty | Body::Pieces(_) => {}
    }
    w.field_u64("Content-Length", body_len);
    w.finish();
    let body = if head_only || body_len == 0 {
        Body::Empty
    } else {
        body
    };
    Response {
        head,
        body,
        persistence,
        status,
        cache: CachePhase::Local,
        refusal: None,
    }
}

fn method_not_allowed(worker: &Worker, persistence: Persistence) -> Response {
    // RFC 9110 §15.5.6: a 405 MUST carry Allow.
    simple(
        worker,
        StatusCode::MethodNotAllowed,
        persistence,
        Some(("Allow", b"GET, HEAD")),
    )
}

/// Map an open error to a status. Escapes (EXDEV from RESOLVE_BENEATH, ELOOP) look like
/// any missing file from outside: 404, logged at debug.
fn open_error_status(e: &io::Error, rel: &[u8]) -> StatusCode {
    match e.raw_os_error() {
        Some(libc::ENOENT)
        | Some(libc::ENOTDIR)
        | Some(libc::ENAMETOOLONG)
        | Some(libc::EISDIR) => StatusCode::NotFound,
        Some(libc::EXDEV) | Some(libc::ELOOP) => {
            tracing::debug!(path = %String::from_utf8_lossy(rel), "path resolves outside the root");
            StatusCode::NotFound
        }
        Some(libc::EACCES) | Some(libc::EPERM) => StatusCode::Forbidden,
        _ => {
            tracing::warn!(path = %String::from_utf8_lossy(rel), error = %e, "open failed");
            StatusCode::InternalServerError
        }
    }
}
