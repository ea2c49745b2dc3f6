//! Deciding who serves a path: Iris (under a mount prefix, or relative to an Iris directory fd)
//! or the kernel. The common case, a host path, costs one prefix comparison and no allocation.

use std::ffi::{CStr, CString};

use iris_fs::{Resolved, ROOT_INO};
use libc::{c_char, c_int};

use crate::fdtable;
use crate::state;

/// Where a path lives.
pub(crate) enum Target {
    /// Not ours: pass the call to libc.
    Host,
    /// Ours: resolve `path` from directory inode `start`.
    Iris { start: u64, path: Vec<u8> },
}

/// The path relative to the Iris root if `bytes` is under a mount prefix.
pub(crate) fn strip_prefix(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut matched = 0usize;
    crate::prefix::for_each(|p| {
        if bytes.starts_with(p) && (bytes.len() == p.len() || bytes[p.len()] == b'/') {
            matched = p.len();
            return false;
        }
        true
    });
    if matched == 0 {
        return None;
    }
    // Allocation only once the path is known to be Iris's.
    let rest = &bytes[matched..];
    Some(if rest.is_empty() {
        b"/".to_vec()
    } else {
        rest.to_vec()
    })
}

/// Absolute `path` without repeated slashes and `.` components (`//iris/./f` is `/iris/f`,
/// as Linux resolves it), if it has any; None when it is tidy already (no allocation then).
fn tidy(path: &[u8]) -> Option<Vec<u8>> {
    let untidy = path.windows(2).any(|w| w == b"//")
        || path.windows(3).any(|w| w == b"/./")
        || path.ends_with(b"/.");
    if !untidy {
        return None;
    }
    let mut out = Vec::with_capacity(path.len());
    for c in path
        .split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
    {
        out.push(b'/');
        out.extend_from_slice(c);
    }
    // A trailing slash (or `/.`) says "a directory": kept.
    if out.is_empty() || path.ends_with(b"/") || path.ends_with(b"/.") {
        out.push(b'/');
    }
    Some(out)
}

/// The host path that Iris path `path` (from directory `start`) leads to through a symlink to
/// an absolute path outside the mount prefix (a Python venv's `bin/python` ->
/// `/usr/bin/python3`, `inc` -> `/usr/include` in `inc/stdio.h`), for a call on it that failed
/// with EXDEV, which the file system answers for such a path: the call is then made on the host
/// path (by libc). `None` if the path does not lead out.
pub(crate) fn left_for_host(start: u64, path: &[u8], follow_last: bool) -> Option<CString> {
    let fs = state::fs()?;
    match fs
        .resolve_or_leave(&state::cred(), start, path, follow_last)
        .ok()?
    {
        Resolved::Host(host) => CString::new(host).ok(),
        Resolved::Inode(_) => None,
    }
}

/// Classify `path` given relative to `dirfd` (AT_FDCWD for the working directory).
///
/// # Safety
/// `path` must be NULL or a valid NUL-terminated string.
pub(crate) unsafe fn target_at(dirfd: i32, path: *const c_char) -> Target {
    if path.is_null() || state::busy() {
        return Target::Host;
    }
    // SAFETY: caller guarantees a valid C string.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if bytes.first() == Some(&b'/') {
        return match strip_prefix(bytes).or_else(|| strip_prefix(&tidy(bytes)?)) {
            Some(rel) => Target::Iris {
                start: ROOT_INO,
                path: rel,
            },
            None => Target::Host,
        };
    }
    if dirfd == libc::AT_FDCWD {
        if let Some(ino) = crate::cwd::iris_cwd() {
            return Target::Iris {
                start: ino,
                path: bytes.to_vec(),
            };
        }
    } else {
        if let Some(f) = fdtable::get(dirfd) {
            return Target::Iris {
                start: f.ino,
                path: bytes.to_vec(),
            };
        }
    }
    match through_host_dir(dirfd, bytes) {
        Some(rel) => Target::Iris {
            start: ROOT_INO,
            path: rel,
        },
        None => Target::Host,
    }
}

/// The path under the Iris root that relative `path` names from host directory `dirfd`
/// (AT_FDCWD: the working directory), if it leads into a mount prefix: `iris/f` from `/`,
/// `../iris/f` from `/tmp` (rsync walks to its destination so, one component at a time from
/// an fd of `/`). Only the leading `..` climb the host directory (lexically, from its real
/// path); the rest goes to Iris's resolver as given (an Iris symlink before a later `..` is
/// followed first, as Linux does). A path whose first component is no prefix's costs no
/// system call; a leading `..` from the working directory reads a cached copy of its path.
fn through_host_dir(dirfd: i32, path: &[u8]) -> Option<Vec<u8>> {
    let (ups, rest) = leading_ups(path);
    let first = rest
        .split(|b| *b == b'/')
        .next()
        .filter(|c| !c.is_empty())?;
    if ups == 0 && !is_prefix_component(first) {
        return None;
    }
    let join = |base: &[u8]| -> Option<Vec<u8>> {
        let mut base = base;
        for _ in 0..ups {
            base = parent(base);
        }
        if !leads_into_prefix(base, first) {
            return None;
        }
        let mut joined = base.to_vec();
        if joined.last() != Some(&b'/') {
            joined.push(b'/');
        }
        joined.extend_from_slice(rest);
        strip_prefix(&joined)
    };
    if dirfd == libc::AT_FDCWD {
        crate::cwd::with_host_cwd(join)
    } else {
        join(&host_dir_path(dirfd)?)
    }
}

/// How many leading `..` components `path` has (past `.` and empty ones), and what follows
/// them.
fn leading_ups(path: &[u8]) -> (usize, &[u8]) {
    let mut ups = 0;
    let mut rest = path;
    loop {
        let end = rest.iter().position(|b| *b == b'/').unwrap_or(rest.len());
        let (c, tail) = (&rest[..end], rest.get(end + 1..).unwrap_or(&[]));
        match c {
            b"" | b"." if !tail.is_empty() => rest = tail,
            b".." => {
                ups += 1;
                rest = tail;
            }
            _ => return (ups, rest),
        }
    }
}

/// The parent of absolute path `p` (`/` for `/`).
fn parent(p: &[u8]) -> &[u8] {
    let p = p.strip_suffix(b"/").filter(|q| !q.is_empty()).unwrap_or(p);
    match p.iter().rposition(|b| *b == b'/') {
        Some(0) | None => b"/",
        Some(i) => &p[..i],
    }
}

/// Whether some prefix is `base/first` or lies below it. No allocation.
fn leads_into_prefix(base: &[u8], first: &[u8]) -> bool {
    let base = if base == b"/" { &b""[..] } else { base };
    let mut hit = false;
    crate::prefix::for_each(|p| {
        hit = p
            .strip_prefix(base)
            .and_then(|r| r.strip_prefix(b"/"))
            .and_then(|r| r.strip_prefix(first))
            .is_some_and(|r| r.is_empty() || r[0] == b'/');
        !hit
    });
    hit
}

/// Whether `c` is a component of some prefix. No allocation, no system call.
fn is_prefix_component(c: &[u8]) -> bool {
    let mut hit = false;
    crate::prefix::for_each(|p| {
        hit = p.split(|b| *b == b'/').any(|x| x == c);
        !hit
    });
    hit
}

/// The absolute path of host directory fd `dirfd`.
fn host_dir_path(dirfd: i32) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    let link = format!("/proc/self/fd/{dirfd}\0");
    // SAFETY: a NUL-terminated path and a buffer of buf.len() bytes; libc's own readlink.
    let n =
        unsafe { crate::real::readlink(link.as_ptr().cast(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = usize::try_from(n).ok().filter(|&n| n < buf.len())?;
    buf.truncate(n);
    (buf.first() == Some(&b'/')).then_some(buf)
}

/// Classify an absolute or cwd-relative path.
///
/// # Safety
/// As [`target_at`].
pub(crate) unsafe fn target(path: *const c_char) -> Target {
    // SAFETY: forwarded contract.
    unsafe { target_at(libc::AT_FDCWD, path) }
}

/// The open Iris file a host path reopens, as Linux reopens an open file by `/dev/stdin`,
/// `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`, `/proc/thread-self/fd/N` or
/// `/proc/PID/fd/N` (this process): the kernel would reopen the fd's placeholder instead. So
/// would a `stat` or `access` of such a path.
///
/// # Safety
/// `path` is null or a valid C string.
pub(crate) unsafe fn reopened(path: *const c_char) -> Option<std::sync::Arc<fdtable::OpenFile>> {
    // SAFETY: forwarded contract.
    let (fd, _) = unsafe { fd_named_by(path) }?;
    fdtable::get(fd)
}

/// The open Iris file whose fd a host path is the kernel's link to (`/dev/fd/N`,
/// `/proc/self/fd/N`, `/proc/thread-self/fd/N`, `/proc/PID/fd/N` of this process): what
/// `readlink` of it names. (`/dev/stdin` and its kin are ordinary symlinks to `/proc/self/fd/N`.)
///
/// # Safety
/// `path` is null or a valid C string.
pub(crate) unsafe fn fd_link(path: *const c_char) -> Option<std::sync::Arc<fdtable::OpenFile>> {
    // SAFETY: forwarded contract.
    match unsafe { fd_named_by(path) }? {
        (fd, true) => fdtable::get(fd),
        (_, false) => None,
    }
}

/// The fd number a path names (see [`reopened`]), and whether the path is the kernel's link
/// to the fd itself rather than a symlink to that link (`/dev/stdin`...).
///
/// # Safety
/// `path` is null or a valid C string.
unsafe fn fd_named_by(path: *const c_char) -> Option<(c_int, bool)> {
    if path.is_null() {
        return None;
    }
    // SAFETY: a valid C string (the caller's promise).
    let b = unsafe { CStr::from_ptr(path) }.to_bytes();
    if !b.starts_with(b"/dev/") && !b.starts_with(b"/proc/") {
        return None;
    }
    match b {
        b"/dev/stdin" => Some((0, false)),
        b"/dev/stdout" => Some((1, false)),
        b"/dev/stderr" => Some((2, false)),
        _ => {
            // `/proc/PID/fd/N` of this process (digits compared, nothing allocated).
            let own = || {
                let rest = b.strip_prefix(b"/proc/")?;
                let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
                let n = rest[digits..].strip_prefix(b"/fd/")?;
                let pid: i64 = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
                // SAFETY: getpid has no preconditions.
                (pid == i64::from(unsafe { libc::getpid() })).then_some(n)
            };
            let n = b
                .strip_prefix(b"/dev/fd/")
                .or_else(|| b.strip_prefix(b"/proc/self/fd/"))
                .or_else(|| b.strip_prefix(b"/proc/thread-self/fd/"))
                .or_else(own)?;
            if n.is_empty() || !n.iter().all(u8::is_ascii_digit) {
                return None;
            }
            Some((std::str::from_utf8(n).ok()?.parse::<c_int>().ok()?, true))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{is_prefix_component, leading_ups, leads_into_prefix, parent, tidy};

    #[test]
    fn tidy_drops_repeated_slashes_and_dot_components_and_keeps_a_trailing_slash() {
        assert_eq!(tidy(b"/iris/f"), None);
        assert_eq!(tidy(b"//iris/f").as_deref(), Some(&b"/iris/f"[..]));
        assert_eq!(tidy(b"/./iris//./f/.").as_deref(), Some(&b"/iris/f/"[..]));
        assert_eq!(tidy(b"//iris/f/").as_deref(), Some(&b"/iris/f/"[..]));
        assert_eq!(tidy(b"//").as_deref(), Some(&b"/"[..]));
        // `..` is left to the resolver (a host symlink before it would change its meaning).
        assert_eq!(tidy(b"/a/../iris"), None);
    }

    #[test]
    fn leading_dot_dots_are_counted_and_the_rest_kept_as_given() {
        assert_eq!(leading_ups(b"../../iris/a/../f"), (2, &b"iris/a/../f"[..]));
        assert_eq!(leading_ups(b"./../iris"), (1, &b"iris"[..]));
        assert_eq!(leading_ups(b"iris/f"), (0, &b"iris/f"[..]));
        assert_eq!(parent(b"/a/b"), b"/a");
        assert_eq!(parent(b"/a"), b"/");
        assert_eq!(parent(b"/"), b"/");
    }

    #[test]
    fn only_a_prefix_at_or_below_the_joined_directory_is_reached() {
        // The default prefix, /iris (IRIS_MOUNT is not set for unit tests).
        assert!(is_prefix_component(b"iris"));
        assert!(!is_prefix_component(b"irisx"));
        assert!(leads_into_prefix(b"/", b"iris"));
        assert!(!leads_into_prefix(b"/tmp", b"iris"));
        assert!(!leads_into_prefix(b"/", b"irisx"));
    }
}
