//! Deciding who serves a path: Iris (under a mount prefix, or relative to an Iris directory fd)
//! or the kernel. The common case, a host path, costs one prefix comparison and no allocation.

use std::ffi::CStr;

use iris_fs::ROOT_INO;
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
    if out.is_empty() {
        out.push(b'/');
    }
    Some(out)
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
/// an fd of `/`). The directory's path is looked up only for a path that may lead there.
fn through_host_dir(dirfd: i32, path: &[u8]) -> Option<Vec<u8>> {
    if !may_reach_prefix(path) {
        return None;
    }
    let mut joined = host_dir_path(dirfd)?;
    joined.push(b'/');
    joined.extend_from_slice(path);
    strip_prefix(&crate::cwd::normalize(&joined))
}

/// Whether relative `path` may lead from a host directory into a mount prefix: its first
/// component (past any `.`) is `..` or a component of a prefix. No allocation, no system call.
fn may_reach_prefix(path: &[u8]) -> bool {
    let Some(first) = path
        .split(|b| *b == b'/')
        .find(|c| !c.is_empty() && *c != b".")
    else {
        return false;
    };
    if first == b".." {
        return true;
    }
    let mut hit = false;
    crate::prefix::for_each(|p| {
        hit = p.split(|b| *b == b'/').any(|c| c == first);
        !hit
    });
    hit
}

/// The absolute path of host directory `dirfd` (AT_FDCWD: the working directory).
fn host_dir_path(dirfd: i32) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    let n = if dirfd == libc::AT_FDCWD {
        // SAFETY: a buffer of buf.len() bytes; libc's own getcwd.
        let p = unsafe { crate::real::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
        if p.is_null() {
            return None;
        }
        buf.iter().position(|&b| b == 0)?
    } else {
        let link = format!("/proc/self/fd/{dirfd}\0");
        // SAFETY: a NUL-terminated path and a buffer of buf.len() bytes; libc's own readlink.
        let n = unsafe {
            crate::real::readlink(link.as_ptr().cast(), buf.as_mut_ptr().cast(), buf.len())
        };
        usize::try_from(n).ok().filter(|&n| n < buf.len())?
    };
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
    use super::{may_reach_prefix, tidy};

    #[test]
    fn tidy_drops_repeated_slashes_and_dot_components_only() {
        assert_eq!(tidy(b"/iris/f"), None);
        assert_eq!(tidy(b"//iris/f").as_deref(), Some(&b"/iris/f"[..]));
        assert_eq!(tidy(b"/./iris//./f/.").as_deref(), Some(&b"/iris/f"[..]));
        assert_eq!(tidy(b"//").as_deref(), Some(&b"/"[..]));
        // `..` is left to the resolver (a host symlink before it would change its meaning).
        assert_eq!(tidy(b"/a/../iris"), None);
    }

    #[test]
    fn only_paths_starting_with_dot_dot_or_a_prefix_component_may_reach_the_prefix() {
        // The default prefix, /iris (IRIS_MOUNT is not set for unit tests).
        assert!(may_reach_prefix(b"iris/f"));
        assert!(may_reach_prefix(b"./iris"));
        assert!(may_reach_prefix(b"../x"));
        assert!(!may_reach_prefix(b"irisx/f"));
        assert!(!may_reach_prefix(b"src/iris"));
        assert!(!may_reach_prefix(b"."));
    }
}
