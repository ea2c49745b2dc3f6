//! Directory streams (opendir/readdir/...) on Iris directories. glibc's opendir opens with its
//! internal open, so streams are interposed whole. An Iris `DIR*` is a [`IrisDir`]; it starts with
//! a magic word that a glibc `DIR` cannot hold (glibc's starts with a small fd number), which is
//! how the other calls tell them apart.
#![allow(clippy::missing_safety_doc)]

use iris_fs::DirEntry;
use libc::{c_char, c_int, c_long, dirent, dirent64, DIR};

use crate::errno::{fail, set};
use crate::fdtable;
use crate::route::{target, Target};
use crate::state::{self, Busy};

const DIR_MAGIC: u64 = 0x4952_4953_4449_5221;

/// An Iris directory stream.
#[repr(C)]
struct IrisDir {
    magic: u64,
    fd: c_int,
    ino: u64,
    /// Cookie of the next entry to fetch from the file system.
    pos: u64,
    /// Cookie of the entry `readdir` returns next (telldir).
    tell: u64,
    batch: Vec<DirEntry>,
    at: usize,
    eof: bool,
    entry: dirent64,
}

/// # Safety
/// `d` NULL or a DIR pointer from opendir (ours or glibc's).
unsafe fn ours<'a>(d: *mut DIR) -> Option<&'a mut IrisDir> {
    // SAFETY: both kinds are at least 8 bytes; only ours carries the magic.
    (!d.is_null() && unsafe { *(d as *const u64) } == DIR_MAGIC)
        .then(|| unsafe { &mut *(d as *mut IrisDir) })
}

fn new_stream(fd: c_int) -> *mut DIR {
    let Some(f) = fdtable::get(fd) else {
        set(libc::EBADF);
        return std::ptr::null_mut();
    };
    if !f.is_dir {
        set(libc::ENOTDIR);
        return std::ptr::null_mut();
    }
    // SAFETY: an all-zero dirent64 is valid.
    let entry: dirent64 = unsafe { std::mem::zeroed() };
    let d = Box::new(IrisDir {
        magic: DIR_MAGIC,
        fd,
        ino: f.ino,
        pos: 0,
        tell: 0,
        batch: Vec::new(),
        at: 0,
        eof: false,
        entry,
    });
    Box::into_raw(d) as *mut DIR
}

type OpendirFn = unsafe extern "C" fn(*const c_char) -> *mut DIR;
type FdopendirFn = unsafe extern "C" fn(c_int) -> *mut DIR;
type ReaddirFn = unsafe extern "C" fn(*mut DIR) -> *mut dirent;
type Readdir64Fn = unsafe extern "C" fn(*mut DIR) -> *mut dirent64;
type ClosedirFn = unsafe extern "C" fn(*mut DIR) -> c_int;
type RewinddirFn = unsafe extern "C" fn(*mut DIR);
type TelldirFn = unsafe extern "C" fn(*mut DIR) -> c_long;
type SeekdirFn = unsafe extern "C" fn(*mut DIR, c_long);
type DirfdFn = unsafe extern "C" fn(*mut DIR) -> c_int;

macro_rules! real_ptr {
    ($sym:literal, $ty:ty) => {{
        static SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let p = crate::real::resolve(&SLOT, concat!($sym, "\0").as_bytes());
        #[allow(unused_unsafe)]
        // SAFETY: libc's definition of the symbol has this C signature.
        let f = (p != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(p) });
        f
    }};
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        Target::Iris { .. } => {
            // SAFETY: our own open serves the Iris path.
            let fd = unsafe {
                crate::calls::open(
                    path,
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                    0,
                )
            };
            if fd < 0 {
                return std::ptr::null_mut();
            }
            if !crate::fdtable::is_iris(fd) {
                // A host directory, through a symlink out of Iris.
                // SAFETY: our own fd, which the stream takes over.
                return unsafe { fdopendir(fd) };
            }
            let d = new_stream(fd);
            if d.is_null() {
                // SAFETY: our fd.
                unsafe { crate::calls::close(fd) };
            }
            d
        }
        Target::Host => match real_ptr!("opendir", OpendirFn) {
            // SAFETY: forwarding.
            Some(f) => unsafe { f(path) },
            None => {
                set(libc::ENOSYS);
                std::ptr::null_mut()
            }
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    if fdtable::is_iris(fd) {
        return new_stream(fd);
    }
    match real_ptr!("fdopendir", FdopendirFn) {
        // SAFETY: forwarding.
        Some(f) => unsafe { f(fd) },
        None => {
            set(libc::ENOSYS);
            std::ptr::null_mut()
        }
    }
}

/// Next entry of an Iris stream, as a dirent64 inside the stream.
fn next(d: &mut IrisDir) -> *mut dirent64 {
    crate::report::count(crate::report::Call::Readdir);
    if d.at >= d.batch.len() {
        if d.eof {
            return std::ptr::null_mut();
        }
        let _b = Busy::enter();
        let Some(fs) = state::fs() else {
            set(libc::EIO);
            return std::ptr::null_mut();
        };
        match fs.readdir(d.ino, d.pos, 128) {
            Ok(batch) => {
                if batch.is_empty() {
                    d.eof = true;
                    return std::ptr::null_mut();
                }
                d.pos = batch.last().map_or(d.pos, |e| e.next);
                d.batch = batch;
                d.at = 0;
            }
            Err(e) => {
                set(e.0);
                return std::ptr::null_mut();
            }
        }
    }
    let e = &d.batch[d.at];
    d.at += 1;
    d.tell = e.next;
    let out = &mut d.entry;
    out.d_ino = e.ino;
    out.d_off = e.next as i64;
    out.d_type = e.kind;
    let n = e.name.len().min(255);
    for (dst, src) in out.d_name.iter_mut().zip(e.name[..n].iter()) {
        *dst = *src as c_char;
    }
    out.d_name[n] = 0;
    out.d_reclen = std::mem::size_of::<dirent64>() as u16;
    out
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(dir: *mut DIR) -> *mut dirent64 {
    // SAFETY: caller's stream.
    match unsafe { ours(dir) } {
        Some(d) => next(d),
        None => match real_ptr!("readdir64", Readdir64Fn) {
            // SAFETY: forwarding.
            Some(f) => unsafe { f(dir) },
            None => std::ptr::null_mut(),
        },
    }
}

// On 64-bit Linux `struct dirent` is `struct dirent64`.
const _: () = assert!(std::mem::size_of::<dirent>() == std::mem::size_of::<dirent64>());

#[no_mangle]
pub unsafe extern "C" fn readdir(dir: *mut DIR) -> *mut dirent {
    // SAFETY: caller's stream.
    match unsafe { ours(dir) } {
        Some(d) => next(d).cast(),
        None => match real_ptr!("readdir", ReaddirFn) {
            // SAFETY: forwarding.
            Some(f) => unsafe { f(dir) },
            None => std::ptr::null_mut(),
        },
    }
}

type ReaddirRFn = unsafe extern "C" fn(*mut DIR, *mut dirent, *mut *mut dirent) -> c_int;
type Readdir64RFn = unsafe extern "C" fn(*mut DIR, *mut dirent64, *mut *mut dirent64) -> c_int;

#[no_mangle]
pub unsafe extern "C" fn readdir_r(
    dir: *mut DIR,
    entry: *mut dirent,
    result: *mut *mut dirent,
) -> c_int {
    // SAFETY: caller's stream and buffers.
    unsafe {
        match ours(dir) {
            Some(d) => {
                let e = next(d);
                if e.is_null() {
                    *result = std::ptr::null_mut();
                } else {
                    std::ptr::copy_nonoverlapping(e.cast::<dirent>(), entry, 1);
                    *result = entry;
                }
                0
            }
            None => match real_ptr!("readdir_r", ReaddirRFn) {
                Some(f) => f(dir, entry, result),
                None => libc::ENOSYS,
            },
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn readdir64_r(
    dir: *mut DIR,
    entry: *mut dirent64,
    result: *mut *mut dirent64,
) -> c_int {
    // SAFETY: caller's stream and buffers.
    unsafe {
        match ours(dir) {
            Some(d) => {
                let e = next(d);
                if e.is_null() {
                    *result = std::ptr::null_mut();
                } else {
                    std::ptr::copy_nonoverlapping(e, entry, 1);
                    *result = entry;
                }
                0
            }
            None => match real_ptr!("readdir64_r", Readdir64RFn) {
                Some(f) => f(dir, entry, result),
                None => libc::ENOSYS,
            },
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn closedir(dir: *mut DIR) -> c_int {
    // SAFETY: caller's stream.
    if unsafe { ours(dir) }.is_some() {
        // SAFETY: ours, allocated by Box::into_raw in new_stream.
        let d = unsafe { Box::from_raw(dir as *mut IrisDir) };
        // SAFETY: the stream's fd.
        return unsafe { crate::calls::close(d.fd) };
    }
    match real_ptr!("closedir", ClosedirFn) {
        // SAFETY: forwarding.
        Some(f) => unsafe { f(dir) },
        None => fail(libc::ENOSYS),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(dir: *mut DIR) {
    // SAFETY: caller's stream.
    match unsafe { ours(dir) } {
        Some(d) => {
            d.pos = 0;
            d.tell = 0;
            d.batch.clear();
            d.at = 0;
            d.eof = false;
        }
        None => {
            if let Some(f) = real_ptr!("rewinddir", RewinddirFn) {
                // SAFETY: forwarding.
                unsafe { f(dir) }
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn telldir(dir: *mut DIR) -> c_long {
    // SAFETY: caller's stream.
    match unsafe { ours(dir) } {
        Some(d) => d.tell as c_long,
        None => match real_ptr!("telldir", TelldirFn) {
            // SAFETY: forwarding.
            Some(f) => unsafe { f(dir) },
            None => -1,
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn seekdir(dir: *mut DIR, pos: c_long) {
    // SAFETY: caller's stream.
    match unsafe { ours(dir) } {
        Some(d) => {
            d.pos = pos as u64;
            d.tell = pos as u64;
            d.batch.clear();
            d.at = 0;
            d.eof = false;
        }
        None => {
            if let Some(f) = real_ptr!("seekdir", SeekdirFn) {
                // SAFETY: forwarding.
                unsafe { f(dir, pos) }
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn dirfd(dir: *mut DIR) -> c_int {
    // SAFETY: caller's stream.
    match unsafe { ours(dir) } {
        Some(d) => d.fd,
        None => match real_ptr!("dirfd", DirfdFn) {
            // SAFETY: forwarding.
            Some(f) => unsafe { f(dir) },
            None => fail(libc::ENOSYS),
        },
    }
}

type Filter = Option<unsafe extern "C" fn(*const dirent64) -> c_int>;
type Compar = Option<unsafe extern "C" fn(*mut *const dirent64, *mut *const dirent64) -> c_int>;
type ScandirFn =
    unsafe extern "C" fn(*const c_char, *mut *mut *mut dirent64, Filter, Compar) -> c_int;

/// scandir over an Iris directory: glibc's own scandir uses its internal opendir.
unsafe fn scandir_iris(
    path: *const c_char,
    list: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compar,
) -> c_int {
    // SAFETY: caller's path; our opendir serves it.
    let dir = unsafe { opendir(path) };
    if dir.is_null() {
        return -1;
    }
    let mut out: Vec<*mut dirent64> = Vec::new();
    loop {
        // SAFETY: our stream.
        let e = unsafe { readdir64(dir) };
        if e.is_null() {
            break;
        }
        // SAFETY: `e` is a valid entry; the filter is the caller's.
        if let Some(f) = filter {
            if unsafe { f(e) } == 0 {
                continue;
            }
        }
        // SAFETY: malloc'd copies, as scandir's caller frees each with free().
        unsafe {
            let copy = libc::malloc(std::mem::size_of::<dirent64>()) as *mut dirent64;
            if copy.is_null() {
                break;
            }
            std::ptr::copy_nonoverlapping(e, copy, 1);
            out.push(copy);
        }
    }
    // SAFETY: our stream.
    unsafe { closedir(dir) };
    if let Some(c) = compar {
        out.sort_by(|a, b| {
            let (mut a, mut b) = (*a as *const dirent64, *b as *const dirent64);
            // SAFETY: the caller's comparator over two valid entries.
            unsafe { c(&mut a, &mut b) }.cmp(&0)
        });
    }
    // SAFETY: a malloc'd array the caller frees.
    unsafe {
        let arr = libc::malloc(out.len().max(1) * std::mem::size_of::<*mut dirent64>())
            as *mut *mut dirent64;
        if arr.is_null() {
            return fail(libc::ENOMEM);
        }
        for (i, p) in out.iter().enumerate() {
            *arr.add(i) = *p;
        }
        *list = arr;
    }
    out.len() as c_int
}

#[no_mangle]
pub unsafe extern "C" fn scandir(
    path: *const c_char,
    list: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compar,
) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        // SAFETY: caller's arguments.
        Target::Iris { .. } => unsafe { scandir_iris(path, list, filter, compar) },
        Target::Host => match real_ptr!("scandir", ScandirFn) {
            // SAFETY: forwarding.
            Some(f) => unsafe { f(path, list, filter, compar) },
            None => fail(libc::ENOSYS),
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn scandir64(
    path: *const c_char,
    list: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compar,
) -> c_int {
    // SAFETY: caller's path.
    match unsafe { target(path) } {
        // SAFETY: caller's arguments.
        Target::Iris { .. } => unsafe { scandir_iris(path, list, filter, compar) },
        Target::Host => match real_ptr!("scandir64", ScandirFn) {
            // SAFETY: forwarding.
            Some(f) => unsafe { f(path, list, filter, compar) },
            None => fail(libc::ENOSYS),
        },
    }
}
