//! The object file header: encode, decode and validate (format version 1; the byte
//! layout and its history are in `docs/on-disk-format.md`).
//!
//! An object file is `header | padding | body`. The header carries a magic, the format
//! version, the full cache key, the stored [`ObjectMeta`], the body's offset, length and
//! xxh3-64 checksum, and ends with an xxh3-64 checksum of everything before it. This
//! file is pure bytes in, values out: it opens no file (the store does) and it does not
//! verify the body checksum (that costs a full read; the crash test and scrubbing do it).

use crate::key::MAX_KEY_LEN;
pub use crate::meta::HeaderError;
use crate::meta::{ObjectMeta, Reader};

/// First four bytes of every object file: "LRCO" (linerate cache object).
pub const MAGIC: [u8; 4] = *b"LRCO";

/// Format version this build writes and the only one it reads. A file with another
/// version is a miss (and is removed), never a guess: the cache refills.
pub const FORMAT_VERSION: u16 = 1;

/// Bytes of the fixed part of the header, before the key.
pub const FIXED_LEN: usize = 56;

/// Bytes of the trailing header checksum.
const CHECKSUM_LEN: usize = 8;

/// Largest header (key + metadata + fixed fields) accepted, in bytes. Response heads
/// beyond 64 KiB are refused by every mainstream proxy; the bound also caps what a
/// lookup reads before it can answer.
pub const MAX_HEADER_LEN: usize = 64 * 1024;

/// Bytes a lookup reads first: one page holds the whole header of nearly every object,
/// so a hit costs one `pread`.
pub const HEADER_READ_LEN: usize = 4096;

/// Bodies that may exceed this many bytes start on a 4 KiB boundary, so that body pages
/// line up with page-cache pages for sendfile and residency checks; smaller bodies are
/// packed right after the header to save up to 4 KiB per object.
pub const SMALL_BODY_MAX: u64 = 16 * 1024;

/// Alignment of large bodies (the page size).
pub const BODY_ALIGN: u64 = 4096;

/// `body_len` value meaning "still being written" (only ever seen in temporary files).
pub const BODY_LEN_UNKNOWN: u64 = u64::MAX;

/// A decoded, checksum-verified object header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectHeader {
    /// The full cache key.
    pub key: Vec<u8>,
    /// Stored response metadata.
    pub meta: ObjectMeta,
    /// Offset of the first body byte within the file.
    pub body_offset: u64,
    /// Body length in bytes ([`BODY_LEN_UNKNOWN`] only while being written).
    pub body_len: u64,
    /// xxh3-64 of the body (0 while being written).
    pub body_checksum: u64,
    /// When the write began, Unix milliseconds.
    pub created_ms: u64,
}

impl ObjectHeader {
    /// Encode the header (without padding). Its length depends only on the key and
    /// metadata, so the writer can rewrite it in place once the body length is known.
    pub fn encode(&self) -> Result<Vec<u8>, HeaderError> {
        if self.key.len() > MAX_KEY_LEN {
            return Err(HeaderError::TooLarge);
        }
        // The metadata is encoded in place, after the fixed part that gives its length.
        let meta_len = self.meta.encoded_len();
        let header_len = FIXED_LEN + self.key.len() + meta_len + CHECKSUM_LEN;
        if header_len > MAX_HEADER_LEN {
            return Err(HeaderError::TooLarge);
        }
        let mut out = Vec::with_capacity(header_len);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes()); // flags, none defined in v1
        out.extend_from_slice(&(header_len as u32).to_le_bytes());
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(&(meta_len as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes()); // reserved
        out.extend_from_slice(&self.body_offset.to_le_bytes());
        out.extend_from_slice(&self.body_len.to_le_bytes());
        out.extend_from_slice(&self.body_checksum.to_le_bytes());
        out.extend_from_slice(&self.created_ms.to_le_bytes());
        debug_assert_eq!(out.len(), FIXED_LEN);
        out.extend_from_slice(&self.key);
        self.meta.encode_into(&mut out)?;
        debug_assert_eq!(out.len(), header_len - CHECKSUM_LEN);
        let sum = xxhash_rust::xxh3::xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        Ok(out)
    }

    /// Total file length of a complete object with this header.
    pub fn file_len(&self) -> u64 {
        self.body_offset.saturating_add(self.body_len)
    }
}

/// Where the body starts for a header of `header_len` bytes, given the expected body
/// length (`None` when the origin did not say).
pub fn body_offset_for(header_len: usize, expected_body: Option<u64>) -> u64 {
    let header_len = header_len as u64;
    match expected_body {
        Some(n) if n <= SMALL_BODY_MAX => header_len,
        _ => header_len.div_ceil(BODY_ALIGN) * BODY_ALIGN,
    }
}

/// Header length announced by the first bytes of a file, so a caller that read
/// [`HEADER_READ_LEN`] bytes knows whether it must read more. Validates magic, version
/// and the length bound, not the checksum.
pub fn peek_header_len(buf: &[u8]) -> Result<usize, HeaderError> {
    if buf.len() < FIXED_LEN {
        return Err(HeaderError::Truncated);
    }
    if buf[..4] != MAGIC {
        return Err(HeaderError::BadMagic);
    }
    let version = u16::from_le_bytes([buf[4], buf[5]]);
    if version != FORMAT_VERSION {
        return Err(HeaderError::UnsupportedVersion(version));
    }
    let len = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    if !(FIXED_LEN + CHECKSUM_LEN..=MAX_HEADER_LEN).contains(&len) {
        return Err(HeaderError::BadLength);
    }
    Ok(len)
}

/// Decode and verify a header from the start of `buf` (which may hold more bytes, e.g.
/// the beginning of the body). Accepts headers of unfinished objects; callers serving
/// hits use [`decode_complete`].
pub fn decode_header(buf: &[u8]) -> Result<ObjectHeader, HeaderError> {
    let header_len = peek_header_len(buf)?;
    let header = buf.get(..header_len).ok_or(HeaderError::Truncated)?;
    let (body, sum) = header.split_at(header_len - CHECKSUM_LEN);
    let mut sum_bytes = [0u8; 8];
    sum_bytes.copy_from_slice(sum);
    if xxhash_rust::xxh3::xxh3_64(body) != u64::from_le_bytes(sum_bytes) {
        return Err(HeaderError::BadChecksum);
    }
    let bad_len = |_| HeaderError::BadLength;
    let mut r = Reader { buf: body, pos: 12 };
    let key_len = r.u32().map_err(bad_len)? as usize;
    let meta_len = r.u32().map_err(bad_len)? as usize;
    let _reserved = r.u32().map_err(bad_len)?;
    let body_offset = r.u64().map_err(bad_len)?;
    let body_len = r.u64().map_err(bad_len)?;
    let body_checksum = r.u64().map_err(bad_len)?;
    let created_ms = r.u64().map_err(bad_len)?;
    if key_len > MAX_KEY_LEN
        || FIXED_LEN + key_len + meta_len != body.len()
        || body_offset < header_len as u64
        || (body_len != BODY_LEN_UNKNOWN && body_offset.checked_add(body_len).is_none())
    {
        return Err(HeaderError::BadLength);
    }
    let key = r.take(key_len).map_err(bad_len)?.to_vec();
    let meta = ObjectMeta::decode(r.take(meta_len).map_err(bad_len)?)?;
    Ok(ObjectHeader {
        key,
        meta,
        body_offset,
        body_len,
        body_checksum,
        created_ms,
    })
}

/// [`decode_header`], and reject an object whose body length was never written.
pub fn decode_complete(buf: &[u8]) -> Result<ObjectHeader, HeaderError> {
    let header = decode_header(buf)?;
    if header.body_len == BODY_LEN_UNKNOWN {
        return Err(HeaderError::Incomplete);
    }
    Ok(header)
}

/// Read and verify the header of an object file at `path` (used by the reconcile scan).
pub(crate) fn read_header(
    io: &dyn crate::io::StoreIo,
    path: &std::path::Path,
) -> Result<Option<(crate::format::ObjectHeader, u64)>, std::io::Error> {
    let file = io.open_read(path)?;
    let mut buf = vec![0u8; HEADER_READ_LEN];
    let n = io.read_at(&file, path, &mut buf, 0)?;
    buf.truncate(n);
    let Ok(need) = peek_header_len(&buf) else {
        return Ok(None);
    };
    if need > n {
        buf.resize(need, 0);
        let m = io.read_at(&file, path, &mut buf[n..], n as u64)?;
        buf.truncate(n + m);
    }
    let Ok(header) = decode_complete(&buf) else {
        return Ok(None);
    };
    let len = io.file_state(&file, path)?.len;
    if len < header.file_len() {
        return Ok(None);
    }
    Ok(Some((header, len)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests build their own valid input")]
    use super::*;
    use proptest::prelude::*;

    fn sample() -> ObjectHeader {
        ObjectHeader {
            key: b"https://cdn.example/title/1080p/seg-00042.m4s".to_vec(),
            meta: ObjectMeta {
                status: 200,
                headers: vec![(b"Content-Type".to_vec(), b"video/iso.segment".to_vec())],
                ..ObjectMeta::default()
            },
            body_offset: 4096,
            body_len: 1_000_000,
            body_checksum: 7,
            created_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn round_trip() {
        let h = sample();
        let bytes = h.encode().unwrap();
        assert_eq!(decode_complete(&bytes).unwrap(), h);
    }

    #[test]
    fn wrong_version_is_rejected() {
        let mut bytes = sample().encode().unwrap();
        bytes[4] = 2;
        assert_eq!(
            decode_header(&bytes),
            Err(HeaderError::UnsupportedVersion(2))
        );
    }

    #[test]
    fn wrong_checksum_is_rejected() {
        let mut bytes = sample().encode().unwrap();
        let n = bytes.len();
        bytes[n - 20] ^= 1; // inside the metadata
        assert_eq!(decode_header(&bytes), Err(HeaderError::BadChecksum));
    }

    #[test]
    fn truncated_and_bad_magic_are_rejected() {
        let bytes = sample().encode().unwrap();
        assert_eq!(
            decode_header(&bytes[..bytes.len() - 1]),
            Err(HeaderError::Truncated)
        );
        assert_eq!(decode_header(&bytes[..10]), Err(HeaderError::Truncated));
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert_eq!(decode_header(&bad), Err(HeaderError::BadMagic));
    }

    #[test]
    fn unfinished_object_is_incomplete() {
        let mut h = sample();
        h.body_len = BODY_LEN_UNKNOWN;
        let bytes = h.encode().unwrap();
        assert!(decode_header(&bytes).is_ok());
        assert_eq!(decode_complete(&bytes), Err(HeaderError::Incomplete));
    }

    #[test]
    fn body_offset_rules() {
        assert_eq!(body_offset_for(200, Some(100)), 200);
        assert_eq!(body_offset_for(200, Some(1 << 20)), 4096);
        assert_eq!(body_offset_for(200, None), 4096);
        assert_eq!(body_offset_for(4096, None), 4096);
    }

    proptest! {
        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_header(&bytes);
        }

        #[test]
        fn single_bit_flips_are_caught(pos in 0usize..200, bit in 0u8..8) {
            let mut bytes = sample().encode().unwrap();
            let pos = pos % bytes.len();
            bytes[pos] ^= 1 << bit;
            prop_assert!(decode_header(&bytes).is_err());
        }
    }
}
