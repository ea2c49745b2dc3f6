//! Running programs stored in Iris. The kernel executes only files it can open, and an Iris path
//! means nothing to it (nor does a relative path from an Iris working directory), so before an
//! exec or spawn of a path that routes to Iris, Iris does what the kernel's loaders would:
//!
//! - a script (`#!interpreter [arg]`): the interpreter runs with the arguments the kernel would
//!   give it (interpreter, its optional argument, the script's path as given, then the caller's
//!   arguments after the first); an interpreter in Iris is launched the same way (at most
//!   [`MAX_DEPTH`] scripts deep, as Linux allows);
//! - a binary (ELF): the kernel executes a host copy kept at its Iris path (see
//!   `loadable::host_copy`; made once per version of the file), or, where there is no path
//!   (`fexecve`) or /dev/shm cannot execute, a close-on-exec memfd of its bytes through
//!   `/proc/self/fd/N` (the caller's arguments as they are either way); the libraries its search
//!   path finds in Iris are copied out and their directories put first in `LD_LIBRARY_PATH`
//!   (see `loadable::dependency_dirs`);
//! - a symlink out of Iris (a Python venv's `bin/python3`): the host file it leads to, with the
//!   caller's arguments as they are (so `argv[0]` still names the link, as programs that find
//!   their installation from it expect).
//!
//! The caller's permission to execute is checked as the kernel checks it (an x bit for the
//! caller; for root, any x bit), on a regular file (EACCES otherwise); a file that is neither a
//! script nor a binary fails with ENOEXEC (shells then run it as a shell script themselves).
//! Set-user-ID and set-group-ID bits are not honoured (as on a `nosuid` mount).

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;

use iris_fs::{Fs, Resolved};
use libc::{c_char, c_int};

use crate::real;
use crate::route::{self, Target};
use crate::state;

/// Scripts whose interpreter is itself a script, at most (Linux: 4 rewrites of the binary).
pub(crate) const MAX_DEPTH: u32 = 4;
/// The longest `#!` line read, as Linux reads it (`BINPRM_BUF_SIZE`).
const HEAD_BYTES: usize = 256;

/// What an exec of a path runs.
pub(crate) enum Launch {
    /// Not a program in Iris: exec it as asked.
    AsAsked,
    /// Run this instead.
    Instead(Plan),
    /// Fail with this errno.
    Fail(c_int),
}

/// A file the kernel can execute, with its arguments.
pub(crate) struct Plan {
    /// The path the kernel executes.
    pub(crate) path: CString,
    /// Its arguments.
    argv: Vec<CString>,
    /// The argument pointers (NULL-terminated), into `argv`.
    ptrs: Vec<*const c_char>,
    /// The memfd holding a binary's bytes (named by `path`), closed when the plan is dropped
    /// (after a failed exec; a successful one closes it, being close-on-exec).
    image: Option<c_int>,
    /// Directories to put first in the program's `LD_LIBRARY_PATH` (copies of the libraries it
    /// needs from Iris), joined by `:`.
    pub(crate) library_path: Option<Vec<u8>>,
}

impl Plan {
    fn new(path: Vec<u8>, argv: Vec<Vec<u8>>, image: Option<c_int>) -> Result<Plan, c_int> {
        let path = CString::new(path).map_err(|_| libc::ENOENT)?;
        let argv: Vec<CString> = argv
            .into_iter()
            .map(CString::new)
            .collect::<Result<_, _>>()
            .map_err(|_| libc::EINVAL)?;
        let mut ptrs: Vec<*const c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        Ok(Plan {
            path,
            argv,
            ptrs,
            image,
            library_path: None,
        })
    }

    /// The NULL-terminated argument array.
    pub(crate) fn argv(&self) -> *const *const c_char {
        debug_assert_eq!(self.ptrs.len(), self.argv.len() + 1);
        self.ptrs.as_ptr()
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        if let Some(fd) = self.image {
            // SAFETY: closing the memfd this plan made and owns.
            unsafe { real::close(fd) };
        }
    }
}

/// The arguments of a NULL-terminated array (none for NULL).
///
/// # Safety
/// `argv` is NULL or a NULL-terminated array of C strings.
unsafe fn args(argv: *const *const c_char) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if argv.is_null() {
        return out;
    }
    loop {
        // SAFETY: per the contract, entries up to the NULL are readable.
        let p = unsafe { *argv.add(out.len()) };
        if p.is_null() {
            return out;
        }
        // SAFETY: a C string of the array.
        out.push(unsafe { CStr::from_ptr(p) }.to_bytes().to_vec());
    }
}

/// What an exec of `path` (as given to execve: absolute, or relative to the working directory)
/// with arguments `argv` runs.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `argv` NULL or a NULL-terminated array of them.
pub(crate) unsafe fn plan(path: *const c_char, argv: *const *const c_char) -> Launch {
    // SAFETY: the caller's path.
    let Target::Iris { start, path: rel } = (unsafe { route::target_at(libc::AT_FDCWD, path) })
    else {
        return Launch::AsAsked;
    };
    let Some(fs) = state::fs() else {
        return Launch::Fail(libc::EIO);
    };
    // SAFETY: routed to Iris, so non-null and NUL-terminated.
    let shown = unsafe { CStr::from_ptr(path) }.to_bytes().to_vec();
    // SAFETY: the caller's arguments.
    let argv = unsafe { args(argv) };
    match plan_iris(fs, start, &rel, shown, argv, 0) {
        Ok(p) => Launch::Instead(p),
        Err(e) => Launch::Fail(e),
    }
}

/// What an exec of the Iris file open as `fd` (inode `ino`) runs (`fexecve`).
///
/// # Safety
/// `argv` is NULL or a NULL-terminated array of C strings.
pub(crate) unsafe fn plan_inode(fd: c_int, ino: u64, argv: *const *const c_char) -> Launch {
    let Some(fs) = state::fs() else {
        return Launch::Fail(libc::EIO);
    };
    // SAFETY: the caller's arguments.
    let argv = unsafe { args(argv) };
    // A script run through its fd is named by the fd, as Linux names it.
    let shown = format!("/dev/fd/{fd}").into_bytes();
    match launch_inode(fs, ino, shown, argv, 0) {
        Ok(p) => Launch::Instead(p),
        Err(e) => Launch::Fail(e),
    }
}

/// [`plan`] for Iris path `rel` from directory `start`, given by the caller as `shown`.
fn plan_iris(
    fs: &Fs,
    start: u64,
    rel: &[u8],
    shown: Vec<u8>,
    argv: Vec<Vec<u8>>,
    depth: u32,
) -> Result<Plan, c_int> {
    match fs
        .resolve_or_leave(&state::cred(), start, rel, true)
        .map_err(|e| e.0)?
    {
        Resolved::Host(host) => Plan::new(host, argv, None),
        Resolved::Inode(ino) => launch_inode(fs, ino, shown, argv, depth),
    }
}

/// [`plan`] for Iris inode `ino`, given by the caller as `shown`.
fn launch_inode(
    fs: &Fs,
    ino: u64,
    shown: Vec<u8>,
    argv: Vec<Vec<u8>>,
    depth: u32,
) -> Result<Plan, c_int> {
    let inode = crate::loadable::regular_file(fs, ino, iris_fs::X_OK, libc::EACCES)?;
    let mut head = [0u8; HEAD_BYTES];
    let n = fs.read(ino, 0, &mut head).map_err(|e| e.0)?;
    let head = &head[..n];
    if let Some(line) = head.strip_prefix(b"#!") {
        let (interp, arg) = interpreter_line(line).ok_or(libc::ENOEXEC)?;
        if depth >= MAX_DEPTH {
            return Err(libc::ELOOP);
        }
        let mut next = vec![interp.clone()];
        next.extend(arg);
        next.push(shown);
        next.extend(argv.into_iter().skip(1));
        let interp_c = CString::new(interp.clone()).map_err(|_| libc::ENOEXEC)?;
        // SAFETY: a NUL-terminated string of our own.
        return match unsafe { route::target_at(libc::AT_FDCWD, interp_c.as_ptr()) } {
            Target::Iris { start, path } => plan_iris(fs, start, &path, interp, next, depth + 1),
            Target::Host => Plan::new(interp, next, None),
        };
    }
    if head.starts_with(b"\x7fELF") {
        // A host copy kept at its Iris path (made once per version of the file), executed by
        // its path: $ORIGIN is then its directory, where copies of its libraries go too.
        if let Some(plan) = from_host_copy(fs, ino, &shown, &argv) {
            return Ok(plan);
        }
        let bytes = crate::loadable::read_all(fs, ino, inode.size)?;
        // Libraries it finds in Iris (a build's own, by an absolute or $ORIGIN search path)
        // are copied out, their directories put first in LD_LIBRARY_PATH.
        let origin = crate::cwd::absolute(&shown)
            .map(|p| p[..p.iter().rposition(|b| *b == b'/').unwrap_or(0)].to_vec());
        let dirs = origin
            .map(|o| crate::loadable::dependency_dirs(fs, &bytes, &o))
            .unwrap_or_default();
        let fd = image(&bytes)?;
        let mut plan = Plan::new(format!("/proc/self/fd/{fd}").into_bytes(), argv, Some(fd))?;
        plan.library_path = (!dirs.is_empty()).then(|| dirs.join(&b':'));
        return Ok(plan);
    }
    Err(libc::ENOEXEC)
}

/// [`launch_inode`] of a binary through its host copy (see `loadable::host_copy`), at the
/// binary's real Iris path (symlinks resolved, as the loader's `$ORIGIN` is); `None` where
/// that cannot be (no such path: `fexecve`; /dev/shm mounted `noexec`; the copy failed): the
/// caller runs a memfd image instead.
fn from_host_copy(fs: &Fs, ino: u64, shown: &[u8], argv: &[Vec<u8>]) -> Option<Plan> {
    let shown = CString::new(shown).ok()?;
    // SAFETY: a NUL-terminated path; the interposed realpath allocates the result.
    let resolved = unsafe { crate::more::realpath(shown.as_ptr(), std::ptr::null_mut()) };
    if resolved.is_null() {
        return None;
    }
    // SAFETY: realpath's NUL-terminated result, copied out, then freed as malloc's.
    let abs = unsafe { CStr::from_ptr(resolved) }.to_bytes().to_vec();
    // SAFETY: as above.
    unsafe { libc::free(resolved.cast()) };
    route::strip_prefix(&abs)?;
    let _busy = state::Busy::enter();
    // SAFETY: all-zero is a valid statvfs; libc fills it for a NUL-terminated path.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    let dir = CString::new(iris_fs::host_files::DIR).ok()?;
    // SAFETY: as above.
    if unsafe { libc::statvfs(dir.as_ptr(), &mut vfs) } != 0 || vfs.f_flag & libc::ST_NOEXEC != 0 {
        return None;
    }
    let copy = crate::loadable::host_copy(fs, ino, &abs).ok()?;
    let bytes = std::fs::read(std::ffi::OsStr::from_bytes(copy.as_bytes())).ok()?;
    let origin = &abs[..abs.iter().rposition(|b| *b == b'/').unwrap_or(0)];
    let dirs = crate::loadable::dependency_dirs(fs, &bytes, origin);
    let mut plan = Plan::new(copy.into_bytes(), argv.to_vec(), None).ok()?;
    plan.library_path = (!dirs.is_empty()).then(|| dirs.join(&b':'));
    Some(plan)
}

/// The interpreter and its optional argument from the rest of a `#!` line, as Linux splits it:
/// blanks around the interpreter skipped, everything after it up to the line's end (trailing
/// blanks trimmed) one argument. `None` if the line names no interpreter.
fn interpreter_line(line: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let end = line.iter().position(|b| *b == b'\n').unwrap_or(line.len());
    let line = &line[..end];
    let start = line.iter().position(|b| !blank(b))?;
    let line = &line[start..];
    let line = &line[..line.iter().rposition(|b| !blank(b))? + 1];
    let split = line.iter().position(blank).unwrap_or(line.len());
    let interp = line[..split].to_vec();
    let rest = &line[split..];
    let arg = rest
        .iter()
        .position(|b| !blank(b))
        .map(|at| rest[at..].to_vec());
    Some((interp, arg))
}

/// A close-on-exec memfd holding `bytes` (a program's, or a library's).
pub(crate) fn image(bytes: &[u8]) -> Result<c_int, c_int> {
    // SAFETY: a NUL-terminated name; memfd_create takes no other memory.
    let fd = unsafe { libc::memfd_create(c"iris-exec".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(crate::loadable::last_errno());
    }
    crate::loadable::write_all(fd, bytes).inspect_err(|_| {
        // SAFETY: closing the memfd made above.
        unsafe { real::close(fd) };
    })?;
    Ok(fd)
}

/// The directories of `PATH` as a search for `file` (no slash in it) would visit them, if any
/// of them is in Iris: then the search must be Iris's (else glibc's, as asked). An empty entry
/// is the working directory.
pub(crate) fn search_path(file: &[u8]) -> Option<Vec<Vec<u8>>> {
    // libc's getenv, not std's: std takes a lock, which a child forked while another thread
    // held it (execvp runs between fork and exec) would wait for forever.
    // SAFETY: a NUL-terminated name; getenv returns NULL or a NUL-terminated string of the
    // environment, copied out at once.
    let value = unsafe { libc::getenv(c"PATH".as_ptr()) };
    let path = if value.is_null() {
        b"/bin:/usr/bin".to_vec()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(value) }.to_bytes().to_vec()
    };
    let dirs: Vec<Vec<u8>> = path.split(|b| *b == b':').map(<[u8]>::to_vec).collect();
    let in_iris = dirs.iter().any(|d| {
        if d.first() == Some(&b'/') {
            route::strip_prefix(d).is_some()
        } else {
            crate::cwd::iris_cwd().is_some()
        }
    });
    (in_iris && !file.is_empty()).then_some(dirs)
}

/// The first `dir/file` of `dirs` (see [`search_path`]) that exists as a file, as the path to
/// exec; ENOENT if none does, EACCES if one was there but not executable.
pub(crate) fn search(dirs: &[Vec<u8>], file: &[u8]) -> Result<CString, c_int> {
    let mut denied = false;
    for dir in dirs {
        let mut cand = if dir.is_empty() {
            b".".to_vec()
        } else {
            dir.clone()
        };
        cand.push(b'/');
        cand.extend_from_slice(file);
        let Ok(c) = CString::new(cand) else { continue };
        // SAFETY: a NUL-terminated path; the interposed access serves Iris and host paths.
        if unsafe { crate::calls::access(c.as_ptr(), libc::X_OK) } == 0 {
            if !is_dir(&c) {
                return Ok(c);
            }
            denied = true; // as an exec of it would: EACCES, and the search goes on
            continue;
        }
        denied |= crate::loadable::last_errno() == libc::EACCES;
    }
    Err(if denied { libc::EACCES } else { libc::ENOENT })
}

/// Whether `path` names a directory (through the interposed statx: Iris and host paths).
fn is_dir(path: &CStr) -> bool {
    // SAFETY: all-zero is a valid statx, which the call fills.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a live buffer.
    let rc =
        unsafe { crate::calls::statx(libc::AT_FDCWD, path.as_ptr(), 0, libc::STATX_TYPE, &mut st) };
    rc == 0 && u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR
}

#[cfg(test)]
mod tests {
    use super::interpreter_line;

    #[test]
    fn interpreter_lines_split_as_linux_splits_them() {
        let v = |s: &str| s.as_bytes().to_vec();
        assert_eq!(interpreter_line(b"/bin/sh\n"), Some((v("/bin/sh"), None)));
        assert_eq!(
            interpreter_line(b" /usr/bin/env  python3 -u \nprint()"),
            Some((v("/usr/bin/env"), Some(v("python3 -u"))))
        );
        assert_eq!(
            interpreter_line(b"/bin/sh\t-e"),
            Some((v("/bin/sh"), Some(v("-e"))))
        );
        assert_eq!(interpreter_line(b"   \n/bin/sh"), None);
        assert_eq!(interpreter_line(b""), None);
    }
}
