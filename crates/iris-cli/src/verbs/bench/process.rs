//! Running one child program for the benchmark: in its own process group (so an interrupt or a
//! timeout stops it and everything it forked), output captured to files in the scratch
//! directory (no pipes to drain), waited for with a deadline.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::interrupt::{self, ChildGroup};
use crate::failure::io_text;

/// How often a waiting run checks its child, the deadline and interrupts.
const POLL: Duration = Duration::from_millis(20);
/// Most characters of a child's error output quoted in a message.
const QUOTED_CHARS: usize = 400;

/// Why a run produced no result.
#[derive(Debug)]
pub enum Stop {
    /// The user interrupted the benchmark: stop everything.
    Interrupted,
    /// This run failed (spawn error, timeout, or non-zero exit): record it and go on.
    Failed(String),
}

/// What a finished child left.
#[derive(Debug)]
pub struct Finished {
    /// Its standard output.
    pub stdout: String,
    /// How long it ran.
    pub elapsed: Duration,
}

/// Run `cmd` to completion within `timeout`, stdout and stderr captured through files in
/// `scratch`. A non-zero exit is `Failed` with the end of stderr.
pub fn run(cmd: &mut Command, scratch: &Path, timeout: Duration) -> Result<Finished, Stop> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    let out_path = scratch.join(format!("child-{}-{n}.stdout", std::process::id()));
    let err_path = scratch.join(format!("child-{}-{n}.stderr", std::process::id()));
    let files = std::fs::File::create(&out_path)
        .and_then(|o| Ok((o, std::fs::File::create(&err_path)?)))
        .map_err(|e| Stop::Failed(format!("{}: {}", scratch.display(), io_text(&e))))?;
    cmd.stdout(Stdio::from(files.0))
        .stderr(Stdio::from(files.1));
    let start = Instant::now();
    let mut child = spawn(cmd, &program)?;
    let status = wait(&mut child, timeout, &program);
    let elapsed = start.elapsed();
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    let status = status?;
    if !status.success() {
        let why = if stderr.trim().is_empty() {
            &stdout
        } else {
            &stderr
        };
        return Err(Stop::Failed(format!(
            "{program} exited with {status}: {}",
            tail(&one_line(why), QUOTED_CHARS)
        )));
    }
    Ok(Finished { stdout, elapsed })
}

/// Start `cmd` as the leader of a new process group, stdin closed unless the caller set it.
pub fn spawn(cmd: &mut Command, program: &str) -> Result<Child, Stop> {
    if interrupt::interrupted() {
        return Err(Stop::Interrupted);
    }
    cmd.process_group(0)
        .spawn()
        .map_err(|e| Stop::Failed(format!("{program}: {}", io_text(&e))))
}

/// Wait for `child`; on interrupt or timeout stop its whole group (SIGINT, then SIGKILL).
fn wait(child: &mut Child, timeout: Duration, program: &str) -> Result<ExitStatus, Stop> {
    let _group = ChildGroup::register(child.id());
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return if interrupt::interrupted() {
                    Err(Stop::Interrupted)
                } else {
                    Ok(status)
                };
            }
            Ok(None) => {}
            Err(e) => return Err(Stop::Failed(format!("{program}: {}", io_text(&e)))),
        }
        if start.elapsed() > timeout {
            stop_group(child);
            return Err(Stop::Failed(format!(
                "{program} did not finish within {} s; stopped",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// Stop a child's process group: SIGINT, a moment to exit cleanly, then SIGKILL; reap it.
pub fn stop_group(child: &mut Child) {
    let Ok(group) = i32::try_from(child.id()) else {
        return;
    };
    interrupt::signal_group(group, libc::SIGINT);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(POLL);
    }
    interrupt::signal_group(group, libc::SIGKILL);
    let _ = child.wait();
}

/// Lines joined by single spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The last `max_chars` characters of `text`, marked when cut.
fn tail(text: &str, max_chars: usize) -> String {
    let count = text.chars().count();
    if count <= max_chars {
        return text.to_string();
    }
    let cut: String = text.chars().skip(count - max_chars).collect();
    format!("...{cut}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_quote_the_end_of_stderr() {
        let dir = std::env::temp_dir();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo one >&2; echo two >&2; exit 3"]);
        match run(&mut cmd, &dir, Duration::from_secs(10)) {
            Err(Stop::Failed(line)) => assert!(line.ends_with("one two"), "{line}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn slow_children_are_stopped_at_the_deadline() {
        let dir = std::env::temp_dir();
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let start = Instant::now();
        assert!(matches!(
            run(&mut cmd, &dir, Duration::from_millis(200)),
            Err(Stop::Failed(_))
        ));
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn tails_are_cut_at_the_front() {
        assert_eq!(tail("abcdef", 3), "...def");
        assert_eq!(tail("abc", 3), "abc");
    }
}
