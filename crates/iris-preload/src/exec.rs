//! Keeping Iris across exec. A program may run another with a scrubbed environment (`env -i`,
//! `execve(path, argv, NULL)`): the new image would then lose `LD_PRELOAD` and the Iris settings
//! and could no longer see its inherited Iris fds or working directory. Every exec entry point
//! puts the Iris variables back into the environment it passes on. (glibc's exec* functions call
//! `execve` internally, past the interposer, so each is interposed.) A program stored in Iris
//! is launched the way `launch` says.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, CString};

use libc::{c_char, c_int, pid_t};

use crate::errno::fail;
use crate::launch::{self, Launch, Plan};
use crate::real;

/// Variables that must survive an exec.
const KEEP: [&str; 5] = [
    "LD_PRELOAD",
    "IRIS_VOLUME",
    "IRIS_MOUNT",
    "IRIS_COMMIT_INTERVAL_MS",
    "IRIS_LOG",
];

/// The variable that passes an Iris working directory to the new image (see `cwd`).
pub(crate) const CWD_VAR: &str = "IRIS_CWD";
const CWD_ENTRY: &[u8] = b"IRIS_CWD=";

/// Our own values of the variables, captured at load (before the program can change them).
fn ours() -> &'static [CString] {
    static OURS: std::sync::OnceLock<Vec<CString>> = std::sync::OnceLock::new();
    OURS.get_or_init(|| {
        KEEP.iter()
            .filter_map(|k| {
                let v = std::env::var_os(k)?;
                let mut s = k.as_bytes().to_vec();
                s.push(b'=');
                s.extend_from_slice(v.as_encoded_bytes());
                CString::new(s).ok()
            })
            .collect()
    })
}

/// Capture the settings while the environment is still the one we were started with.
pub(crate) fn capture() {
    let _ = ours();
}

/// `envp` plus any of our variables it lacks (an LD_PRELOAD without our library gets it added).
///
/// # Safety
/// `envp` NULL or a NULL-terminated array of C strings.
unsafe fn patched_env(
    envp: *const *const c_char,
    extra: &[CString],
    library_path: Option<&[u8]>,
) -> (Vec<CString>, Vec<*const c_char>) {
    let mut owned: Vec<CString> = Vec::new();
    let mut have: Vec<Vec<u8>> = Vec::new();
    if !envp.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: per the contract, a NULL-terminated array.
            let p = unsafe { *envp.add(i) };
            if p.is_null() {
                break;
            }
            // SAFETY: a C string of the array.
            let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
            // (Lock fds an earlier image passed: this exec names its own; and the working
            // directory is this process's, below.)
            if !crate::locks::is_passed_entry(bytes) && !bytes.starts_with(CWD_ENTRY) {
                have.push(bytes.to_vec());
            }
            i += 1;
        }
    }
    for want in ours() {
        let w = want.as_bytes();
        let name = &w[..w.iter().position(|b| *b == b'=').unwrap_or(w.len()) + 1];
        match have.iter_mut().find(|h| h.starts_with(name)) {
            None => have.push(w.to_vec()),
            Some(h) if name == b"LD_PRELOAD=" => {
                let lib = &w[name.len()..];
                if !h.windows(lib.len().max(1)).any(|x| x == lib) {
                    let mut merged = w.to_vec();
                    if h.len() > name.len() {
                        merged.push(b':');
                        merged.extend_from_slice(&h[name.len()..]);
                    }
                    *h = merged;
                }
            }
            Some(_) => {}
        }
    }
    let cwd_given = extra.iter().any(|e| e.as_bytes().starts_with(CWD_ENTRY));
    if let Some(cwd) = crate::cwd::iris_cwd_path().filter(|_| !cwd_given) {
        // The new image starts in this Iris working directory: `PWD` says so only when a
        // shell changed it (`make -C`, a program's chdir, leave it behind).
        let mut e = CWD_ENTRY.to_vec();
        e.extend_from_slice(&cwd);
        have.push(e);
    }
    if let Some(dirs) = library_path {
        // A program stored in Iris: copies of the libraries it needs from Iris come first.
        const NAME: &[u8] = b"LD_LIBRARY_PATH=";
        let mut e = NAME.to_vec();
        e.extend_from_slice(dirs);
        match have.iter_mut().find(|h| h.starts_with(NAME)) {
            Some(h) => {
                if h.len() > NAME.len() {
                    e.push(b':');
                    e.extend_from_slice(&h[NAME.len()..]);
                }
                *h = e;
            }
            None => have.push(e),
        }
    }
    have.extend(extra.iter().map(|e| e.as_bytes().to_vec()));
    for h in have {
        if let Ok(c) = CString::new(h) {
            owned.push(c);
        }
    }
    let mut ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    (owned, ptrs)
}

extern "C" {
    static environ: *const *const c_char;
}

fn current_env() -> *const *const c_char {
    // SAFETY: reading the process's environment pointer.
    unsafe { environ }
}

/// The path and arguments the kernel executes for `path` and `argv` (see `launch`), with what
/// keeps them alive; `Err` with the errno an exec of an Iris program failed with.
///
/// # Safety
/// As execve's arguments.
unsafe fn launched(
    path: *const c_char,
    argv: *const *const c_char,
) -> Result<(*const c_char, *const *const c_char, Option<Plan>), c_int> {
    // SAFETY: the caller's arguments.
    match unsafe { launch::plan(path, argv) } {
        Launch::AsAsked => Ok((path, argv, None)),
        Launch::Instead(p) => Ok((p.path.as_ptr(), p.argv(), Some(p))),
        Launch::Fail(e) => Err(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // A program stored in Iris, or a relative path from an Iris directory.
    // SAFETY: the caller's arguments.
    let (path, argv, plan) = match unsafe { launched(path, argv) } {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let libs = plan.as_ref().and_then(|p| p.library_path.as_deref());
    // POSIX keeps record locks across exec, and the descriptions with their locks.
    let passed = crate::locks::pass_across_exec(true);
    // SAFETY: the caller's environment array.
    let (_keep, env) = unsafe { patched_env(envp, &passed.env, libs) };
    // SAFETY: forwarding with the patched environment.
    let r = unsafe { real::execve(path, argv, env.as_ptr()) };
    // (Only when the exec failed.)
    passed.restore();
    r
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as execve with the current environment.
    unsafe { execve(path, argv, current_env()) }
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's file name (checked for NULL).
    match unsafe { searched(file) } {
        Searched::Found(path) => {
            // SAFETY: a path of our own, the caller's arguments.
            return unsafe { execve_or_shell(&path, argv, envp) };
        }
        Searched::Failed(e) => return fail(e),
        Searched::ByLibc => {}
    }
    // POSIX keeps record locks across exec, and the descriptions with their locks.
    let passed = crate::locks::pass_across_exec(true);
    // SAFETY: the caller's environment array.
    let (_keep, env) = unsafe { patched_env(envp, &passed.env, None) };
    // SAFETY: forwarding with the patched environment.
    let r = unsafe { real::execvpe(file, argv, env.as_ptr()) };
    // (Only when the exec failed.)
    passed.restore();
    r
}

/// How a search of `PATH` for a program goes (see `launch::search_path`).
enum Searched {
    /// A path with a slash, or a `PATH` with Iris directories: exec this path.
    Found(CString),
    /// Nothing to run (errno).
    Failed(c_int),
    /// A search of host directories only: libc's, as asked.
    ByLibc,
}

/// The search of `PATH` for `file` that an execvp or posix_spawnp makes.
///
/// # Safety
/// `file` is NULL or a NUL-terminated string.
unsafe fn searched(file: *const c_char) -> Searched {
    if file.is_null() {
        return Searched::ByLibc;
    }
    // SAFETY: non-null, NUL-terminated (the caller's contract).
    let name = unsafe { CStr::from_ptr(file) };
    let bytes = name.to_bytes();
    let found = if bytes.contains(&b'/') {
        // A path: executed as it is.
        name.to_owned()
    } else {
        match launch::search_path(bytes) {
            None => return Searched::ByLibc,
            Some(dirs) => match launch::search(&dirs, bytes) {
                Ok(p) => p,
                Err(e) => return Searched::Failed(e),
            },
        }
    };
    // A host program is libc's to run (with its /bin/sh for a file that is no program).
    // SAFETY: a NUL-terminated path.
    match unsafe { crate::route::target(found.as_ptr()) } {
        crate::route::Target::Host if bytes.contains(&b'/') => Searched::ByLibc,
        _ => Searched::Found(found),
    }
}

/// execve of `path` found by a PATH search (or named with a slash), and as glibc's execvp
/// does, `/bin/sh path args...` when the file is no program (ENOEXEC: a script without `#!`).
///
/// # Safety
/// As execve's arguments.
unsafe fn execve_or_shell(
    path: &CStr,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's arguments.
    let r = unsafe { execve(path.as_ptr(), argv, envp) };
    if crate::errno::get() != libc::ENOEXEC {
        return r;
    }
    let mut args: Vec<*const c_char> = vec![c"/bin/sh".as_ptr(), path.as_ptr()];
    if !argv.is_null() {
        // SAFETY: a NULL-terminated array (the caller's contract); its first entry skipped.
        unsafe {
            if !(*argv).is_null() {
                let mut i = 1;
                while !(*argv.add(i)).is_null() {
                    args.push(*argv.add(i));
                    i += 1;
                }
            }
        }
    }
    args.push(std::ptr::null());
    // SAFETY: a static path and a NULL-terminated array of the caller's strings.
    unsafe { execve(c"/bin/sh".as_ptr(), args.as_ptr(), envp) }
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as execvpe with the current environment.
    unsafe { execvpe(file, argv, current_env()) }
}

#[no_mangle]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    if let Some(f) = crate::fdtable::get(fd) {
        // The fd is a description memfd, not the program: the program is launched from the
        // file it names.
        // SAFETY: the caller's arguments.
        return match unsafe { launch::plan_inode(fd, f.ino, argv) } {
            Launch::Instead(p) => {
                // SAFETY: a plan's path and arguments, NUL-terminated.
                unsafe { execve(p.path.as_ptr(), p.argv(), envp) }
            }
            Launch::Fail(e) => fail(e),
            Launch::AsAsked => fail(libc::ENOEXEC),
        };
    }
    // POSIX keeps record locks across exec, and the descriptions with their locks.
    let passed = crate::locks::pass_across_exec(true);
    // SAFETY: the caller's environment array.
    let (_keep, env) = unsafe { patched_env(envp, &passed.env, None) };
    // SAFETY: forwarding with the patched environment.
    let r = unsafe { real::fexecve(fd, argv, env.as_ptr()) };
    // (Only when the exec failed.)
    passed.restore();
    r
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // A program stored in Iris, or a relative path from an Iris directory.
    // SAFETY: the caller's arguments.
    let (path, argv, plan) = match unsafe { launched(path, argv.cast()) } {
        Ok(l) => l,
        Err(e) => return e,
    };
    let libs = plan.as_ref().and_then(|p| p.library_path.as_deref());
    // A child that starts in an Iris directory (addchdir_np).
    let cwd = match spawn_cwd(actions) {
        Ok(c) => c,
        Err(e) => return e,
    };
    // The child shares the inheritable descriptions: their locks too (not the process's).
    crate::locks::share_before_fork();
    let passed = crate::locks::pass_across_exec(false);
    let mut extra = passed.env.clone();
    extra.extend(cwd);
    // SAFETY: the caller's environment array.
    let (_keep, env) = unsafe { patched_env(envp.cast(), &extra, libs) };
    // Its file actions may give the child an inheritable copy of any fd.
    crate::description::note_fork();
    // SAFETY: forwarding with the patched environment.
    let r =
        unsafe { real::posix_spawn(pid, path, actions, attr, argv.cast(), env.as_ptr().cast()) };
    crate::description::note_fork();
    passed.restore();
    r
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the caller's file name (checked for NULL).
    match unsafe { searched(file) } {
        Searched::Found(path) => {
            // SAFETY: a path of our own, the caller's other arguments.
            return unsafe { posix_spawn(pid, path.as_ptr(), actions, attr, argv, envp) };
        }
        Searched::Failed(e) => return e,
        Searched::ByLibc => {}
    }
    // A child that starts in an Iris directory (addchdir_np).
    let cwd = match spawn_cwd(actions) {
        Ok(c) => c,
        Err(e) => return e,
    };
    // The child shares the inheritable descriptions: their locks too (not the process's).
    crate::locks::share_before_fork();
    let passed = crate::locks::pass_across_exec(false);
    let mut extra = passed.env.clone();
    extra.extend(cwd);
    // SAFETY: the caller's environment array.
    let (_keep, env) = unsafe { patched_env(envp.cast(), &extra, None) };
    // Its file actions may give the child an inheritable copy of any fd.
    crate::description::note_fork();
    // SAFETY: forwarding with the patched environment.
    let r = unsafe { real::posix_spawnp(pid, file, actions, attr, argv, env.as_ptr().cast()) };
    crate::description::note_fork();
    passed.restore();
    r
}

/// system: glibc runs the shell through its internal posix_spawn, which Iris does not see; the
/// shell inherits every fd without close-on-exec (and may leave a background job holding one
/// after system returns), so the descriptions made so far are never reused (see
/// `description::FORKS`). In an Iris working directory the shell is sent there first (see
/// [`in_iris_cwd`]).
///
/// # Safety
/// As libc's `system`: `command` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    // SAFETY: the caller's argument: NULL or a NUL-terminated string.
    let in_cwd = unsafe { in_iris_cwd(command) };
    let command = in_cwd.as_ref().map_or(command, |c| c.as_ptr());
    crate::description::note_fork();
    // SAFETY: the caller's argument, or the same command behind a `cd`, NUL-terminated.
    let r = unsafe { real::system(command) };
    crate::description::note_fork();
    r
}

/// `command` run in this process's working directory when that is in Iris: `cd -- 'DIR' &&
/// COMMAND`. glibc starts the shells of `system` and `popen` with its internal posix_spawn,
/// past the interposer's `posix_spawn` and `execve`, so they cannot be given `IRIS_CWD`, and
/// the kernel's working directory of an Iris directory is not it; the shell's own `cd` is
/// served by the interposer in the child. `None`: run `command` as it is.
///
/// # Safety
/// `command` is NULL or a NUL-terminated string.
unsafe fn in_iris_cwd(command: *const c_char) -> Option<CString> {
    if command.is_null() {
        return None;
    }
    let dir = crate::cwd::iris_cwd_path()?;
    // SAFETY: non-null and NUL-terminated (the caller's contract).
    let command = unsafe { std::ffi::CStr::from_ptr(command) }.to_bytes();
    let mut line = b"cd -- '".to_vec();
    for &b in &dir {
        if b == b'\'' {
            line.extend_from_slice(b"'\\''");
        } else {
            line.push(b);
        }
    }
    line.extend_from_slice(b"' && ");
    line.extend_from_slice(command);
    CString::new(line).ok()
}

/// popen: as [`system`], the child a shell spawned by glibc's internal posix_spawn, and run
/// in an Iris working directory the same way.
///
/// # Safety
/// As libc's `popen`: both arguments are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: the caller's argument: a NUL-terminated string.
    let in_cwd = unsafe { in_iris_cwd(command) };
    let command = in_cwd.as_ref().map_or(command, |c| c.as_ptr());
    crate::description::note_fork();
    // SAFETY: the caller's arguments (the command perhaps behind a `cd`), forwarded.
    let r = unsafe { real::popen(command, mode) };
    crate::description::note_fork();
    r
}

/// glibc's `WRDE_NOCMD`: wordexp runs no command substitution (no child).
const WRDE_NOCMD: c_int = 1 << 2;

/// wordexp: a command substitution runs a shell as a child of this process.
///
/// # Safety
/// As libc's `wordexp`: `words` is a NUL-terminated string, `out` a `wordexp_t`.
#[no_mangle]
pub unsafe extern "C" fn wordexp(
    words: *const c_char,
    out: *mut libc::c_void,
    flags: c_int,
) -> c_int {
    let child = flags & WRDE_NOCMD == 0;
    if child {
        crate::description::note_fork();
    }
    // SAFETY: the caller's arguments, forwarded.
    let r = unsafe { real::wordexp(words, out, flags) };
    if child {
        crate::description::note_fork();
    }
    r
}

/// Fds opened for `posix_spawn_file_actions_addopen` of Iris paths, per file-actions object
/// (its address), closed at its destroy.
static SPAWN_OPENS: iris_fs::ForkSafeMutex<
    Vec<(usize, c_int, std::sync::Arc<crate::fdtable::OpenFile>)>,
> = iris_fs::ForkSafeMutex::new(Vec::new());

/// The Iris directory a file-actions object's child starts in (its last
/// `posix_spawn_file_actions_addchdir_np` named one), by the object's address.
static SPAWN_CHDIRS: iris_fs::ForkSafeMutex<Vec<(usize, Vec<u8>)>> =
    iris_fs::ForkSafeMutex::new(Vec::new());

/// Hold the tables of addopen fds and chdirs across a fork (see `crate::fork`).
pub(crate) fn lock_for_fork() {
    std::mem::forget(SPAWN_OPENS.lock());
    std::mem::forget(SPAWN_CHDIRS.lock());
}

/// Release what [`lock_for_fork`] took (parent and child).
pub(crate) fn unlock_after_fork() {
    // SAFETY: only after lock_for_fork, whose guards were forgotten.
    unsafe {
        SPAWN_CHDIRS.force_unlock();
        SPAWN_OPENS.force_unlock();
    }
}

/// posix_spawn_file_actions_addchdir_np to an Iris directory: the child changes directory with
/// glibc's internal chdir, which knows no Iris path (the spawn failed with ENOENT). The child
/// changes to `/` instead and starts in the Iris directory through `IRIS_CWD` (see
/// [`spawn_cwd`]); a later change to a host directory in the same actions undoes that.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addchdir_np(
    actions: *mut libc::posix_spawn_file_actions_t,
    path: *const c_char,
) -> c_int {
    // SAFETY: the caller's path.
    let iris = !path.is_null()
        && matches!(
            unsafe { crate::route::target(path) },
            crate::route::Target::Iris { .. }
        );
    let mut chdirs = SPAWN_CHDIRS.lock();
    chdirs.retain(|(a, _)| *a != actions as usize);
    if !iris {
        drop(chdirs);
        // SAFETY: forwarding.
        return unsafe { real::posix_spawn_file_actions_addchdir_np(actions, path) };
    }
    // SAFETY: routed to Iris, so non-null and NUL-terminated.
    let given = unsafe { CStr::from_ptr(path) }.to_bytes();
    let Some(abs) = crate::cwd::absolute(given) else {
        return libc::ENOENT;
    };
    chdirs.push((actions as usize, abs));
    drop(chdirs);
    // SAFETY: the caller's actions, and a static path.
    unsafe { real::posix_spawn_file_actions_addchdir_np(actions, c"/".as_ptr()) }
}

/// posix_spawn_file_actions_addfchdir_np of an Iris directory fd: as
/// [`posix_spawn_file_actions_addchdir_np`] of the path it was opened by (the child's
/// `fchdir` on the fd, a description memfd, failed the spawn with ENOTDIR).
#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addfchdir_np(
    actions: *mut libc::posix_spawn_file_actions_t,
    fd: c_int,
) -> c_int {
    let Some(f) = crate::fdtable::get(fd) else {
        SPAWN_CHDIRS.lock().retain(|(a, _)| *a != actions as usize);
        // SAFETY: forwarding.
        return unsafe { real::posix_spawn_file_actions_addfchdir_np(actions, fd) };
    };
    if !f.is_dir {
        return libc::ENOTDIR;
    }
    let Some(path) = f.path.as_ref().and_then(|p| CString::new(p.clone()).ok()) else {
        return libc::ENOENT;
    };
    // SAFETY: the caller's actions and a NUL-terminated absolute Iris path.
    unsafe { posix_spawn_file_actions_addchdir_np(actions, path.as_ptr()) }
}

/// The `IRIS_CWD` entry for a child spawned with `actions`, if they change into an Iris
/// directory; `Err` with the errno the change would fail with (not a directory, missing).
fn spawn_cwd(actions: *const libc::posix_spawn_file_actions_t) -> Result<Option<CString>, c_int> {
    if actions.is_null() {
        return Ok(None);
    }
    let Some(dir) = SPAWN_CHDIRS
        .lock()
        .iter()
        .find(|(a, _)| *a == actions as usize)
        .map(|(_, d)| d.clone())
    else {
        return Ok(None);
    };
    let c = CString::new(dir.clone()).map_err(|_| libc::ENOENT)?;
    // SAFETY: all-zero is a valid stat, which the interposed stat fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and our buffer.
    if unsafe { crate::calls::stat(c.as_ptr(), &mut st) } != 0 {
        return Err(crate::errno::get());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(libc::ENOTDIR);
    }
    let mut e = CWD_ENTRY.to_vec();
    e.extend_from_slice(&dir);
    CString::new(e).map(Some).map_err(|_| libc::ENOENT)
}

/// posix_spawn_file_actions_addopen of an Iris path: the spawned child opens its files with
/// glibc's internal open, which Iris does not see (ENOENT, the spawn failed). The file is
/// opened here, now, by Iris (close-on-exec), and the action becomes a dup2 of it onto `fd`;
/// the open is closed when the actions are destroyed. (So the open happens at this call, and
/// its error is this call's.)
#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_addopen(
    actions: *mut libc::posix_spawn_file_actions_t,
    fd: c_int,
    path: *const c_char,
    oflag: c_int,
    mode: libc::mode_t,
) -> c_int {
    // SAFETY: the caller's path.
    if path.is_null()
        || matches!(
            unsafe { crate::route::target(path) },
            crate::route::Target::Host
        )
    {
        // SAFETY: forwarding.
        return unsafe { real::posix_spawn_file_actions_addopen(actions, fd, path, oflag, mode) };
    }
    if fd < 0 {
        return libc::EBADF;
    }
    // SAFETY: Iris's own open of the caller's path.
    let opened = unsafe { crate::calls::open(path, oflag | libc::O_CLOEXEC, mode) };
    if opened < 0 {
        return crate::errno::get();
    }
    // SAFETY: the caller's actions object.
    let r = unsafe { real::posix_spawn_file_actions_adddup2(actions, opened, fd) };
    if r != 0 {
        // SAFETY: closing the fd just opened.
        unsafe { crate::calls::close(opened) };
        return r;
    }
    if let Some(file) = crate::fdtable::get(opened) {
        SPAWN_OPENS.lock().push((actions as usize, opened, file));
    }
    0
}

/// posix_spawn_file_actions_destroy: the fds opened for its Iris paths close.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn_file_actions_destroy(
    actions: *mut libc::posix_spawn_file_actions_t,
) -> c_int {
    SPAWN_CHDIRS.lock().retain(|(a, _)| *a != actions as usize);
    let mine: Vec<(c_int, std::sync::Arc<crate::fdtable::OpenFile>)> = {
        let mut opens = SPAWN_OPENS.lock();
        let mine = opens
            .iter()
            .filter(|(a, _, _)| *a == actions as usize)
            .map(|(_, fd, file)| (*fd, file.clone()))
            .collect();
        opens.retain(|(a, _, _)| *a != actions as usize);
        mine
    };
    for (fd, file) in mine {
        // Only while the number still names that open file (the program may have closed it
        // and reused the number).
        if crate::fdtable::get(fd).is_some_and(|f| std::sync::Arc::ptr_eq(&f, &file)) {
            // SAFETY: closing an fd opened by addopen above.
            unsafe { crate::calls::close(fd) };
        }
    }
    // SAFETY: forwarding.
    unsafe { real::posix_spawn_file_actions_destroy(actions) }
}
