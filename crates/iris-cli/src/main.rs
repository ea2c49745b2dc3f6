//! `iris`: create, inspect, check and snapshot volumes, move files in and out of them, and run
//! unmodified programs on them. This file holds the command-line grammar and turns a verb's
//! outcome into an exit status; each verb family lives in `verbs/`.
//!
//! Exit status: 0 success, 1 error (one "iris: ..." line on stderr), 2 bad usage, and for fsck
//! the e2fsck codes (1 corrected, 4 errors left, 8 could not check).

mod failure;
mod preload_library;
mod progress;
mod units;
mod verbs;
mod volume;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};

use failure::{Failure, Outcome, STDOUT_CLOSED_EXIT};
use verbs::{bench, data, filefrag, fsck, get, inspect, mkfs, put, run, snapshot};

/// Exit status for a command line clap rejects.
const USAGE_EXIT: u8 = 2;

#[derive(Parser)]
#[command(
    name = "iris",
    version,
    about = "Iris: user-space direct-access storage"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a volume.
    Mkfs(mkfs::MkfsArgs),
    /// Run COMMAND with paths under the mount prefix served from the volume.
    Run(run::RunArgs),
    /// Show usage, generation, commits, snapshots and tree shape.
    Stat(inspect::StatArgs),
    /// Show size, used, free and snapshot-held space.
    Df(inspect::DfArgs),
    /// Check every structure of a volume (exit 0 clean, 1 repaired, 4 errors left).
    Fsck(fsck::FsckArgs),
    /// List directories of the volume.
    Ls(data::LsArgs),
    /// Print files of the volume.
    Cat(data::CatArgs),
    /// Show where files' blocks lie on the volume: their extents (runs in consecutive blocks).
    Filefrag(filefrag::FilefragArgs),
    /// Copy host files (with -r, directory trees) into the volume.
    Put(put::PutArgs),
    /// Copy files (with -r, directory trees) out of the volume.
    Get(get::GetArgs),
    /// Remove files (with -r, directory trees) from the volume.
    Rm(data::RmArgs),
    /// Make directories in the volume.
    Mkdir(data::MkdirArgs),
    /// Create, list, delete or roll back to snapshots.
    Snapshot(snapshot::SnapshotArgs),
    /// Measure Iris against the kernel file systems and the bare-interposer ceiling with fio.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage(e),
    };
    match dispatch(cli.cmd) {
        Ok(code) => code,
        Err(Failure::Error(line)) => {
            eprintln!("iris: {line}");
            ExitCode::FAILURE
        }
        Err(Failure::StdoutClosed) => ExitCode::from(STDOUT_CLOSED_EXIT),
    }
}

fn dispatch(cmd: Cmd) -> Outcome {
    match cmd {
        Cmd::Mkfs(args) => mkfs::run(args),
        Cmd::Run(args) => run::run(args),
        Cmd::Stat(args) => inspect::stat(args),
        Cmd::Df(args) => inspect::df(args),
        Cmd::Fsck(args) => fsck::run(args),
        Cmd::Ls(args) => data::ls(args),
        Cmd::Cat(args) => data::cat(args),
        Cmd::Filefrag(args) => filefrag::run(args),
        Cmd::Put(args) => put::run(args),
        Cmd::Get(args) => get::run(args),
        Cmd::Rm(args) => data::rm(args),
        Cmd::Mkdir(args) => data::mkdir(args),
        Cmd::Snapshot(args) => snapshot::run(args),
        Cmd::Bench(args) => bench::run(args),
    }
}

/// Help and version go to stdout as clap prints them. A bad command line becomes one line on
/// stderr: clap's message, then the usage it would have printed.
fn usage(e: clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(USAGE_EXIT);
        }
        _ => {}
    }
    let text = e.to_string();
    let mut paragraphs = text.split("\n\n").map(|p| one_line(p.trim()));
    let message = paragraphs.next().unwrap_or_default();
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    match paragraphs.find(|p| p.starts_with("Usage: ")) {
        Some(usage) => eprintln!("iris: {message}; usage: {}", &usage["Usage: ".len()..]),
        None => eprintln!("iris: {message}"),
    }
    ExitCode::from(USAGE_EXIT)
}

/// Lines joined by single spaces.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
