//! Undoing what the benchmark set up: mounts, loop devices, images, volumes, directories. Every
//! step that creates something registers its undo here first-in, last-out, and the undo runs on
//! every way out: the normal end, an error (the guard is dropped), a panic (dropped while
//! unwinding) and Ctrl-C or SIGTERM (the interrupt stops the run, which then returns an error).
//! Only SIGKILL leaves things behind.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::tools;
use crate::failure::host_failure;

/// Attempts at a plain unmount before falling back to a lazy one (a killed fio may hold the
/// mount for a moment while it exits).
const UNMOUNT_ATTEMPTS: u32 = 20;
/// Pause between unmount attempts.
const UNMOUNT_PAUSE: Duration = Duration::from_millis(100);

/// One thing to undo.
#[derive(Debug)]
pub enum Undo {
    /// Unmount a mount point.
    Unmount(PathBuf),
    /// Detach a loop device (`losetup -d`).
    DetachLoop(PathBuf),
    /// Remove a file (missing is fine).
    RemoveFile(PathBuf),
    /// Remove a directory and everything in it.
    RemoveTree(PathBuf),
}

/// The undo stack. Dropping it undoes everything not yet undone.
#[derive(Debug, Default)]
pub struct Cleanup {
    undo: Vec<Undo>,
}

impl Cleanup {
    /// Nothing to undo yet.
    pub fn new() -> Cleanup {
        Cleanup::default()
    }

    /// Undo `step` when cleaning up (before everything pushed earlier).
    pub fn push(&mut self, step: Undo) {
        self.undo.push(step);
    }

    /// Undo everything, last first; returns a line for each step that failed.
    pub fn run(&mut self) -> Vec<String> {
        let mut failures = Vec::new();
        while let Some(step) = self.undo.pop() {
            if let Err(line) = undo(&step) {
                failures.push(line);
            }
        }
        failures
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for line in self.run() {
            eprintln!("iris: bench cleanup: {line}");
        }
    }
}

fn undo(step: &Undo) -> Result<(), String> {
    match step {
        Undo::Unmount(dir) => unmount(dir),
        Undo::DetachLoop(dev) => tools::run("losetup", &["-d".as_ref(), dev.as_os_str()]).map(drop),
        Undo::RemoveFile(path) => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(host_failure(path, &e)),
            _ => Ok(()),
        },
        Undo::RemoveTree(path) => match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(host_failure(path, &e)),
            _ => Ok(()),
        },
    }
}

/// `umount DIR`, retried while busy, then `umount -l DIR` so the device can go.
fn unmount(dir: &Path) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..UNMOUNT_ATTEMPTS {
        match tools::run("umount", &[dir.as_os_str()]) {
            Ok(_) => return Ok(()),
            Err(line) => last = line,
        }
        std::thread::sleep(UNMOUNT_PAUSE);
    }
    tools::run("umount", &["-l".as_ref(), dir.as_os_str()])
        .map(drop)
        .map_err(|lazy| format!("{last}; lazy unmount: {lazy}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_runs_last_first_and_tolerates_missing_files() {
        let dir = PathBuf::from(format!(
            "/dev/shm/iris-bench-cleanup-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(dir.join("sub")).expect("dir");
        std::fs::write(dir.join("sub/f"), b"x").expect("file");
        let mut c = Cleanup::new();
        c.push(Undo::RemoveTree(dir.clone()));
        c.push(Undo::RemoveFile(dir.join("sub/f")));
        c.push(Undo::RemoveFile(dir.join("never-made")));
        assert!(c.run().is_empty());
        assert!(!dir.exists());
    }
}
