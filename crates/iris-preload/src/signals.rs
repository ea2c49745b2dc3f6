//! Signals that arrive while a thread is inside Iris. A handler that calls back into Iris (a
//! `write()` to an Iris fd from a SIGALRM handler, say) would wait for a lock its own thread
//! holds, or see a half-made change. So the interposer stands in front of every handler a program
//! installs: the kernel calls [`trampoline`], which runs the program's handler at once when the
//! thread is outside Iris, and otherwise records the signal with its siginfo and returns. The
//! thread sends it to itself again (`rt_tgsigqueueinfo`, same siginfo) as it leaves Iris, where
//! the handler then runs as if the signal had come a moment later.
//!
//! Faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS) are never interposed: they are
//! synchronous, and a program that handles them wants them where they happen. While deferred, a
//! signal coalesces with another of its number, as standard signals do in the kernel (real-time
//! signals coalesce here too, where the kernel would queue them).

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use libc::{c_int, c_void, sighandler_t, siginfo_t};

use crate::real::sigaction as real_sigaction;

/// Highest signal number handled (the kernel's _NSIG - 1).
const MAX_SIG: usize = 64;

/// The program's handler of each signal (0: none interposed, the kernel has the program's own
/// disposition), and its flags.
static HANDLER: [AtomicUsize; MAX_SIG + 1] = [const { AtomicUsize::new(0) }; MAX_SIG + 1];
static FLAGS: [AtomicI32; MAX_SIG + 1] = [const { AtomicI32::new(0) }; MAX_SIG + 1];
/// The program's whole `sigaction` of each interposed signal, as `sigaction` must report it.
/// Written under `TABLE_LOCK`; never read in a signal handler.
struct Table(UnsafeCell<[MaybeUninit<libc::sigaction>; MAX_SIG + 1]>);
// SAFETY: every access holds TABLE_LOCK.
unsafe impl Sync for Table {}
static TABLE: Table = Table(UnsafeCell::new(
    [const { MaybeUninit::uninit() }; MAX_SIG + 1],
));
static TABLE_LOCK: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The siginfo of each deferred signal.
    static INFO: UnsafeCell<[MaybeUninit<siginfo_t>; MAX_SIG + 1]> =
        const { UnsafeCell::new([const { MaybeUninit::uninit() }; MAX_SIG + 1]) };
}

/// Whether a handler of `sig` is interposed at all.
fn deferrable(sig: c_int) -> bool {
    (1..=MAX_SIG as c_int).contains(&sig)
        && ![
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGTRAP,
            libc::SIGSYS,
            libc::SIGKILL,
            libc::SIGSTOP,
        ]
        .contains(&sig)
}

fn lock_table() {
    while TABLE_LOCK
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
}

fn unlock_table() {
    TABLE_LOCK.store(0, Ordering::Release);
}

/// What the kernel calls for every interposed signal.
extern "C" fn trampoline(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let i = sig as usize;
    if i > MAX_SIG {
        return;
    }
    if crate::state::busy() {
        // SAFETY: this thread's own table; the kernel passes a valid siginfo.
        INFO.with(|t| unsafe { (*t.get())[i] = MaybeUninit::new(*info) });
        crate::state::defer_signal(i);
        return;
    }
    run_handler(sig, info, ctx);
}

/// Run the program's handler of `sig` now.
fn run_handler(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let i = sig as usize;
    let h = HANDLER[i].load(Ordering::Acquire);
    let flags = FLAGS[i].load(Ordering::Acquire);
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        return;
    }
    if flags & libc::SA_RESETHAND != 0 {
        // One delivery, then the default, as the kernel would have done.
        HANDLER[i].store(libc::SIG_DFL, Ordering::Release);
        let mut dfl: libc::sigaction = unsafe_zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        // SAFETY: a valid sigaction; libc's own function.
        unsafe { real_sigaction(sig, &dfl, std::ptr::null_mut()) };
    }
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this as a three-argument handler.
        let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the program installed this as a one-argument handler.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

fn unsafe_zeroed() -> libc::sigaction {
    // SAFETY: sigaction is plain data; all-zero is a valid (empty-mask, SIG_DFL) value.
    unsafe { std::mem::zeroed() }
}

/// Send every signal of `bits` (deferred while this thread was inside Iris, see
/// `state::Busy`) to this thread again.
#[cold]
pub(crate) fn deliver(mut bits: u64) {
    // SAFETY: plain system calls.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    while bits != 0 {
        let i = bits.trailing_zeros() as usize + 1;
        bits &= bits - 1;
        // SAFETY: the siginfo was stored before its bit was set.
        let mut info = INFO.with(|t| unsafe { (*t.get())[i].assume_init() });
        // SAFETY: re-sending a signal to this very thread with the siginfo the kernel gave.
        let r = unsafe {
            libc::syscall(
                libc::SYS_rt_tgsigqueueinfo,
                pid,
                tid,
                i as c_int,
                &mut info as *mut siginfo_t,
            )
        };
        if r != 0 {
            // SAFETY: as above, without the siginfo.
            unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, i as c_int) };
        }
    }
}

/// `sigaction`: a handler is recorded and the trampoline installed in its place; SIG_DFL and
/// SIG_IGN, and faults, go to libc as they are.
unsafe fn interposed_sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if !deferrable(sig) {
        // SAFETY: forwarding the caller's pointers.
        return unsafe { real_sigaction(sig, act, old) };
    }
    let i = sig as usize;
    lock_table();
    let mut prev: libc::sigaction = unsafe_zeroed();
    let had = HANDLER[i].load(Ordering::Acquire) != 0;
    // SAFETY: the table lock is held; an entry is initialised whenever HANDLER is non-zero.
    let recorded = had.then(|| unsafe { (*TABLE.0.get())[i].assume_init() });
    let r = if act.is_null() {
        // SAFETY: querying libc.
        unsafe { real_sigaction(sig, std::ptr::null(), &mut prev) }
    } else {
        // SAFETY: the caller passes a valid sigaction.
        let want = unsafe { *act };
        let h = want.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            let r = unsafe { real_sigaction(sig, &want, &mut prev) };
            if r == 0 {
                HANDLER[i].store(0, Ordering::Release);
            }
            r
        } else {
            let mut ours = want;
            ours.sa_sigaction = trampoline as *const () as sighandler_t;
            ours.sa_flags = (want.sa_flags | libc::SA_SIGINFO) & !libc::SA_RESETHAND;
            // Record first: a signal may arrive as soon as the kernel has the trampoline.
            FLAGS[i].store(want.sa_flags, Ordering::Release);
            HANDLER[i].store(h, Ordering::Release);
            // SAFETY: the table lock is held.
            unsafe { (*TABLE.0.get())[i] = MaybeUninit::new(want) };
            // SAFETY: a valid sigaction.
            let r = unsafe { real_sigaction(sig, &ours, &mut prev) };
            if r != 0 {
                HANDLER[i].store(recorded.map_or(0, |a| a.sa_sigaction), Ordering::Release);
                if let Some(a) = recorded {
                    FLAGS[i].store(a.sa_flags, Ordering::Release);
                    // SAFETY: the table lock is held.
                    unsafe { (*TABLE.0.get())[i] = MaybeUninit::new(a) };
                }
            }
            r
        }
    };
    unlock_table();
    if r == 0 && !old.is_null() {
        // What the program installed, not the trampoline.
        let shown = match recorded {
            Some(a) if prev.sa_sigaction == trampoline as *const () as sighandler_t => a,
            _ => prev,
        };
        // SAFETY: the caller passes room for a sigaction.
        unsafe { *old = shown };
    }
    r
}

/// Install `handler` for `sig` with `flags`, returning the previous handler (the `signal` family).
unsafe fn install(sig: c_int, handler: sighandler_t, flags: c_int) -> sighandler_t {
    let mut act = unsafe_zeroed();
    act.sa_sigaction = handler;
    act.sa_flags = flags;
    let mut old = unsafe_zeroed();
    // SAFETY: valid pointers.
    if unsafe { interposed_sigaction(sig, &act, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: per the caller's contract.
    unsafe { interposed_sigaction(sig, act, old) }
}

#[no_mangle]
pub unsafe extern "C" fn __sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: per the caller's contract.
    unsafe { interposed_sigaction(sig, act, old) }
}

/// glibc's `signal` has BSD semantics: the handler stays installed, calls restart.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    // SAFETY: as sigaction.
    unsafe { install(sig, handler, libc::SA_RESTART) }
}

/// The BSD name of `signal`.
#[no_mangle]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    // SAFETY: as signal.
    unsafe { signal(sig, handler) }
}

/// System V semantics: one delivery, then the default; the signal is not blocked meanwhile.
#[no_mangle]
pub unsafe extern "C" fn __sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    // SAFETY: as sigaction.
    unsafe { install(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER) }
}

/// The public name of `__sysv_signal`.
#[no_mangle]
pub unsafe extern "C" fn sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    // SAFETY: as __sysv_signal.
    unsafe { __sysv_signal(sig, handler) }
}
