//! iris-preload: the `LD_PRELOAD` interposer. Calls on paths under an Iris mount prefix (default
//! `/iris`, `IRIS_MOUNT` sets a colon-separated list) and on fds opened there are served
//! in-process by iris-fs over the volume named by `IRIS_VOLUME`; everything else goes to libc's own
//! functions untouched.
//!
//! Files: `calls.rs` (exported entry points), `fdtable.rs` (fd -> open file), `route.rs` (whose
//! path is it), `state.rs` (configuration, the file system, the re-entrancy guard), `real.rs`
//! (libc's functions via `dlsym(RTLD_NEXT)`).

mod aio;
mod aliases;
mod bounce;
mod calls;
mod cwd;
mod deadlock;
mod desc_pool;
mod description;
mod dirstream;
mod elf_deps;
mod errno;
mod exec;
#[cfg(target_arch = "x86_64")]
mod exec_list;
mod fdtable;
mod fork;
mod hazard;
mod ident;
mod inherit;
mod launch;
mod libc_paths;
mod loadable;
mod lock_owners;
mod locks;
mod mappings;
mod more;
mod posix_aio;
mod prefix;
mod readiness;
mod real;
mod report;
mod route;
mod shadow;
mod signals;
mod sockets;
mod splice;
mod state;
mod stdio;
mod uring;
mod xattr;

pub use state::{default_volume, DEFAULT_MOUNT};
