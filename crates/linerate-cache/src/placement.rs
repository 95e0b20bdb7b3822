//! Which disk holds a key: weighted rendezvous (highest-random-weight) hashing.
//!
//! Each disk scores every key with `weight / -ln(u)`, `u` a uniform hash of (key, disk
//! name) in (0, 1); the highest score wins. A disk that joins or leaves takes or gives
//! only its own share, and shares are proportional to weight (Schindelhauer & Schomaker,
//! "Weighted distributed hash tables", 2005). This file only computes; it does not know
//! which disks are in service (the caller passes candidates).

use crate::key::KeyHash;

/// Placement identity of one disk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Hash of the disk's configured name (not its index or path).
    pub seed: u64,
    /// Relative weight, normally its capacity in bytes.
    pub weight: f64,
}

impl Candidate {
    /// Candidate for a disk named `name` with `weight`.
    pub fn new(name: &str, weight: u64) -> Candidate {
        Candidate {
            seed: xxhash_rust::xxh3::xxh3_64(name.as_bytes()),
            weight: weight as f64,
        }
    }

    /// This disk's score for `key`. Cost: one 16-byte xxh3 and one `ln`.
    pub fn score(&self, key: KeyHash) -> f64 {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(&key.0.to_le_bytes(), self.seed);
        // Map to the open interval (0, 1): never 0 (ln = -inf) nor 1 (ln = 0).
        let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        self.weight / -u.ln()
    }
}

/// Index (into the iterator's order) of the candidate with the highest score, or
/// `None` if there are none.
pub fn choose<I>(key: KeyHash, candidates: I) -> Option<usize>
where
    I: IntoIterator<Item = (usize, Candidate)>,
{
    let mut best: Option<(usize, f64)> = None;
    for (i, c) in candidates {
        let s = c.score(key);
        if best.is_none_or(|(_, b)| s > b) {
            best = Some((i, s));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disks() -> Vec<Candidate> {
        vec![
            Candidate::new("a", 100),
            Candidate::new("b", 100),
            Candidate::new("c", 200),
        ]
    }

    #[test]
    fn shares_follow_weights() {
        let d = disks();
        let mut counts = [0u32; 3];
        for i in 0..40_000u32 {
            let k = KeyHash::of(&i.to_le_bytes());
            if let Some(w) = choose(k, d.iter().copied().enumerate()) {
                counts[w] += 1;
            }
        }
        // Expect 10k / 10k / 20k within a few percent.
        assert!((9_000..11_000).contains(&counts[0]), "{counts:?}");
        assert!((9_000..11_000).contains(&counts[1]), "{counts:?}");
        assert!((19_000..21_000).contains(&counts[2]), "{counts:?}");
    }

    #[test]
    fn losing_a_disk_moves_only_its_share() {
        let d = disks();
        for i in 0..10_000u32 {
            let k = KeyHash::of(&i.to_le_bytes());
            let before = choose(k, d.iter().copied().enumerate());
            let after = choose(k, d.iter().copied().enumerate().filter(|(i, _)| *i != 1));
            if before != Some(1) {
                assert_eq!(before, after);
            }
        }
    }
}
