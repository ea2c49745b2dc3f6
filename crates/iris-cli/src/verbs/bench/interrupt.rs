//! Ctrl-C, SIGTERM and SIGHUP during a benchmark: remember that the run was interrupted and stop
//! the child process group running now (fio and its job processes, or an application). The run
//! then notices, returns, and the cleanup guard unmounts and detaches as on any other exit.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// Set once an interrupt arrived.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The process group of the child being waited for; 0 when none.
static CHILD_GROUP: AtomicI32 = AtomicI32::new(0);

/// How long a child group has to exit after SIGINT before it gets SIGKILL (fio exits cleanly on
/// SIGINT and removes its shared memory; SIGKILL would leave that behind).
const GRACE: Duration = Duration::from_secs(3);

/// Install the handler (once per process).
pub fn install() -> Result<(), String> {
    ctrlc::set_handler(on_interrupt).map_err(|e| format!("cannot handle Ctrl-C: {e}"))
}

/// Whether the run was interrupted.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Runs on ctrlc's own thread, not in a signal handler: it may sleep and call anything.
fn on_interrupt() {
    INTERRUPTED.store(true, Ordering::SeqCst);
    let group = CHILD_GROUP.load(Ordering::SeqCst);
    if group <= 0 {
        return;
    }
    signal_group(group, libc::SIGINT);
    let start = Instant::now();
    while start.elapsed() < GRACE {
        if CHILD_GROUP.load(Ordering::SeqCst) != group {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if CHILD_GROUP.load(Ordering::SeqCst) == group {
        signal_group(group, libc::SIGKILL);
    }
}

/// Send `signal` to every process in `group`.
pub fn signal_group(group: i32, signal: i32) {
    debug_assert!(group > 0);
    // SAFETY: kill touches no memory of ours; a group that already exited gives ESRCH.
    unsafe { libc::kill(-group, signal) };
}

/// While alive, an interrupt stops process group `group` (a child spawned as its own group).
pub struct ChildGroup(i32);

impl ChildGroup {
    /// Register `group` as the one to stop on interrupt.
    pub fn register(group: u32) -> ChildGroup {
        let group = i32::try_from(group).unwrap_or(0);
        CHILD_GROUP.store(group, Ordering::SeqCst);
        ChildGroup(group)
    }
}

impl Drop for ChildGroup {
    fn drop(&mut self) {
        let _ = CHILD_GROUP.compare_exchange(self.0, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}
