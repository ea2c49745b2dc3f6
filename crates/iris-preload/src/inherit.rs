//! Start-up of a program image: find the Iris fds it inherited across exec (the description
//! memfds, see `description`), put them back in the fd table, and switch the standard streams of
//! any of fds 0-2 that are Iris files. Also Iris fds received over a socket (SCM_RIGHTS, through
//! `recvmsg` and `recvmmsg`; `sendmsg` and `sendmmsg` mark those sent as shared).

use std::sync::Arc;

use crate::description::Desc;
use crate::fdtable::{self, OpenFile};
use crate::state::{self, Busy};

/// Runs before `main` (from `.init_array`).
extern "C" fn on_load() {
    let _b = Busy::enter();
    crate::exec::capture();
    crate::report::init();
    crate::cwd::adopt_pwd();
    // Lock fds an exec passed (taken out of the environment whatever happens next).
    let mut passed = crate::locks::Inherited::take();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        passed.abandon();
        return;
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target
            .as_os_str()
            .as_encoded_bytes()
            .starts_with(b"/memfd:iris-desc")
        {
            found.push(fd);
        }
    }
    if found.is_empty() && passed.is_empty() {
        return;
    }
    let Some(fs) = state::fs() else {
        passed.abandon();
        return;
    };
    let volume_id = fs.store().volume_id();
    // The previous image's locks on the files it held, kept while this one takes its own.
    let opens_adopted = passed.adopt_opens(fs);
    // One open file per description: fds of one description (dup'd before the exec) share it,
    // and its locks with it.
    let mut adopted: Vec<(u64, Arc<OpenFile>)> = Vec::new();
    for fd in found {
        let memfd = crate::locks::memfd_ino(fd);
        if let Some(file) = adopted
            .iter()
            .find(|(m, _)| Some(*m) == memfd)
            .map(|(_, f)| f.clone())
        {
            fdtable::install(fd, file);
            continue;
        }
        let Some(desc) = Desc::adopt(fd, volume_id) else {
            continue;
        };
        let (flock_fd, ofd_fd) = passed.for_description(fd);
        let file = open_file(fs, desc, flock_fd, ofd_fd);
        if let Some(m) = memfd {
            adopted.push((m, file.clone()));
        }
        fdtable::install(fd, file);
    }
    passed.finish();
    if opens_adopted {
        fs.settle_opens_after_exec();
    }
    drop(_b);
    for fd in 0..3 {
        crate::stdio::sync_std_stream(fd);
    }
}

/// Take fd `fd`, just received in an SCM_RIGHTS message, into the fd table if it is an Iris
/// description of this volume: it shares the sender's file offset and status flags (the
/// description page), as a passed fd does on Linux. (Its flock and OFD locks are the
/// receiver's own: the sender's lock-file opens do not travel with it.)
pub(crate) fn adopt_received(fd: i32) {
    // An Iris fd is an O_PATH open (see `description`): most received fds are not, and cost
    // one fcntl.
    // SAFETY: F_GETFL changes nothing.
    let flags = unsafe { crate::real::fcntl(fd, libc::F_GETFL, 0) };
    if flags < 0 || flags & libc::O_PATH == 0 {
        return;
    }
    let link = format!("/proc/self/fd/{fd}");
    let is_desc = std::fs::read_link(&link).is_ok_and(|t| {
        t.as_os_str()
            .as_encoded_bytes()
            .starts_with(b"/memfd:iris-desc")
    });
    if !is_desc || fdtable::is_iris(fd) {
        return;
    }
    let _b = Busy::enter();
    let Some(fs) = state::fs() else { return };
    // Another fd of this process on the same description: one open file for both.
    let memfd = crate::locks::memfd_ino(fd);
    let mut same = None;
    fdtable::each(|other, f| {
        if same.is_none() && memfd.is_some() && crate::locks::memfd_ino(other) == memfd {
            same = Some(f.clone());
        }
    });
    if let Some(file) = same {
        fdtable::install(fd, file);
        return;
    }
    let Some(desc) = Desc::adopt(fd, fs.store().volume_id()) else {
        return;
    };
    let (flock_fd, ofd_fd) = (crate::locks::LockFd::new(), crate::locks::LockFd::new());
    fdtable::install(fd, open_file(fs, desc, flock_fd, ofd_fd));
}

/// The open file of adopted description `desc` (its inode's open count taken).
fn open_file(
    fs: &iris_fs::Fs,
    desc: Desc,
    flock_fd: crate::locks::LockFd,
    ofd_fd: crate::locks::LockFd,
) -> Arc<OpenFile> {
    let s = desc.shared();
    let ino = s.ino.load(std::sync::atomic::Ordering::Relaxed);
    let is_dir = s.is_dir.load(std::sync::atomic::Ordering::Relaxed) != 0;
    let path = desc.path();
    fs.retain(ino);
    Arc::new(OpenFile {
        ino,
        cache: fs.file_cache(ino),
        is_dir,
        desc,
        path,
        flock_fd,
        ofd_fd,
        _count: fdtable::OpenCount(ino),
    })
}

/// The fds an SCM_RIGHTS message in `msg` (just received) carries, each adopted if it is an
/// Iris description (see [`adopt_received`]).
///
/// # Safety
/// `msg` is a message header the kernel just filled in.
pub(crate) unsafe fn adopt_rights(msg: *const libc::msghdr) {
    // SAFETY: the header the kernel just filled in.
    unsafe { each_passed_fd(msg, adopt_received) };
}

/// Call `f` with each fd an SCM_RIGHTS control message of `msg` carries.
///
/// # Safety
/// `msg` is null or a valid message header (its control buffer as its fields say).
unsafe fn each_passed_fd(msg: *const libc::msghdr, mut f: impl FnMut(i32)) {
    if msg.is_null() {
        return;
    }
    // SAFETY: walking the control messages with libc's own CMSG macros.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<i32>();
                let head = libc::CMSG_LEN(0) as usize;
                let n = ((*c).cmsg_len as usize).saturating_sub(head) / std::mem::size_of::<i32>();
                for i in 0..n {
                    f(data.add(i).read_unaligned());
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
}

/// Iris fds about to be sent in an SCM_RIGHTS message in `msg`: their descriptions are
/// shared from now on (the receiver maps the same page), so never reused for another open
/// (see `Desc::retire`) after the sender closes its fd.
///
/// # Safety
/// `msg` is null or the caller's message header.
unsafe fn note_sent(msg: *const libc::msghdr) {
    // SAFETY: the caller's header.
    unsafe {
        each_passed_fd(msg, |fd| {
            if let Some(f) = fdtable::get(fd) {
                f.desc.note_inheritable();
            }
        })
    };
}

/// sendmsg: Iris fds it passes are marked shared first (see [`note_sent`]).
#[no_mangle]
pub unsafe extern "C" fn sendmsg(
    sock: libc::c_int,
    msg: *const libc::msghdr,
    flags: libc::c_int,
) -> isize {
    // SAFETY: the caller's header; forwarding.
    unsafe {
        note_sent(msg);
        crate::real::sendmsg(sock, msg, flags)
    }
}

/// sendmmsg: as [`sendmsg`], for each message.
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(
    sock: libc::c_int,
    msgs: *mut libc::mmsghdr,
    n: libc::c_uint,
    flags: libc::c_int,
) -> libc::c_int {
    if !msgs.is_null() {
        for i in 0..n as usize {
            // SAFETY: the caller's `n` headers.
            unsafe { note_sent(&(*msgs.add(i)).msg_hdr) };
        }
    }
    // SAFETY: forwarding.
    unsafe { crate::real::sendmmsg(sock, msgs, n, flags) }
}

/// recvmsg: an Iris fd received in an SCM_RIGHTS message is taken into the fd table (see
/// [`adopt_received`]); before, the receiver's calls went to its placeholder.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(
    sock: libc::c_int,
    msg: *mut libc::msghdr,
    flags: libc::c_int,
) -> isize {
    // SAFETY: forwarding.
    let r = unsafe { crate::real::recvmsg(sock, msg, flags) };
    if r >= 0 {
        // SAFETY: the header the kernel just filled in.
        unsafe { adopt_rights(msg) };
    }
    r
}

/// recvmmsg: as [`recvmsg`], for each message received.
#[no_mangle]
pub unsafe extern "C" fn recvmmsg(
    sock: libc::c_int,
    msgs: *mut libc::mmsghdr,
    n: libc::c_uint,
    flags: libc::c_int,
    timeout: *mut libc::timespec,
) -> libc::c_int {
    // SAFETY: forwarding.
    let r = unsafe { crate::real::recvmmsg(sock, msgs, n, flags, timeout) };
    for i in 0..usize::try_from(r).unwrap_or(0) {
        // SAFETY: the first `r` headers, which the kernel just filled in.
        unsafe { adopt_rights(&(*msgs.add(i)).msg_hdr) };
    }
    r
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
