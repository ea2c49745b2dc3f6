//! The targets issues #6 and #4 set, checked against one run's ratios: Iris within 90% of the
//! bare-interposer ceiling on every fio cell; warm-cache speedups over the best kernel file
//! system (tmpfs, ext4, xfs); two jobs nearly twice one; two threads on one file (issue #4)
//! 1.7x one job; fdatasync writes against ext4; direct=1 against the better of ext4 and xfs. (tmpfs accepts O_DIRECT but has no device to go direct
//! to: its direct=1 numbers are its page cache's, so they are shown but not the bar for the
//! direct=1 target.)

use super::cells::{block_label, Cell, Mode, Rw};
use super::results::{find, ratio, CellResult};
use super::targets::TargetKind;

/// One target of the issue and what the run measured for it.
#[derive(Clone, Debug)]
pub struct Goal {
    /// What is compared, e.g. "iris / floor, randread 4K 1j warm".
    pub name: String,
    /// The least ratio that meets the goal.
    pub required: f64,
    /// The ratio measured; `None` when a side did not run.
    pub measured: Option<f64>,
}

impl Goal {
    /// Met, missed, or not measured (`None`).
    pub fn met(&self) -> Option<bool> {
        self.measured.map(|m| m >= self.required)
    }
}

/// Iris's least share of the bare-interposer ceiling.
const FLOOR_SHARE: f64 = 0.90;
/// Two jobs against one.
const JOB_SCALING: f64 = 1.9;
/// Two threads on disjoint halves of one file against one job (issue #4).
const ONE_FILE_SCALING: f64 = 1.7;
/// fdatasync'd 4 KiB random writes against ext4.
const DURABLE_OVER_EXT4: f64 = 10.0;
/// direct=1 against the better of ext4 and xfs.
const DIRECT_OVER_BLOCK_FS: f64 = 25.0;
/// The file systems direct=1 goes to a device on.
const BLOCK_FS: [TargetKind; 2] = [TargetKind::Ext4, TargetKind::Xfs];

/// Warm-cache speedup over the best kernel file system required for a pattern and block size.
fn warm_speedup(rw: Rw, block_bytes: u32) -> Option<f64> {
    match (rw, block_bytes) {
        (Rw::RandRead, 4096) => Some(1.3),
        (Rw::RandRead, 512) => Some(1.7),
        (Rw::RandWrite, 4096) => Some(1.5),
        (Rw::RandWrite, 512) => Some(2.0),
        _ => None,
    }
}

/// Every goal that applies to the cells of `results`.
pub fn evaluate(results: &[CellResult]) -> Vec<Goal> {
    let mut goals = Vec::new();
    let mut add = |name: String, required: f64, measured: Option<f64>| {
        goals.push(Goal {
            name,
            required,
            measured,
        })
    };
    for r in results {
        let c = &r.cell;
        let label = c.label();
        add(
            format!("iris / floor, {label}"),
            FLOOR_SHARE,
            r.iris_over(TargetKind::Floor),
        );
        match c.mode {
            Mode::Warm => {
                if let Some(required) = warm_speedup(c.rw, c.block_bytes) {
                    add(
                        format!("iris / best kernel, {label}"),
                        required,
                        r.iris_over_best_kernel(),
                    );
                }
            }
            Mode::Direct => add(
                format!("iris / best of ext4, xfs, {label}"),
                DIRECT_OVER_BLOCK_FS,
                r.best_of(&BLOCK_FS)
                    .and_then(|(_, best)| ratio(r.get(TargetKind::Iris)?, best)),
            ),
            Mode::Durable => {
                if c.rw == Rw::RandWrite && c.block_bytes == 4096 {
                    add(
                        format!("iris / ext4, {label}"),
                        DURABLE_OVER_EXT4,
                        r.iris_over(TargetKind::Ext4),
                    );
                }
            }
            Mode::OneFile => {}
        }
        if c.mode == Mode::OneFile {
            let one = Cell {
                mode: Mode::Warm,
                jobs: 1,
                ..*c
            };
            add(
                format!(
                    "iris {} threads on one file / 1 job, {}",
                    c.jobs,
                    without_jobs(&one)
                ),
                ONE_FILE_SCALING,
                scaling(results, r, one),
            );
        } else if c.jobs == 2 {
            add(
                format!("iris 2 jobs / 1 job, {}", without_jobs(c)),
                JOB_SCALING,
                scaling(results, r, c.with_jobs(1)),
            );
        }
    }
    goals
}

/// Iris's IOPS with two jobs over its IOPS in the cell `one` (one job).
fn scaling(results: &[CellResult], two: &CellResult, one: Cell) -> Option<f64> {
    let one = find(results, one)?;
    let a = two.get(TargetKind::Iris)?;
    let b = one.get(TargetKind::Iris)?;
    (b.iops > 0.0).then(|| a.iops / b.iops)
}

/// "randread 4K warm".
fn without_jobs(c: &Cell) -> String {
    format!(
        "{} {} {}",
        c.rw.fio_name(),
        block_label(c.block_bytes),
        c.mode.name()
    )
}

#[cfg(test)]
mod tests {
    use super::super::cells::full;
    use super::super::results::Measurement;
    use super::*;

    #[test]
    fn every_full_cell_has_a_ceiling_goal_and_the_issue_targets_apply() {
        let results: Vec<CellResult> = full()
            .into_iter()
            .map(|cell| {
                let mut r = CellResult::new(cell);
                let iris = f64::from(cell.jobs) * 100.0;
                for (kind, iops) in [
                    (TargetKind::Iris, iris),
                    (TargetKind::Floor, 100.0),
                    (TargetKind::Ext4, 10.0),
                ] {
                    r.by_target.insert(
                        kind,
                        Ok(Measurement {
                            iops,
                            mean_ns: 1.0,
                            p99_ns: 1.0,
                        }),
                    );
                }
                r
            })
            .collect();
        let goals = evaluate(&results);
        let count = |prefix: &str| goals.iter().filter(|g| g.name.starts_with(prefix)).count();
        assert_eq!(count("iris / floor"), 21);
        assert_eq!(count("iris / best kernel"), 8);
        assert_eq!(count("iris / best of ext4, xfs"), 8);
        assert_eq!(count("iris / ext4"), 2);
        assert_eq!(count("iris 2 jobs"), 10);
        let scaling = goals
            .iter()
            .find(|g| g.name.starts_with("iris 2 jobs"))
            .expect("scaling goal");
        assert_eq!(scaling.measured, Some(2.0));
        assert_eq!(scaling.met(), Some(true));
        let shared = goals
            .iter()
            .find(|g| g.name.starts_with("iris 2 threads on one file / 1 job"))
            .expect("one-file goal");
        assert_eq!(
            shared.name,
            "iris 2 threads on one file / 1 job, randwrite 4K warm"
        );
        assert_eq!((shared.required, shared.measured), (1.7, Some(2.0)));
    }
}
