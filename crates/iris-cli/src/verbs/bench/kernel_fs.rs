//! The kernel targets: a tmpfs directory, and ext4 and xfs each made on a loop device over a
//! sparse image file in the scratch tmpfs and mounted there: the same medium (memory) under
//! every file system, so differences are the file systems' own.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::cleanup::{Cleanup, Undo};
use super::targets::{FioTarget, Setup, TargetKind};
use super::tools;
use crate::failure::host_failure;

/// Room on a loop file system beyond fio's files (journal, metadata, xfs's minimum size).
const IMAGE_SLACK_BYTES: u64 = 512 << 20;
/// xfs refuses file systems smaller than about 300 MiB.
const IMAGE_MIN_BYTES: u64 = 1 << 30;

/// A directory on the scratch tmpfs.
pub fn tmpfs(scratch: &Path, cleanup: &mut Cleanup) -> Result<Setup, String> {
    let dir = scratch.join("tmpfs");
    std::fs::create_dir_all(&dir).map_err(|e| host_failure(&dir, &e))?;
    cleanup.push(Undo::RemoveTree(dir.clone()));
    Ok(Setup::Ready(FioTarget {
        kind: TargetKind::Tmpfs,
        dir,
        env: Vec::new(),
    }))
}

/// Whether `dir` is on a tmpfs (the comparison assumes every target sits on memory).
pub fn on_tmpfs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero statfs is a valid value to be overwritten.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a writable statfs.
    let ok = unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0;
    ok && st.f_type == libc::TMPFS_MAGIC
}

/// ext4 or xfs on a loop device over `scratch/KIND.img`, mounted on `scratch/mnt-KIND`.
pub fn loop_mounted(
    kind: TargetKind,
    scratch: &Path,
    cleanup: &mut Cleanup,
    data_bytes: u64,
) -> Result<Setup, String> {
    let (mkfs, mkfs_args, package): (&str, &[&str], &str) = match kind {
        TargetKind::Ext4 => (
            "mkfs.ext4",
            // Initialise inode tables and journal now: no ext4lazyinit thread during the runs.
            &["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"],
            "e2fsprogs",
        ),
        TargetKind::Xfs => ("mkfs.xfs", &["-q", "-f"], "xfsprogs"),
        _ => return Err(format!("{} is not a loop-mounted target", kind.name())),
    };
    // SAFETY: geteuid has no failure mode and touches no memory.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        return Ok(Setup::Skipped(format!(
            "needs root for loop devices and mounts (running as uid {uid}; try sudo)"
        )));
    }
    if tools::find(mkfs).is_none() {
        return Ok(Setup::Skipped(format!(
            "{mkfs} not found (apt-get install {package})"
        )));
    }
    for needed in ["losetup", "mount", "umount"] {
        if tools::find(needed).is_none() {
            return Ok(Setup::Skipped(format!("{needed} not found")));
        }
    }
    let name = kind.name();
    let image = scratch.join(format!("{name}.img"));
    let image_bytes = data_bytes
        .saturating_add(IMAGE_SLACK_BYTES)
        .max(IMAGE_MIN_BYTES);
    cleanup.push(Undo::RemoveFile(image.clone()));
    std::fs::File::create(&image)
        .and_then(|f| f.set_len(image_bytes))
        .map_err(|e| host_failure(&image, &e))?;
    let device = match attach_loop(&image) {
        Ok(d) => d,
        Err(why) => return Ok(Setup::Skipped(why)),
    };
    cleanup.push(Undo::DetachLoop(device.clone()));
    let mut args: Vec<&OsStr> = mkfs_args.iter().map(OsStr::new).collect();
    args.push(device.as_os_str());
    if let Err(why) = tools::run(mkfs, &args) {
        return Ok(Setup::Skipped(why));
    }
    let mount_point = scratch.join(format!("mnt-{name}"));
    std::fs::create_dir_all(&mount_point).map_err(|e| host_failure(&mount_point, &e))?;
    cleanup.push(Undo::RemoveTree(mount_point.clone()));
    let mount_args: [&OsStr; 4] = [
        "-t".as_ref(),
        name.as_ref(),
        device.as_os_str(),
        mount_point.as_os_str(),
    ];
    if let Err(why) = tools::run("mount", &mount_args) {
        return Ok(Setup::Skipped(why));
    }
    cleanup.push(Undo::Unmount(mount_point.clone()));
    Ok(Setup::Ready(FioTarget {
        kind,
        dir: mount_point,
        env: Vec::new(),
    }))
}

/// `losetup -f --show IMAGE`: the loop device now backed by `image`.
fn attach_loop(image: &Path) -> Result<PathBuf, String> {
    let out = tools::run(
        "losetup",
        &["-f".as_ref(), "--show".as_ref(), image.as_os_str()],
    )?;
    let device = out.trim();
    if !device.starts_with("/dev/") {
        return Err(format!(
            "losetup -f --show {}: printed {device:?}",
            image.display()
        ));
    }
    Ok(PathBuf::from(device))
}
