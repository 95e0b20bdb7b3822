//! HTTP/2's wire layer (RFC 9113 §4-§6, RFC 7541, RFC 9218), sans-I/O like the rest of
//! the crate: bytes in, values out, no socket, no clock.
//!
//! Here:
//! - [`frame`]: the connection preface, the 9-byte frame header, parsing one frame from a
//!   buffer with every §4-§6 rule that needs no connection state (stream 0 or not, fixed
//!   lengths, padding, SETTINGS values), and encoders for the frames a server sends. DATA
//!   payloads are borrowed on the way in and, on the way out, [`frame::data_header`] gives
//!   the 9 bytes to send before the caller's own `sendfile` of the payload (zero copy).
//! - [`hpack`]: field-block decoding and encoding (RFC 7541) with the Huffman code of its
//!   Appendix B (`huffman`).
//! - [`priority`]: the Priority Field Value of RFC 9218 (the `priority` field and the
//!   PRIORITY_UPDATE frame, whose payload [`frame::priority_update`] reads).
//!
//! Not here: the connection state machine (`h2::conn`: stream states, flow-control
//! windows, SETTINGS acknowledgement, the order HEADERS/CONTINUATION must arrive in, the
//! defences against floods), which is built on this API, nor the server driver that owns
//! the socket (linerate-server).
//!
//! ## Why our own HPACK
//!
//! No crate fits. `hpack` (the original) is unmaintained since 2016; `fluke-hpack` and
//! `loona-hpack` are forks of it that decode into owned `Vec<u8>` pairs, so every field
//! of every request is allocated; `h2`'s HPACK is private to `h2`; `httlib-hpack` is
//! small but decodes into owned buffers too and has no list-size limit. We want a
//! decoder that hands out fields borrowed from the block, the static table, the dynamic
//! table or one scratch buffer (no allocation per field), that keeps its memory bounded
//! by our own limits (dynamic table size, header list size, an HPACK bomb stopping at the
//! list limit instead of growing the output) and that reports every coding error as a
//! labelled [`hpack::DecodeError`]. It is about 700 lines, checked against every vector
//! of RFC 7541 Appendix C, ported h2spec cases and two fuzz targets
//! (`fuzz/fuzz_targets/{h2_frame,hpack_decode}.rs`).

pub mod conn;
pub mod frame;
pub mod hpack;
mod huffman;
pub mod priority;
