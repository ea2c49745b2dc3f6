//! Where the interposer library lives.

use std::path::PathBuf;

/// `$IRIS_PRELOAD`, else libiris_preload.so next to this binary (or in its deps/ folder, as
/// cargo lays out a build). Of several, the newest: `cargo build -p iris-cli` refreshes only the
/// deps/ copy, and running a stale interposer would test old code.
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
    .filter_map(|p| {
        let modified = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
        Some((modified, p))
    })
    .max_by_key(|(modified, _)| *modified)
    .and_then(|(_, p)| std::fs::canonicalize(p).ok())
}
