//! Start-up of a program image: find the Iris fds it inherited across exec (the description
//! memfds, see `description`), put them back in the fd table, and switch the standard streams of
//! any of fds 0-2 that are Iris files.

use std::sync::Arc;

use crate::description::Desc;
use crate::fdtable::{self, OpenFile};
use crate::state::{self, Busy};

/// Runs before `main` (from `.init_array`).
extern "C" fn on_load() {
    let _b = Busy::enter();
    crate::exec::capture();
    crate::report::init();
    crate::cwd::adopt_pwd();
    // Lock fds an exec passed (taken out of the environment whatever happens next).
    let mut passed = crate::locks::Inherited::take();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        passed.abandon();
        return;
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target
            .as_os_str()
            .as_encoded_bytes()
            .starts_with(b"/memfd:iris-desc")
        {
            found.push(fd);
        }
    }
    if found.is_empty() && passed.is_empty() {
        return;
    }
    let Some(fs) = state::fs() else {
        passed.abandon();
        return;
    };
    let volume_id = fs.store().volume_id();
    // One open file per description: fds of one description (dup'd before the exec) share it,
    // and its locks with it.
    let mut adopted: Vec<(u64, Arc<OpenFile>)> = Vec::new();
    for fd in found {
        let memfd = crate::locks::memfd_ino(fd);
        if let Some(file) = adopted
            .iter()
            .find(|(m, _)| Some(*m) == memfd)
            .map(|(_, f)| f.clone())
        {
            fdtable::install(fd, file);
            continue;
        }
        let Some(desc) = Desc::adopt(fd, volume_id) else {
            continue;
        };
        let s = desc.shared();
        let ino = s.ino.load(std::sync::atomic::Ordering::Relaxed);
        let is_dir = s.is_dir.load(std::sync::atomic::Ordering::Relaxed) != 0;
        let path = desc.path();
        let (flock_fd, ofd_fd) = passed.for_description(fd);
        fs.retain(ino);
        let file = Arc::new(OpenFile {
            ino,
            cache: fs.file_cache(ino),
            is_dir,
            desc,
            path,
            flock_fd,
            ofd_fd,
            _count: fdtable::OpenCount(ino),
        });
        if let Some(m) = memfd {
            adopted.push((m, file.clone()));
        }
        fdtable::install(fd, file);
    }
    passed.finish();
    drop(_b);
    for fd in 0..3 {
        crate::stdio::sync_std_stream(fd);
    }
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
