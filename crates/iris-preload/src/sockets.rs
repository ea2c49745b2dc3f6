//! Unix-domain sockets named by Iris paths. A socket is a kernel object: the kernel can only
//! bind it to a name in a file system it knows, so it went to the kernel's working directory
//! (a relative name from an Iris directory made the socket in the host's `/`) or failed (an
//! absolute Iris name: ENOENT). `bind` and `connect` of such a name use a host name instead,
//! one per volume and Iris path: `/dev/shm/iris-sock-VOLID-HASH` (a hash of the absolute path,
//! so any length of Iris path fits `sun_path`); `unlink` of the Iris path removes it. Not
//! covered: the socket is not listed in its Iris directory nor found by `stat`, and
//! `getsockname` names the host path.

use std::ffi::CStr;

use libc::{c_char, c_int, sockaddr, sockaddr_un, socklen_t};

use crate::real;
use crate::route::{self, Target};
use crate::state;

/// FNV-1a over `bytes`: the same in every process and build.
fn path_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The host name of the socket at absolute Iris path `abs`.
fn host_name(volume_id: u64, abs: &[u8]) -> String {
    format!(
        "{}/iris-sock-{volume_id:016x}-{:016x}",
        iris_fs::host_files::DIR,
        path_hash(abs)
    )
}

/// The host name of the socket an Iris path names (NUL-terminated `path`), if it routes to
/// Iris; `Err` with an errno if its directory does not exist there.
///
/// # Safety
/// `path` is NUL-terminated.
unsafe fn for_path(path: *const c_char) -> Option<Result<String, c_int>> {
    // SAFETY: the caller's path.
    let Target::Iris { start, path: rel } = (unsafe { route::target(path) }) else {
        return None;
    };
    let fs = state::fs()?;
    // SAFETY: routed to Iris, so NUL-terminated.
    let given = unsafe { CStr::from_ptr(path) }.to_bytes();
    let abs = crate::cwd::absolute(given)?;
    if let Err(e) = fs.resolve_parent(&state::cred(), start, &rel) {
        return Some(Err(e.0));
    }
    Some(Ok(host_name(fs.store().volume_id(), &abs)))
}

/// `addr` with its Iris path replaced by the host name (see the module doc), if it is a
/// Unix-domain address naming an Iris path.
///
/// # Safety
/// `addr` is NULL or points at `len` readable bytes.
unsafe fn translated(
    addr: *const sockaddr,
    len: socklen_t,
) -> Option<Result<(sockaddr_un, socklen_t), c_int>> {
    let family_end = std::mem::size_of::<libc::sa_family_t>();
    if addr.is_null() || (len as usize) <= family_end {
        return None;
    }
    // SAFETY: at least the family is readable (len covers it).
    if c_int::from(unsafe { (*addr).sa_family }) != libc::AF_UNIX {
        return None;
    }
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut un: sockaddr_un = unsafe { std::mem::zeroed() };
    let n = (len as usize).min(std::mem::size_of::<sockaddr_un>());
    // SAFETY: `n` bytes are readable at `addr` and fit `un`.
    unsafe { std::ptr::copy_nonoverlapping(addr.cast::<u8>(), (&raw mut un).cast::<u8>(), n) };
    let raw: Vec<u8> = un.sun_path[..n - family_end]
        .iter()
        .map(|c| *c as u8)
        .take_while(|b| *b != 0)
        .collect();
    if raw.is_empty() {
        return None; // unnamed or abstract
    }
    let path = std::ffi::CString::new(raw).ok()?;
    // SAFETY: a NUL-terminated path.
    let host = match unsafe { for_path(path.as_ptr()) }? {
        Ok(h) => h,
        Err(e) => return Some(Err(e)),
    };
    // SAFETY: as above.
    let mut out: sockaddr_un = unsafe { std::mem::zeroed() };
    out.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in out.sun_path.iter_mut().zip(host.bytes()) {
        *d = s as c_char;
    }
    Some(Ok((out, (family_end + host.len() + 1) as socklen_t)))
}

#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's address.
    match unsafe { translated(addr, len) } {
        // SAFETY: forwarding the caller's arguments.
        None => unsafe { real::bind(fd, addr, len) },
        // SAFETY: our own address of the given length.
        Some(Ok((un, n))) => unsafe { real::bind(fd, (&raw const un).cast(), n) },
        Some(Err(e)) => crate::errno::fail(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's address.
    match unsafe { translated(addr, len) } {
        // SAFETY: forwarding the caller's arguments.
        None => unsafe { real::connect(fd, addr, len) },
        // SAFETY: our own address of the given length.
        Some(Ok((un, n))) => unsafe { real::connect(fd, (&raw const un).cast(), n) },
        Some(Err(e)) => crate::errno::fail(e),
    }
}

/// After `unlink` of Iris path `path` found nothing: remove the host socket it names, if any
/// (a server removes its old socket before binding anew). Whether one was removed.
///
/// # Safety
/// `path` is NUL-terminated.
pub(crate) unsafe fn unlink_socket(path: *const c_char) -> bool {
    // SAFETY: the caller's path.
    let Some(Ok(host)) = (unsafe { for_path(path) }) else {
        return false;
    };
    let Ok(host) = std::ffi::CString::new(host) else {
        return false;
    };
    // SAFETY: a NUL-terminated path of our own.
    unsafe { real::unlink(host.as_ptr()) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_fit_sun_path_and_differ_by_path() {
        let a = host_name(
            u64::MAX,
            b"/iris/a/very/long/path/that/goes/on/and/on/redis.sock",
        );
        assert!(a.len() < 108);
        assert_ne!(a, host_name(u64::MAX, b"/iris/b.sock"));
        assert_eq!(
            a,
            host_name(
                u64::MAX,
                b"/iris/a/very/long/path/that/goes/on/and/on/redis.sock"
            )
        );
    }
}
