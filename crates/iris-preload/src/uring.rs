//! io_uring requests on Iris fds, for programs that make io_uring's system calls through libc's
//! `syscall()` (Rust's io-uring crate does; fio's engine and liburing make them as raw system
//! calls, which no interposer sees). The kernel reads a ring's requests from memory it
//! shares with the program, so a request on an Iris fd would run against the fd's placeholder
//! (a write fails with EBADF, a read returns zeros). Here the `io_uring_enter` that submits
//! requests first walks the ones the kernel is about to take: each on an Iris fd is carried
//! out at once through Iris's own calls and rewritten into a NOP that makes the kernel post its
//! result (`IORING_NOP_INJECT_RESULT`), so the completion reaches the program through the
//! ring's own completion queue, in order with the kernel's, with its `user_data` and link
//! semantics (a failed request cancels the rest of its chain).
//!
//! Not followed: rings polled by a kernel thread (`IORING_SETUP_SQPOLL`: the kernel takes
//! requests without a system call), programs that make the system calls themselves (liburing
//! built without libc), requests on registered (fixed) files, and path-based requests
//! (`OPENAT`, `STATX`) naming Iris paths. A request on an Iris fd that must wait for a kernel
//! request before it in its chain, or that asks for a kernel-selected buffer, fails with
//! EOPNOTSUPP; so do `SPLICE`, `TEE`, the xattr requests and `URING_CMD` on Iris fds.
//! Without `IORING_NOP_INJECT_RESULT` (kernels before 6.11) requests go to the kernel as
//! before.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use iris_fs::ForkSafeMutex as Mutex;
use libc::{c_int, c_long, c_void};

use crate::fdtable;

/// `struct io_sqring_offsets` / `struct io_cqring_offsets` (the same shape).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RingOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    /// `flags` for the submission ring, `overflow` for the completion ring.
    w4: u32,
    /// `dropped` / `cqes`.
    w5: u32,
    /// `array` / `flags`.
    w6: u32,
    resv1: u32,
    user_addr: u64,
}

/// `struct io_uring_params`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: RingOffsets,
    cq_off: RingOffsets,
}

/// `struct io_uring_sqe`, the fields read or written here (64 bytes).
#[repr(C)]
struct Sqe {
    opcode: u8,
    flags: u8,
    ioprio: u16,
    fd: i32,
    off: u64,
    addr: u64,
    len: u32,
    /// `rw_flags`, `fsync_flags`, `nop_flags`, ...
    op_flags: u32,
    user_data: u64,
    buf_index: u16,
    personality: u16,
    splice_fd_in: i32,
    addr3: u64,
    pad: u64,
}

const _: () = assert!(std::mem::size_of::<Sqe>() == 64);
const _: () = assert!(std::mem::size_of::<Params>() == 120);

// Setup flags.
const SETUP_SQPOLL: u32 = 1 << 1;
const SETUP_SQE128: u32 = 1 << 10;
const SETUP_NO_MMAP: u32 = 1 << 14;
const SETUP_REGISTERED_FD_ONLY: u32 = 1 << 15;
const SETUP_NO_SQARRAY: u32 = 1 << 16;
// Offsets of `mmap` on a ring fd.
const OFF_SQ_RING: i64 = 0;
const OFF_SQES: i64 = 0x1000_0000;
// Enter flags.
const ENTER_REGISTERED_RING: u32 = 1 << 4;
// Register opcodes.
const REGISTER_RING_FDS: u32 = 20;
const UNREGISTER_RING_FDS: u32 = 21;
/// Register flag: the fd is a registered ring's index.
const REGISTER_USE_REGISTERED_RING: u32 = 1 << 31;
// Request flags.
const SQE_FIXED_FILE: u8 = 1 << 0;
const SQE_IO_DRAIN: u8 = 1 << 1;
const SQE_IO_LINK: u8 = 1 << 2;
const SQE_IO_HARDLINK: u8 = 1 << 3;
const SQE_ASYNC: u8 = 1 << 4;
const SQE_BUFFER_SELECT: u8 = 1 << 5;
const SQE_CQE_SKIP_SUCCESS: u8 = 1 << 6;
// Opcodes.
const OP_NOP: u8 = 0;
const OP_READV: u8 = 1;
const OP_WRITEV: u8 = 2;
const OP_FSYNC: u8 = 3;
const OP_READ_FIXED: u8 = 4;
const OP_WRITE_FIXED: u8 = 5;
const OP_POLL_ADD: u8 = 6;
const OP_SYNC_FILE_RANGE: u8 = 8;
const OP_FALLOCATE: u8 = 17;
const OP_CLOSE: u8 = 19;
const OP_READ: u8 = 22;
const OP_WRITE: u8 = 23;
const OP_FADVISE: u8 = 24;
const OP_SPLICE: u8 = 30;
const OP_TEE: u8 = 33;
const OP_FSETXATTR: u8 = 41;
const OP_FGETXATTR: u8 = 43;
const OP_URING_CMD: u8 = 46;
const OP_READ_MULTISHOT: u8 = 49;
const OP_FTRUNCATE: u8 = 55;
const OP_READV_FIXED: u8 = 60;
const OP_WRITEV_FIXED: u8 = 61;
const FSYNC_DATASYNC: u32 = 1;
const NOP_INJECT_RESULT: u32 = 1;

/// A ring set up through `syscall()`: where its submission queue is, in this process.
struct Ring {
    fd: c_int,
    /// The submission ring (head, tail, mask, array).
    sq: *mut u8,
    sq_off: RingOffsets,
    sqes: *mut u8,
    entries: u32,
    /// Bytes per request (64, or 128 with `IORING_SETUP_SQE128`).
    stride: usize,
    /// No index array: request i is at slot i & mask (`IORING_SETUP_NO_SQARRAY`).
    no_array: bool,
    /// This process's own mappings, to unmap when the ring is forgotten (none for
    /// `IORING_SETUP_NO_MMAP`, whose memory is the program's).
    maps: [(usize, usize); 2],
    /// Held while requests are served: two threads entering one ring at once (a program
    /// that submits from both) do not rewrite the same requests.
    serving: Mutex<()>,
}

// SAFETY: the pointers are this process's mappings of the ring, valid while the entry lives;
// the ring's words are read as atomics, and its requests are rewritten only under `serving`.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        for &(at, len) in &self.maps {
            if len > 0 {
                // SAFETY: a mapping made in `Ring::map` and used by nothing else.
                unsafe { crate::real::munmap(at as *mut c_void, len) };
            }
        }
    }
}

/// Rings known in this process (held only to look one up: requests are served outside it).
static RINGS: Mutex<Vec<Arc<Ring>>> = Mutex::new(Vec::new());
/// Whether any ring is known (so `close` of other fds costs one load).
static ANY: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This thread's registered ring fds (`IORING_REGISTER_RING_FDS`, per thread in the
    /// kernel): (index, ring fd).
    static REGISTERED: std::cell::RefCell<Vec<(u32, c_int)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Ring {
    /// Map the submission side of ring `fd` set up with `p`; None when it cannot be followed.
    fn map(fd: c_int, p: &Params) -> Option<Ring> {
        if p.flags & (SETUP_SQPOLL | SETUP_REGISTERED_FD_ONLY) != 0 || p.sq_entries == 0 {
            return None;
        }
        let stride = if p.flags & SETUP_SQE128 != 0 { 128 } else { 64 };
        let no_array = p.flags & SETUP_NO_SQARRAY != 0;
        let sqes_len = p.sq_entries as usize * stride;
        let (sq, sqes, maps) = if p.flags & SETUP_NO_MMAP != 0 {
            // The program's own memory: rings at cq_off.user_addr, requests at sq_off's.
            (
                p.cq_off.user_addr as *mut u8,
                p.sq_off.user_addr as *mut u8,
                [(0, 0); 2],
            )
        } else {
            let o = &p.sq_off;
            let ring_len = if no_array {
                [o.head, o.tail, o.ring_mask, o.w4, o.w5]
                    .into_iter()
                    .max()? as usize
                    + 4
            } else {
                o.w6 as usize + p.sq_entries as usize * 4
            };
            let sq = map_shared(fd, ring_len, OFF_SQ_RING)?;
            let Some(sqes) = map_shared(fd, sqes_len, OFF_SQES) else {
                // SAFETY: unmapping the mapping just made.
                unsafe { crate::real::munmap(sq.cast(), ring_len) };
                return None;
            };
            (
                sq,
                sqes,
                [(sq as usize, ring_len), (sqes as usize, sqes_len)],
            )
        };
        Some(Ring {
            fd,
            sq,
            sq_off: p.sq_off,
            sqes,
            entries: p.sq_entries,
            stride,
            no_array,
            maps,
            serving: Mutex::new(()),
        })
    }

    /// The u32 of the submission ring at byte offset `off`.
    fn word(&self, off: u32) -> &AtomicU32 {
        // SAFETY: `off` is one of the kernel's offsets into the mapped ring, 4-aligned; the
        // ring's words are shared with the kernel, hence atomics.
        unsafe { &*self.sq.add(off as usize).cast::<AtomicU32>() }
    }

    /// Serve the requests on Iris fds among the next `to_submit` the kernel will take.
    fn serve_pending(&self, to_submit: u32) {
        let _serving = self.serving.lock();
        let head = self.word(self.sq_off.head).load(Ordering::Acquire);
        let tail = self.word(self.sq_off.tail).load(Ordering::Acquire);
        let mask = self.word(self.sq_off.ring_mask).load(Ordering::Relaxed);
        let n = tail.wrapping_sub(head).min(to_submit).min(self.entries);
        // Whether the request before is linked to the next one, and how its chain stands.
        let mut chain = Chain::None;
        for i in 0..n {
            let pos = head.wrapping_add(i) & mask;
            let slot = if self.no_array {
                pos
            } else {
                self.word(self.sq_off.w6 + pos * 4).load(Ordering::Relaxed)
            };
            if slot >= self.entries {
                // The kernel drops it (and counts it in `dropped`).
                chain = Chain::None;
                continue;
            }
            // SAFETY: slot < entries, so the request lies inside the mapped array.
            let sqe = unsafe { &mut *self.sqes.add(slot as usize * self.stride).cast::<Sqe>() };
            let flags = sqe.flags;
            let before = chain;
            chain = serve_one(sqe, chain);
            if flags & (SQE_IO_LINK | SQE_IO_HARDLINK) == 0 {
                chain = Chain::None;
            } else if flags & SQE_IO_HARDLINK != 0
                && chain == Chain::Failed
                && before != Chain::Failed
            {
                // A hard link goes on after its own failure (not after a cancellation).
                chain = Chain::Served;
            }
        }
    }
}

/// Where the chain a request belongs to stands.
#[derive(Clone, Copy, PartialEq)]
enum Chain {
    /// Not linked to a request before it.
    None,
    /// Every request before it in the chain was served here, successfully.
    Served,
    /// A request before it in the chain was served here and failed: the kernel cancels this
    /// one (it must not be carried out).
    Failed,
    /// A request before it in the chain is the kernel's: it cannot wait for it.
    Kernel,
}

/// Serve `sqe` if it names an Iris fd and rewrite it into a NOP carrying its result; the
/// state of the chain after it.
fn serve_one(sqe: &mut Sqe, chain: Chain) -> Chain {
    let iris = sqe.flags & SQE_FIXED_FILE == 0
        && (fdtable::is_iris(sqe.fd)
            || (matches!(sqe.opcode, OP_SPLICE | OP_TEE) && fdtable::is_iris(sqe.splice_fd_in)));
    if !iris || !handled(sqe.opcode) {
        return match chain {
            Chain::None | Chain::Kernel | Chain::Served => Chain::Kernel,
            // The kernel cancels it with the rest of the chain.
            Chain::Failed => Chain::Failed,
        };
    }
    let res = match chain {
        // Cancelled by the kernel when the NOP before it fails: the result is not seen.
        Chain::Failed => -libc::ECANCELED,
        Chain::Kernel => -libc::EOPNOTSUPP,
        Chain::None | Chain::Served if sqe.flags & SQE_BUFFER_SELECT != 0 => -libc::EOPNOTSUPP,
        // SAFETY: the program's request, its buffers valid as it describes them.
        Chain::None | Chain::Served => unsafe { carry_out(sqe) },
    };
    // A short read or write fails its link too, as the kernel's do.
    let short = matches!(
        sqe.opcode,
        OP_READ | OP_WRITE | OP_READ_FIXED | OP_WRITE_FIXED
    ) && res >= 0
        && (res as u32) < sqe.len;
    rewrite(sqe, res);
    if res < 0 || short || chain == Chain::Failed {
        Chain::Failed
    } else {
        Chain::Served
    }
}

/// Whether requests with `opcode` on an Iris fd are answered here.
fn handled(opcode: u8) -> bool {
    matches!(
        opcode,
        OP_READV
            | OP_WRITEV
            | OP_POLL_ADD
            | OP_FSYNC
            | OP_READ_FIXED
            | OP_WRITE_FIXED
            | OP_SYNC_FILE_RANGE
            | OP_FALLOCATE
            | OP_CLOSE
            | OP_READ
            | OP_WRITE
            | OP_FADVISE
            | OP_SPLICE
            | OP_TEE
            | OP_FSETXATTR
            | OP_FGETXATTR
            | OP_URING_CMD
            | OP_READ_MULTISHOT
            | OP_FTRUNCATE
            | OP_READV_FIXED
            | OP_WRITEV_FIXED
    )
}

/// The result of an Iris call that returns -1 and sets errno: the value, or -errno (as an
/// io_uring completion's `res`, an i32).
fn result(r: i64) -> i32 {
    if r < 0 {
        -crate::errno::get()
    } else {
        i32::try_from(r).unwrap_or(i32::MAX)
    }
}

/// Carry out `sqe` on its Iris fd; its result (bytes or 0, or -errno).
///
/// # Safety
/// `sqe`'s buffers are the program's, valid as the request describes them.
unsafe fn carry_out(sqe: &Sqe) -> i32 {
    use crate::calls;
    let fd = sqe.fd;
    let buf = sqe.addr as *mut c_void;
    let len = sqe.len as usize;
    // Offset -1: the file offset (IORING_FEAT_RW_CUR_POS).
    let off = sqe.off as i64;
    let flags = sqe.op_flags as c_int;
    let one = libc::iovec {
        iov_base: buf,
        iov_len: len,
    };
    let iov = sqe.addr as *const libc::iovec;
    let count = c_int::try_from(sqe.len).unwrap_or(c_int::MAX);
    let saved = crate::errno::get();
    // SAFETY: the program's buffers as the request gives them, through Iris's own calls.
    let r = unsafe {
        match sqe.opcode {
            OP_READ | OP_READ_FIXED if flags == 0 && off != -1 => {
                result(calls::pread64(fd, buf, len, off) as i64)
            }
            OP_WRITE | OP_WRITE_FIXED if flags == 0 && off != -1 => {
                result(calls::pwrite64(fd, buf, len, off) as i64)
            }
            OP_READ | OP_READ_FIXED => result(calls::preadv2(fd, &one, 1, off, flags) as i64),
            OP_WRITE | OP_WRITE_FIXED => result(calls::pwritev2(fd, &one, 1, off, flags) as i64),
            OP_READV | OP_READV_FIXED => result(calls::preadv2(fd, iov, count, off, flags) as i64),
            OP_WRITEV | OP_WRITEV_FIXED => {
                result(calls::pwritev2(fd, iov, count, off, flags) as i64)
            }
            OP_FSYNC if sqe.op_flags & !FSYNC_DATASYNC != 0 => -libc::EINVAL,
            OP_FSYNC if sqe.op_flags & FSYNC_DATASYNC != 0 => {
                result(i64::from(calls::fdatasync(fd)))
            }
            OP_FSYNC => result(i64::from(calls::fsync(fd))),
            // (off: offset, len: bytes, op_flags: flags)
            OP_SYNC_FILE_RANGE => result(i64::from(crate::more::sync_file_range(
                fd,
                off,
                i64::from(sqe.len),
                sqe.op_flags,
            ))),
            // (off: offset, addr: length, len: mode)
            OP_FALLOCATE => result(i64::from(calls::fallocate(
                fd,
                sqe.len as c_int,
                off,
                sqe.addr as i64,
            ))),
            OP_CLOSE if sqe.splice_fd_in != 0 => -libc::EINVAL,
            OP_CLOSE => result(i64::from(calls::close(fd))),
            // (off: offset, len: bytes, op_flags: advice)
            OP_FADVISE => {
                // (A zero `len` with the length in `addr`: io_uring_prep_fadvise64.)
                let n = if sqe.len == 0 {
                    sqe.addr as i64
                } else {
                    i64::from(sqe.len)
                };
                -calls::posix_fadvise(fd, off, n, flags)
            }
            OP_FTRUNCATE => result(i64::from(calls::ftruncate(fd, off))),
            // A file is always ready (a multishot poll would never end: refused).
            OP_POLL_ADD if sqe.len & 1 != 0 => -libc::EOPNOTSUPP,
            OP_POLL_ADD => {
                let ready =
                    (libc::POLLIN | libc::POLLOUT | libc::POLLRDNORM | libc::POLLWRNORM) as u32;
                match sqe.op_flags & ready {
                    // Only events a file never has: Linux would never complete it.
                    0 => -libc::EOPNOTSUPP,
                    m => m as i32,
                }
            }
            _ => -libc::EOPNOTSUPP,
        }
    };
    crate::errno::set(saved);
    r
}

/// Make `sqe` a NOP whose completion carries `res`, keeping its `user_data` and the flags
/// that order it and its chain.
fn rewrite(sqe: &mut Sqe, res: i32) {
    let keep = SQE_IO_DRAIN | SQE_IO_LINK | SQE_IO_HARDLINK | SQE_ASYNC | SQE_CQE_SKIP_SUCCESS;
    let user_data = sqe.user_data;
    *sqe = Sqe {
        opcode: OP_NOP,
        flags: sqe.flags & keep,
        ioprio: 0,
        fd: -1,
        off: 0,
        addr: 0,
        len: res as u32,
        op_flags: NOP_INJECT_RESULT,
        user_data,
        buf_index: 0,
        personality: 0,
        splice_fd_in: 0,
        addr3: 0,
        pad: 0,
    };
    // The kernel reads the request after this thread's system call begins.
    fence(Ordering::Release);
}

/// `mmap(MAP_SHARED)` of `len` bytes of ring fd `fd` at `off`.
fn map_shared(fd: c_int, len: usize, off: i64) -> Option<*mut u8> {
    // SAFETY: a new shared mapping of the ring's own memory; nothing existing is affected.
    let p = unsafe {
        crate::real::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd,
            off,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}

/// Whether this kernel's NOP can carry a result (`IORING_NOP_INJECT_RESULT`), tried once on a
/// ring of one request.
fn inject_supported() -> bool {
    // 0 not known, 1 yes, 2 no. (Not a `OnceLock`: a child forked while another thread probes
    // would wait for it for ever. Two threads may both probe.)
    static SUPPORTED: AtomicU8 = AtomicU8::new(0);
    match SUPPORTED.load(Ordering::Acquire) {
        1 => return true,
        2 => return false,
        _ => {}
    }
    let mut p = Params::default();
    // SAFETY: io_uring_setup with a valid params block.
    let fd = unsafe {
        crate::real::syscall(
            libc::SYS_io_uring_setup,
            1,
            std::ptr::from_mut(&mut p) as c_long,
            0,
            0,
            0,
            0,
        )
    } as c_int;
    if fd < 0 {
        // (No answer: perhaps out of fds or memory now; asked again next time.)
        return false;
    }
    let ok = probe(fd, &p).unwrap_or(false);
    // SAFETY: closing the probe's own ring.
    unsafe { crate::real::close(fd) };
    SUPPORTED.store(if ok { 1 } else { 2 }, Ordering::Release);
    ok
}

/// Submit a NOP carrying 7 on ring `fd` and check that it completes with 7.
fn probe(fd: c_int, p: &Params) -> Option<bool> {
    let ring = Ring::map(fd, p)?;
    let cq_len = p.cq_off.w5 as usize + p.cq_entries as usize * 16;
    let cq = map_shared(fd, cq_len, 0x800_0000)?;
    let tail = ring.word(ring.sq_off.tail).load(Ordering::Relaxed);
    let mask = ring.word(ring.sq_off.ring_mask).load(Ordering::Relaxed);
    let slot = tail & mask;
    if !ring.no_array {
        ring.word(ring.sq_off.w6 + slot * 4)
            .store(slot, Ordering::Relaxed);
    }
    // SAFETY: slot < entries: inside the mapped requests.
    let sqe = unsafe { &mut *ring.sqes.add(slot as usize * ring.stride).cast::<Sqe>() };
    rewrite(sqe, 7);
    sqe.user_data = 0x1215;
    ring.word(ring.sq_off.tail)
        .store(tail.wrapping_add(1), Ordering::Release);
    // SAFETY: io_uring_enter on the probe's ring: submit one, wait for one.
    let r = unsafe {
        crate::real::syscall(
            libc::SYS_io_uring_enter,
            fd as c_long,
            1,
            1,
            1, // IORING_ENTER_GETEVENTS
            0,
            0,
        )
    };
    let word = |off: u32| {
        // SAFETY: an offset the kernel gave into the mapped completion ring.
        unsafe { &*cq.add(off as usize).cast::<AtomicU32>() }
    };
    let head = word(p.cq_off.head).load(Ordering::Relaxed);
    let ctail = word(p.cq_off.tail).load(Ordering::Acquire);
    let res = if r == 1 && ctail != head {
        let at = p.cq_off.w5 as usize
            + (head & word(p.cq_off.ring_mask).load(Ordering::Relaxed)) as usize * 16;
        // SAFETY: the first completion, inside the mapped ring: user_data (u64), res (i32).
        let (data, res) = unsafe {
            (
                cq.add(at).cast::<u64>().read(),
                cq.add(at + 8).cast::<i32>().read(),
            )
        };
        data == 0x1215 && res == 7
    } else {
        false
    };
    // SAFETY: unmapping the completion ring mapped above.
    unsafe { crate::real::munmap(cq.cast(), cq_len) };
    Some(res)
}

/// `syscall(SYS_io_uring_setup, entries, params)`: note the ring.
///
/// # Safety
/// `params` is the caller's, as the system call takes it.
pub(crate) unsafe fn setup(entries: c_long, params: c_long) -> c_long {
    // SAFETY: forwarding the caller's arguments.
    let fd = unsafe { crate::real::syscall(libc::SYS_io_uring_setup, entries, params, 0, 0, 0, 0) };
    if fd >= 0 && params != 0 && inject_supported() {
        // SAFETY: the kernel filled in the caller's params block.
        let p = unsafe { (params as *const Params).read() };
        if let Some(ring) = Ring::map(fd as c_int, &p) {
            let _b = crate::state::Busy::enter();
            let gone = {
                let mut rings = RINGS.lock();
                let gone: Vec<_> = rings
                    .iter()
                    .filter(|r| r.fd == fd as c_int)
                    .cloned()
                    .collect();
                rings.retain(|r| r.fd != fd as c_int);
                rings.push(Arc::new(ring));
                gone
            };
            drop(gone);
            ANY.store(true, Ordering::Relaxed);
        }
    }
    fd
}

/// `syscall(SYS_io_uring_enter, fd, to_submit, ...)`: serve the requests on Iris fds first.
///
/// # Safety
/// The arguments are the caller's, as the system call takes them.
pub(crate) unsafe fn enter(a: [c_long; 6]) -> c_long {
    // (unsigned int and int arguments: their registers' upper halves mean nothing.)
    let (fd, to_submit, flags) = (a[0] as c_int, a[1] as u32, a[3] as u32);
    if to_submit > 0 && ANY.load(Ordering::Relaxed) {
        let ring_fd = if flags & ENTER_REGISTERED_RING != 0 {
            REGISTERED
                .try_with(|r| {
                    r.try_borrow()
                        .ok()
                        .and_then(|r| r.iter().find(|&&(i, _)| i as c_int == fd).map(|&(_, f)| f))
                })
                .ok()
                .flatten()
        } else {
            Some(fd)
        };
        if let Some(ring_fd) = ring_fd {
            let _b = crate::state::Busy::enter();
            let ring = RINGS.lock().iter().find(|r| r.fd == ring_fd).cloned();
            if let Some(ring) = ring {
                ring.serve_pending(to_submit);
            }
        }
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { crate::real::syscall(libc::SYS_io_uring_enter, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

/// `struct io_uring_rsrc_update`.
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

/// `syscall(SYS_io_uring_register, fd, opcode, arg, nr)`: note registered ring fds.
///
/// # Safety
/// The arguments are the caller's, as the system call takes them.
pub(crate) unsafe fn register(a: [c_long; 6]) -> c_long {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe {
        crate::real::syscall(
            libc::SYS_io_uring_register,
            a[0],
            a[1],
            a[2],
            a[3],
            a[4],
            a[5],
        )
    };
    let op = a[1] as u32 & !REGISTER_USE_REGISTERED_RING;
    let arg = a[2];
    if r > 0 && arg != 0 && matches!(op, REGISTER_RING_FDS | UNREGISTER_RING_FDS) {
        // The kernel took the first `r` updates of the caller's array.
        let done = usize::try_from(r).unwrap_or(0).min(a[3] as u32 as usize);
        // SAFETY: the caller's array holds at least the `done` updates the kernel accepted.
        let ups = unsafe { std::slice::from_raw_parts(arg as *const RsrcUpdate, done) };
        let _ = REGISTERED.try_with(|reg| {
            let Ok(mut reg) = reg.try_borrow_mut() else {
                return;
            };
            for u in ups {
                reg.retain(|&(i, _)| i != u.offset);
                if op == REGISTER_RING_FDS {
                    reg.push((u.offset, u.data as c_int));
                }
            }
        });
    }
    r
}

/// Fds `first..=last` are closed (or replaced): a ring among them is forgotten (its mappings
/// here would keep it alive).
pub(crate) fn forget_range(first: c_int, last: c_int) {
    if ANY.load(Ordering::Relaxed) {
        let _b = crate::state::Busy::enter();
        let gone: Vec<Arc<Ring>> = {
            let mut rings = RINGS.lock();
            let gone = rings
                .iter()
                .filter(|r| (first..=last).contains(&r.fd))
                .cloned()
                .collect();
            rings.retain(|r| !(first..=last).contains(&r.fd));
            gone
        };
        drop(gone);
    }
}

/// Fd `fd` is closed (or replaced): see [`forget_range`].
pub(crate) fn forget(fd: c_int) {
    forget_range(fd, fd);
}

/// Hold the table of rings across a fork (see `crate::fork`).
pub(crate) fn lock_for_fork() {
    std::mem::forget(RINGS.lock());
}

/// Release what [`lock_for_fork`] took (parent and child).
pub(crate) fn unlock_after_fork() {
    // SAFETY: only after lock_for_fork, whose guard was forgotten.
    unsafe { RINGS.force_unlock() };
}

/// Whether system call `n` makes a child process.
fn makes_child(n: c_long) -> bool {
    #[cfg(target_arch = "x86_64")]
    if n == libc::SYS_fork || n == libc::SYS_vfork {
        return true;
    }
    n == libc::SYS_clone || n == libc::SYS_clone3
}

/// libc's `syscall()`: io_uring's three system calls are followed here (a raw chdir or
/// fchdir drops the cached host working directory, a raw fork or clone is counted as a child
/// that may hold this process's fds), every other goes to libc untouched.
/// (Variadic in C; on x86-64 and aarch64 its integer arguments travel as six fixed ones do,
/// and libc reads six whatever the call.)
///
/// # Safety
/// As the system call named by `n` requires of its arguments.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    // SAFETY (each arm): the caller's arguments, as the system call takes them.
    match n {
        libc::SYS_io_uring_setup => unsafe { setup(a1, a2) },
        libc::SYS_io_uring_enter => unsafe { enter([a1, a2, a3, a4, a5, a6]) },
        libc::SYS_io_uring_register => unsafe { register([a1, a2, a3, a4, a5, a6]) },
        n if makes_child(n) => {
            // A child made behind libc's back (see `description::FORKS`); a raw clone may put
            // it in a new user namespace (see `ident`).
            crate::description::note_fork();
            if n == libc::SYS_clone || n == libc::SYS_clone3 {
                crate::ident::remember_nothing();
            }
            let r = unsafe { crate::real::syscall(n, a1, a2, a3, a4, a5, a6) };
            crate::description::note_fork();
            r
        }
        n if crate::ident::raw_call_matters(n) => {
            let r = unsafe { crate::real::syscall(n, a1, a2, a3, a4, a5, a6) };
            crate::ident::after_raw_call(n);
            r
        }
        libc::SYS_chdir | libc::SYS_fchdir => {
            let r = unsafe { crate::real::syscall(n, a1, a2, a3, a4, a5, a6) };
            // The host working directory moved unseen: its cached path is stale.
            crate::cwd::forget_host_cwd();
            r
        }
        _ => unsafe { crate::real::syscall(n, a1, a2, a3, a4, a5, a6) },
    }
}
