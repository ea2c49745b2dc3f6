//! Running the matrix: lay out every target's files once, then each cell on each target in
//! turn (so slow drifts of the machine spread over all targets alike), and the memcpy floor.
//! A failed run is recorded against its cell and target; an interrupt stops everything.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::cells::{Cell, Mode};
use super::plan::Plan;
use super::process::{self, Stop};
use super::results::{self, CellResult, Measurement};
use super::steps::Steps;
use super::targets::{FioTarget, TargetKind};
use super::{fio, interrupt, memcpy};

/// Time a fio run may take beyond its runtime (start-up, layout, teardown) before it is stopped.
const FIO_GRACE: Duration = Duration::from_secs(180);

/// Lay out every target's files, then run every cell on every target (and the memcpy floor).
pub fn measure(
    plan: &Plan,
    ready: &[FioTarget],
    with_memcpy: bool,
    scratch: &Path,
    steps: &Steps,
) -> Result<Vec<CellResult>, Stop> {
    let mut broken: Vec<(TargetKind, String)> = Vec::new();
    for t in ready {
        steps.start(&format!("laying out files on {}", t.kind.name()));
        let mut cmd = fio_command(
            t,
            scratch,
            fio::layout_args(&t.dir, plan.file_bytes, plan.max_jobs()),
        );
        match process::run(&mut cmd, scratch, FIO_GRACE) {
            Ok(_) => {}
            Err(Stop::Interrupted) => return Err(Stop::Interrupted),
            Err(Stop::Failed(why)) => {
                steps.warn(&format!("bench: {}: layout failed: {why}", t.kind.name()));
                broken.push((t.kind, format!("layout failed: {why}")));
            }
        }
        steps.done();
    }
    let mut results: Vec<CellResult> = Vec::new();
    for cell in &plan.cells {
        let mut r = CellResult::new(*cell);
        let runs = run_rounds(cell, plan, ready, &broken, scratch, steps)?;
        for t in ready {
            let mine: Vec<&results::Outcome> = runs
                .iter()
                .filter(|(k, _)| *k == t.kind)
                .map(|(_, o)| o)
                .collect();
            let outcome = results::median_outcome(&mine);
            if plan.rounds > 1 {
                let iops = mine.iter().filter_map(|o| o.as_ref().ok()).map(|m| m.iops);
                r.runs.insert(t.kind, iops.collect());
            }
            r.by_target.insert(t.kind, outcome);
        }
        if with_memcpy {
            let outcome = memcpy_cell(cell, &results, plan, scratch, steps);
            r.by_target.insert(TargetKind::Memcpy, outcome);
        }
        results.push(r);
        if interrupt::interrupted() {
            return Err(Stop::Interrupted);
        }
    }
    Ok(results)
}

/// Every round of `cell` on every target: each target's outcome per round, in the order run.
/// Every other round goes the other way round, so a drift of the machine during a round weighs
/// on every target alike.
fn run_rounds(
    cell: &Cell,
    plan: &Plan,
    ready: &[FioTarget],
    broken: &[(TargetKind, String)],
    scratch: &Path,
    steps: &Steps,
) -> Result<Vec<(TargetKind, results::Outcome)>, Stop> {
    let mut runs = Vec::new();
    for round in 0..plan.rounds {
        let order: Vec<&FioTarget> = if round % 2 == 0 {
            ready.iter().collect()
        } else {
            ready.iter().rev().collect()
        };
        for t in order {
            if let Some((_, why)) = broken.iter().find(|(k, _)| *k == t.kind) {
                runs.push((t.kind, Err(why.clone())));
                steps.done();
                continue;
            }
            steps.start(&format!("{} {}", t.kind.name(), cell.label()));
            let outcome = match run_cell(t, cell, plan, scratch) {
                Err(Stop::Interrupted) => return Err(Stop::Interrupted),
                Err(Stop::Failed(why)) => {
                    steps.warn(&format!("bench: {} {}: {why}", t.kind.name(), cell.label()));
                    Err(why)
                }
                Ok(m) => Ok(m),
            };
            runs.push((t.kind, outcome));
            steps.done();
        }
    }
    Ok(runs)
}

/// One fio cell on one target.
fn run_cell(t: &FioTarget, cell: &Cell, plan: &Plan, scratch: &Path) -> Result<Measurement, Stop> {
    let args = fio::cell_args(cell, &t.dir, plan.file_bytes, plan.runtime_secs);
    let mut cmd = fio_command(t, scratch, args);
    let timeout = Duration::from_secs(plan.runtime_secs) + FIO_GRACE;
    let out = process::run(&mut cmd, scratch, timeout)?;
    fio::parse(&out.stdout, cell).map_err(Stop::Failed)
}

/// The memcpy floor for a cell. direct=1 and one shared file change nothing for plain loads and
/// stores (see [`Mode::memcpy_as_warm`]): those cells repeat the warm cell's numbers.
fn memcpy_cell(
    cell: &Cell,
    earlier: &[CellResult],
    plan: &Plan,
    scratch: &Path,
    steps: &Steps,
) -> results::Outcome {
    if cell.mode.memcpy_as_warm() {
        let warm = Cell {
            mode: Mode::Warm,
            ..*cell
        };
        return results::find(earlier, warm)
            .and_then(|r| r.by_target.get(&TargetKind::Memcpy).cloned())
            .unwrap_or_else(|| Err("no warm memcpy run to repeat".into()));
    }
    steps.start(&format!("memcpy {}", cell.label()));
    let outcome = memcpy::measure(
        scratch,
        cell,
        plan.file_bytes,
        Duration::from_secs_f64(plan.memcpy_secs),
    );
    if let Err(why) = &outcome {
        steps.warn(&format!("bench: memcpy {}: {why}", cell.label()));
    }
    steps.done();
    outcome
}

/// fio with `args`, the target's environment, run from the scratch directory.
pub fn fio_command(t: &FioTarget, scratch: &Path, args: Vec<String>) -> Command {
    let mut cmd = Command::new("fio");
    cmd.args(args)
        .envs(t.env.iter().map(|(k, v)| (k, v)))
        .current_dir(scratch)
        .stdin(Stdio::null());
    cmd
}
