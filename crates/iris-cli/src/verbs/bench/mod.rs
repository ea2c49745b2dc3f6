//! `iris bench`: unmodified fio against Iris, the bare-interposer ceiling (libiris_floor.so),
//! tmpfs, and ext4 and xfs on loop devices over /dev/shm files; plus an in-process memcpy floor
//! and, with `--apps`, redis, sqlite3 and RocksDB on Iris against ext4 (and against themselves
//! on tmpfs with their syncs off). Prints a table, writes
//! JSON and an SVG chart, and removes every mount, loop device and scratch file on every way
//! out (issue #6).
//!
//! Files, by job:
//! - the matrix and the targets: `cells.rs`, `plan.rs`, `targets.rs`, `interposed.rs` (iris,
//!   floor), `kernel_fs.rs` (tmpfs, ext4, xfs);
//! - measuring: `matrix.rs` (every cell on every target), `fio.rs` (command lines, JSON),
//!   `memcpy.rs` and `histogram.rs` (the in-process floor), `apps/` (applications);
//! - running and undoing: `process.rs` (children with deadlines), `interrupt.rs` (Ctrl-C),
//!   `cleanup.rs` (the undo stack), `stale.rs` (leftovers of killed runs), `tools.rs`;
//! - reporting: `results.rs`, `goals.rs`, `report.rs`, `table.rs`, `json.rs`, `chart.rs`,
//!   `machine.rs`, `steps.rs` (the progress bar).

mod apps;
mod cells;
mod chart;
mod cleanup;
mod fio;
mod goals;
mod histogram;
mod interposed;
mod interrupt;
mod json;
mod kernel_fs;
mod machine;
mod matrix;
mod memcpy;
mod plan;
mod process;
mod report;
mod results;
mod stale;
mod steps;
mod table;
mod targets;
mod tools;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use crate::failure::{host_failure, say, Outcome};
use cleanup::{Cleanup, Undo};
use plan::Plan;
use process::Stop;
use report::Report;
use steps::Steps;
use targets::{FioTarget, Setup, TargetKind};

/// Exit status after an interrupt: what a shell reports for SIGINT.
const INTERRUPTED_EXIT: u8 = 130;

/// Arguments of `iris bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Smoke test: 4 KiB single-job cells (warm randread, warm randwrite, randwrite with
    /// fdatasync), 1 s each, 32 MiB files.
    #[arg(long)]
    quick: bool,
    /// Seconds each fio cell measures. Default 5 (1 with --quick).
    #[arg(long, value_name = "SECS")]
    runtime: Option<u64>,
    /// Run each fio cell this many times on every target, in rounds over the targets (each
    /// round in the opposite order to the last), and report the run with the median IOPS:
    /// steadier ratios on a noisy machine, at that many times the fio time (1 to 9).
    #[arg(long, value_name = "N", default_value_t = 1)]
    rounds: u32,
    /// Where to write the results as JSON. Default: OUT_DIR/bench.json.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Where to draw the chart (SVG). Default: OUT_DIR/bench.svg.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Also write the report as Markdown (the tables of docs/BENCHMARKS.md).
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// Directory for the default JSON and SVG files.
    #[arg(long, value_name = "DIR", default_value = ".")]
    out_dir: PathBuf,
    /// Also run applications on Iris and on ext4: redis SET (appendfsync always), sqlite3
    /// inserts (synchronous=FULL), db_bench fillrandom and readrandom; and on tmpfs with their
    /// syncs off (what they reach when durability costs nothing on the kernel's path).
    #[arg(long)]
    apps: bool,
    /// Targets to measure, comma-separated. Default: all (kernel targets need root).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    targets: Vec<TargetKind>,
    /// Directory for volumes, images and mount points: a tmpfs, so every target sits on memory.
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    scratch: PathBuf,
}

/// Run the benchmark, print the report, write JSON and SVG (and Markdown if asked).
pub fn run(args: BenchArgs) -> Outcome {
    let started_utc = now_utc();
    let load_before = machine::load_average();
    let machine = machine::describe();
    if machine::fio_version().is_none() {
        return Err("fio not found (apt-get install fio)".into());
    }
    let plan = Plan::new(args.quick, args.runtime, args.rounds)?;
    let json_path = args
        .json
        .clone()
        .unwrap_or_else(|| args.out_dir.join("bench.json"));
    let svg_path = args
        .svg
        .clone()
        .unwrap_or_else(|| args.out_dir.join("bench.svg"));
    std::fs::create_dir_all(&args.out_dir).map_err(|e| host_failure(&args.out_dir, &e))?;
    let wanted = wanted_targets(&args)?;
    interrupt::install()?;

    for line in stale::clean(&args.scratch) {
        eprintln!("iris: bench: {line}");
    }
    let mut cleanup = Cleanup::new();
    let scratch = scratch_dir(&args.scratch, &mut cleanup)?;
    let machine = machine::Machine {
        pages: machine::page_policy(&scratch),
        ..machine
    };
    let data_bytes = targets::data_bytes(plan.file_bytes, plan.max_jobs());
    let Some((ready, skipped)) = set_up_targets(&wanted, &scratch, &mut cleanup, data_bytes)?
    else {
        return interrupted(&mut cleanup);
    };
    let with_memcpy = wanted.contains(&TargetKind::Memcpy);
    let steps = Steps::new(step_count(&plan, ready.len(), with_memcpy, args.apps));
    let measured = matrix::measure(&plan, &ready, with_memcpy, &scratch, &steps).and_then(|r| {
        let apps = if args.apps {
            run_apps(&ready, &skipped, &scratch, &plan, &steps)?
        } else {
            Vec::new()
        };
        Ok((r, apps))
    });
    drop(steps);
    let (results, apps) = match measured {
        Err(Stop::Interrupted) => return interrupted(&mut cleanup),
        Err(Stop::Failed(line)) => return Err(line.into()),
        Ok(both) => both,
    };
    for line in cleanup.run() {
        eprintln!("iris: bench cleanup: {line}");
    }

    let report = Report {
        machine,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        started_utc,
        load: [load_before, machine::load_average()],
        runtime_secs: plan.runtime_secs,
        rounds: plan.rounds,
        memcpy_secs: plan.memcpy_secs,
        file_bytes: plan.file_bytes,
        quick: plan.quick,
        kinds: TargetKind::ALL
            .into_iter()
            .filter(|k| results.iter().any(|r| r.by_target.contains_key(k)))
            .collect(),
        skipped,
        goals: goals::evaluate(&results, &apps),
        results,
        apps,
    };
    write_outputs(&report, &json_path, &svg_path, args.markdown.as_deref())?;
    for line in report.text().lines() {
        say(line)?;
    }
    let mut written = vec![
        json_path.display().to_string(),
        svg_path.display().to_string(),
    ];
    written.extend(args.markdown.iter().map(|p| p.display().to_string()));
    say(&format!("wrote {}", written.join(", ")))?;
    let failed = failures(&report);
    if failed > 0 {
        return Err(format!(
            "{failed} runs failed (their errors are in {})",
            json_path.display()
        )
        .into());
    }
    Ok(ExitCode::SUCCESS)
}

/// This run's scratch directory under `root`, removed last on the way out.
fn scratch_dir(root: &Path, cleanup: &mut Cleanup) -> Result<PathBuf, String> {
    let scratch = root.join(format!("{}{}", stale::SCRATCH_PREFIX, std::process::id()));
    cleanup.push(Undo::RemoveTree(scratch.clone()));
    std::fs::create_dir_all(&scratch).map_err(|e| host_failure(&scratch, &e))?;
    if !kernel_fs::on_tmpfs(&scratch) {
        eprintln!(
            "iris: bench: {} is not a tmpfs: targets do not all sit on memory",
            root.display()
        );
    }
    Ok(scratch)
}

/// Targets set up, and targets skipped with the reason; `None` if interrupted meanwhile.
type SetUp = Option<(Vec<FioTarget>, Vec<(TargetKind, String)>)>;

/// Set up every wanted fio target; say which are skipped and why.
fn set_up_targets(
    wanted: &[TargetKind],
    scratch: &Path,
    cleanup: &mut Cleanup,
    data_bytes: u64,
) -> Result<SetUp, String> {
    let mut ready = Vec::new();
    let mut skipped = Vec::new();
    for &kind in wanted.iter().filter(|k| k.runs_fio()) {
        match targets::set_up(kind, scratch, cleanup, data_bytes)? {
            Setup::Ready(t) => ready.push(t),
            Setup::Skipped(why) => {
                eprintln!("iris: bench: skipping {}: {why}", kind.name());
                skipped.push((kind, why));
            }
        }
        if interrupt::interrupted() {
            return Ok(None);
        }
    }
    Ok(Some((ready, skipped)))
}

/// Steps of the progress bar: layouts, fio runs, memcpy runs (not for direct cells, which
/// repeat the warm ones), applications.
fn step_count(plan: &Plan, fio_targets: usize, with_memcpy: bool, apps: bool) -> u64 {
    let cells = plan.cells.len() as u64;
    let memcpy_runs = plan
        .cells
        .iter()
        .filter(|c| with_memcpy && !c.mode.memcpy_as_warm())
        .count() as u64;
    fio_targets as u64 * (1 + cells * u64::from(plan.rounds))
        + memcpy_runs
        + if apps { apps::STEP_COUNT } else { 0 }
}

/// The applications on Iris, ext4 and tmpfs with syncs off (a side not set up reports why).
fn run_apps(
    ready: &[FioTarget],
    skipped: &[(TargetKind, String)],
    scratch: &Path,
    plan: &Plan,
    steps: &Steps,
) -> Result<Vec<apps::AppResult>, Stop> {
    let find = |kind: TargetKind| {
        ready.iter().find(|t| t.kind == kind).ok_or_else(|| {
            skipped
                .iter()
                .find(|(k, _)| *k == kind)
                .map_or("not among --targets".to_string(), |(_, why)| why.clone())
        })
    };
    apps::run(
        find(TargetKind::Iris),
        find(TargetKind::Ext4),
        find(TargetKind::Tmpfs),
        scratch,
        apps::Sizes::new(plan.quick),
        steps,
    )
}

/// The targets asked for (all by default), in report order. --apps needs iris (and compares
/// it with ext4 and with tmpfs without syncs, each reported missing when skipped or not asked
/// for).
fn wanted_targets(args: &BenchArgs) -> Result<Vec<TargetKind>, String> {
    let mut wanted = if args.targets.is_empty() {
        TargetKind::ALL.to_vec()
    } else {
        args.targets.clone()
    };
    wanted.sort();
    wanted.dedup();
    if args.apps && !wanted.contains(&TargetKind::Iris) {
        return Err("--apps needs the iris target".into());
    }
    Ok(wanted)
}

/// Clean up after an interrupt and say so.
fn interrupted(cleanup: &mut Cleanup) -> Outcome {
    for line in cleanup.run() {
        eprintln!("iris: bench cleanup: {line}");
    }
    eprintln!("iris: bench interrupted; mounts, loop devices and scratch files removed");
    Ok(ExitCode::from(INTERRUPTED_EXIT))
}

/// Write the JSON, the SVG, and the Markdown if asked.
fn write_outputs(
    report: &Report,
    json_path: &Path,
    svg_path: &Path,
    markdown: Option<&Path>,
) -> Result<(), String> {
    let json =
        serde_json::to_string_pretty(&json::document(report)).map_err(|e| format!("JSON: {e}"))?;
    std::fs::write(json_path, json + "\n").map_err(|e| host_failure(json_path, &e))?;
    let svg = chart::svg(&report.results, &report.kinds, &report.subtitle());
    std::fs::write(svg_path, svg).map_err(|e| host_failure(svg_path, &e))?;
    if let Some(path) = markdown {
        std::fs::write(path, report.markdown()).map_err(|e| host_failure(path, &e))?;
    }
    Ok(())
}

/// Runs that produced no numbers (fio cells, memcpy runs, application sides).
fn failures(report: &Report) -> usize {
    let cells = report
        .results
        .iter()
        .flat_map(|r| r.by_target.values())
        .filter(|o| o.is_err())
        .count();
    let apps = report
        .apps
        .iter()
        .map(apps::AppResult::failures)
        .sum::<usize>();
    cells + apps
}

/// Now, UTC, "YYYY-MM-DD HH:MM:SS".
fn now_utc() -> String {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    crate::units::utc_time(ns)
}
