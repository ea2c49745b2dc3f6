//! iris-floor: the ceiling any `LD_PRELOAD` interposer can reach on this machine. Paths under
//! [`MOUNT_PREFIX`] are files in a backing directory (`$IRIS_FLOOR_DIR`, default
//! [`DEFAULT_DIR`]); an fd opened there is a real fd on the backing file, and `pread`/`pwrite`
//! (and `read`/`write` with an offset kept in user space) are `memcpy` to and from a `MAP_SHARED`
//! mapping of it. There is no store, no tree, no lookup: only the mechanics every interposer
//! pays (symbol interposition, a path check on open, one fd-table load per call). `iris bench`
//! runs fio through it to show what is physically possible here.
//!
//! What it is not: a file system. Because each fd *is* the backing file, every call it does not
//! serve (fstat, fcntl, mmap, readv, dup, ...) goes to the kernel and still sees the right file.
//! Known gaps, harmless for fio: an fd made by `dup` or inherited across `exec` is served by the
//! kernel with the kernel's offset, not the user-space one; a file truncated by another process
//! while mapped here raises SIGBUS on access past its new end; stdio (`fopen`) opens inside libc
//! and is not routed; only absolute paths are.
//!
//! Files: `calls.rs` (the exported C entry points), `fdtable.rs` (fd -> mapped file),
//! `mapping.rs` (opening, mapping, growing a backing file), `copy.rs` (the memcpy data path),
//! `path.rs` (which path is the floor's, and where its backing file is), `real.rs` (libc's own
//! functions via `dlsym(RTLD_NEXT)`), `errno.rs`.

mod calls;
mod copy;
mod errno;
mod fdtable;
mod mapping;
mod path;
mod real;

/// The path prefix served by the shim: `/floor` and everything below it.
pub const MOUNT_PREFIX: &str = "/floor";

/// The environment variable naming the backing directory.
pub const DIR_ENV: &str = "IRIS_FLOOR_DIR";

/// The backing directory when `$IRIS_FLOOR_DIR` is unset or empty.
pub const DEFAULT_DIR: &str = "/dev/shm/iris-floor";

/// The largest file the shim serves: each open file reserves this much address space (never
/// memory), so a write that grows a file never has to move its mapping.
pub const MAX_FILE_BYTES: u64 = 16 << 30;
