//! Cache keys and their hashes: the 128-bit hash that names an object's file, picks its
//! disk and its index shard.
//!
//! This file does not build keys from requests (scheme, host, path, query and Vary are
//! the cache-mode layer's business); a key here is an opaque byte string. A hash
//! collision is never trusted: the full key is stored in the object header and compared
//! on every hit, so two keys with one hash make a miss, not a wrong object.

use std::fmt;
use std::path::{Path, PathBuf};

/// Longest key the store accepts, in bytes. Keys live in memory for every object (prefix
/// purge walks them) and in every object header, so a bound keeps one hostile URL from
/// costing kilobytes per object; 8 KiB is nginx's default `large_client_header_buffers`
/// line size, longer than any request line the HTTP layer accepts.
pub const MAX_KEY_LEN: usize = 8 * 1024;

/// xxh3-128 of a cache key. Names the object file, selects the index shard and is the
/// input of rendezvous placement. Cost: ~20 ns for a 100-byte key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyHash(pub u128);

impl KeyHash {
    /// Hash `key` (any bytes).
    pub fn of(key: &[u8]) -> KeyHash {
        KeyHash(xxhash_rust::xxh3::xxh3_128(key))
    }

    /// Lower 64 bits, used to pick a shard and mixed into placement scores.
    pub fn low64(self) -> u64 {
        self.0 as u64
    }

    /// Path of this object's file below a disk's `objects/` directory:
    /// `<3 hex digits>/<32 hex digits>`. 4096 fan-out directories keep 10 M objects at
    /// about 2,500 entries per directory, which ext4's and XFS's hashed directories handle
    /// without slowing down, while a full scan visits only 4096 directories.
    pub fn relative_path(self) -> PathBuf {
        let hex = format!("{:032x}", self.0);
        Path::new(&hex[..3]).join(&hex)
    }

    /// Parse the 32-hex-digit file name written by [`KeyHash::relative_path`].
    pub fn from_file_name(name: &str) -> Option<KeyHash> {
        if name.len() != 32 {
            return None;
        }
        u128::from_str_radix(name, 16).ok().map(KeyHash)
    }
}

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_name_round_trips() {
        let h = KeyHash::of(b"http://example.com/video/seg-1.m4s");
        let rel = h.relative_path();
        let name = rel.file_name().and_then(|n| n.to_str());
        assert_eq!(name.and_then(KeyHash::from_file_name), Some(h));
        assert_eq!(KeyHash::from_file_name("xyz"), None);
        assert_eq!(
            KeyHash::from_file_name("0123456789abcdef0123456789abcdeg"),
            None
        );
    }
}
