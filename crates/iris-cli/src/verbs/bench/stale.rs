//! Leftovers of an earlier run that was killed outright (SIGKILL, power cut of the container):
//! a scratch directory `iris-bench-PID` whose process is gone, maybe with file systems still
//! mounted in it and loop devices still backed by its images. Found and undone before a new run
//! sets anything up.

use std::path::{Path, PathBuf};

use super::cleanup::{Cleanup, Undo};
use super::tools;

/// Scratch directories are named this, then the pid of the run that made them.
pub const SCRATCH_PREFIX: &str = "iris-bench-";

/// Undo what dead runs left in `scratch_root`; returns a line per run cleaned up.
pub fn clean(scratch_root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(scratch_root) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SCRATCH_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue; // alive (or the pid was reused): not ours to touch
        }
        let dir = entry.path();
        let mut undo = Cleanup::new();
        undo.push(Undo::RemoveTree(dir.clone()));
        for image in images(&dir) {
            for device in loop_devices(&image) {
                undo.push(Undo::DetachLoop(device));
            }
        }
        for mount_point in mounts_under(&dir) {
            undo.push(Undo::Unmount(mount_point));
        }
        let failures = undo.run();
        lines.push(if failures.is_empty() {
            format!(
                "removed what an earlier run (pid {pid}) left in {}",
                dir.display()
            )
        } else {
            format!(
                "could not remove all an earlier run (pid {pid}) left in {}: {}",
                dir.display(),
                failures.join("; ")
            )
        });
    }
    lines
}

/// The image files in a scratch directory.
fn images(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "img"))
                .collect()
        })
        .unwrap_or_default()
}

/// Loop devices backed by `image` (`losetup -j`).
fn loop_devices(image: &Path) -> Vec<PathBuf> {
    tools::run("losetup", &["-j".as_ref(), image.as_os_str()])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(':').map(|(dev, _)| PathBuf::from(dev)))
        .collect()
}

/// Mount points at or below `dir`, from /proc/mounts.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mount_points(&mounts)
        .into_iter()
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// The mount points of a /proc/mounts text (its octal escapes undone).
fn mount_points(mounts: &str) -> Vec<PathBuf> {
    mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|p| PathBuf::from(unescape(p)))
        .collect()
}

/// /proc/mounts writes space, tab, newline and backslash as \040, \011, \012, \134.
fn unescape(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_read_and_unescaped() {
        let text =
            "/dev/loop0 /dev/shm/iris-bench-1/mnt\\040ext4 ext4 rw 0 0\nproc /proc proc rw 0 0\n";
        assert_eq!(
            mount_points(text),
            vec![
                PathBuf::from("/dev/shm/iris-bench-1/mnt ext4"),
                PathBuf::from("/proc")
            ]
        );
    }

    #[test]
    fn dead_runs_are_removed_and_live_ones_kept() {
        let root = std::env::temp_dir().join(format!("iris-stale-test-{}", std::process::id()));
        let dead = root.join(format!("{SCRATCH_PREFIX}{}", u32::MAX - 1));
        let live = root.join(format!("{SCRATCH_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(dead.join("floor")).expect("dead");
        std::fs::create_dir_all(&live).expect("live");
        let lines = clean(&root);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(!dead.exists() && live.exists());
        std::fs::remove_dir_all(&root).expect("cleanup");
    }
}
