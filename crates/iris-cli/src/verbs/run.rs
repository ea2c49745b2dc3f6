//! `iris run`: exec a program with the interposer preloaded, so paths under the mount prefix are
//! served from the volume. The volume is created on first use.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use clap::Args;
use iris_store::CreateOptions;

use crate::failure::{host_failure, io_text, Outcome};
use crate::preload_library::preload_library;
use crate::volume::create_volume;

/// Size limit of a volume `run` creates.
const CREATED_SIZE_LIMIT_BYTES: u64 = 64 << 30;
/// Bytes backed when `run` creates a volume.
const CREATED_INITIAL_BYTES: u64 = 64 << 20;

/// Arguments of `iris run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The volume (created if missing). Default: $IRIS_VOLUME or ~/.local/share/iris/default.vol.
    #[arg(long)]
    volume: Option<PathBuf>,
    /// Mount prefix (repeatable). Default: /iris.
    #[arg(long = "mount")]
    mounts: Vec<String>,
    /// Commit interval in milliseconds.
    #[arg(long, default_value_t = 5000)]
    commit_interval_ms: u64,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// Replace this process with the command; returns only if exec fails.
pub fn run(args: RunArgs) -> Outcome {
    let volume = args.volume.unwrap_or_else(iris_preload::default_volume);
    if !volume.exists() {
        if let Some(dir) = volume.parent() {
            std::fs::create_dir_all(dir).map_err(|e| host_failure(dir, &e))?;
        }
        let opts = CreateOptions {
            size_limit_bytes: CREATED_SIZE_LIMIT_BYTES,
            initial_bytes: CREATED_INITIAL_BYTES,
            ..CreateOptions::default()
        };
        create_volume(&volume, &opts)?;
    } else {
        // Refuse here, on one line, what the interposer could only refuse call by call.
        drop(crate::volume::open_fs(&volume)?);
    }
    let lib = preload_library()
        .ok_or("cannot find libiris_preload.so next to the iris binary (set IRIS_PRELOAD)")?;
    let mut preload = lib.display().to_string();
    if let Ok(old) = std::env::var("LD_PRELOAD") {
        if !old.is_empty() {
            preload = format!("{preload}:{old}");
        }
    }
    let mount = if args.mounts.is_empty() {
        "/iris".to_string()
    } else {
        args.mounts.join(":")
    };
    let abs_volume = std::fs::canonicalize(&volume).unwrap_or(volume);
    let Some((program, program_args)) = args.command.split_first() else {
        return Err("no command given".into());
    };
    let err = std::process::Command::new(program)
        .args(program_args)
        .env("LD_PRELOAD", preload)
        .env("IRIS_VOLUME", abs_volume)
        .env("IRIS_MOUNT", mount)
        .env(
            "IRIS_COMMIT_INTERVAL_MS",
            args.commit_interval_ms.to_string(),
        )
        .exec();
    Err(format!("{program}: {}", io_text(&err)).into())
}
