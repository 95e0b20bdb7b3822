//! Fixed-bucket latency histogram: log-linear buckets over the whole `u64` nanosecond
//! range, allocated once, so recording a sample is an index computation and an add
//! (no allocation, no branch on the value's size beyond a leading-zero count).
//!
//! Layout (the HdrHistogram idea, reduced to what the generator needs): values below
//! 2^`SUB_BITS` (64) have a bucket each; above that, each power-of-two range
//! `[2^e, 2^(e+1))` is split into 2^`SUB_BITS` equal buckets, so a reported value is
//! within 1/64 (1.6 %) of the true one. Quantiles report the bucket's upper edge
//! (clamped to the largest value seen), i.e. "at most this". It does not merge across
//! threads, decay, or keep samples.

/// Sub-buckets per power of two, as a bit count: 6 → 64 buckets per octave, 1.6 %
/// worst-case relative error, which is finer than run-to-run noise on loopback.
const SUB_BITS: u32 = 6;
/// Sub-buckets per power of two.
const SUB_COUNT: usize = 1 << SUB_BITS;
/// Buckets for every u64: 64 exact ones, then 64 per octave for exponents 6..=63.
const BUCKETS: usize = SUB_COUNT * (64 - SUB_BITS as usize + 1);

/// A histogram of `u64` values (the generator records nanoseconds).
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.total)
            .field("min", &self.min())
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl Histogram {
    /// An empty histogram (one 30 KiB allocation, here and never again).
    pub fn new() -> Self {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// Count one value.
    pub fn record(&mut self, value: u64) {
        let i = bucket_index(value);
        // `bucket_index` maps every u64 below BUCKETS (see its doc and the test
        // `index_covers_u64`); `get_mut` keeps a bug from becoming a panic anyway.
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.total += 1;
        self.sum += u128::from(value);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Forget every value (used when the warm-up ends).
    pub fn clear(&mut self) {
        self.counts.fill(0);
        self.total = 0;
        self.sum = 0;
        self.min = u64::MAX;
        self.max = 0;
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Smallest value recorded, 0 when empty.
    pub fn min(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            self.min
        }
    }

    /// Largest value recorded, 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Arithmetic mean, 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    /// The value at quantile `q` (0.0-1.0): the upper edge of the bucket holding the
    /// `ceil(q * count)`-th smallest value, never above [`Histogram::max`]. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_upper(i).min(self.max);
            }
        }
        self.max
    }
}

/// Bucket of `v`: exact below 64, else octave `e` (bit length - 1) and the next
/// [`SUB_BITS`] bits below the leading one.
fn bucket_index(v: u64) -> usize {
    if v < SUB_COUNT as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS here
    let sub = (v >> (e - SUB_BITS)) as usize & (SUB_COUNT - 1);
    (e - SUB_BITS + 1) as usize * SUB_COUNT + sub
}

/// Largest value that falls in bucket `i`.
fn bucket_upper(i: usize) -> u64 {
    if i < SUB_COUNT {
        return i as u64;
    }
    let e = (i / SUB_COUNT) as u32 + SUB_BITS - 1;
    let sub = (i % SUB_COUNT) as u64;
    let shift = e - SUB_BITS;
    // lower edge + (width - 1); the last bucket ends exactly at u64::MAX, no overflow.
    ((SUB_COUNT as u64 + sub) << shift) + ((1u64 << shift) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_covers_u64() {
        assert_eq!(bucket_index(0), 0);
        assert_eq!(bucket_index(63), 63);
        assert_eq!(bucket_index(64), 64);
        assert_eq!(bucket_index(127), 127);
        assert_eq!(bucket_index(128), 128);
        assert_eq!(bucket_index(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_upper(BUCKETS - 1), u64::MAX);
    }

    #[test]
    fn buckets_are_contiguous_and_ordered() {
        for i in 1..BUCKETS {
            let lo = bucket_upper(i - 1) + 1;
            assert_eq!(bucket_index(lo), i, "first value of bucket {i}");
            assert_eq!(bucket_index(bucket_upper(i)), i, "last value of bucket {i}");
        }
    }

    #[test]
    fn relative_error_is_bounded() {
        let mut v = 1u64;
        while v < u64::MAX / 3 {
            let up = bucket_upper(bucket_index(v));
            assert!(up >= v);
            assert!(
                (up - v) as f64 <= v as f64 / SUB_COUNT as f64,
                "{v} -> {up}"
            );
            v = v * 3 + 1;
        }
    }

    #[test]
    fn quantiles_of_uniform_values() {
        let mut h = Histogram::new();
        for v in 1..=100_000u64 {
            h.record(v);
        }
        assert_eq!(h.count(), 100_000);
        assert_eq!(h.min(), 1);
        assert_eq!(h.max(), 100_000);
        assert!((h.mean() - 50_000.5).abs() < 1e-6);
        for (q, exact) in [(0.5, 50_000.0), (0.99, 99_000.0), (0.999, 99_900.0)] {
            let got = h.quantile(q) as f64;
            assert!(
                got >= exact && got <= exact * (1.0 + 1.0 / 64.0),
                "q{q}: {got}"
            );
        }
        assert_eq!(h.quantile(1.0), 100_000);
        assert_eq!(h.quantile(0.0), 1);
    }

    #[test]
    fn empty_and_cleared() {
        let mut h = Histogram::new();
        assert_eq!(
            (h.count(), h.min(), h.max(), h.quantile(0.99)),
            (0, 0, 0, 0)
        );
        h.record(5);
        h.record(7_000_000);
        assert_eq!(h.quantile(0.5), 5);
        assert_eq!(h.quantile(0.99), 7_000_000);
        h.clear();
        assert_eq!((h.count(), h.quantile(0.5)), (0, 0));
    }
}
