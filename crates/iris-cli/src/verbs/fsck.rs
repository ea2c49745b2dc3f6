//! `iris fsck`: check every structure of a volume, and with --repair fix what can be fixed. Exit
//! codes follow e2fsck: 0 clean, 1 errors corrected, 4 errors left uncorrected, 8 operational
//! error (the volume could not be opened at all).
//!
//! What --repair fixes: file-system damage (`Fs::repair`: stray entries, wrong link counts,
//! types and `..`, nameless inodes into /lost+found, stray records) and blocks marked used that
//! no tree reaches (`Store::collect_garbage`). Store corruption (a bad checksum, a broken node, a
//! truncated volume) is reported and left: there is no second copy to repair it from.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use iris_store::{OpenOptions, Store};

use crate::failure::{host_failure, Outcome};
use crate::volume::store_failure;

/// e2fsck: no errors.
const EXIT_CLEAN: u8 = 0;
/// e2fsck: file system errors corrected.
const EXIT_CORRECTED: u8 = 1;
/// e2fsck: file system errors left uncorrected.
const EXIT_UNCORRECTED: u8 = 4;
/// e2fsck: operational error.
const EXIT_OPERATIONAL: u8 = 8;

/// Arguments of `iris fsck`.
#[derive(Args, Debug)]
pub struct FsckArgs {
    /// Repair file-system damage and free leaked blocks (blocks marked used that nothing
    /// reaches); exit 1 if the volume is clean afterwards. Store corruption cannot be repaired.
    #[arg(long)]
    repair: bool,
    /// The volume.
    volume: PathBuf,
}

/// Check the volume; the outcome is always an exit status (errors are printed here).
pub fn run(args: FsckArgs) -> Outcome {
    let volume = &args.volume;
    if let Err(e) = std::fs::metadata(volume) {
        eprintln!("iris: {}", host_failure(volume, &e));
        return Ok(ExitCode::from(EXIT_OPERATIONAL));
    }
    // Opening reads and checks the superblocks and the working header: failing here is damage.
    let store = match Store::open(volume, &OpenOptions::default()) {
        Ok(store) => store,
        Err(e) => {
            eprintln!("iris: {}", store_failure(volume, &e));
            return Ok(ExitCode::from(EXIT_UNCORRECTED));
        }
    };
    let report = match store.verify() {
        Ok(report) => report,
        Err(e) => {
            eprintln!("iris: {}", store_failure(volume, &e));
            return Ok(ExitCode::from(EXIT_UNCORRECTED));
        }
    };
    // The file-system invariants on top (entries, link counts, '..', orphans, data past EOF).
    let fs = match iris_fs::Fs::on_store(store) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("iris: {}: file system: {e}", volume.display());
            return Ok(ExitCode::from(EXIT_UNCORRECTED));
        }
    };
    let fsr = match fs.check() {
        Ok(fsr) => fsr,
        Err(e) => {
            eprintln!("iris: {}: file system: {e}", volume.display());
            return Ok(ExitCode::from(EXIT_UNCORRECTED));
        }
    };
    if fsr.problems.is_empty() && report.leaked_blocks == 0 {
        verdict(format!(
            "{}: clean, {} blocks reachable",
            volume.display(),
            report.reachable_blocks
        ));
        return Ok(ExitCode::from(EXIT_CLEAN));
    }
    if !args.repair {
        for p in &fsr.problems {
            eprintln!("iris: {}: {p}", volume.display());
        }
        let mut found = Vec::new();
        if !fsr.problems.is_empty() {
            found.push(format!("{} file-system problems", fsr.problems.len()));
        }
        if report.leaked_blocks > 0 {
            // Which ones, to look at what they hold (`dd bs=BLOCK_SIZE skip=N count=1`).
            let sample: Vec<String> = report.leaked_sample.iter().map(u64::to_string).collect();
            eprintln!(
                "iris: {}: leaked blocks, the first {}: {}",
                volume.display(),
                sample.len(),
                sample.join(" ")
            );
            found.push(format!(
                "{} leaked blocks (used, but nothing reaches them)",
                report.leaked_blocks
            ));
        }
        verdict(format!(
            "{}: {}; --repair fixes them",
            volume.display(),
            found.join(", ")
        ));
        return Ok(ExitCode::from(EXIT_UNCORRECTED));
    }
    Ok(ExitCode::from(repair(
        volume,
        &fs,
        !fsr.problems.is_empty(),
    )))
}

/// Repair the file system (if `fs_damage`), free leaked blocks, commit, and check again: the
/// exit status says "corrected" only for a volume that now checks clean.
fn repair(volume: &std::path::Path, fs: &iris_fs::Fs, fs_damage: bool) -> u8 {
    let fail = |e: String| {
        eprintln!("iris: {e}");
        EXIT_UNCORRECTED
    };
    let mut fixed = 0;
    if fs_damage {
        match fs.repair() {
            Ok(r) => {
                for line in &r.fixed {
                    eprintln!("iris: {}: fixed: {line}", volume.display());
                }
                fixed = r.fixed.len();
            }
            Err(e) => return fail(format!("{}: file system: {e}", volume.display())),
        }
    }
    let store = fs.store();
    if let Err(e) = store.commit() {
        return fail(store_failure(volume, &e));
    }
    let freed_blocks = match store.collect_garbage() {
        Ok(n) => n,
        Err(e) => return fail(store_failure(volume, &e)),
    };
    let after = match store.verify() {
        Ok(after) => after,
        Err(e) => return fail(store_failure(volume, &e)),
    };
    let left = match fs.check() {
        Ok(r) => r.problems,
        Err(e) => return fail(format!("{}: file system: {e}", volume.display())),
    };
    for p in &left {
        eprintln!("iris: {}: {p}", volume.display());
    }
    if after.leaked_blocks == 0 && left.is_empty() {
        verdict(format!(
            "{}: fixed {fixed} file-system problems, freed {freed_blocks} leaked blocks; now \
             clean, {} blocks reachable",
            volume.display(),
            after.reachable_blocks
        ));
        EXIT_CORRECTED
    } else {
        verdict(format!(
            "{}: fixed {fixed} problems and freed {freed_blocks} blocks, but {} problems and {} \
             leaked blocks remain",
            volume.display(),
            left.len(),
            after.leaked_blocks
        ));
        EXIT_UNCORRECTED
    }
}

/// Print the verdict on stdout. A closed stdout loses the line, not the exit status that scripts
/// act on.
fn verdict(line: String) {
    let _ = writeln!(std::io::stdout(), "{line}");
}
