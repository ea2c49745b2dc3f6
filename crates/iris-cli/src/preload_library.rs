//! Where the interposer library lives.

use std::path::PathBuf;

/// `$IRIS_PRELOAD`, else libiris_preload.so next to this binary (or in its deps/ folder, as
/// cargo lays out a build).
pub fn preload_library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("IRIS_PRELOAD") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("libiris_preload.so"),
        dir.join("deps/libiris_preload.so"),
        dir.join("../lib/iris/libiris_preload.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .and_then(|p| std::fs::canonicalize(p).ok())
}
