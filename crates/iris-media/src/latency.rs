//! An optional latency model: extra nanoseconds per block read and written, so benchmarks on DRAM
//! can emulate slower media (PCM, flash), as the Iris and Moneta papers do.

use std::time::{Duration, Instant};

/// Extra delay per block access. The default adds nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyModel {
    /// Added to every block read, in nanoseconds.
    pub read_ns: u32,
    /// Added to every block written, in nanoseconds.
    pub write_ns: u32,
}

impl LatencyModel {
    /// Read a model from `IRIS_READ_NS` / `IRIS_WRITE_NS`; unset or unparsable means 0.
    pub fn from_env() -> Self {
        let get = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        LatencyModel {
            read_ns: get("IRIS_READ_NS"),
            write_ns: get("IRIS_WRITE_NS"),
        }
    }

    /// True when the model adds nothing (the common case: one branch on the hot path).
    #[inline]
    pub fn is_zero(&self) -> bool {
        self.read_ns == 0 && self.write_ns == 0
    }

    /// Spin for the read delay of `block_count` blocks.
    #[inline]
    pub fn on_read(&self, block_count: u32) {
        if self.read_ns != 0 {
            spin(u64::from(self.read_ns) * u64::from(block_count));
        }
    }

    /// Spin for the write delay of `block_count` blocks.
    #[inline]
    pub fn on_write(&self, block_count: u32) {
        if self.write_ns != 0 {
            spin(u64::from(self.write_ns) * u64::from(block_count));
        }
    }
}

/// Busy-wait: a sleep would cost microseconds of scheduler latency, far more than the model.
fn spin(delay_ns: u64) {
    let until = Instant::now() + Duration::from_nanos(delay_ns);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}
