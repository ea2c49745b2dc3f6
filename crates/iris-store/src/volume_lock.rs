//! The writer locks: one process-shared, robust pthread mutex per writer partition, living in the
//! working header, so every process mapping the volume (forked or not) serialises on them, and a
//! process killed while holding one hands the next locker `EOWNERDEAD` instead of a deadlock.
//! Taking every partition's lock, in order, is the volume lock.

use crate::error::{Result, StoreError};
use crate::header::Header;
use std::time::{Duration, Instant};

/// Initialise every partition's mutex in place. Only while no other process can use them (under
/// the exclusive advisory lock during recovery, or at creation).
pub(crate) fn init(header: &Header) -> Result<()> {
    for p in 0..crate::header::PARTITIONS {
        init_one(header, p)?;
    }
    Ok(())
}

/// Set every partition's lock up afresh for an opener alone with the volume (it holds the
/// exclusive advisory lock, so no thread anywhere holds one of these): whether any read held
/// (its holder died mid-change, marked so by the kernel, or the header was copied from a volume
/// in use, naming a thread that will never let go), in which case the caller repairs as after
/// a dead holder. Every mutex is set up again, so none left in a state glibc cannot take.
pub(crate) fn reset_alone(header: &Header) -> Result<bool> {
    let mut held = false;
    for p in 0..crate::header::PARTITIONS {
        held |= lock_word(header, p).load(std::sync::atomic::Ordering::Acquire) != 0;
        init_one(header, p)?;
    }
    Ok(held)
}

/// Partition `p`'s mutex's lock word: the owner's thread id (and the kernel's flags), 0 when
/// free.
fn lock_word(header: &Header, p: u64) -> &std::sync::atomic::AtomicI32 {
    let m = header.mutex_ptr(p);
    // SAFETY: glibc's pthread_mutex_t begins with its lock word (`int __lock`), 4-byte aligned
    // inside the mutex, which lives in the mapping for as long as `header` (its region) does.
    unsafe { &*(m as *const std::sync::atomic::AtomicI32) }
}

fn init_one(header: &Header, p: u64) -> Result<()> {
    let m = header.mutex_ptr(p);
    // SAFETY: `m` points at MUTEX_BYTES of the mapped header, large and aligned enough for a
    // pthread_mutex_t (checked at compile time); nobody else uses it during initialisation.
    unsafe {
        std::ptr::write_bytes(
            m as *mut u8,
            0,
            std::mem::size_of::<libc::pthread_mutex_t>(),
        );
        let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
        if libc::pthread_mutexattr_init(&mut attr) != 0
            || libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED) != 0
            || libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST) != 0
        {
            return Err(StoreError::Invalid(
                "cannot set up a process-shared mutex".into(),
            ));
        }
        let rc = libc::pthread_mutex_init(m, &attr);
        libc::pthread_mutexattr_destroy(&mut attr);
        if rc != 0 {
            return Err(StoreError::Invalid(format!(
                "pthread_mutex_init failed: {rc}"
            )));
        }
    }
    Ok(())
}

/// Outcome of taking the lock.
pub(crate) enum Acquired {
    /// Taken normally.
    Clean,
    /// The previous holder died while holding it: the caller must repair shared state, then call
    /// [`mark_consistent`].
    OwnerDied,
}

/// How long a waiter spins before it sleeps. Most critical sections last about a microsecond;
/// a commit (which holds every lock) a few: both far less than a futex sleep and wake-up on a
/// virtual machine, and every waiter that sleeps also costs its waker a system call. With two
/// jobs each writing and `fdatasync`ing, spinning 200 rounds (a few microseconds) put most
/// waiters to sleep and halved throughput against one job.
const SPIN: Duration = Duration::from_micros(50);
/// Spin rounds between two looks at the clock.
const SPINS_PER_CLOCK: u32 = 64;

/// Take the lock of partition `p`.
pub(crate) fn lock(header: &Header, p: u64) -> Result<Acquired> {
    let m = header.mutex_ptr(p);
    // (Only read here, as a hint.)
    let word = lock_word(header, p);
    let mut since: Option<Instant> = None;
    loop {
        // SAFETY: as below; trylock never blocks.
        let rc = unsafe { libc::pthread_mutex_trylock(m) };
        match rc {
            0 => return Ok(Acquired::Clean),
            libc::EOWNERDEAD => return Ok(Acquired::OwnerDied),
            libc::EBUSY => {}
            _ => break,
        }
        let start = *since.get_or_insert_with(Instant::now);
        // Wait for the word to read free with plain loads, not read-modify-writes: they leave
        // the line shared, so the holder's unlock does not have to win it back from the waiter.
        // (A dead owner's word never reads 0: the time bound ends the wait, the lock below
        // then reports it.)
        let mut spins = 0u32;
        while word.load(std::sync::atomic::Ordering::Relaxed) != 0 {
            std::hint::spin_loop();
            spins += 1;
            if spins.is_multiple_of(SPINS_PER_CLOCK) && start.elapsed() > SPIN {
                break;
            }
        }
        if start.elapsed() > SPIN {
            break;
        }
    }
    // SAFETY: the mutex was initialised by `init` (at creation or recovery) and lives in the mapping
    // for as long as the store that owns `header`.
    let rc = unsafe { libc::pthread_mutex_lock(header.mutex_ptr(p)) };
    match rc {
        0 => Ok(Acquired::Clean),
        libc::EOWNERDEAD => Ok(Acquired::OwnerDied),
        libc::ENOTRECOVERABLE => Err(StoreError::corrupt(
            "volume lock unrecoverable (a previous repair failed); reopen the volume alone",
        )),
        other => Err(StoreError::Invalid(format!(
            "volume lock failed: errno {other}"
        ))),
    }
}

/// Take the lock of partition `p` if it is free now; `None` (not taken) if another holds it.
pub(crate) fn try_lock(header: &Header, p: u64) -> Option<Acquired> {
    // SAFETY: the mutex was initialised by `init` and lives in the mapping for as long as the
    // store that owns `header`; trylock never blocks.
    match unsafe { libc::pthread_mutex_trylock(header.mutex_ptr(p)) } {
        0 => Some(Acquired::Clean),
        libc::EOWNERDEAD => Some(Acquired::OwnerDied),
        _ => None,
    }
}

/// Make partition `p`'s lock usable again after [`Acquired::OwnerDied`].
pub(crate) fn mark_consistent(header: &Header, p: u64) {
    // SAFETY: called by the current owner of an initialised robust mutex.
    unsafe { libc::pthread_mutex_consistent(header.mutex_ptr(p)) };
}

/// Release partition `p`'s lock.
pub(crate) fn unlock(header: &Header, p: u64) {
    // SAFETY: called by the current owner (guards pair every lock with one unlock).
    unsafe { libc::pthread_mutex_unlock(header.mutex_ptr(p)) };
}
