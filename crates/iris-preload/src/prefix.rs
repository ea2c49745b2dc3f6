//! The mount prefixes, parsed from `IRIS_MOUNT` into static storage without allocating: the
//! prefix check runs on every path call, including calls a memory allocator makes while it
//! initialises itself (jemalloc reads /etc/malloc.conf with readlink), where allocating would
//! re-enter the allocator and deadlock.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU8, Ordering};

const MAX_PREFIXES: usize = 8;
const MAX_BYTES: usize = 1024;

struct Table {
    bytes: UnsafeCell<[u8; MAX_BYTES]>,
    spans: UnsafeCell<[(u16, u16); MAX_PREFIXES]>,
    count: UnsafeCell<usize>,
}

// SAFETY: written once by the thread that moves STATE from 0 to 1, read only after STATE is 2.
unsafe impl Sync for Table {}

static TABLE: Table = Table {
    bytes: UnsafeCell::new([0; MAX_BYTES]),
    spans: UnsafeCell::new([(0, 0); MAX_PREFIXES]),
    count: UnsafeCell::new(0),
};
/// 0 = not parsed, 1 = being parsed, 2 = ready.
static STATE: AtomicU8 = AtomicU8::new(0);

fn parse() {
    // SAFETY: getenv returns NULL or a NUL-terminated string of the environment.
    let p = unsafe { libc::getenv(c"IRIS_MOUNT".as_ptr()) };
    let raw: &[u8] = if p.is_null() {
        crate::state::DEFAULT_MOUNT.as_bytes()
    } else {
        // SAFETY: non-null, NUL-terminated.
        unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes()
    };
    // SAFETY: STATE is 1 and this thread set it: nobody else reads or writes the table now.
    let (bytes, spans, count) = unsafe {
        (
            &mut *TABLE.bytes.get(),
            &mut *TABLE.spans.get(),
            &mut *TABLE.count.get(),
        )
    };
    let mut used = 0usize;
    let mut n = 0usize;
    for part in raw.split(|b| *b == b':') {
        let mut part = part;
        while part.len() > 1 && part.ends_with(b"/") {
            part = &part[..part.len() - 1];
        }
        if part.len() < 2 || part[0] != b'/' || n == MAX_PREFIXES || used + part.len() > MAX_BYTES {
            continue;
        }
        bytes[used..used + part.len()].copy_from_slice(part);
        spans[n] = (used as u16, part.len() as u16);
        used += part.len();
        n += 1;
    }
    *count = n;
}

/// Call `f` with each prefix; nothing if the table is being built by this or another thread
/// (such early calls are the host's).
pub(crate) fn for_each(mut f: impl FnMut(&[u8]) -> bool) {
    match STATE.load(Ordering::Acquire) {
        2 => {}
        0 if STATE
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok() =>
        {
            parse();
            STATE.store(2, Ordering::Release);
        }
        _ => return,
    }
    // SAFETY: STATE is 2: the table is complete and never written again.
    let (bytes, spans, count) =
        unsafe { (&*TABLE.bytes.get(), &*TABLE.spans.get(), *TABLE.count.get()) };
    for &(at, len) in &spans[..count] {
        if !f(&bytes[at as usize..(at + len) as usize]) {
            return;
        }
    }
}

/// The first prefix (what absolute symlink targets and `getcwd` use).
pub(crate) fn first() -> Vec<u8> {
    let mut out = Vec::new();
    for_each(|p| {
        out = p.to_vec();
        false
    });
    out
}
