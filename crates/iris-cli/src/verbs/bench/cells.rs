//! The cells of the benchmark matrix: an access pattern (random read or write), a block size, a
//! job count and a mode (page cache warm, `direct=1`, `fdatasync` after every write, or warm with
//! the jobs sharing one file), and the two plans: the full matrix of issues #6 and #4 and the
//! quick smoke test.

/// Random reads or random writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rw {
    /// fio `randread`.
    RandRead,
    /// fio `randwrite`.
    RandWrite,
}

impl Rw {
    /// fio's name for it.
    pub fn fio_name(self) -> &'static str {
        match self {
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
        }
    }

    /// The section of fio's JSON job holding its numbers.
    pub fn fio_section(self) -> &'static str {
        match self {
            Rw::RandRead => "read",
            Rw::RandWrite => "write",
        }
    }
}

/// How the I/O meets the kernel's caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// Buffered, page cache hot (fio `invalidate=0`, files laid out just before).
    Warm,
    /// `direct=1`: O_DIRECT, the comparison the Iris paper made.
    Direct,
    /// `fdatasync=1`: every write made durable before the next.
    Durable,
    /// Buffered and warm, but the jobs are threads of one process sharing one file, each on its
    /// own part of it (issue #4: writers of disjoint ranges of one file run in parallel).
    OneFile,
}

impl Mode {
    /// Short name used in labels, JSON and the chart.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Warm => "warm",
            Mode::Direct => "direct",
            Mode::Durable => "fdatasync",
            Mode::OneFile => "one-file",
        }
    }

    /// A heading for the chart panel and the docs.
    pub fn title(self) -> &'static str {
        match self {
            Mode::Warm => "Buffered, page cache warm",
            Mode::Direct => "direct=1 (O_DIRECT)",
            Mode::Durable => "randwrite with fdatasync after every write",
            Mode::OneFile => "Buffered, warm: threads on disjoint halves of one file",
        }
    }

    /// Plain loads and stores see no difference between this mode and `Warm`: the memcpy floor
    /// repeats the warm cell's numbers (no cache to bypass; one mapping or two alike).
    pub fn memcpy_as_warm(self) -> bool {
        matches!(self, Mode::Direct | Mode::OneFile)
    }

    /// Every mode, in report order.
    pub const ALL: [Mode; 4] = [Mode::Warm, Mode::Direct, Mode::Durable, Mode::OneFile];
}

/// One cell: what fio (or the memcpy floor) runs against every target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cell {
    /// Report order first: mode, then pattern, block size, jobs.
    pub mode: Mode,
    /// Random read or write.
    pub rw: Rw,
    /// Bytes per I/O.
    pub block_bytes: u32,
    /// Concurrent jobs, queue depth 1: processes, each on its own file (threads sharing one file
    /// in [`Mode::OneFile`]).
    pub jobs: u32,
}

impl Cell {
    /// "randread 4K 1j warm".
    pub fn label(&self) -> String {
        format!(
            "{} {} {}j {}",
            self.rw.fio_name(),
            block_label(self.block_bytes),
            self.jobs,
            self.mode.name()
        )
    }

    /// The same cell with another job count.
    pub fn with_jobs(&self, jobs: u32) -> Cell {
        Cell { jobs, ..*self }
    }
}

/// "512" or "4K".
pub fn block_label(block_bytes: u32) -> String {
    if block_bytes >= 1024 && block_bytes.is_multiple_of(1024) {
        format!("{}K", block_bytes / 1024)
    } else {
        block_bytes.to_string()
    }
}

/// Block sizes of the full matrix.
const BLOCK_SIZES: [u32; 2] = [512, 4096];
/// Job counts of the full matrix.
const JOB_COUNTS: [u32; 2] = [1, 2];

/// The full matrix: randread and randwrite x 512 B and 4 KiB x 1 and 2 jobs, warm and direct;
/// randwrite x 512 B and 4 KiB x 1 and 2 jobs with fdatasync; 4 KiB randwrite by two threads
/// on the halves of one file. 21 cells.
pub fn full() -> Vec<Cell> {
    let mut cells = Vec::new();
    for mode in [Mode::Warm, Mode::Direct, Mode::Durable] {
        let patterns: &[Rw] = match mode {
            Mode::Durable => &[Rw::RandWrite],
            _ => &[Rw::RandRead, Rw::RandWrite],
        };
        for &rw in patterns {
            for block_bytes in BLOCK_SIZES {
                for jobs in JOB_COUNTS {
                    cells.push(Cell {
                        mode,
                        rw,
                        block_bytes,
                        jobs,
                    });
                }
            }
        }
    }
    cells.push(Cell {
        mode: Mode::OneFile,
        rw: Rw::RandWrite,
        block_bytes: 4096,
        jobs: 2,
    });
    debug_assert_eq!(cells.len(), 21);
    cells
}

/// The smoke test: 4 KiB, one job: warm randread and randwrite, randwrite with fdatasync.
pub fn quick() -> Vec<Cell> {
    let cell = |mode, rw| Cell {
        mode,
        rw,
        block_bytes: 4096,
        jobs: 1,
    };
    vec![
        cell(Mode::Warm, Rw::RandRead),
        cell(Mode::Warm, Rw::RandWrite),
        cell(Mode::Durable, Rw::RandWrite),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_matrix_is_the_issues() {
        let cells = full();
        assert_eq!(cells.iter().filter(|c| c.mode == Mode::Warm).count(), 8);
        assert_eq!(cells.iter().filter(|c| c.mode == Mode::Direct).count(), 8);
        assert_eq!(
            cells
                .iter()
                .filter(|c| c.mode == Mode::OneFile && c.jobs == 2)
                .count(),
            1
        );
        assert!(cells
            .iter()
            .filter(|c| c.mode == Mode::Durable)
            .all(|c| c.rw == Rw::RandWrite));
        let mut sorted = cells.clone();
        sorted.sort();
        assert_eq!(sorted, cells, "cells are in report order");
    }

    #[test]
    fn labels_read_as_fio_options() {
        let c = quick()[0];
        assert_eq!(c.label(), "randread 4K 1j warm");
        assert_eq!(block_label(512), "512");
    }
}
