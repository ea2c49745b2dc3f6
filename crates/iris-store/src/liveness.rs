//! Whether a process or thread that left its id in the shared header still runs: the owners of
//! reader slots, a volume's grower, the holders of the writer locks. Ids are those of the
//! caller's pid namespace (processes that share a volume share one).

/// Whether process `pid` exists (signal 0 delivers nothing; EPERM: it exists, not ours). A
/// zombie exists until its parent reaps it.
pub(crate) fn process_exists(pid: libc::pid_t) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Whether thread `tid` of process `pid` still runs: it exists in that process, and the
/// process is not a zombie (a killed process keeps its id until its parent reaps it).
pub(crate) fn thread_runs(pid: libc::pid_t, tid: libc::pid_t) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the thread exists and may be signalled.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, 0) };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    // A zombie's state in /proc/PID/stat, after the parenthesised command name: Z (or X).
    match std::fs::read(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .iter()
                .rposition(|&b| b == b')')
                .and_then(|i| stat.get(i + 2));
            !matches!(state, Some(b'Z' | b'X'))
        }
        // Gone since the signal's check; or no /proc here (this process's own entry missing
        // too), where a live thread is all that can be told: taken as running.
        Err(_) => std::fs::metadata("/proc/self/stat").is_err(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_zombie_or_reaped_process_runs_no_thread_a_running_one_does() {
        let id = |child: &std::process::Child| child.id() as libc::pid_t;
        let mut running = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        assert!(thread_runs(id(&running), id(&running)));
        assert!(process_exists(id(&running)));
        // SAFETY: getpid and gettid cannot fail.
        let (me, my_tid) = unsafe { (libc::getpid(), libc::gettid()) };
        assert!(thread_runs(me, my_tid), "this thread");
        assert!(
            !thread_runs(me, id(&running)),
            "another process's thread is not ours"
        );
        let mut quick = std::process::Command::new("true").spawn().expect("spawn");
        let pid = id(&quick);
        // Exited, not yet reaped: a zombie, which exists but runs nothing.
        let stat = format!("/proc/{pid}/stat");
        let start = Instant::now();
        while !std::fs::read_to_string(&stat).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        }) {
            assert!(start.elapsed() < Duration::from_secs(10), "never a zombie");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(process_exists(pid), "a zombie exists");
        assert!(!thread_runs(pid, pid), "a zombie");
        quick.wait().expect("reap");
        assert!(!thread_runs(pid, pid), "reaped");
        assert!(!process_exists(pid), "reaped");
        running.kill().expect("kill");
        running.wait().expect("reap");
        assert!(
            !thread_runs(id(&running), id(&running)),
            "killed and reaped"
        );
        assert!(!process_exists(0) && !thread_runs(0, 1), "no process 0");
    }
}
