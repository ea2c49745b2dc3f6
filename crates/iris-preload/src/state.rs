//! Process-wide state: configuration from the environment, the open file system, and the
//! re-entrancy guard that sends the interposer's own libc calls straight to libc.

use std::cell::Cell;
use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::atomic::{compiler_fence, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use iris_fs::{Cred, ForkSafeMutex, Fs};
use iris_store::{CreateOptions, OpenOptions};

/// The volume used when `IRIS_VOLUME` is unset: `$XDG_DATA_HOME/iris/default.vol`, else
/// `~/.local/share/iris/default.vol` (durable, sparse, growable; created on first use).
pub fn default_volume() -> PathBuf {
    if let Some(v) = std::env::var_os("IRIS_VOLUME") {
        return PathBuf::from(v);
    }
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("iris/default.vol")
}
/// Default mount prefix when `IRIS_MOUNT` is unset.
pub const DEFAULT_MOUNT: &str = "/iris";

/// Configuration read once from the environment (the mount prefixes live in `prefix`).
pub(crate) struct Config {
    pub volume: PathBuf,
    pub commit_interval: Duration,
    pub log: bool,
}

fn env(name: &[u8]) -> Option<Vec<u8>> {
    // SAFETY: `name` is NUL-terminated; getenv returns NULL or a NUL-terminated string owned by
    // the environment, copied here before anything can change it.
    let p = unsafe { libc::getenv(name.as_ptr().cast()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null pointer from getenv to a NUL-terminated string.
    Some(unsafe { CStr::from_ptr(p) }.to_bytes().to_vec())
}

pub(crate) fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let volume = default_volume();
        let ms = env(b"IRIS_COMMIT_INTERVAL_MS\0")
            .and_then(|v| String::from_utf8_lossy(&v).parse::<u64>().ok())
            .unwrap_or(5000);
        Config {
            volume,
            commit_interval: Duration::from_millis(ms.max(1)),
            log: env(b"IRIS_LOG\0").is_some_and(|v| v != b"0"),
        }
    })
}

/// This thread's place in the interposer: whether it is inside Iris (its libc calls then pass
/// through), and the signals that arrived meanwhile, one bit per number (see `signals`). One
/// thread-local for both: a call into Iris reads it once.
pub(crate) struct Inside {
    busy: Cell<bool>,
    pending: AtomicU64,
}

thread_local! {
    static INSIDE: Inside = const {
        Inside {
            busy: Cell::new(false),
            pending: AtomicU64::new(0),
        }
    };
}

/// True while this thread is inside the interposer: its libc calls must pass through.
#[inline]
pub(crate) fn busy() -> bool {
    INSIDE.with(|t| t.busy.get())
}

/// Note signal number `sig` (1-64) as deferred on this thread until it leaves Iris (called in
/// the signal handler).
pub(crate) fn defer_signal(sig: usize) {
    INSIDE.with(|t| t.pending.fetch_or(1 << (sig - 1), Ordering::Relaxed));
}

/// Marks the thread busy for its lifetime.
pub(crate) struct Busy {
    was: bool,
    /// This thread's [`Inside`], found once when entering.
    inside: *const Inside,
}

impl Busy {
    #[inline]
    pub fn enter() -> Busy {
        INSIDE.with(|t| Busy {
            was: t.busy.replace(true),
            inside: t,
        })
    }
}

impl Drop for Busy {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `inside` is this thread's `INSIDE`, which has no destructor (a `Cell<bool>` and
        // an atomic), so its storage lives as long as the thread; a `Busy` holds a raw pointer,
        // so it is not `Send` and is dropped on the thread that made it.
        let t = unsafe { &*self.inside };
        t.busy.set(self.was);
        if !self.was {
            // Out of Iris: signals that came meanwhile run their handlers now.
            compiler_fence(Ordering::SeqCst);
            if t.pending.load(Ordering::Relaxed) != 0 {
                crate::signals::deliver(t.pending.swap(0, Ordering::Relaxed));
            }
        }
    }
}

/// Print a diagnostic line to stderr when `IRIS_LOG` is set.
pub(crate) fn log(msg: &str) {
    if config().log {
        let line = format!("iris: {msg}\n");
        // SAFETY: writing a valid buffer to fd 2 with libc's write (not an Iris fd).
        unsafe { crate::real::write(2, line.as_ptr().cast(), line.len()) };
    }
}

static FS: OnceLock<Option<Fs>> = OnceLock::new();

/// The file system if this process has opened it already (sync must not open a volume).
pub(crate) fn fs_if_open() -> Option<&'static Fs> {
    FS.get().and_then(Option::as_ref)
}

/// Held while the file system is opened, and across a fork (see [`lock_for_fork`]).
static FS_OPEN: ForkSafeMutex<()> = ForkSafeMutex::new(());

/// Hold the opening of the file system across a fork (see `crate::fork`): a child forked while
/// another thread was opening it would wait for that thread, which it does not have, for ever.
pub(crate) fn lock_for_fork() {
    std::mem::forget(FS_OPEN.lock());
}

/// Release what [`lock_for_fork`] took (parent and child after the fork).
pub(crate) fn unlock_after_fork() {
    // SAFETY: only called after lock_for_fork, whose guard was forgotten.
    unsafe { FS_OPEN.force_unlock() };
}

/// The file system, opened on first use (creating the default volume if missing).
pub(crate) fn fs() -> Option<&'static Fs> {
    if let Some(fs) = FS.get() {
        return fs.as_ref();
    }
    // The fork handlers first, so a fork from now on waits for the opening to finish.
    crate::fork::install();
    let _opening = FS_OPEN.lock();
    FS.get_or_init(|| {
        let _busy = Busy::enter();
        let cfg = config();
        let opts = OpenOptions {
            boot_id: None,
            commit_interval: Some(cfg.commit_interval),
        };
        if let Some(dir) = cfg.volume.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let opened = if cfg.volume.exists() {
            Fs::open_volume(&cfg.volume, &opts)
        } else {
            let create = CreateOptions {
                size_limit_bytes: 64 << 30,
                initial_bytes: 64 << 20,
                ..CreateOptions::default()
            };
            Fs::create_volume(&cfg.volume, &create)
        };
        match opened {
            Ok(mut fs) => {
                crate::fork::install();
                let first = crate::prefix::first();
                if !first.is_empty() {
                    fs.set_mount_prefix(&first);
                }
                fs.start_commit_timer(cfg.commit_interval);
                // SAFETY: registering a plain extern "C" function to run at exit.
                unsafe { libc::atexit(commit_at_exit) };
                log(&format!(
                    "serving {} from {}",
                    String::from_utf8_lossy(&crate::prefix::first()),
                    cfg.volume.display()
                ));
                Some(fs)
            }
            Err(e) => {
                let msg = format!("cannot open volume {}: {e}\n", cfg.volume.display());
                // SAFETY: valid buffer to stderr through libc's own write.
                unsafe { crate::real::write(2, msg.as_ptr().cast(), msg.len()) };
                None
            }
        }
    })
    .as_ref()
}

/// At exit, let go of the files this process still holds open (an unlinked one no other
/// process holds is freed, as the kernel frees it when its last holder ends), then commit what
/// this process left uncommitted: a kernel file system writes dirty pages back within seconds
/// of a program's exit, and so does Iris (the commit timer dies with us).
extern "C" fn commit_at_exit() {
    if let Some(fs) = fs_if_open() {
        let _b = Busy::enter();
        crate::shadow::write_back_all_changed(fs);
        fs.release_at_exit();
        let _ = fs.sync();
    }
}

/// The caller's credentials (checked per request, as the kernel would; remembered while
/// nothing changed them, see `ident`).
pub(crate) fn cred() -> Cred {
    crate::ident::cred()
}
