//! The caller's identity (user, group, supplementary groups) and file-mode creation mask,
//! remembered between requests instead of asked of the kernel at each: a system call costs
//! about 220 ns here, and every request checks permissions (`geteuid`, and for other users
//! than root `getegid` and `getgroups` too), every create applies the umask (two `umask`
//! calls to read it).
//!
//! A remembered identity is used only while nothing can have changed it. Every libc call that
//! changes a process's ids or groups goes through the wrappers below, which move
//! [`GENERATION`] once the change is made; a thread checks its remembered identity against it
//! at each request. The identity is remembered per thread: a raw `setresuid` system call
//! (`syscall()`, followed in `uring`) changes the calling thread's ids only, and each thread
//! then asks the kernel for its own. After `unshare` or `setns` (a new user namespace maps ids
//! anew, possibly later and from another process; a thread unshared from the file-system
//! context has a umask of its own) or a `clone` into a new user namespace, nothing is
//! remembered any more: every request asks the kernel, as before.
//!
//! What is not seen: an id change made by a raw system call instruction outside libc's
//! `syscall()` (a program that does that bypasses libc for its file calls too).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use iris_fs::Cred;
use libc::{c_int, gid_t, mode_t, uid_t};

use crate::real;

/// Moves after every change of ids or groups this process makes.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// Set for good once ids or the umask may change where the wrappers cannot see.
static NEVER: AtomicBool = AtomicBool::new(false);
/// The process's umask, or [`UNKNOWN`].
static UMASK: AtomicU32 = AtomicU32::new(UNKNOWN);
const UNKNOWN: u32 = u32::MAX;

thread_local! {
    /// This thread's identity and the [`GENERATION`] it was read in. A `Cell` taken and put
    /// back, not a `RefCell`: a signal handler's request may interrupt a refill.
    static REMEMBERED: Cell<Option<(u64, Cred)>> = const { Cell::new(None) };
}

/// The calling thread's credentials, as the kernel would check them now.
pub(crate) fn cred() -> Cred {
    if NEVER.load(Ordering::Relaxed) {
        return Cred::current();
    }
    let gen = GENERATION.load(Ordering::Acquire);
    let hit = REMEMBERED.try_with(|slot| {
        let kept = slot.take();
        let cred = match kept {
            Some((g, cred)) if g == gen => cred,
            _ => {
                let cred = Cred::current();
                // Read the group now, once, rather than at each create (root's is lazy).
                cred.gid();
                cred
            }
        };
        slot.set(Some((gen, cred.clone())));
        cred
    });
    // (While the thread's locals are being torn down: ask the kernel.)
    hit.unwrap_or_else(|_| Cred::current())
}

/// The process's file-mode creation mask.
pub(crate) fn umask_now() -> u32 {
    if !NEVER.load(Ordering::Relaxed) {
        let m = UMASK.load(Ordering::Acquire);
        if m != UNKNOWN {
            return m;
        }
    }
    // SAFETY: umask only swaps the process mask; restored at once (libc's, not the wrapper).
    let m = unsafe {
        let m = real::umask(0o022);
        real::umask(m);
        m
    } as u32;
    UMASK.store(m, Ordering::Release);
    m
}

/// Ids or groups may have changed: every thread asks again at its next request.
pub(crate) fn ids_changed() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// The umask may have changed unseen: read it again at the next create.
pub(crate) fn umask_changed() {
    UMASK.store(UNKNOWN, Ordering::Release);
}

/// Ids or the umask may change from now on where no wrapper sees it: remember nothing.
pub(crate) fn remember_nothing() {
    NEVER.store(true, Ordering::SeqCst);
    ids_changed();
    umask_changed();
}

/// Run an id-changing libc call, then note the change (also when it failed: a partial change
/// is possible, and asking again costs one system call).
fn changing<R>(call: impl FnOnce() -> R) -> R {
    let r = call();
    ids_changed();
    r
}

macro_rules! id_wrapper {
    ($name:ident, $real:ident, fn($($a:ident: $t:ty),*)) => {
        /// libc's call of the same name; the thread's remembered identity is dropped after it.
        ///
        /// # Safety
        /// As the libc function's.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            // SAFETY: the caller's arguments, forwarded.
            changing(|| unsafe { real::$real($($a),*) })
        }
    };
}

id_wrapper!(setuid, setuid, fn(uid: uid_t));
id_wrapper!(seteuid, seteuid, fn(uid: uid_t));
id_wrapper!(setreuid, setreuid, fn(r: uid_t, e: uid_t));
id_wrapper!(setresuid, setresuid, fn(r: uid_t, e: uid_t, s: uid_t));
id_wrapper!(setgid, setgid, fn(gid: gid_t));
id_wrapper!(setegid, setegid, fn(gid: gid_t));
id_wrapper!(setregid, setregid, fn(r: gid_t, e: gid_t));
id_wrapper!(setresgid, setresgid, fn(r: gid_t, e: gid_t, s: gid_t));
id_wrapper!(
    setgroups,
    setgroups,
    fn(n: libc::size_t, groups: *const gid_t)
);
id_wrapper!(
    initgroups,
    initgroups,
    fn(user: *const libc::c_char, group: gid_t)
);
id_wrapper!(setfsuid, setfsuid, fn(uid: uid_t));
id_wrapper!(setfsgid, setfsgid, fn(gid: gid_t));

/// umask: libc's, and the new mask remembered.
#[no_mangle]
pub extern "C" fn umask(mask: mode_t) -> mode_t {
    // SAFETY: umask cannot fail and touches no memory.
    let old = unsafe { real::umask(mask) };
    if !NEVER.load(Ordering::Relaxed) {
        UMASK.store(mask & 0o777, Ordering::Release);
    }
    old
}

/// unshare: a new user namespace maps ids anew (its map is written later, maybe by another
/// process), an unshared file-system context has its own umask: remember nothing from here.
///
/// # Safety
/// As libc's `unshare`.
#[no_mangle]
pub unsafe extern "C" fn unshare(flags: c_int) -> c_int {
    remember_nothing();
    // SAFETY: the caller's argument, forwarded.
    let r = unsafe { real::unshare(flags) };
    remember_nothing();
    r
}

/// setns: as [`unshare`].
///
/// # Safety
/// As libc's `setns`.
#[no_mangle]
pub unsafe extern "C" fn setns(fd: c_int, kind: c_int) -> c_int {
    remember_nothing();
    // SAFETY: the caller's arguments, forwarded.
    let r = unsafe { real::setns(fd, kind) };
    remember_nothing();
    r
}

/// Whether raw system call `n` changes ids, groups or namespaces, or the umask: for
/// `syscall()` (see `uring`), which calls [`after_raw_call`] for those.
pub(crate) fn raw_call_matters(n: libc::c_long) -> bool {
    [
        libc::SYS_setuid,
        libc::SYS_setgid,
        libc::SYS_setreuid,
        libc::SYS_setregid,
        libc::SYS_setresuid,
        libc::SYS_setresgid,
        libc::SYS_setgroups,
        libc::SYS_setfsuid,
        libc::SYS_setfsgid,
        libc::SYS_umask,
        libc::SYS_unshare,
        libc::SYS_setns,
    ]
    .contains(&n)
}

/// After raw system call `n` (one [`raw_call_matters`] names) returned.
pub(crate) fn after_raw_call(n: libc::c_long) {
    match n {
        libc::SYS_umask => umask_changed(),
        libc::SYS_unshare | libc::SYS_setns => remember_nothing(),
        _ => ids_changed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_generation_makes_the_thread_ask_again() {
        let first = cred();
        REMEMBERED.with(|slot| {
            let kept = slot.take();
            let (g, c) = kept.clone().expect("remembered after a request");
            assert_eq!(g, GENERATION.load(Ordering::SeqCst));
            assert_eq!(c, first);
            // Plant a different identity in the same generation: it is what a request gets.
            let mut planted = c.clone();
            planted.uid = planted.uid.wrapping_add(12345);
            slot.set(Some((g, planted.clone())));
            assert_eq!(cred().uid, planted.uid);
        });
        ids_changed();
        // The generation moved: the kernel's answer again, not the planted one.
        assert_eq!(cred().uid, first.uid);
    }

    #[test]
    fn the_umask_follows_the_wrapper_and_is_read_again_after_an_unseen_change() {
        let before = umask_now();
        umask(0o027);
        assert_eq!(umask_now(), 0o027);
        // An unseen change (libc's own call, as a raw system call would be).
        // SAFETY: umask touches no memory.
        unsafe { real::umask(0o077) };
        assert_eq!(umask_now(), 0o027, "remembered until told");
        umask_changed();
        assert_eq!(umask_now(), 0o077);
        umask(before as mode_t);
        assert_eq!(umask_now(), before);
    }
}
