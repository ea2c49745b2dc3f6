//! Fault injection for the kill tests: with `IRIS_FAILPOINT=NAME` in its environment, a
//! process sends itself SIGKILL the first time it reaches the point NAME, so a test can kill a
//! writer at an instant a random `kill -9` would almost never hit. Unset (always, outside the
//! tests), a point costs one load.

use std::sync::OnceLock;

/// Die here, as by `kill -9`, if this is the point the environment names.
#[inline]
pub(crate) fn hit(name: &str) {
    static POINT: OnceLock<Option<String>> = OnceLock::new();
    if POINT
        .get_or_init(|| std::env::var("IRIS_FAILPOINT").ok())
        .as_deref()
        == Some(name)
    {
        // SAFETY: sending a signal to this process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}
