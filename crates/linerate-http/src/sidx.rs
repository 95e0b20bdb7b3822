//! The Segment Index box (`sidx`, ISO/IEC 14496-12 §8.16.3) of a DASH `SegmentBase`
//! representation, read for the byte ranges of its subsegments, so cache mode's segment
//! prefetch can fetch the ranges after the one a player reads (one file per
//! representation, `SegmentBase@indexRange` naming where the box is).
//!
//! Pure and strict: bytes in, ranges out, `None` for anything this reader is not sure
//! of (a truncated box, no `sidx`, a reference to another `sidx` (hierarchical
//! indexes), an empty subsegment, a range past `u64::MAX`) — never a guess.

use crate::hls::SubRange;

/// Most references read from one `sidx` (two hours of 0.5 s subsegments is 14400).
pub const MAX_REFERENCES: usize = 65_536;

/// The subsegments the first `sidx` box in `index` lists, as byte ranges of the file.
/// `index`: the bytes `SegmentBase@indexRange` names (boxes before the `sidx`, such
/// as a `styp`, are skipped); `offset`: where `index[0]` is in the file (the anchor
/// the box's `first_offset` counts from is the first byte after the box).
pub fn subsegments(index: &[u8], offset: u64) -> Option<Vec<SubRange>> {
    let mut at = 0usize;
    loop {
        let rest = index.get(at..)?;
        let (size, header) = box_size(rest)?;
        if rest.get(4..8)? == b"sidx" {
            let body = rest.get(header..size)?;
            let after = offset.checked_add(u64::try_from(at + size).ok()?)?;
            return read(body, after);
        }
        at = at.checked_add(size)?;
    }
}

/// A box's size and header length (8, or 16 with a 64-bit `largesize`). A size of 0
/// (to the end of the file) or below the header is refused.
fn box_size(b: &[u8]) -> Option<(usize, usize)> {
    let size = u32::from_be_bytes(b.get(..4)?.try_into().ok()?);
    let (size, header) = match size {
        1 => (u64::from_be_bytes(b.get(8..16)?.try_into().ok()?), 16),
        n => (u64::from(n), 8),
    };
    let size = usize::try_from(size).ok()?;
    (size >= header).then_some((size, header))
}

/// The body of a `sidx` (after its box header); `anchor`: the file offset of the first
/// byte after the box.
fn read(b: &[u8], anchor: u64) -> Option<Vec<SubRange>> {
    let u32_at =
        |i: usize| -> Option<u32> { Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?)) };
    let version = *b.first()?;
    // version(1) flags(3) reference_ID(4) timescale(4), then earliest_presentation_time
    // and first_offset: 32 bits each in version 0, 64 in version 1.
    let (first_offset, at) = match version {
        0 => (u64::from(u32_at(16)?), 20),
        1 => (u64::from_be_bytes(b.get(20..28)?.try_into().ok()?), 28),
        _ => return None,
    };
    // reserved(2) reference_count(2).
    let count = usize::from(u16::from_be_bytes(b.get(at + 2..at + 4)?.try_into().ok()?));
    if count == 0 || count > MAX_REFERENCES {
        return None;
    }
    let refs = b.get(at + 4..at + 4 + count * 12)?;
    let mut out = Vec::with_capacity(count);
    let mut next = anchor.checked_add(first_offset)?;
    for r in refs.chunks_exact(12) {
        let word = u32::from_be_bytes(r[..4].try_into().ok()?);
        // reference_type 1: the reference is to another sidx (a hierarchical index).
        if word >> 31 != 0 {
            return None;
        }
        let len = u64::from(word & 0x7fff_ffff);
        if len == 0 {
            return None;
        }
        out.push(SubRange { offset: next, len });
        next = next.checked_add(len)?;
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test, with its location.
mod tests {
    use super::*;

    /// A `sidx` box of `version` with `first_offset` and references `(type, size)`.
    fn sidx(version: u8, first_offset: u64, refs: &[(u8, u32)]) -> Vec<u8> {
        let mut body = vec![version, 0, 0, 0];
        body.extend_from_slice(&1u32.to_be_bytes()); // reference_ID
        body.extend_from_slice(&90000u32.to_be_bytes()); // timescale
        if version == 0 {
            body.extend_from_slice(&0u32.to_be_bytes());
            body.extend_from_slice(&u32::try_from(first_offset).unwrap().to_be_bytes());
        } else {
            body.extend_from_slice(&0u64.to_be_bytes());
            body.extend_from_slice(&first_offset.to_be_bytes());
        }
        body.extend_from_slice(&0u16.to_be_bytes());
        body.extend_from_slice(&u16::try_from(refs.len()).unwrap().to_be_bytes());
        for &(kind, size) in refs {
            body.extend_from_slice(&((u32::from(kind) << 31) | size).to_be_bytes());
            body.extend_from_slice(&180000u32.to_be_bytes()); // subsegment_duration
            body.extend_from_slice(&0x9000_0000u32.to_be_bytes()); // starts with SAP 1
        }
        let mut b = u32::try_from(body.len() + 8)
            .unwrap()
            .to_be_bytes()
            .to_vec();
        b.extend_from_slice(b"sidx");
        b.extend_from_slice(&body);
        b
    }

    fn r(offset: u64, len: u64) -> SubRange {
        SubRange { offset, len }
    }

    #[test]
    fn version_0_ranges_follow_the_box() {
        let b = sidx(0, 0, &[(0, 1000), (0, 2000), (0, 500)]);
        let end = 800 + b.len() as u64;
        assert_eq!(
            subsegments(&b, 800),
            Some(vec![r(end, 1000), r(end + 1000, 2000), r(end + 3000, 500)])
        );
        // first_offset: a gap between the box and the first subsegment.
        let b = sidx(0, 16, &[(0, 10)]);
        assert_eq!(subsegments(&b, 0), Some(vec![r(b.len() as u64 + 16, 10)]));
    }

    #[test]
    fn version_1_and_boxes_before_the_sidx() {
        let mut b = vec![0, 0, 0, 16];
        b.extend_from_slice(b"styp");
        b.extend_from_slice(b"msdhmsix");
        let s = sidx(1, 1 << 33, &[(0, 7), (0, 9)]);
        b.extend_from_slice(&s);
        let first = 100 + b.len() as u64 + (1 << 33);
        assert_eq!(
            subsegments(&b, 100),
            Some(vec![r(first, 7), r(first + 7, 9)])
        );
        // A 64-bit largesize header.
        let mut large = vec![0, 0, 0, 1];
        large.extend_from_slice(b"sidx");
        large.extend_from_slice(&(s.len() as u64 + 8).to_be_bytes());
        large.extend_from_slice(&s[8..]);
        let first = large.len() as u64 + (1 << 33);
        assert_eq!(
            subsegments(&large, 0),
            Some(vec![r(first, 7), r(first + 7, 9)])
        );
    }

    proptest::proptest! {
        /// Whatever the bytes (an origin's), no panic, and the ranges found are
        /// contiguous after the box, non-empty and in order.
        #[test]
        fn never_panics(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256), offset in 0u64..1 << 40) {
            let mut b = sidx(0, 0, &[(0, 10)]);
            b.truncate(12);
            b.extend_from_slice(&body);
            for input in [&body, &b] {
                if let Some(ranges) = subsegments(input, offset) {
                    for w in ranges.windows(2) {
                        proptest::prop_assert_eq!(w[0].end(), w[1].offset);
                    }
                    proptest::prop_assert!(ranges.iter().all(|r| r.len > 0 && r.offset > offset));
                }
            }
        }
    }

    #[test]
    fn what_is_not_read() {
        // A reference to another sidx (reference_type 1).
        assert_eq!(subsegments(&sidx(0, 0, &[(0, 10), (1, 20)]), 0), None);
        // Truncated anywhere.
        let b = sidx(0, 0, &[(0, 10), (0, 20)]);
        for n in 0..b.len() {
            assert_eq!(subsegments(&b[..n], 0), None, "{n} bytes");
        }
        // No sidx at all; a box of size 0 or below its header; another version.
        let mut moof = vec![0, 0, 0, 8];
        moof.extend_from_slice(b"moof");
        assert_eq!(subsegments(&moof, 0), None);
        assert_eq!(subsegments(b"\0\0\0\0sidx", 0), None);
        assert_eq!(subsegments(b"\0\0\0\x04sidx", 0), None);
        let mut v2 = b.clone();
        v2[8] = 2;
        assert_eq!(subsegments(&v2, 0), None);
        // No references, an empty one, a range past u64::MAX.
        assert_eq!(subsegments(&sidx(0, 0, &[]), 0), None);
        assert_eq!(subsegments(&sidx(0, 0, &[(0, 0)]), 0), None);
        assert_eq!(subsegments(&sidx(1, u64::MAX - 5, &[(0, 10)]), 0), None);
    }
}
