//! Finding and running the administration tools the kernel targets need (losetup, mkfs.*,
//! mount, umount), also when PATH lacks the sbin directories.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::process::one_line;
use crate::failure::io_text;

/// Where administration tools live when PATH lacks them.
const SBIN_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// `program` on PATH or in the sbin directories.
pub fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SBIN_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// A command for `program`, found as [`find`] finds it (else left to PATH, to fail there).
pub fn command(program: &str) -> Command {
    Command::new(find(program).unwrap_or_else(|| PathBuf::from(program)))
}

/// Run `program args` quietly and return its standard output; a failure is one line naming
/// the command and quoting its stderr.
pub fn run(program: &str, args: &[&OsStr]) -> Result<String, String> {
    let shown = || {
        let mut line = program.to_string();
        for a in args {
            line.push(' ');
            line.push_str(&a.to_string_lossy());
        }
        line
    };
    let out = command(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {}", shown(), io_text(&e)))?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            shown(),
            one_line(&String::from_utf8_lossy(&out.stderr))
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
