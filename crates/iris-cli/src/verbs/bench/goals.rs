//! The targets issues #6 and #4 set, checked against one run's ratios: Iris within 90% of the
//! bare-interposer ceiling on every fio cell; warm-cache speedups over the best kernel file
//! system (tmpfs, ext4, xfs); two jobs nearly twice one; two threads on one file (issue #4)
//! 1.7x one job; fdatasync writes against ext4; direct=1 against the better of ext4 and xfs
//! (tmpfs accepts O_DIRECT but has no device to go direct to: its direct=1 numbers are its page
//! cache's, so they are shown but not the bar for the direct=1 target); Redis and SQLite, every
//! operation durable, 3x ext4.

use super::apps::AppResult;
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
/// Redis with `appendfsync always` and SQLite with `synchronous=FULL` against ext4: the
/// applications whose every operation is durable (see `apps`; db_bench has no such goal).
const DURABLE_APP_OVER_EXT4: f64 = 3.0;
/// The applications [`DURABLE_APP_OVER_EXT4`] applies to, by the start of their names.
const DURABLE_APPS: [&str; 2] = ["redis ", "sqlite3 "];
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

/// Every goal that applies to the cells of `results` and to the applications of `apps` (none
/// when they did not run).
pub fn evaluate(results: &[CellResult], apps: &[AppResult]) -> Vec<Goal> {
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
    for app in apps {
        if DURABLE_APPS.iter().any(|a| app.name.starts_with(a)) {
            add(
                format!("iris / ext4, {}", app.name),
                DURABLE_APP_OVER_EXT4,
                app.ratio(),
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
        let goals = evaluate(&results, &[]);
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

    #[test]
    fn redis_and_sqlite_against_ext4_are_goals_db_bench_is_not() {
        let app = |name: &str, iris: Result<f64, String>, ext4: f64| AppResult {
            name: name.into(),
            detail: String::new(),
            iris,
            ext4: Ok(ext4),
            unsynced: Ok(1.0),
        };
        let apps = [
            app("redis SET, appendfsync always", Ok(15_700.0), 6_000.0),
            app("sqlite3 INSERT, synchronous=FULL", Ok(19_100.0), 2_730.0),
            app("db_bench fillrandom", Ok(355.0), 298.0),
        ];
        let goals = evaluate(&[], &apps);
        let got: Vec<_> = goals
            .iter()
            .map(|g| (g.name.as_str(), g.required, g.met()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "iris / ext4, redis SET, appendfsync always",
                    3.0,
                    Some(false)
                ),
                (
                    "iris / ext4, sqlite3 INSERT, synchronous=FULL",
                    3.0,
                    Some(true)
                ),
            ]
        );
        let failed = [app(
            "redis SET, appendfsync always",
            Err("no redis".into()),
            1.0,
        )];
        let goals = evaluate(&[], &failed);
        assert_eq!(goals.len(), 1);
        assert_eq!(goals[0].met(), None, "not measured");
    }
}
