//! Which paths are the floor's, and the backing path each one names. Nothing here allocates: an
//! interposer may be entered from inside malloc, so backing paths are built in a stack buffer.

use std::ffi::CStr;
use std::sync::OnceLock;

use libc::c_char;

use crate::{DEFAULT_DIR, DIR_ENV, MOUNT_PREFIX};

/// Room for a backing path with its NUL (PATH_MAX on Linux).
pub(crate) const PATH_BYTES: usize = 4096;

/// Room for the backing directory's name.
const DIR_BYTES: usize = 1024;

/// Where a path goes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Not under the prefix: libc's own function, untouched.
    Host,
    /// Under the prefix; the backing path (NUL-terminated) is in the caller's buffer.
    Floor,
    /// Under the prefix, but the backing path would not fit: ENAMETOOLONG.
    TooLong,
}

/// The backing directory, read from the environment once.
struct BackingDir {
    bytes: [u8; DIR_BYTES],
    len: usize,
}

/// `$IRIS_FLOOR_DIR` without trailing slashes, else [`DEFAULT_DIR`]; `None` if it is too long.
fn backing_dir() -> Option<&'static [u8]> {
    static DIR: OnceLock<Option<BackingDir>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let mut name = [0u8; DIR_ENV.len() + 1];
        name[..DIR_ENV.len()].copy_from_slice(DIR_ENV.as_bytes());
        // SAFETY: `name` is NUL-terminated; getenv returns NULL or a NUL-terminated string that
        // stays valid while no one calls setenv (the shim copies it at once).
        let value = unsafe { libc::getenv(name.as_ptr().cast()) };
        let chosen: &[u8] = if value.is_null() {
            DEFAULT_DIR.as_bytes()
        } else {
            // SAFETY: non-null, NUL-terminated (above).
            match unsafe { CStr::from_ptr(value) }.to_bytes() {
                [] => DEFAULT_DIR.as_bytes(),
                v => v,
            }
        };
        let trimmed = trim_slashes(chosen);
        if trimmed.len() > DIR_BYTES {
            return None;
        }
        let mut bytes = [0u8; DIR_BYTES];
        bytes[..trimmed.len()].copy_from_slice(trimmed);
        Some(BackingDir {
            bytes,
            len: trimmed.len(),
        })
    });
    dir.as_ref().map(|d| &d.bytes[..d.len])
}

/// `dir` without trailing slashes ("/" stays "/").
fn trim_slashes(dir: &[u8]) -> &[u8] {
    let mut end = dir.len();
    while end > 1 && dir[end - 1] == b'/' {
        end -= 1;
    }
    &dir[..end]
}

/// Route a C path: for a floor path, write its backing path into `out`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
pub(crate) unsafe fn route(path: *const c_char, out: &mut [u8; PATH_BYTES]) -> Route {
    if path.is_null() {
        return Route::Host; // the kernel answers EFAULT
    }
    // SAFETY: non-null and NUL-terminated (the caller's contract).
    let path = unsafe { CStr::from_ptr(path) }.to_bytes();
    if under_prefix(path).is_none() {
        return Route::Host;
    }
    match backing_dir() {
        Some(dir) => rewrite(path, dir, out),
        None => Route::TooLong,
    }
}

/// What follows the prefix ("" or "/..."), if `path` is the prefix or below it.
fn under_prefix(path: &[u8]) -> Option<&[u8]> {
    let rest = path.strip_prefix(MOUNT_PREFIX.as_bytes())?;
    (rest.is_empty() || rest[0] == b'/').then_some(rest)
}

/// Write `dir` + what follows the prefix in `path`, NUL-terminated, into `out`.
fn rewrite(path: &[u8], dir: &[u8], out: &mut [u8; PATH_BYTES]) -> Route {
    let Some(rest) = under_prefix(path) else {
        return Route::Host;
    };
    let len = dir.len() + rest.len();
    if len + 1 > PATH_BYTES {
        return Route::TooLong;
    }
    out[..dir.len()].copy_from_slice(dir);
    out[dir.len()..len].copy_from_slice(rest);
    out[len] = 0;
    Route::Floor
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backing(path: &[u8], dir: &[u8]) -> Option<Vec<u8>> {
        let mut out = [0u8; PATH_BYTES];
        match rewrite(path, dir, &mut out) {
            Route::Floor => {
                let end = out.iter().position(|b| *b == 0)?;
                Some(out[..end].to_vec())
            }
            _ => None,
        }
    }

    #[test]
    fn floor_paths_land_in_the_backing_dir() {
        assert_eq!(backing(b"/floor", b"/d").as_deref(), Some(&b"/d"[..]));
        assert_eq!(backing(b"/floor/", b"/d").as_deref(), Some(&b"/d/"[..]));
        assert_eq!(
            backing(b"/floor/a/b", b"/d").as_deref(),
            Some(&b"/d/a/b"[..])
        );
    }

    #[test]
    fn other_paths_are_the_hosts() {
        assert_eq!(backing(b"/floorboard", b"/d"), None);
        assert_eq!(backing(b"/flo", b"/d"), None);
        assert_eq!(backing(b"floor/a", b"/d"), None);
        assert_eq!(backing(b"/iris/floor", b"/d"), None);
    }

    #[test]
    fn overlong_backing_paths_are_refused() {
        let mut out = [0u8; PATH_BYTES];
        let long = vec![b'x'; PATH_BYTES];
        let mut path = b"/floor/".to_vec();
        path.extend_from_slice(&long);
        assert_eq!(rewrite(&path, b"/d", &mut out), Route::TooLong);
    }

    #[test]
    fn trailing_slashes_of_the_dir_are_dropped() {
        assert_eq!(trim_slashes(b"/dev/shm/x//"), b"/dev/shm/x");
        assert_eq!(trim_slashes(b"/"), b"/");
    }
}
