//! `IRIS_REPORT=1`: count the calls Iris served and print the counts to stderr at exit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Kinds of served calls.
#[derive(Clone, Copy)]
pub(crate) enum Call {
    Open,
    Close,
    Read,
    Write,
    Pread,
    Pwrite,
    Seek,
    Stat,
    Sync,
    Readdir,
    Mmap,
    Path,
}

const NAMES: [&str; 12] = [
    "open", "close", "read", "write", "pread", "pwrite", "lseek", "stat", "fsync", "readdir",
    "mmap", "path-op",
];

static ON: AtomicBool = AtomicBool::new(false);
/// A private copy of stderr: programs (coreutils) close fd 2 before our exit handler runs.
static OUT_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(2);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
static COUNTS: [AtomicU64; 12] = [ZERO; 12];

/// Count one served call (one predictable branch when reporting is off).
#[inline]
pub(crate) fn count(c: Call) {
    if ON.load(Ordering::Relaxed) {
        COUNTS[c as usize].fetch_add(1, Ordering::Relaxed);
    }
}

extern "C" fn print_report() {
    if COUNTS.iter().all(|c| c.load(Ordering::Relaxed) == 0) {
        return;
    }
    // SAFETY: getpid cannot fail.
    let mut line = format!("iris report (pid {}):", unsafe { libc::getpid() });
    for (name, n) in NAMES.iter().zip(COUNTS.iter()) {
        let n = n.load(Ordering::Relaxed);
        if n > 0 {
            line.push_str(&format!(" {name}={n}"));
        }
    }
    line.push('\n');
    // SAFETY: writing our own buffer to fd 2 through libc's write.
    unsafe {
        crate::real::write(
            OUT_FD.load(Ordering::Relaxed),
            line.as_ptr().cast(),
            line.len(),
        )
    };
}

/// Turn reporting on if `IRIS_REPORT` asks for it (called at load).
pub(crate) fn init() {
    // SAFETY: getenv with a NUL-terminated name.
    let v = unsafe { libc::getenv(c"IRIS_REPORT".as_ptr()) };
    // SAFETY: a non-null getenv result is a C string.
    if !v.is_null() && unsafe { std::ffi::CStr::from_ptr(v) }.to_bytes() != b"0" {
        ON.store(true, Ordering::Relaxed);
        // SAFETY: duplicating fd 2 (close-on-exec) for the report; on failure keep fd 2.
        let fd = unsafe { crate::real::fcntl(2, libc::F_DUPFD_CLOEXEC, 100) };
        if fd >= 0 {
            OUT_FD.store(fd, Ordering::Relaxed);
        }
        // SAFETY: registering a plain extern "C" function to run at exit.
        unsafe { libc::atexit(print_report) };
    }
}
