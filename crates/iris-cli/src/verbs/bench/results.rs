//! What a run measured: one [`Measurement`] per cell and target, and the ratios the issue judges
//! Iris by (against the best kernel file system, and against the bare-interposer ceiling).

use std::collections::BTreeMap;

use super::cells::Cell;
use super::targets::TargetKind;

/// Throughput and latency of one cell on one target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    /// Operations per second, all jobs together.
    pub iops: f64,
    /// Mean latency of one operation in nanoseconds (for fdatasync cells: write + fdatasync).
    pub mean_ns: f64,
    /// 99th percentile latency in nanoseconds (for fdatasync cells: the write's plus the
    /// fdatasync's, an upper bound of the pair's).
    pub p99_ns: f64,
}

/// A target's outcome in one cell: numbers, or why there are none.
pub type Outcome = Result<Measurement, String>;

/// Every target's outcome in one cell.
#[derive(Clone, Debug)]
pub struct CellResult {
    /// The cell.
    pub cell: Cell,
    /// Outcome per target that ran.
    pub by_target: BTreeMap<TargetKind, Outcome>,
    /// With several rounds: the IOPS of each successful run per target, in the order run.
    pub runs: BTreeMap<TargetKind, Vec<f64>>,
}

impl CellResult {
    /// An empty result for `cell`.
    pub fn new(cell: Cell) -> CellResult {
        CellResult {
            cell,
            by_target: BTreeMap::new(),
            runs: BTreeMap::new(),
        }
    }

    /// The numbers of `kind`, if it ran and succeeded.
    pub fn get(&self, kind: TargetKind) -> Option<Measurement> {
        self.by_target.get(&kind)?.as_ref().ok().copied()
    }

    /// The kernel target (tmpfs, ext4, xfs) with the most IOPS.
    pub fn best_kernel(&self) -> Option<(TargetKind, Measurement)> {
        self.best_of(&TargetKind::KERNEL)
    }

    /// The target among `kinds` with the most IOPS.
    pub fn best_of(&self, kinds: &[TargetKind]) -> Option<(TargetKind, Measurement)> {
        kinds
            .iter()
            .filter_map(|&k| Some((k, self.get(k)?)))
            .max_by(|a, b| a.1.iops.total_cmp(&b.1.iops))
    }

    /// Iris IOPS over `other`'s.
    pub fn iris_over(&self, other: TargetKind) -> Option<f64> {
        ratio(self.get(TargetKind::Iris)?, self.get(other)?)
    }

    /// Iris IOPS over the best kernel target's.
    pub fn iris_over_best_kernel(&self) -> Option<f64> {
        ratio(self.get(TargetKind::Iris)?, self.best_kernel()?.1)
    }
}

/// `a`'s IOPS over `b`'s, if `b` did any.
pub fn ratio(a: Measurement, b: Measurement) -> Option<f64> {
    (b.iops > 0.0).then(|| a.iops / b.iops)
}

/// The run with the median IOPS (of an even count, the lower of the two middle ones): it
/// stands for the cell whole, its latencies with it. `None` for no runs.
pub fn median_run(runs: &[Measurement]) -> Option<Measurement> {
    let mut sorted = runs.to_vec();
    sorted.sort_by(|a, b| a.iops.total_cmp(&b.iops));
    sorted.get(sorted.len().checked_sub(1)? / 2).copied()
}

/// What several runs of one cell on one target come to: the median successful run, or, when
/// every run failed, the last one's reason.
pub fn median_outcome(runs: &[&Outcome]) -> Outcome {
    let ok: Vec<Measurement> = runs
        .iter()
        .filter_map(|o| o.as_ref().ok().copied())
        .collect();
    median_run(&ok).ok_or_else(|| {
        runs.last()
            .and_then(|o| o.as_ref().err().cloned())
            .unwrap_or_else(|| "no run".to_string())
    })
}

/// The cell equal to `cell` but for its job count.
pub fn find(results: &[CellResult], cell: Cell) -> Option<&CellResult> {
    results.iter().find(|r| r.cell == cell)
}

#[cfg(test)]
mod tests {
    use super::super::cells::quick;
    use super::*;

    fn m(iops: f64) -> Outcome {
        Ok(Measurement {
            iops,
            mean_ns: 1e9 / iops,
            p99_ns: 2e9 / iops,
        })
    }

    #[test]
    fn the_median_run_stands_for_its_rounds_latencies_and_all() {
        let run = |iops: f64, p99_ns: f64| Measurement {
            iops,
            mean_ns: 1e9 / iops,
            p99_ns,
        };
        assert_eq!(median_run(&[]), None);
        assert_eq!(median_run(&[run(5.0, 1.0)]), Some(run(5.0, 1.0)));
        let odd = [run(300.0, 3.0), run(100.0, 1.0), run(200.0, 2.0)];
        assert_eq!(median_run(&odd), Some(run(200.0, 2.0)));
        let even = [
            run(400.0, 4.0),
            run(100.0, 1.0),
            run(300.0, 3.0),
            run(200.0, 2.0),
        ];
        assert_eq!(median_run(&even), Some(run(200.0, 2.0)));
    }

    #[test]
    fn failed_runs_give_way_to_any_that_succeeded() {
        let (good, bad, worse) = (m(100.0), Err("fio died".to_string()), Err("timeout".into()));
        assert_eq!(median_outcome(&[&bad, &good, &worse]), good);
        assert_eq!(median_outcome(&[&bad, &worse]), Err("timeout".to_string()));
        assert_eq!(median_outcome(&[]), Err("no run".to_string()));
    }

    #[test]
    fn the_best_kernel_is_the_fastest_that_ran() {
        let mut r = CellResult::new(quick()[0]);
        r.by_target.insert(TargetKind::Iris, m(300.0));
        r.by_target.insert(TargetKind::Floor, m(400.0));
        r.by_target.insert(TargetKind::Tmpfs, m(100.0));
        r.by_target.insert(TargetKind::Ext4, m(150.0));
        r.by_target.insert(TargetKind::Xfs, Err("failed".into()));
        assert_eq!(r.best_kernel().map(|b| b.0), Some(TargetKind::Ext4));
        assert_eq!(r.iris_over_best_kernel(), Some(2.0));
        assert_eq!(r.iris_over(TargetKind::Floor), Some(0.75));
        assert_eq!(r.iris_over(TargetKind::Xfs), None);
    }
}
