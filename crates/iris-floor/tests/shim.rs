//! The shim preloaded into real programs: bytes written under /floor land in the backing file,
//! bytes read come from it, sizes follow, and paths elsewhere are untouched.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A backing directory of its own for each test, removed at the end.
struct BackingDir(PathBuf);

impl BackingDir {
    fn new(name: &str) -> BackingDir {
        let p = PathBuf::from(format!(
            "/dev/shm/iris-floor-test-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("backing dir");
        BackingDir(p)
    }

    /// Run `program args` with the shim preloaded on this directory.
    fn run(&self, program: &str, args: &[&str]) -> Output {
        let out = Command::new(program)
            .args(args)
            .env("LD_PRELOAD", shim())
            .env("IRIS_FLOOR_DIR", &self.0)
            .output()
            .expect("spawn");
        assert!(
            out.status.success(),
            "{program} {args:?} failed\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

impl Drop for BackingDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// libiris_floor.so as cargo laid it out next to this test (in deps/ or one level up).
fn shim() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let deps = exe.parent().expect("deps dir");
    [
        deps.join("libiris_floor.so"),
        deps.join("../libiris_floor.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("libiris_floor.so built next to the test")
}

fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

#[test]
fn python_io_lands_in_the_backing_file() {
    let dir = BackingDir::new("py");
    let script = r#"
import os
fd = os.open("/floor/x", os.O_CREAT | os.O_RDWR, 0o644)
assert os.pwrite(fd, b"hello", 4096) == 5          # grows the file past a hole
assert os.fstat(fd).st_size == 4101
assert os.pread(fd, 5, 4096) == b"hello"
assert os.pread(fd, 100, 4099) == b"lo"            # short read at the end
assert os.pread(fd, 10, 9000) == b""               # past the end
os.lseek(fd, 0, os.SEEK_SET)
assert os.write(fd, b"head") == 4
assert os.lseek(fd, 0, os.SEEK_CUR) == 4
os.lseek(fd, 0, os.SEEK_SET)
assert os.read(fd, 4) == b"head"
assert os.lseek(fd, 0, os.SEEK_END) == 4101
os.fsync(fd)
os.fdatasync(fd)
os.ftruncate(fd, 8192)
assert os.stat("/floor/x").st_size == 8192
os.close(fd)
fd = os.open("/floor/x", os.O_RDONLY)
assert os.pread(fd, 4, 0) == b"head"
try:
    os.pwrite(fd, b"no", 0)
    raise SystemExit("write on a read-only fd succeeded")
except OSError as e:
    assert e.errno == 9, e                          # EBADF
os.close(fd)
os.mkdir("/floor/sub")
assert os.path.isdir("/floor/sub")
os.rmdir("/floor/sub")
with open("/floor/y", "wb") as f:
    f.write(b"z" * 10000)
os.unlink("/floor/y")
assert not os.path.exists("/floor/y")
print("ok")
"#;
    let out = dir.run(python(), &["-c", script]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    let bytes = std::fs::read(dir.0.join("x")).expect("backing file");
    assert_eq!(bytes.len(), 8192);
    assert_eq!(&bytes[..4], b"head");
    assert_eq!(&bytes[4096..4101], b"hello");
    assert!(bytes[4101..].iter().all(|b| *b == 0));
    assert!(!dir.0.join("y").exists());
}

#[test]
fn dd_writes_and_reads_through_the_shim() {
    let dir = BackingDir::new("dd");
    let src = dir.0.join("src");
    let pattern: Vec<u8> = (0..65536u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&src, &pattern).expect("source");
    let src_arg = format!("if={}", src.display());
    dir.run(
        "dd",
        &[&src_arg, "of=/floor/copy", "bs=4096", "status=none"],
    );
    assert_eq!(std::fs::read(dir.0.join("copy")).expect("copy"), pattern);
    let back = dir.0.join("back");
    let back_arg = format!("of={}", back.display());
    dir.run(
        "dd",
        &[
            "if=/floor/copy",
            &back_arg,
            "bs=512",
            "skip=8",
            "status=none",
        ],
    );
    assert_eq!(std::fs::read(&back).expect("back"), &pattern[4096..]);
}

#[test]
fn paths_outside_the_prefix_are_untouched() {
    let dir = BackingDir::new("host");
    let host = dir.0.join("host-file");
    let of = format!("of={}", host.display());
    dir.run(
        "dd",
        &["if=/dev/zero", &of, "bs=1000", "count=3", "status=none"],
    );
    assert_eq!(std::fs::metadata(&host).expect("host file").len(), 3000);
}
