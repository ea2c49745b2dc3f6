//! Fuzz target: any bytes as a sequence of file-system operations (create, open with flags,
//! write at offsets through the inode and through an open file's block map, read back, truncate,
//! zero and allocate ranges, rename with flags, link, unlink, mkdir, rmdir, symlink, xattrs,
//! chmod, sync) on a fresh small volume, through two openers of it (as two processes). Errors
//! are fine (no space, no such file, ...); a panic, a hang, a write that does not read back in
//! both openers, an open file's map disagreeing with the other opener's walk of the tree, or a
//! file system `check` finds a problem in (after the run, reopened, and reopened after a
//! simulated power loss at a persist the input picks, or at its end) is a bug. Run with `cargo +nightly fuzz run fs_seq` from
//! crates/iris-fs/fuzz.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "seq_ops.rs"]
mod seq_ops;

fuzz_target!(|data: &[u8]| seq_ops::one(data));
