//! A matrix of POSIX cases (every operation against every kind of path), each run on a fresh
//! fixture in Iris and in a tmpfs directory through libc, comparing the errno and, where the
//! call succeeds, the resulting metadata. Linux decides what is right.

use std::ffi::CString;
use std::sync::Arc;

use iris_fs::{Cred, Errno, Fs, ROOT_INO};
use iris_media::SimMedia;
use iris_store::{CreateOptions, OpenOptions, Store};

/// The fixture, built identically on both sides:
/// f (file, 10 bytes), d/ (dir) with d/g (file), e/ (empty dir), lf -> f, ld -> d, dang -> nowhere,
/// loop -> loop.
fn iris_fixture() -> Fs {
    let sim = Arc::new(SimMedia::new(8 << 20));
    let opts = CreateOptions {
        size_limit_bytes: 8 << 20,
        initial_bytes: 8 << 20,
        ..CreateOptions::default()
    };
    let store = Store::create_on(
        Box::new(sim),
        &opts,
        &OpenOptions {
            boot_id: Some(1),
            commit_interval: None,
        },
    )
    .expect("store");
    let fs = Fs::on_store(store).expect("fs");
    let c = Cred::root();
    let f = fs
        .open(&c, ROOT_INO, b"f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .expect("f");
    fs.write(f.ino, 0, b"0123456789").expect("write");
    fs.mkdir(&c, ROOT_INO, b"d", 0o755).expect("d");
    fs.open(&c, ROOT_INO, b"d/g", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .expect("g");
    fs.mkdir(&c, ROOT_INO, b"e", 0o755).expect("e");
    fs.symlink(&c, b"f", ROOT_INO, b"lf").expect("lf");
    fs.symlink(&c, b"d", ROOT_INO, b"ld").expect("ld");
    fs.symlink(&c, b"nowhere", ROOT_INO, b"dang").expect("dang");
    fs.symlink(&c, b"loop", ROOT_INO, b"loop").expect("loop");
    fs
}

struct Host(String);

impl Host {
    fn new(case: usize) -> Host {
        let root = format!("/dev/shm/iris-matrix-{}-{case}", std::process::id());
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(format!("{root}/d")).expect("d");
        std::fs::create_dir_all(format!("{root}/e")).expect("e");
        std::fs::write(format!("{root}/f"), b"0123456789").expect("f");
        std::fs::write(format!("{root}/d/g"), b"").expect("g");
        for (t, l) in [
            ("f", "lf"),
            ("d", "ld"),
            ("nowhere", "dang"),
            ("loop", "loop"),
        ] {
            std::os::unix::fs::symlink(t, format!("{root}/{l}")).expect("symlink");
        }
        Host(root)
    }
    fn c(&self, p: &str) -> CString {
        CString::new(format!("{}/{p}", self.0)).expect("cstring")
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn errno_of(rc: i64) -> Result<(), Errno> {
    if rc < 0 {
        Err(Errno(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ))
    } else {
        Ok(())
    }
}

/// What a successful case leaves behind, compared on both sides.
#[derive(Debug, PartialEq, Eq)]
struct Probe {
    kind: u32,
    size: u64,
    nlink: u64,
}

fn iris_probe(fs: &Fs, p: &str) -> Option<Probe> {
    let ino = fs
        .resolve(&Cred::root(), ROOT_INO, p.as_bytes(), false)
        .ok()?;
    let i = fs.getattr(ino).ok()?;
    let size = if i.is_dir() { 0 } else { i.size };
    Some(Probe {
        kind: i.mode & libc::S_IFMT,
        size,
        nlink: if i.is_dir() { 0 } else { u64::from(i.nlink) },
    })
}

fn host_probe(h: &Host, p: &str) -> Option<Probe> {
    let m = std::fs::symlink_metadata(format!("{}/{p}", h.0)).ok()?;
    use std::os::unix::fs::MetadataExt;
    let dir = m.is_dir();
    Some(Probe {
        kind: m.mode() & libc::S_IFMT,
        size: if dir { 0 } else { m.size() },
        nlink: if dir { 0 } else { m.nlink() },
    })
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Open(i32),
    Mkdir,
    Rmdir,
    Unlink,
    Stat,
    Lstat,
    Readlink,
    Truncate(u64),
    RenameTo(&'static str),
    RenameFrom(&'static str),
    LinkTo(&'static str),
    SymlinkAt,
    Access(u32),
}

const PATHS: [&str; 22] = [
    "f",
    "f/",
    "d",
    "d/",
    "d/g",
    "e",
    "lf",
    "lf/",
    "ld",
    "ld/",
    "ld/g",
    "dang",
    "dang/",
    "loop",
    "missing",
    "missing/x",
    "f/x",
    "d/missing/x",
    ".",
    "d/..",
    "e/.",
    "lf/x",
];

fn ops() -> Vec<Op> {
    let c = libc::O_CREAT;
    vec![
        Op::Open(libc::O_RDONLY),
        Op::Open(libc::O_WRONLY),
        Op::Open(libc::O_RDONLY | libc::O_DIRECTORY),
        Op::Open(libc::O_RDONLY | libc::O_NOFOLLOW),
        Op::Open(c | libc::O_WRONLY),
        Op::Open(c | libc::O_EXCL | libc::O_WRONLY),
        Op::Open(libc::O_WRONLY | libc::O_TRUNC),
        Op::Open(libc::O_RDONLY | libc::O_TRUNC),
        Op::Mkdir,
        Op::Rmdir,
        Op::Unlink,
        Op::Stat,
        Op::Lstat,
        Op::Readlink,
        Op::Truncate(3),
        Op::RenameTo("newname"),
        Op::RenameTo("e"),
        Op::RenameTo("f"),
        Op::RenameFrom("f"),
        Op::RenameFrom("e"),
        Op::LinkTo("hard"),
        Op::SymlinkAt,
        Op::Access(4),
    ]
}

fn run_iris(fs: &Fs, op: Op, p: &str) -> Result<(), Errno> {
    let c = Cred::root();
    let b = p.as_bytes();
    match op {
        Op::Open(flags) => fs.open(&c, ROOT_INO, b, flags, 0o644).map(|_| ()),
        Op::Mkdir => fs.mkdir(&c, ROOT_INO, b, 0o755).map(|_| ()),
        Op::Rmdir => fs.rmdir(&c, ROOT_INO, b),
        Op::Unlink => fs.unlink(&c, ROOT_INO, b),
        Op::Stat => fs.resolve(&c, ROOT_INO, b, true).map(|_| ()),
        Op::Lstat => fs.resolve(&c, ROOT_INO, b, false).map(|_| ()),
        Op::Readlink => fs.readlink(&c, ROOT_INO, b).map(|_| ()),
        Op::Truncate(n) => fs.resolve(&c, ROOT_INO, b, true).and_then(|ino| {
            if fs.getattr(ino)?.is_dir() {
                return Err(Errno::EISDIR);
            }
            fs.truncate(ino, n)
        }),
        Op::RenameTo(t) => fs.rename(&c, ROOT_INO, b, ROOT_INO, t.as_bytes(), 0),
        Op::RenameFrom(s) => fs.rename(&c, ROOT_INO, s.as_bytes(), ROOT_INO, b, 0),
        Op::LinkTo(t) => fs.link(&c, ROOT_INO, b, ROOT_INO, t.as_bytes(), false),
        Op::SymlinkAt => fs.symlink(&c, b"target", ROOT_INO, b).map(|_| ()),
        Op::Access(_) => fs.resolve(&c, ROOT_INO, b, true).map(|_| ()),
    }
}

fn run_host(h: &Host, op: Op, p: &str) -> Result<(), Errno> {
    let cp = h.c(p);
    // SAFETY: every call gets valid C strings and buffers; fds are closed at once.
    unsafe {
        match op {
            Op::Open(flags) => {
                let fd = libc::open(cp.as_ptr(), flags, 0o644);
                if fd >= 0 {
                    libc::close(fd);
                }
                errno_of(fd.into())
            }
            Op::Mkdir => errno_of(libc::mkdir(cp.as_ptr(), 0o755).into()),
            Op::Rmdir => errno_of(libc::rmdir(cp.as_ptr()).into()),
            Op::Unlink => errno_of(libc::unlink(cp.as_ptr()).into()),
            Op::Stat => {
                let mut st: libc::stat = std::mem::zeroed();
                errno_of(libc::stat(cp.as_ptr(), &mut st).into())
            }
            Op::Lstat => {
                let mut st: libc::stat = std::mem::zeroed();
                errno_of(libc::lstat(cp.as_ptr(), &mut st).into())
            }
            Op::Readlink => {
                let mut buf = [0 as libc::c_char; 256];
                errno_of(libc::readlink(cp.as_ptr(), buf.as_mut_ptr(), 256) as i64)
            }
            Op::Truncate(n) => errno_of(libc::truncate(cp.as_ptr(), n as i64).into()),
            Op::RenameTo(t) => errno_of(libc::rename(cp.as_ptr(), h.c(t).as_ptr()).into()),
            Op::RenameFrom(s) => errno_of(libc::rename(h.c(s).as_ptr(), cp.as_ptr()).into()),
            Op::LinkTo(t) => errno_of(libc::link(cp.as_ptr(), h.c(t).as_ptr()).into()),
            Op::SymlinkAt => errno_of(libc::symlink(c"target".as_ptr(), cp.as_ptr()).into()),
            Op::Access(m) => errno_of(libc::access(cp.as_ptr(), m as i32).into()),
        }
    }
}

#[test]
fn every_operation_on_every_kind_of_path_matches_linux() {
    let mut cases = 0;
    let mut mismatches = Vec::new();
    for op in ops() {
        for p in PATHS {
            cases += 1;
            let fs = iris_fixture();
            let host = Host::new(cases);
            let iris = run_iris(&fs, op, p);
            let linux = run_host(&host, op, p);
            if iris != linux {
                mismatches.push(format!("{op:?} {p:?}: iris {iris:?}, linux {linux:?}"));
                continue;
            }
            // Same outcome: the touched names must now look alike too.
            for probe in [p.trim_end_matches('/'), "f", "e", "newname", "hard", "d/g"] {
                if probe.is_empty() || probe == "." {
                    continue;
                }
                let (a, b) = (iris_probe(&fs, probe), host_probe(&host, probe));
                if a != b {
                    mismatches.push(format!(
                        "{op:?} {p:?}: afterwards {probe:?} is {a:?} in iris, {b:?} in linux"
                    ));
                }
            }
        }
    }
    assert!(cases >= 400, "only {cases} cases");
    assert!(
        mismatches.is_empty(),
        "{} of {cases} cases differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}
