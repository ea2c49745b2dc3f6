//! `iris filefrag`: where a file's blocks lie on the volume, as e2fsprogs' `filefrag` reports
//! for a kernel file system: how many extents (runs of file blocks in consecutive volume
//! blocks) it has, and with `-v` each extent.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use iris_fs::{Errno, ROOT_INO};

use crate::failure::{stdout_failed, Outcome};
use crate::volume::{caller, open_fs, path_failure};

/// Arguments of `iris filefrag`.
#[derive(Args, Debug)]
pub struct FilefragArgs {
    /// List each extent: its file blocks, its volume blocks and its length in blocks.
    #[arg(short, long)]
    verbose: bool,
    /// The volume.
    volume: PathBuf,
    /// Regular files inside the volume.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<String>,
}

/// Report each file's extents.
pub fn run(args: FilefragArgs) -> Outcome {
    let volume = &args.volume;
    let fs = open_fs(volume)?;
    let cred = caller();
    let mut out = std::io::stdout().lock();
    for path in &args.paths {
        let fail = |e: Errno| path_failure(volume, path.as_bytes(), e);
        // Opened for reading, as `cat` would: the caller must be allowed to read it.
        let inode = fs
            .open(&cred, ROOT_INO, path.as_bytes(), libc::O_RDONLY, 0)
            .map_err(fail)?;
        let layout = fs.layout(inode.ino).map_err(fail)?;
        let n = layout.extents.len();
        let mut line = format!("{path}: {n} extent{} found", if n == 1 { "" } else { "s" });
        if layout.inline_blocks > 0 {
            line += &format!(
                " (and {} block{} inline in the tree)",
                layout.inline_blocks,
                if layout.inline_blocks == 1 { "" } else { "s" }
            );
        }
        writeln!(out, "{line}").map_err(stdout_failed)?;
        if args.verbose && n > 0 {
            writeln!(
                out,
                "{:>6} {:>24} {:>24} {:>10}",
                "ext", "file blocks", "volume blocks", "length"
            )
            .map_err(stdout_failed)?;
            for (i, e) in layout.extents.iter().enumerate() {
                let last = e.blocks - 1;
                writeln!(
                    out,
                    "{i:>6} {:>24} {:>24} {:>10}",
                    format!("{}..{}", e.logical, e.logical + last),
                    format!("{}..{}", e.physical, e.physical + last),
                    e.blocks
                )
                .map_err(stdout_failed)?;
            }
        }
    }
    out.flush().map_err(stdout_failed)?;
    Ok(ExitCode::SUCCESS)
}
