//! Stored response metadata ([`ObjectMeta`]): status, header fields, validators and the
//! times needed to compute age and freshness later, and its binary encoding inside the
//! object header.
//!
//! This file does not decide freshness or build response heads (that is cache-mode and
//! `linerate-http` work); it only keeps what the origin said, byte for byte. Decoding is
//! bounds-checked everywhere: the input comes from disk and may be corrupt.

use std::borrow::Cow;
use std::sync::OnceLock;

use linerate_http::cache::Terms;

/// Why a header was rejected. Every variant makes the object a miss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Fewer bytes than the header claims (or than the fixed part).
    #[error("header truncated")]
    Truncated,
    /// The first bytes are not [`MAGIC`](crate::format::MAGIC).
    #[error("bad magic")]
    BadMagic,
    /// A format version this build does not read.
    #[error("unsupported format version {0}")]
    UnsupportedVersion(u16),
    /// The header checksum does not match.
    #[error("header checksum mismatch")]
    BadChecksum,
    /// A length field is out of range or inconsistent with the others.
    #[error("header length field out of range")]
    BadLength,
    /// The metadata section does not decode.
    #[error("stored metadata malformed")]
    BadMeta,
    /// The key or metadata is larger than the format allows (encoding side).
    #[error("key or metadata too large")]
    TooLarge,
    /// The header is intact but the object was never finished (`body_len` unknown).
    #[error("object incomplete")]
    Incomplete,
}

impl HeaderError {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            HeaderError::Truncated => "truncated",
            HeaderError::BadMagic => "bad_magic",
            HeaderError::UnsupportedVersion(_) => "unsupported_version",
            HeaderError::BadChecksum => "bad_checksum",
            HeaderError::BadLength => "bad_length",
            HeaderError::BadMeta => "bad_meta",
            HeaderError::TooLarge => "too_large",
            HeaderError::Incomplete => "incomplete",
        }
    }
}

/// Most header fields one object may store. Origins send a dozen or two; 256 is far
/// above real responses and bounds the work of decoding a corrupt header.
pub const MAX_STORED_FIELDS: usize = 256;

/// Response metadata stored with an object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectMeta {
    /// HTTP status code of the stored response (200, 206 for a slice, 301 …).
    pub status: u16,
    /// When the request that produced this response was sent, Unix milliseconds
    /// (RFC 9111 §4.2.3 `request_time`). 0 if unknown.
    pub request_time_ms: u64,
    /// When the response head was received, Unix milliseconds (RFC 9111 §4.2.3
    /// `response_time`). 0 if unknown.
    pub response_time_ms: u64,
    /// Strong or weak entity tag, as sent (quotes included), if any.
    pub etag: Option<Vec<u8>>,
    /// `Last-Modified` as Unix seconds, if the origin sent one that parsed.
    pub last_modified_s: Option<u64>,
    /// Header fields to replay on a hit, name and value as received, in order. Hop-by-hop
    /// fields should have been removed by the caller (RFC 9110 §7.6.1).
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// What hits derive from the fields above, worked out on the first hit and kept
    /// here (not stored on disk). Construct with `Default::default()`.
    pub derived: Derived,
}

/// What a hit derives from an [`ObjectMeta`]'s fields, computed on first use and kept
/// with the metadata, which every hit on a kept object shares (`Arc`): the freshness
/// terms (`Cache-Control`, `Date`, `Expires`... parsed) and the stored fields as the
/// server writes them into a response head. Parsing and rendering them on every hit
/// cost about 5 % of a core serving 64 KiB hits (perf, docs/benchmarks.md).
///
/// Not part of the metadata's value: metas compare equal whatever their memos hold,
/// and a clone starts empty (a clone may be edited before it is shared). Fields must
/// not be edited after a memo is filled; the store hands metadata out behind `Arc`,
/// where nothing edits it.
#[derive(Default)]
pub struct Derived {
    terms: OnceLock<(Box<[Vec<u8>]>, Terms)>,
    replay: OnceLock<Box<[u8]>>,
    index: OnceLock<Option<FieldIndex>>,
}

/// The stored fields copied into one buffer, names lower-cased, for [`ObjectMeta::header`]:
/// a hit looks up several fields (`ETag`, `Via`, `Content-Range`, the `Vary` stub), and a
/// scan of `headers` touches each field's own two allocations, a cache miss apiece on a
/// busy core (`ObjectMeta::header` was 2 % of a core on 64 KiB hits in perf); this is
/// one allocation read in order.
struct FieldIndex {
    bytes: Box<[u8]>,
    /// Per field: where its lower-case name and its value lie in `bytes`.
    spans: Box<[FieldSpan]>,
}

#[derive(Clone, Copy)]
struct FieldSpan {
    name: (u32, u16),
    value: (u32, u16),
}

impl FieldIndex {
    /// None when a name or value is longer than the encoding allows (only in metadata
    /// never stored): `header` scans those.
    fn of(headers: &[(Vec<u8>, Vec<u8>)]) -> Option<FieldIndex> {
        let total = headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        let mut bytes = Vec::with_capacity(total);
        let mut put = |b: &[u8], lower: bool| -> Option<(u32, u16)> {
            let len = u16::try_from(b.len()).ok()?;
            let at = u32::try_from(bytes.len()).ok()?;
            bytes.extend(
                b.iter()
                    .map(|c| if lower { c.to_ascii_lowercase() } else { *c }),
            );
            Some((at, len))
        };
        let mut spans = Vec::with_capacity(headers.len());
        for (n, v) in headers {
            spans.push(FieldSpan {
                name: put(n, true)?,
                value: put(v, false)?,
            });
        }
        Some(FieldIndex {
            bytes: bytes.into_boxed_slice(),
            spans: spans.into_boxed_slice(),
        })
    }

    fn get(&self, (at, len): (u32, u16)) -> &[u8] {
        let at = at as usize;
        self.bytes.get(at..at + usize::from(len)).unwrap_or(&[])
    }
}

impl Clone for Derived {
    fn clone(&self) -> Derived {
        Derived::default()
    }
}

impl PartialEq for Derived {
    fn eq(&self, _: &Derived) -> bool {
        true
    }
}

impl Eq for Derived {}

impl std::fmt::Debug for Derived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Derived")
    }
}

const FLAG_ETAG: u16 = 1;
const FLAG_LAST_MODIFIED: u16 = 2;

impl ObjectMeta {
    /// Append the binary encoding to `out`. Layout (little-endian):
    /// `status u16 | flags u16 | request_time_ms u64 | response_time_ms u64 |
    /// last_modified_s u64 | etag_len u16 | etag | field_count u16 |
    /// (name_len u16 | name | value_len u16 | value)*`.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), HeaderError> {
        let mut flags = 0u16;
        if self.etag.is_some() {
            flags |= FLAG_ETAG;
        }
        if self.last_modified_s.is_some() {
            flags |= FLAG_LAST_MODIFIED;
        }
        out.extend_from_slice(&self.status.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.request_time_ms.to_le_bytes());
        out.extend_from_slice(&self.response_time_ms.to_le_bytes());
        out.extend_from_slice(&self.last_modified_s.unwrap_or(0).to_le_bytes());
        put_u16_bytes(out, self.etag.as_deref().unwrap_or(&[]))?;
        if self.headers.len() > MAX_STORED_FIELDS {
            return Err(HeaderError::TooLarge);
        }
        out.extend_from_slice(&(self.headers.len() as u16).to_le_bytes());
        for (name, value) in &self.headers {
            put_u16_bytes(out, name)?;
            put_u16_bytes(out, value)?;
        }
        Ok(())
    }

    /// How many bytes [`ObjectMeta::encode_into`] writes (when it succeeds).
    pub fn encoded_len(&self) -> usize {
        let fixed = 2 + 2 + 8 + 8 + 8 + 2 + 2;
        let etag = self.etag.as_ref().map_or(0, Vec::len);
        let fields: usize = self
            .headers
            .iter()
            .map(|(n, v)| 2 + n.len() + 2 + v.len())
            .sum();
        fixed + etag + fields
    }

    /// Decode what [`ObjectMeta::encode_into`] wrote; `buf` must be exactly the encoding.
    pub fn decode(buf: &[u8]) -> Result<ObjectMeta, HeaderError> {
        let mut r = Reader { buf, pos: 0 };
        let status = r.u16()?;
        let flags = r.u16()?;
        let request_time_ms = r.u64()?;
        let response_time_ms = r.u64()?;
        let last_modified = r.u64()?;
        let etag = r.u16_bytes()?;
        let count = usize::from(r.u16()?);
        if count > MAX_STORED_FIELDS {
            return Err(HeaderError::BadMeta);
        }
        let mut headers = Vec::with_capacity(count);
        for _ in 0..count {
            let name = r.u16_bytes()?.to_vec();
            let value = r.u16_bytes()?.to_vec();
            headers.push((name, value));
        }
        if r.pos != buf.len() {
            return Err(HeaderError::BadMeta);
        }
        Ok(ObjectMeta {
            status,
            request_time_ms,
            response_time_ms,
            etag: (flags & FLAG_ETAG != 0).then(|| etag.to_vec()),
            last_modified_s: (flags & FLAG_LAST_MODIFIED != 0).then_some(last_modified),
            headers,
            derived: Derived::default(),
        })
    }

    /// The freshness terms of the stored fields under the target list `targets`
    /// ([`Terms::of`]), parsed on the first call and kept; a call with another target
    /// list (a reload changed `targeted_fields`) parses its own.
    pub fn terms(&self, targets: &[Vec<u8>]) -> Cow<'_, Terms> {
        let (t, terms) = self
            .derived
            .terms
            .get_or_init(|| (targets.into(), Terms::of(targets, &self.headers)));
        if **t == *targets {
            Cow::Borrowed(terms)
        } else {
            Cow::Owned(Terms::of(targets, &self.headers))
        }
    }

    /// The stored fields as `render` writes them for a response head, rendered on the
    /// first call and kept. `render` must depend on the metadata alone (no
    /// configuration, no request), as every later call gets the first call's bytes.
    pub fn rendered(&self, render: impl FnOnce(&ObjectMeta) -> Vec<u8>) -> &[u8] {
        self.derived
            .replay
            .get_or_init(|| render(self).into_boxed_slice())
    }

    /// First value of header field `name` (ASCII case-insensitive), if stored. Looked up
    /// in an index of the fields made on the first call and kept ([`Derived`]).
    pub fn header(&self, name: &[u8]) -> Option<&[u8]> {
        let index = self
            .derived
            .index
            .get_or_init(|| FieldIndex::of(&self.headers));
        match index {
            Some(index) => index
                .spans
                .iter()
                .find(|s| index.get(s.name).eq_ignore_ascii_case(name))
                .map(|s| index.get(s.value)),
            None => self
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_slice()),
        }
    }
}

fn put_u16_bytes(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), HeaderError> {
    let len = u16::try_from(bytes.len()).map_err(|_| HeaderError::TooLarge)?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

/// Bounds-checked little-endian cursor over untrusted bytes.
pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], HeaderError> {
        let end = self.pos.checked_add(n).ok_or(HeaderError::BadMeta)?;
        let s = self.buf.get(self.pos..end).ok_or(HeaderError::BadMeta)?;
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn u16(&mut self) -> Result<u16, HeaderError> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, HeaderError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, HeaderError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    pub(crate) fn u128(&mut self) -> Result<u128, HeaderError> {
        let mut a = [0u8; 16];
        a.copy_from_slice(self.take(16)?);
        Ok(u128::from_le_bytes(a))
    }

    fn u16_bytes(&mut self) -> Result<&'a [u8], HeaderError> {
        let n = usize::from(self.u16()?);
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::unwrap_used, reason = "test input is built right here")]
    fn round_trip() {
        let meta = ObjectMeta {
            status: 200,
            request_time_ms: 1,
            response_time_ms: 2,
            etag: Some(b"\"abc\"".to_vec()),
            last_modified_s: Some(1_700_000_000),
            headers: vec![(b"Content-Type".to_vec(), b"video/mp4".to_vec())],
            derived: Derived::default(),
        };
        let mut buf = Vec::new();
        meta.encode_into(&mut buf).unwrap();
        // The header's length fields are written from this before the encoding.
        assert_eq!(meta.encoded_len(), buf.len());
        let back = ObjectMeta::decode(&buf).unwrap();
        assert_eq!(back, meta);
        let bare = ObjectMeta {
            etag: None,
            last_modified_s: None,
            headers: Vec::new(),
            ..meta.clone()
        };
        let mut bare_buf = Vec::new();
        bare.encode_into(&mut bare_buf).unwrap();
        assert_eq!(bare.encoded_len(), bare_buf.len());
        assert_eq!(back.header(b"content-type"), Some(&b"video/mp4"[..]));
        assert_eq!(
            ObjectMeta::decode(&buf[..buf.len() - 1]),
            Err(HeaderError::BadMeta)
        );
    }

    /// The kept terms answer the target list they were parsed under, and only that one
    /// (a reload that changes `targeted_fields` must not get the old governing field);
    /// the rendered fields are made once; a clone starts without either and compares
    /// equal all the same.
    #[test]
    fn derived_values_follow_their_inputs() {
        let meta = ObjectMeta {
            status: 200,
            headers: vec![
                (b"Cache-Control".to_vec(), b"max-age=60".to_vec()),
                (b"CDN-Cache-Control".to_vec(), b"max-age=600".to_vec()),
            ],
            ..ObjectMeta::default()
        };
        let none: &[Vec<u8>] = &[];
        let cdn = [b"cdn-cache-control".to_vec()];
        assert_eq!(*meta.terms(none), Terms::of(none, &meta.headers));
        assert!(matches!(meta.terms(none), Cow::Borrowed(_)), "kept");
        let other = meta.terms(&cdn);
        assert!(
            matches!(other, Cow::Owned(_)),
            "another list parses its own"
        );
        assert_eq!(*other, Terms::of(&cdn, &meta.headers));
        assert_ne!(*other, *meta.terms(none), "the targeted field governs");

        let mut made = 0;
        for _ in 0..3 {
            let out = meta.rendered(|m| {
                made += 1;
                m.headers[0].1.clone()
            });
            assert_eq!(out, b"max-age=60");
        }
        assert_eq!(made, 1);

        let mut copy = meta.clone();
        assert_eq!(copy, meta);
        copy.headers[0].1 = b"max-age=1".to_vec();
        assert_eq!(copy.rendered(|m| m.headers[0].1.clone()), b"max-age=1");
    }

    /// `header` answers from its index as a scan would: the first of repeated fields,
    /// any case of the name, the value as sent (not lower-cased); and a field too long
    /// for the index (never stored, only built in memory) is still found.
    #[test]
    fn header_lookups_match_a_scan() {
        let long = vec![b'v'; usize::from(u16::MAX) + 1];
        let meta = ObjectMeta {
            headers: vec![
                (b"ETag".to_vec(), b"\"AbC\"".to_vec()),
                (b"Via".to_vec(), b"1.1 A".to_vec()),
                (b"via".to_vec(), b"1.1 B".to_vec()),
            ],
            ..ObjectMeta::default()
        };
        assert_eq!(meta.header(b"etag"), Some(&b"\"AbC\""[..]));
        assert_eq!(meta.header(b"VIA"), Some(&b"1.1 A"[..]));
        assert_eq!(meta.header(b"age"), None);
        let big = ObjectMeta {
            headers: vec![
                (b"X-Long".to_vec(), long.clone()),
                (b"Age".to_vec(), b"5".to_vec()),
            ],
            ..ObjectMeta::default()
        };
        assert_eq!(big.header(b"x-long"), Some(&long[..]));
        assert_eq!(big.header(b"age"), Some(&b"5"[..]));
    }
}
