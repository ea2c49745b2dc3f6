//! `iris fsck`: check every structure of a volume, and with --repair free leaked blocks. Exit
//! codes follow e2fsck: 0 clean, 1 errors corrected, 4 errors left uncorrected, 8 operational
//! error (the volume could not be opened at all).
//!
//! What --repair can fix is what the store can fix: blocks marked used that no tree reaches
//! (`Store::collect_garbage`). Corruption (a bad checksum, a broken node, a truncated volume) is
//! reported and left: there is no second copy to repair it from.

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
    /// Free leaked blocks (blocks marked used that nothing reaches); exit 1 if any were freed.
    /// Corruption cannot be repaired.
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
    match fs.check() {
        Ok(fsr) if fsr.problems.is_empty() => {}
        Ok(fsr) => {
            for p in &fsr.problems {
                eprintln!("iris: {}: {p}", volume.display());
            }
            verdict(format!(
                "{}: {} file-system problems (not repairable yet)",
                volume.display(),
                fsr.problems.len()
            ));
            return Ok(ExitCode::from(EXIT_UNCORRECTED));
        }
        Err(e) => {
            eprintln!("iris: {}: file system: {e}", volume.display());
            return Ok(ExitCode::from(EXIT_UNCORRECTED));
        }
    }
    let store = fs.store();
    if report.leaked_blocks == 0 {
        verdict(format!(
            "{}: clean, {} blocks reachable",
            volume.display(),
            report.reachable_blocks
        ));
        return Ok(ExitCode::from(EXIT_CLEAN));
    }
    if !args.repair {
        verdict(format!(
            "{}: {} leaked blocks (used, but nothing reaches them); --repair frees them",
            volume.display(),
            report.leaked_blocks
        ));
        return Ok(ExitCode::from(EXIT_UNCORRECTED));
    }
    let freed_blocks = match store.collect_garbage() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("iris: {}", store_failure(volume, &e));
            return Ok(ExitCode::from(EXIT_UNCORRECTED));
        }
    };
    // Check again: say "corrected" only for a volume that now checks clean.
    match store.verify() {
        Ok(after) if after.leaked_blocks == 0 => {
            verdict(format!(
                "{}: freed {freed_blocks} leaked blocks; now clean, {} blocks reachable",
                volume.display(),
                after.reachable_blocks
            ));
            Ok(ExitCode::from(EXIT_CORRECTED))
        }
        Ok(after) => {
            verdict(format!(
                "{}: freed {freed_blocks} blocks, but {} leaked blocks remain",
                volume.display(),
                after.leaked_blocks
            ));
            Ok(ExitCode::from(EXIT_UNCORRECTED))
        }
        Err(e) => {
            eprintln!("iris: {}", store_failure(volume, &e));
            Ok(ExitCode::from(EXIT_UNCORRECTED))
        }
    }
}

/// Print the verdict on stdout. A closed stdout loses the line, not the exit status that scripts
/// act on.
fn verdict(line: String) {
    let _ = writeln!(std::io::stdout(), "{line}");
}
