//! Sans-I/O HTTP/1.1 for an edge cache: request-head parsing (RFC 9112), request-target
//! normalisation, byte ranges and multipart plans (RFC 9110 §14), preconditions (RFC 9110
//! §13), media types for video delivery, and response-head encoding.
//!
//! This crate owns bytes and values only. It never touches a socket, a file or a clock:
//! the caller passes in the buffer it read, the file's length and validators, and the
//! current time, and gets back values to act on. That keeps every protocol decision
//! testable with plain byte strings and fuzzable without I/O.
//!
//! Pipeline order, as the server uses it: [`request::parse_request`] →
//! [`path::normalize_target`] (cache mode: [`path::normalize_proxy_target`]) →
//! [`conditional::evaluate`] → [`conditional::if_range`] →
//! [`range::parse_range`] / [`range::resolve`] → [`multipart::plan`] when several ranges
//! remain → [`response::HeadWriter`].
//!
//! Message framing (where a body ends, RFC 9112 §6.3) is [`framing`]'s, for the request
//! parser, the origin client ([`upstream`]) and the load generator alike.
#![forbid(unsafe_code)]

pub mod cache;
pub mod cmcd;
pub mod conditional;
pub mod dash;
pub mod date;
pub mod forward;
pub mod framing;
pub mod h2;
pub mod hls;
pub mod mime;
pub mod multipart;
pub mod path;
pub mod playback;
pub mod range;
pub mod request;
pub mod response;
pub mod sidx;
mod syntax;
pub mod upstream;

pub use request::{
    parse_request, BodyFraming, FieldBuf, Method, ParseOutcome, Persistence, RequestError,
    RequestHead, TargetForm, Version,
};
pub use response::{HeadWriter, StatusCode};
