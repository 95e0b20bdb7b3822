//! How the option types read and print themselves (serde): the units the configuration
//! file writes (`_ms`, `_s`, sizes such as `"900G"`) and the checks a single value must
//! pass as it is read. A check fails with a message naming what is wanted; the file's
//! parser adds the key and the line. Used through `#[serde(with = ...)]` and
//! `#[serde(deserialize_with = ...)]` on the option types; reference: docs/config.md.
//!
//! Not here: checks that need more than one value (those are the option types' own
//! `TryFrom` conversions), reading files, or the command line (the binary's).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// A custom error of the deserializer in use.
fn invalid<'de, D: Deserializer<'de>>(message: impl std::fmt::Display) -> D::Error {
    serde::de::Error::custom(message)
}

/// A [`Duration`] written as whole milliseconds (keys ending in `_ms`).
pub mod ms {
    use super::*;

    /// Print as milliseconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// Read milliseconds (any non-negative integer).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// A [`Duration`] written as whole seconds (keys ending in `_s`).
pub mod secs {
    use super::*;

    /// Print as seconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    /// Read seconds (any non-negative integer).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

/// A count that must be at least 1.
pub fn positive<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default + PartialEq,
{
    let n = T::deserialize(d)?;
    if n == T::default() {
        return Err(invalid::<D>("must be greater than 0"));
    }
    Ok(n)
}

/// A share, 0.0 to 1.0.
pub fn share<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if !(0.0..=1.0).contains(&v) {
        return Err(invalid::<D>("must be between 0.0 and 1.0"));
    }
    Ok(v)
}

/// Longest timeout accepted, ms: a player has given up long before, and a stuck fetch
/// holds an origin connection for this long.
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// Longest `down_for_ms`: an hour; a server down longer is a configuration matter.
pub const MAX_DOWN_FOR_MS: u64 = 3_600_000;

/// Longest freshness lifetime accepted, s (10 years): far past any real TTL (a year is
/// the customary "immutable"), and far from overflowing expiry arithmetic.
pub const MAX_LIFETIME_S: u64 = 10 * 365 * 86_400;

/// Smallest slice: each slice is one origin request and one stored object, so below
/// 64 KiB the per-request and per-file overhead outweighs the data.
pub const MIN_SLICE_BYTES: u64 = 64 * 1024;

/// A timeout in milliseconds, 1 to [`MAX_TIMEOUT_MS`].
pub fn timeout_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let n = u64::deserialize(d)?;
    if n == 0 || n > MAX_TIMEOUT_MS {
        return Err(invalid::<D>(format!(
            "must be between 1 and {MAX_TIMEOUT_MS} (ms)"
        )));
    }
    Ok(Duration::from_millis(n))
}

/// How long a failed origin server is skipped, ms, 1 to [`MAX_DOWN_FOR_MS`].
pub fn down_for_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let n = u64::deserialize(d)?;
    if n == 0 || n > MAX_DOWN_FOR_MS {
        return Err(invalid::<D>(format!(
            "must be between 1 and {MAX_DOWN_FOR_MS} (ms)"
        )));
    }
    Ok(Duration::from_millis(n))
}

/// A freshness lifetime in seconds, at most [`MAX_LIFETIME_S`].
pub fn lifetime_s<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = u64::deserialize(d)?;
    if n > MAX_LIFETIME_S {
        return Err(invalid::<D>(format!(
            "must be at most {MAX_LIFETIME_S} (s, 10 years)"
        )));
    }
    Ok(n)
}

/// A size in bytes: an integer, or a string of digits with an optional `K`, `M`, `G` or
/// `T` suffix (powers of 1024, as in nginx: `"900G"`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let shift = match t.as_bytes().last().map(u8::to_ascii_uppercase) {
        Some(b'K') => 10,
        Some(b'M') => 20,
        Some(b'G') => 30,
        Some(b'T') => 40,
        _ => 0,
    };
    let digits = if shift == 0 { t } else { &t[..t.len() - 1] };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{s}`: a size in bytes: an integer, or a string such as \"900G\" (suffix K, M, G or T: powers of 1024)"
        ));
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("`{s}`: too large"))
}

/// A size in bytes ([`parse_size`]'s forms).
pub fn size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct Size;
    impl serde::de::Visitor<'_> for Size {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a size in bytes: an integer, or a string such as \"900G\"")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom("a size cannot be negative"))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<u64, E> {
            parse_size(v).map_err(E::custom)
        }
    }
    d.deserialize_any(Size)
}

/// A size of at least one byte.
pub fn positive_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = size(d)?;
    if n == 0 {
        return Err(invalid::<D>("must be greater than 0"));
    }
    Ok(n)
}

/// A slice size: 0 (no slicing) or at least [`MIN_SLICE_BYTES`].
pub fn slice_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = size(d)?;
    if n != 0 && n < MIN_SLICE_BYTES {
        return Err(invalid::<D>(format!(
            "must be 0 (no slicing) or at least {MIN_SLICE_BYTES}"
        )));
    }
    Ok(n)
}

/// Names of disks and origins: 1-64 bytes of letters, digits, `-` and `_` (disk names
/// feed placement, origin names will label metrics).
pub fn check_name(n: &str) -> Result<(), String> {
    if n.is_empty()
        || n.len() > 64
        || !n
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!("name {n:?}: 1-64 letters, digits, `-` or `_`"));
    }
    Ok(())
}

/// A name ([`check_name`]).
pub fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let n = String::deserialize(d)?;
    check_name(&n).map_err(invalid::<D>)?;
    Ok(n)
}

/// RFC 9110 `tchar`: what a `Via` pseudonym and a `Cache-Status` token may hold.
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A configured file extension (a key of a per-extension table): letters and digits,
/// no dot; kept in lower case. Its own type so that an error points at the key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Extension(pub String);

impl<'de> Deserialize<'de> for Extension {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let k = String::deserialize(d)?;
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(invalid::<D>(format!(
                "extension `{k}`: letters and digits only, no dot"
            )));
        }
        Ok(Extension(k.to_ascii_lowercase()))
    }
}

/// A lifetime value of a per-extension table ([`lifetime_s`]).
pub struct Lifetime(pub u64);

impl<'de> Deserialize<'de> for Lifetime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lifetime_s(d).map(Lifetime)
    }
}
