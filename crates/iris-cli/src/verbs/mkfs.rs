//! `iris mkfs`: create a volume with an empty file system, refusing to overwrite data.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use iris_store::{CreateOptions, OpenOptions, Store};

use crate::failure::{host_failure, say, Outcome};
use crate::units::{human_bytes, parse_size};
use crate::volume::create_volume;

/// Bytes backed at creation at most; the file grows sparsely from there up to the size limit.
const INITIAL_BYTES: u64 = 64 << 20;

/// Arguments of `iris mkfs`.
#[derive(Args, Debug)]
pub struct MkfsArgs {
    /// Size limit (the file grows sparsely up to it), e.g. 1G, 512M.
    #[arg(long, default_value = "64G", value_parser = parse_size)]
    size: u64,
    /// Block size in bytes (512 to 65536, a power of two).
    #[arg(long, default_value_t = 4096)]
    block_size: u32,
    /// Bytes of pending updates each internal tree node may buffer (a Bε-tree; a multiple of
    /// 8, at most half a block). 0 gives a plain B+-tree.
    #[arg(long, default_value_t = 0)]
    buffer_bytes: u32,
    /// Overwrite a non-empty file, even one that is not an Iris volume.
    #[arg(long)]
    force: bool,
    /// The volume file or device.
    volume: PathBuf,
}

/// Create the volume. A non-empty regular file is overwritten only with --force, whether it
/// holds an Iris volume or anything else.
pub fn run(args: MkfsArgs) -> Outcome {
    let volume = &args.volume;
    if let Ok(meta) = std::fs::metadata(volume) {
        if meta.is_file() && meta.len() > 0 {
            refuse_unless_forced(volume, args.force)?;
            std::fs::remove_file(volume).map_err(|e| host_failure(volume, &e))?;
        }
    }
    let opts = CreateOptions {
        block_size: args.block_size,
        size_limit_bytes: args.size,
        initial_bytes: INITIAL_BYTES.min(args.size),
        inline_max: None,
        buffer_bytes: args.buffer_bytes,
    };
    create_volume(volume, &opts)?;
    say(&format!(
        "created {} (block size {}, size limit {}, {})",
        volume.display(),
        args.block_size,
        human_bytes(args.size),
        match args.buffer_bytes {
            0 => "B+-tree".to_string(),
            n => format!("Bε-tree with {n}-byte buffers"),
        }
    ))?;
    Ok(ExitCode::SUCCESS)
}

fn refuse_unless_forced(volume: &Path, force: bool) -> Result<(), String> {
    if force {
        return Ok(());
    }
    let is_iris = Store::open(volume, &OpenOptions::default()).is_ok();
    Err(if is_iris {
        format!(
            "{} is already an Iris volume; use --force to recreate it",
            volume.display()
        )
    } else {
        format!(
            "{} exists and is not an Iris volume; use --force to overwrite it",
            volume.display()
        )
    })
}
