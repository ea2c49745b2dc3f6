//! A volume in /dev/shm for one test, and running shell scripts on it under `iris run`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `iris` binary under test.
pub const IRIS: &str = env!("CARGO_BIN_EXE_iris");

/// A volume file removed (with its lock and shadow files) when dropped.
pub struct Volume(pub PathBuf);

impl Volume {
    /// A fresh volume path for test `name`.
    pub fn new(name: &str) -> Volume {
        let p = PathBuf::from(format!(
            "/dev/shm/iris-test-{}-{name}.vol",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        Volume(p)
    }

    /// `iris run --volume V -- sh -c SCRIPT`
    pub fn sh(&self, script: &str) -> Output {
        let out = Command::new(IRIS)
            .args(["run", "--volume"])
            .arg(&self.0)
            .args(["--", "sh", "-c", script])
            .output()
            .expect("run iris");
        if !out.status.success() {
            eprintln!(
                "script failed: {script}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        out
    }

    /// Run a script that must succeed; its stdout.
    pub fn sh_ok(&self, script: &str) -> String {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "script failed: {script}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run `script(dir)` with `sh -c` in a fresh tmpfs directory (the kernel's answer) and with
    /// `/iris` through this volume, and require both to print `expected`.
    pub fn prints_as_on_tmpfs(&self, name: &str, script: impl Fn(&str) -> String, expected: &str) {
        let host = HostPath(format!("/dev/shm/iris-{name}-host-{}", std::process::id()));
        std::fs::create_dir_all(&host.0).expect("host dir");
        let kernel = Command::new("sh")
            .args(["-c", &script(&host.0)])
            .output()
            .expect("sh on tmpfs");
        drop(host);
        assert_eq!(
            String::from_utf8_lossy(&kernel.stdout),
            expected,
            "what Linux does"
        );
        assert_eq!(self.sh_ok(&script("/iris")), expected);
    }

    /// [`Volume::prints_as_on_tmpfs`] for Python programs: each of `programs` runs in turn as
    /// `python3 - DIR` (under a timeout), DIR the tmpfs directory or `/iris`.
    pub fn python_prints_as_on_tmpfs(&self, name: &str, programs: &[&str], expected: &str) {
        self.prints_as_on_tmpfs(
            name,
            |dir| {
                programs
                    .iter()
                    .map(|p| format!("timeout 60 python3 - {dir} <<'PY'\n{p}PY\n"))
                    .collect::<String>()
            },
            expected,
        );
    }

    /// A fresh volume for test `name`, made by a first process, and its blocks in use then.
    pub fn made(name: &str) -> (Volume, u64) {
        let v = Volume::new(name);
        v.sh_ok("true");
        let used = v.used_blocks();
        (v, used)
    }

    /// The blocks in use, as `iris stat` reports them.
    pub fn used_blocks(&self) -> u64 {
        let out = Command::new(IRIS)
            .arg("stat")
            .arg(&self.0)
            .output()
            .expect("iris stat");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("used:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no used blocks in: {text}"))
    }

    /// `iris cat VOLUME PATH`: the file as the volume holds it, read without the interposer.
    pub fn cat(&self, path: &str) -> Output {
        Command::new(IRIS)
            .arg("cat")
            .arg(&self.0)
            .arg(path)
            .output()
            .expect("iris cat")
    }

    /// [`Volume::cat`] that must succeed: the file's bytes.
    pub fn cat_ok(&self, path: &str) -> Vec<u8> {
        let out = self.cat(path);
        assert!(
            out.status.success(),
            "iris cat {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// The volume's id (superblock A, bytes 48..56), which names its files in /dev/shm.
    pub fn volume_id(&self) -> u64 {
        let bytes = std::fs::read(&self.0).expect("read the volume file");
        u64::from_le_bytes(bytes[48..56].try_into().expect("8 bytes"))
    }

    /// `iris fsck` must pass.
    pub fn fsck_clean(&self) {
        let out = Command::new(IRIS)
            .arg("fsck")
            .arg(&self.0)
            .output()
            .expect("fsck");
        if !out.status.success() {
            // Kept for a look: the volume file is removed when the test's `Volume` drops.
            let kept = std::env::temp_dir().join(format!(
                "iris-fsck-failed-{}",
                self.0
                    .file_name()
                    .map_or("vol".into(), |n| n.to_string_lossy())
            ));
            let _ = std::fs::copy(&self.0, &kept);
            panic!(
                "fsck: {}{}\nvolume kept in {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                kept.display()
            );
        }
    }
}

/// A host path (file or directory tree) removed when dropped, also when the test fails.
pub struct HostPath(pub String);

impl Drop for HostPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        // The interposer's per-volume lock files are named by the volume id (superblock A,
        // bytes 48..56); remove them with the volume.
        if let Ok(bytes) = std::fs::read(&self.0).map(|b| b.get(48..56).map(<[u8]>::to_vec)) {
            if let Some(id) = bytes.and_then(|b| <[u8; 8]>::try_from(b).ok()) {
                let id = u64::from_le_bytes(id);
                for kind in ["locks", "flocks", "owners", "waits", "opens", "volume"] {
                    let _ = std::fs::remove_file(format!("/dev/shm/iris-{kind}-{id:016x}"));
                }
                let _ = std::fs::remove_dir_all(format!("/dev/shm/iris-lib-{id:016x}"));
                let shadows = format!("iris-shadow-{id:016x}-");
                let sockets = format!("iris-sock-{id:016x}-");
                for e in std::fs::read_dir("/dev/shm")
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.starts_with(&shadows) || name.starts_with(&sockets) {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }
        let _ = std::fs::remove_file(&self.0);
    }
}
