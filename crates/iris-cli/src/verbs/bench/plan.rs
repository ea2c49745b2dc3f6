//! A run's fixed parameters: which cells, how long each measures, how big each job's file is.

use super::cells::{self, Cell};

/// Bytes of each fio job's file (the 128 MiB).
const FILE_BYTES: u64 = 128 << 20;
/// Bytes of each job's file with --quick.
const QUICK_FILE_BYTES: u64 = 32 << 20;
/// Seconds per fio cell by default.
const RUNTIME_SECS: u64 = 5;
/// Seconds per fio cell with --quick.
const QUICK_RUNTIME_SECS: u64 = 1;
/// The memcpy floor is steady: it measures at most this long per cell.
const MEMCPY_MAX_SECS: f64 = 2.0;
/// Most rounds a run may ask for (each multiplies the fio time).
pub const MAX_ROUNDS: u32 = 9;

/// The run's fixed parameters.
pub struct Plan {
    /// The cells, in report order.
    pub cells: Vec<Cell>,
    /// Seconds each fio run measures.
    pub runtime_secs: u64,
    /// Seconds each memcpy run measures.
    pub memcpy_secs: f64,
    /// Bytes of each job's file.
    pub file_bytes: u64,
    /// Times each cell runs on each target, in rounds over the targets; the run with the
    /// median IOPS stands for the cell (see `results::median_run`).
    pub rounds: u32,
    /// Whether this is the quick smoke test.
    pub quick: bool,
}

impl Plan {
    /// Cells, durations and file size from the arguments.
    pub fn new(quick: bool, runtime_secs: Option<u64>, rounds: u32) -> Result<Plan, String> {
        if !(1..=MAX_ROUNDS).contains(&rounds) {
            return Err(format!("--rounds must be 1 to {MAX_ROUNDS}"));
        }
        let runtime_secs = runtime_secs.unwrap_or(if quick {
            QUICK_RUNTIME_SECS
        } else {
            RUNTIME_SECS
        });
        if runtime_secs == 0 {
            return Err("--runtime must be at least 1 second".into());
        }
        Ok(Plan {
            cells: if quick { cells::quick() } else { cells::full() },
            runtime_secs,
            memcpy_secs: (runtime_secs as f64).min(MEMCPY_MAX_SECS),
            file_bytes: if quick { QUICK_FILE_BYTES } else { FILE_BYTES },
            rounds,
            quick,
        })
    }

    /// The most jobs any cell runs (and so the files each target needs).
    pub fn max_jobs(&self) -> u32 {
        self.cells.iter().map(|c| c.jobs).max().unwrap_or(1)
    }
}
