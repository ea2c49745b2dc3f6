//! `iris`: create and inspect volumes, and run unmodified programs on them.

mod volume_path;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use iris_fs::{Cred, Fs, ROOT_INO};
use iris_store::{CreateOptions, OpenOptions, Store};

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
    Mkfs {
        /// Size limit (the file grows sparsely up to it), e.g. 1G, 512M.
        #[arg(long, default_value = "64G", value_parser = parse_size)]
        size: u64,
        /// Block size in bytes (512 to 65536, a power of two).
        #[arg(long, default_value_t = 4096)]
        block_size: u32,
        /// Overwrite a non-empty file that is not an Iris volume.
        #[arg(long)]
        force: bool,
        /// The volume file or device.
        volume: PathBuf,
    },
    /// Run COMMAND with paths under the mount prefix served from the volume.
    Run {
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
    },
    /// Show usage, generation, commits, snapshots and tree shape.
    Stat {
        /// The volume.
        volume: PathBuf,
    },
    /// Check every structure of a volume (exit 0 clean, 4 errors left).
    Fsck {
        /// The volume.
        volume: PathBuf,
    },
    /// List a directory of the volume.
    Ls {
        /// The volume.
        volume: PathBuf,
        /// Path inside the volume.
        #[arg(default_value = "/")]
        path: String,
    },
    /// Print a file of the volume.
    Cat {
        /// The volume.
        volume: PathBuf,
        /// Path inside the volume.
        path: String,
    },
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        Some('T' | 't') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("bad size {s:?} (e.g. 512M, 4G)"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.cmd) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("iris: {msg}");
            ExitCode::from(1)
        }
    }
}

fn run(cmd: Cmd) -> Result<ExitCode, String> {
    match cmd {
        Cmd::Mkfs {
            size,
            block_size,
            force,
            volume,
        } => {
            if let Ok(meta) = std::fs::metadata(&volume) {
                if meta.is_file() && meta.len() > 0 {
                    let is_iris = Store::open(&volume, &OpenOptions::default()).is_ok();
                    if !is_iris && !force {
                        return Err(format!(
                            "{} exists and is not an Iris volume; use --force to overwrite it",
                            volume.display()
                        ));
                    }
                    if is_iris && !force {
                        return Err(format!(
                            "{} is already an Iris volume; use --force to recreate it",
                            volume.display()
                        ));
                    }
                    std::fs::remove_file(&volume)
                        .map_err(|e| format!("{}: {e}", volume.display()))?;
                }
            }
            let opts = CreateOptions {
                block_size,
                size_limit_bytes: size,
                initial_bytes: (64 << 20).min(size),
                inline_max: None,
            };
            Fs::create_volume(&volume, &opts).map_err(|e| format!("{}: {e}", volume.display()))?;
            println!(
                "created {} (block size {block_size}, limit {size} bytes)",
                volume.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run {
            volume,
            mounts,
            commit_interval_ms,
            command,
        } => {
            let volume = volume.unwrap_or_else(iris_preload::default_volume);
            if !volume.exists() {
                if let Some(dir) = volume.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                }
                let opts = CreateOptions {
                    size_limit_bytes: 64 << 30,
                    initial_bytes: 64 << 20,
                    ..CreateOptions::default()
                };
                Fs::create_volume(&volume, &opts)
                    .map_err(|e| format!("{}: {e}", volume.display()))?;
            }
            let lib = volume_path::preload_library().ok_or(
                "cannot find libiris_preload.so next to the iris binary (set IRIS_PRELOAD)",
            )?;
            let mut preload = lib.display().to_string();
            if let Ok(old) = std::env::var("LD_PRELOAD") {
                if !old.is_empty() {
                    preload = format!("{preload}:{old}");
                }
            }
            let mount = if mounts.is_empty() {
                "/iris".to_string()
            } else {
                mounts.join(":")
            };
            let abs_volume = std::fs::canonicalize(&volume).unwrap_or(volume);
            let err = std::process::Command::new(&command[0])
                .args(&command[1..])
                .env("LD_PRELOAD", preload)
                .env("IRIS_VOLUME", abs_volume)
                .env("IRIS_MOUNT", mount)
                .env("IRIS_COMMIT_INTERVAL_MS", commit_interval_ms.to_string())
                .exec();
            Err(format!("{}: {err}", command[0]))
        }
        Cmd::Stat { volume } => {
            let store = Store::open(&volume, &OpenOptions::default())
                .map_err(|e| format!("{}: {e}", volume.display()))?;
            let st = store.stats().map_err(|e| e.to_string())?;
            let shape = store.shape().map_err(|e| e.to_string())?;
            let snaps = store.snapshot_list().map_err(|e| e.to_string())?;
            println!("volume:          {}", volume.display());
            println!("block size:      {}", st.block_size);
            println!("size limit:      {} blocks", st.max_blocks);
            println!("backed:          {} blocks", st.backed_blocks);
            println!("used:            {} blocks", st.used_blocks);
            println!("free:            {} blocks", st.free_blocks);
            println!("pending free:    {} blocks", st.pending_free_blocks);
            println!("snapshot-held:   {} blocks", st.snapshot_held_blocks);
            println!("generation:      {}", st.committed_generation);
            println!("uncommitted:     {}", if st.dirty { "yes" } else { "no" });
            println!(
                "tree:            height {}, {} leaves, {} internal, {} entries, {} data blocks",
                shape.height, shape.leaf_nodes, shape.inner_nodes, shape.entries, shape.data_blocks
            );
            for s in snaps {
                println!("snapshot:        {} (generation {})", s.name, s.generation);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Fsck { volume } => {
            let store = match Store::open(&volume, &OpenOptions::default()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("iris fsck: {}: {e}", volume.display());
                    return Ok(ExitCode::from(4));
                }
            };
            match store.verify() {
                Ok(r) if r.leaked_blocks == 0 => {
                    println!(
                        "{}: clean, {} blocks reachable",
                        volume.display(),
                        r.reachable_blocks
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Ok(r) => {
                    println!("{}: {} leaked blocks", volume.display(), r.leaked_blocks);
                    Ok(ExitCode::from(4))
                }
                Err(e) => {
                    eprintln!("iris fsck: {}: {e}", volume.display());
                    Ok(ExitCode::from(4))
                }
            }
        }
        Cmd::Ls { volume, path } => {
            let fs = Fs::open_volume(&volume, &OpenOptions::default())
                .map_err(|e| format!("{}: {e}", volume.display()))?;
            let c = Cred::root();
            let ino = fs
                .resolve(&c, ROOT_INO, path.as_bytes(), true)
                .map_err(|e| format!("{path}: {e}"))?;
            let mut pos = 0;
            loop {
                let batch = fs
                    .readdir(ino, pos, 256)
                    .map_err(|e| format!("{path}: {e}"))?;
                let Some(last) = batch.last() else { break };
                pos = last.next;
                for e in &batch {
                    if e.name == b"." || e.name == b".." {
                        continue;
                    }
                    let i = fs.getattr(e.ino).map_err(|e| e.to_string())?;
                    println!(
                        "{:o} {:>10} {}",
                        i.mode,
                        i.size,
                        String::from_utf8_lossy(&e.name)
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Cat { volume, path } => {
            use std::io::Write;
            let fs = Fs::open_volume(&volume, &OpenOptions::default())
                .map_err(|e| format!("{}: {e}", volume.display()))?;
            let c = Cred::root();
            let i = fs
                .open(&c, ROOT_INO, path.as_bytes(), libc::O_RDONLY, 0)
                .map_err(|e| format!("{path}: {e}"))?;
            let mut off = 0;
            let mut buf = vec![0u8; 1 << 16];
            let mut out = std::io::stdout().lock();
            loop {
                let n = fs
                    .read(i.ino, off, &mut buf)
                    .map_err(|e| format!("{path}: {e}"))?;
                if n == 0 {
                    break;
                }
                out.write_all(&buf[..n]).map_err(|e| e.to_string())?;
                off += n as u64;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
