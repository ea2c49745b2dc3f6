//! How a verb fails: the one line `main` prints after "iris: ", or a quiet stop when the reader
//! of standard output went away. Also the wording of OS and file-system errors in those lines.

use std::process::ExitCode;

use iris_fs::Errno;

/// Why a verb stopped before finishing.
#[derive(Debug)]
pub enum Failure {
    /// Report this (one line, without the "iris: " prefix) on stderr and exit 1.
    Error(String),
    /// Standard output was closed by its reader (`iris cat V /f | head`): stop without a word.
    StdoutClosed,
}

impl From<String> for Failure {
    fn from(line: String) -> Self {
        Failure::Error(line)
    }
}

impl From<&str> for Failure {
    fn from(line: &str) -> Self {
        Failure::Error(line.to_string())
    }
}

/// What a verb returns: the exit status to end with, or why it failed.
pub type Outcome = Result<ExitCode, Failure>;

/// Exit status after stdout closed early: what a shell reports for a process killed by SIGPIPE
/// (128 + 13), so `set -o pipefail` scripts see the same as with coreutils.
pub const STDOUT_CLOSED_EXIT: u8 = 141;

/// Classify a failed write to standard output.
pub fn stdout_failed(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::StdoutClosed
    } else {
        Failure::Error(format!("standard output: {}", io_text(&e)))
    }
}

/// An OS error's text without the " (os error N)" that Rust appends: "No such file or directory".
pub fn io_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// One line for a failed operation on a host path: "PATH: No such file or directory".
pub fn host_failure(path: &std::path::Path, e: &std::io::Error) -> String {
    format!("{}: {}", path.display(), io_text(e))
}

/// A file-system error's text, worded as the OS words the same errno.
pub fn errno_text(e: Errno) -> String {
    io_text(&std::io::Error::from_raw_os_error(e.0))
}

/// Print one line on standard output.
pub fn say(line: &str) -> Result<(), Failure> {
    use std::io::Write;
    writeln!(std::io::stdout(), "{line}").map_err(stdout_failed)
}
