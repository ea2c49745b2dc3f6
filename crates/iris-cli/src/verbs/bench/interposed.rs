//! The two interposed targets: Iris (`iris run` mechanics: libiris_preload.so over a volume in
//! the scratch directory) and the bare-interposer ceiling (libiris_floor.so over a backing
//! directory there). Both libraries are found next to the iris binary, as `iris run` finds its,
//! and copied into the scratch directory: a rebuild during the run cannot change what is measured.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use iris_store::CreateOptions;

use super::cleanup::{Cleanup, Undo};
use super::targets::{FioTarget, Setup, TargetKind};
use crate::failure::host_failure;
use crate::preload_library::preload_library;
use crate::volume::create_volume;

/// Where fio's files go under Iris: its default mount prefix.
const IRIS_DIR: &str = iris_preload::DEFAULT_MOUNT;
/// Commit interval given to the interposer, as `iris run` gives it by default.
const COMMIT_INTERVAL_MS: &str = "5000";
/// Room in the volume beyond fio's files: copy-on-write rewrites, metadata, free-space slack.
const VOLUME_SLACK_BYTES: u64 = 512 << 20;
/// The largest the benchmark volume may grow.
const VOLUME_LIMIT_BYTES: u64 = 64 << 30;
/// The floor library's file name.
const FLOOR_LIBRARY: &str = "libiris_floor.so";
/// The floor shim's path prefix: iris_floor::MOUNT_PREFIX. (The crate is not linked in: its C
/// entry points would clash with the interposer's.)
const FLOOR_PREFIX: &str = "/floor";
/// The floor shim's backing-directory variable: iris_floor::DIR_ENV.
const FLOOR_DIR_ENV: &str = "IRIS_FLOOR_DIR";

/// An Iris volume sized for `data_bytes` of fio files, and fio's environment for it.
pub fn iris(scratch: &Path, cleanup: &mut Cleanup, data_bytes: u64) -> Result<Setup, String> {
    let Some(lib) = preload_library() else {
        return Ok(Setup::Skipped(
            "libiris_preload.so not found next to the iris binary (set IRIS_PRELOAD)".into(),
        ));
    };
    let lib = snapshot(&lib, scratch)?;
    let volume = scratch.join("iris.vol");
    cleanup.push(Undo::RemoveFile(volume.clone()));
    // Backed up front, so the volume does not grow while fio measures: the files twice over
    // (copy on write), slack, and the blocks that writes synced one by one take until the intent
    // log fills and a commit frees them (without them, the first fdatasync cell grew the volume
    // by a gigabyte, and a thread collapsed the new pages into huge ones while fio ran).
    let mut opts = CreateOptions {
        size_limit_bytes: VOLUME_LIMIT_BYTES,
        ..CreateOptions::default()
    };
    let initial_bytes = data_bytes
        .saturating_mul(2)
        .saturating_add(VOLUME_SLACK_BYTES)
        .saturating_add(opts.log_working_bytes());
    opts.size_limit_bytes = VOLUME_LIMIT_BYTES.max(initial_bytes);
    opts.initial_bytes = initial_bytes;
    let fs = create_volume(&volume, &opts)?;
    // Huge pages before fio starts, as the page cache is warm for the kernel's targets (else
    // the first cell's process would collapse them in the background while it measures).
    fs.store().settle_pages();
    // The interposer keeps its tables (locks, open files...) in /dev/shm, named by volume id.
    let id = fs.store().volume_id();
    for kind in iris_fs::host_files::TABLE_KINDS {
        cleanup.push(Undo::RemoveFile(PathBuf::from(format!(
            "{}/iris-{kind}-{id:016x}",
            iris_fs::host_files::DIR
        ))));
    }
    drop(fs);
    let env = vec![
        ("LD_PRELOAD".to_string(), preload_value(&lib)),
        ("IRIS_VOLUME".to_string(), volume.into_os_string()),
        ("IRIS_MOUNT".to_string(), IRIS_DIR.into()),
        (
            "IRIS_COMMIT_INTERVAL_MS".to_string(),
            COMMIT_INTERVAL_MS.into(),
        ),
    ];
    Ok(Setup::Ready(FioTarget {
        kind: TargetKind::Iris,
        dir: PathBuf::from(IRIS_DIR),
        env,
    }))
}

/// A backing directory for the floor shim, and fio's environment for it.
pub fn floor(scratch: &Path, cleanup: &mut Cleanup) -> Result<Setup, String> {
    let Some(lib) = floor_library() else {
        return Ok(Setup::Skipped(format!(
            "{FLOOR_LIBRARY} not found next to the iris binary \
             (cargo build --release -p iris-floor, or set IRIS_FLOOR)"
        )));
    };
    let lib = snapshot(&lib, scratch)?;
    let backing = scratch.join("floor");
    std::fs::create_dir_all(&backing).map_err(|e| host_failure(&backing, &e))?;
    cleanup.push(Undo::RemoveTree(backing.clone()));
    let env = vec![
        ("LD_PRELOAD".to_string(), preload_value(&lib)),
        (FLOOR_DIR_ENV.to_string(), backing.into_os_string()),
    ];
    Ok(Setup::Ready(FioTarget {
        kind: TargetKind::Floor,
        dir: PathBuf::from(FLOOR_PREFIX),
        env,
    }))
}

/// A copy of `lib` in the scratch directory (removed with it).
fn snapshot(lib: &Path, scratch: &Path) -> Result<PathBuf, String> {
    let name = lib
        .file_name()
        .ok_or_else(|| format!("{}: not a library file", lib.display()))?;
    let copy = scratch.join(name);
    std::fs::copy(lib, &copy).map_err(|e| host_failure(lib, &e))?;
    Ok(copy)
}

/// `lib`, ahead of any LD_PRELOAD the caller already has (as `iris run` does it).
fn preload_value(lib: &Path) -> OsString {
    let mut value = lib.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        value.push(":");
        value.push(old);
    }
    value
}

/// `$IRIS_FLOOR`, else libiris_floor.so next to this binary (or in its deps/ folder, as cargo
/// lays out a build, or in ../lib/iris as installed).
pub fn floor_library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("IRIS_FLOOR").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join(FLOOR_LIBRARY),
        dir.join("deps").join(FLOOR_LIBRARY),
        dir.join("../lib/iris").join(FLOOR_LIBRARY),
    ]
    .into_iter()
    .find(|p| p.exists())
    .and_then(|p| std::fs::canonicalize(p).ok())
}
