//! The writer locks: one process-shared, robust pthread mutex per writer partition, living in the
//! working header, so every process mapping the volume (forked or not) serialises on them, and a
//! process killed while holding one hands the next locker `EOWNERDEAD` instead of a deadlock.
//! Taking every partition's lock, in order, is the volume lock.

use crate::error::{Result, StoreError};
use crate::header::Header;

/// Initialise every partition's mutex in place. Only while no other process can use them (under
/// the exclusive advisory lock during recovery, or at creation).
pub(crate) fn init(header: &Header) -> Result<()> {
    for p in 0..crate::header::PARTITIONS {
        init_one(header, p)?;
    }
    Ok(())
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

/// Tries before sleeping: critical sections last about a microsecond, far less than a futex
/// sleep and wake-up, so a waiter spins a little first.
const SPIN_TRIES: u32 = 200;

/// Take the lock of partition `p`.
pub(crate) fn lock(header: &Header, p: u64) -> Result<Acquired> {
    for _ in 0..SPIN_TRIES {
        // SAFETY: as below; trylock never blocks.
        let rc = unsafe { libc::pthread_mutex_trylock(header.mutex_ptr(p)) };
        match rc {
            0 => return Ok(Acquired::Clean),
            libc::EOWNERDEAD => return Ok(Acquired::OwnerDied),
            libc::EBUSY => std::hint::spin_loop(),
            _ => break,
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
