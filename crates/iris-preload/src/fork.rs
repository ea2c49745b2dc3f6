//! fork() while other threads are inside Iris: the child has only the forking thread, so a
//! process-local lock held by any other thread at that instant would stay held in the child for
//! ever. The prepare handler takes every such lock (the opening of the volume, the Iris working
//! directory, the shadow table, the first open of the record-lock file, the table of mappings,
//! the file system's tables of open counts and block maps, the range lock of each open file, the
//! table of Iris's own fds, the queue of AIO completions and the AIO contexts known)
//! so the fork happens between operations; both sides release them after, and the child
//! forgets the byte ranges the parent's threads held in flight, the AIO contexts (the
//! kernel's are not inherited), and closes its copy of the parent's open of the record-lock
//! file, whose locks are the parent's (see `locks::forget_in_child`). Locks in the volume's shared
//! memory need nothing: the parent's threads live on and release them. (posix_spawn runs no
//! handlers and needs none: its child runs only glibc's own code before exec. vfork is fork
//! here, see [`vfork`].)

use std::sync::atomic::{AtomicBool, Ordering};

extern "C" fn prepare() {
    // Before the child exists: no description made so far is reused from here on.
    crate::description::note_fork();
    crate::state::lock_for_fork();
    crate::cwd::lock_for_fork();
    crate::shadow::lock_for_fork();
    crate::locks::lock_for_fork();
    crate::mappings::lock_for_fork();
    if let Some(fs) = crate::state::fs_if_open() {
        fs.lock_for_fork();
    }
    iris_media::own_fd::lock_for_fork();
    crate::aio::lock_for_fork();
    crate::uring::lock_for_fork();
    crate::exec::lock_for_fork();
}

extern "C" fn release_parent() {
    // The child exists: a description made while it was being made counts as shared too.
    crate::description::note_fork();
    crate::aio::unlock_after_fork(false);
    if let Some(fs) = crate::state::fs_if_open() {
        // SAFETY: prepare took these locks in this thread.
        unsafe { fs.unlock_after_fork() };
    }
    release();
}

extern "C" fn release_child() {
    crate::aio::unlock_after_fork(true);
    crate::hazard::clear_after_fork();
    crate::desc_pool::empty_in_child();
    if let Some(fs) = crate::state::fs_if_open() {
        // SAFETY: prepare took these locks in the parent of this child, in this thread.
        unsafe { fs.unlock_in_child() };
    }
    release();
    crate::locks::forget_in_child();
    if let Some(fs) = crate::state::fs_if_open() {
        fs.after_fork_in_child();
    }
}

/// Release what both sides release alike.
fn release() {
    crate::exec::unlock_after_fork();
    crate::uring::unlock_after_fork();
    iris_media::own_fd::unlock_after_fork();
    crate::mappings::unlock_after_fork();
    crate::locks::unlock_after_fork();
    crate::shadow::unlock_after_fork();
    crate::cwd::unlock_after_fork();
    crate::state::unlock_after_fork();
}

/// fork: first, outside the handlers (which may run after another library's handler took its
/// allocator's locks), every inheritable description gets its lock-file opens, so the child
/// shares them (see `locks::share_before_fork`). glibc's own forks (`daemon`, `forkpty`,
/// `system`) and raw `clone` do not come here: their children make their own.
#[no_mangle]
pub extern "C" fn fork() -> libc::pid_t {
    crate::locks::share_before_fork();
    // SAFETY: glibc's fork, which runs the handlers above.
    unsafe { crate::real::fork() }
}

/// vfork is fork here. A vfork child shares its parent's memory until it execs, and what it
/// runs in between goes through Iris too: Python's subprocess closes every fd above 2 in the
/// child (close_range), which took the parent's Iris fds out of the parent's own table (its
/// reads then saw the placeholder's zeros); a dup2 onto fd 1 there would do the same to an
/// Iris stdout. POSIX lets vfork behave as fork, and fork's handlers keep Iris's state right.
#[no_mangle]
pub extern "C" fn vfork() -> libc::pid_t {
    fork()
}

/// _Fork (glibc 2.34): a fork that runs no handlers, so the child's fds are counted here.
#[no_mangle]
pub extern "C" fn _Fork() -> libc::pid_t {
    crate::description::note_fork();
    // SAFETY: glibc's _Fork, forwarded.
    let r = unsafe { crate::real::fork_bare() };
    crate::description::note_fork();
    r
}

/// clone: a child made without glibc's fork may hold every fd of this process (unless it
/// shares the fd table: counted all the same). The child runs `f` on its own stack inside
/// libc and never returns here. (Variadic in C after `arg`; on x86-64 and aarch64 the three
/// optional arguments travel as fixed ones do, and libc reads them only when `flags` asks.)
///
/// # Safety
/// As libc's `clone`.
#[no_mangle]
pub unsafe extern "C" fn clone(
    f: Option<unsafe extern "C" fn(*mut libc::c_void) -> libc::c_int>,
    stack: *mut libc::c_void,
    flags: libc::c_int,
    arg: *mut libc::c_void,
    ptid: *mut libc::pid_t,
    tls: *mut libc::c_void,
    ctid: *mut libc::pid_t,
) -> libc::c_int {
    crate::description::note_fork();
    if flags & libc::CLONE_NEWUSER != 0 {
        // Its ids are mapped anew, later (see `ident`): its copy of this memory must not
        // answer from what this process remembers.
        crate::ident::remember_nothing();
    }
    // SAFETY: the caller's arguments, forwarded.
    let r = unsafe { crate::real::clone(f, stack, flags, arg, ptid, tls, ctid) };
    crate::description::note_fork();
    r
}

/// Register the handlers (once per process; a child inherits them). Not with a `Once`:
/// `pthread_atfork` waits while another thread forks, and a child forked then would inherit a
/// `Once` marked running that nothing finishes, and wait on it for ever.
pub(crate) fn install() {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if !INSTALLED.swap(true, Ordering::AcqRel) {
        // SAFETY: registering plain extern "C" functions.
        unsafe { libc::pthread_atfork(Some(prepare), Some(release_parent), Some(release_child)) };
    }
}
