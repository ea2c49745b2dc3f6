//! A latency histogram for the in-process memcpy floor: exact below 128 ns, then 64 buckets per
//! doubling (each within 1/64 of its value), fixed size, no allocation while recording.

/// Values below this are counted exactly.
const LINEAR_NS: u64 = 128;
/// Buckets per doubling above [`LINEAR_NS`], as a power of two.
const SUB_BITS: u32 = 6;
/// Buckets in all: the linear ones and 64 for each doubling from 2^7 to 2^63.
const BUCKET_COUNT: usize = LINEAR_NS as usize + (64 - 7) * (1 << SUB_BITS);

/// Counts of latencies in nanoseconds.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    sum_ns: u128,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKET_COUNT].into_boxed_slice(),
            count: 0,
            sum_ns: 0,
        }
    }

    /// Count one latency.
    #[inline]
    pub fn record(&mut self, latency_ns: u64) {
        self.counts[bucket(latency_ns)] += 1;
        self.count += 1;
        self.sum_ns += u128::from(latency_ns);
    }

    /// Add `other`'s counts to this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
    }

    /// Latencies counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The mean latency (0 when empty).
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        self.sum_ns as f64 / self.count as f64
    }

    /// The latency at quantile `q` (0..=1): the middle of the bucket holding it (0 when empty).
    pub fn quantile_ns(&self, q: f64) -> f64 {
        debug_assert!((0.0..=1.0).contains(&q));
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, width) = bounds(i);
                return low as f64 + (width as f64 - 1.0) / 2.0;
            }
        }
        debug_assert!(false, "rank {rank} beyond count {}", self.count);
        0.0
    }
}

/// The bucket of `v`.
#[inline]
fn bucket(v: u64) -> usize {
    if v < LINEAR_NS {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= 7
    let sub = (v >> (exp - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    LINEAR_NS as usize + ((exp - 7) as usize) * (1 << SUB_BITS) + sub as usize
}

/// The lowest value of bucket `i` and how many values it holds.
fn bounds(i: usize) -> (u64, u64) {
    if i < LINEAR_NS as usize {
        return (i as u64, 1);
    }
    let k = (i - LINEAR_NS as usize) as u64;
    let exp = (k >> SUB_BITS) as u32 + 7;
    let sub = k & ((1 << SUB_BITS) - 1);
    let width = 1u64 << (exp - SUB_BITS);
    (((1 << SUB_BITS) + sub) * width, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_their_values() {
        for v in [0u64, 1, 127, 128, 129, 1000, 4095, 4096, 1 << 40, u64::MAX] {
            let (low, width) = bounds(bucket(v));
            assert!(low <= v && v - low < width, "{v}: [{low}, +{width})");
        }
        assert_eq!(bucket(u64::MAX), BUCKET_COUNT - 1);
    }

    #[test]
    fn quantiles_and_mean_of_a_uniform_run() {
        let mut h = Histogram::new();
        for v in 1..=1000u64 {
            h.record(v);
        }
        assert_eq!(h.count(), 1000);
        assert!((h.mean_ns() - 500.5).abs() < 1e-9);
        let p99 = h.quantile_ns(0.99);
        assert!((p99 - 990.0).abs() < 990.0 / 64.0, "{p99}");
        let mut other = Histogram::new();
        other.record(5);
        h.merge(&other);
        assert_eq!(h.count(), 1001);
        assert_eq!(Histogram::new().quantile_ns(0.5), 0.0);
    }
}
