//! What the benchmark runs against: the targets, what each needs, and setting them up. A target
//! that cannot be set up here (not root, a tool missing) is skipped with a reason, never faked.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::ValueEnum;

use super::cleanup::Cleanup;
use super::{interposed, kernel_fs};

/// A target of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum)]
pub enum TargetKind {
    /// Iris: fio under the interposer, files in a volume in the scratch directory.
    Iris,
    /// The bare-interposer ceiling: fio under libiris_floor.so (memcpy on a mapped file).
    Floor,
    /// A directory on the scratch tmpfs.
    Tmpfs,
    /// ext4 on a loop device over a scratch file (root only).
    Ext4,
    /// xfs on a loop device over a scratch file (root only, needs mkfs.xfs).
    Xfs,
    /// Plain loads and stores on a mapped scratch file, in this process (no fio).
    Memcpy,
}

impl TargetKind {
    /// Every target, in report order.
    pub const ALL: [TargetKind; 6] = [
        TargetKind::Iris,
        TargetKind::Floor,
        TargetKind::Tmpfs,
        TargetKind::Ext4,
        TargetKind::Xfs,
        TargetKind::Memcpy,
    ];

    /// The kernel file systems Iris is compared against.
    pub const KERNEL: [TargetKind; 3] = [TargetKind::Tmpfs, TargetKind::Ext4, TargetKind::Xfs];

    /// Its name in tables, JSON and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Iris => "iris",
            TargetKind::Floor => "floor",
            TargetKind::Tmpfs => "tmpfs",
            TargetKind::Ext4 => "ext4",
            TargetKind::Xfs => "xfs",
            TargetKind::Memcpy => "memcpy",
        }
    }

    /// Whether fio runs against it (all but the in-process memcpy floor).
    pub fn runs_fio(self) -> bool {
        self != TargetKind::Memcpy
    }
}

/// A target fio can run against: the directory its files go in and the environment fio needs.
#[derive(Clone, Debug)]
pub struct FioTarget {
    /// Which target.
    pub kind: TargetKind,
    /// The directory fio puts its files in, as fio sees it.
    pub dir: PathBuf,
    /// Variables added to fio's environment (LD_PRELOAD and its configuration).
    pub env: Vec<(String, OsString)>,
}

/// The outcome of setting a target up.
pub enum Setup {
    /// Ready to run.
    Ready(FioTarget),
    /// Not available here, and why (shown to the user and kept in the JSON).
    Skipped(String),
}

/// Room each fio target needs: `jobs` files of `file_bytes`.
pub fn data_bytes(file_bytes: u64, max_jobs: u32) -> u64 {
    file_bytes.saturating_mul(u64::from(max_jobs))
}

/// Set up `kind` under `scratch`, registering everything to undo in `cleanup`. `Err` is a
/// failure worth stopping for (the scratch directory unusable); a target unavailable here is
/// `Ok(Setup::Skipped)`.
pub fn set_up(
    kind: TargetKind,
    scratch: &Path,
    cleanup: &mut Cleanup,
    data_bytes: u64,
) -> Result<Setup, String> {
    match kind {
        TargetKind::Iris => interposed::iris(scratch, cleanup, data_bytes),
        TargetKind::Floor => interposed::floor(scratch, cleanup),
        TargetKind::Tmpfs => kernel_fs::tmpfs(scratch, cleanup),
        TargetKind::Ext4 | TargetKind::Xfs => {
            kernel_fs::loop_mounted(kind, scratch, cleanup, data_bytes)
        }
        TargetKind::Memcpy => Err("memcpy is measured in process, not set up".into()),
    }
}
