//! Fuzz target: any bytes as the volume of a file system, opened by a process alone with it as
//! the first after a reboot (as `open_scan` does), then walked (every directory listed, every
//! entry looked up, stat'ed, read, its link and extended attributes read), checked, and changed
//! (create, write, truncate, rename, link, unlink, mkdir, rmdir, setxattr, sync). Must never
//! panic, hang or misbehave; errors are fine. Seeds: `cargo run --example seeds -- corpus/fs_ops`; run with
//! `cargo +nightly fuzz run fs_ops corpus/fs_ops -- -max_len=307200` from crates/iris-fs/fuzz.
#![no_main]

use std::sync::Arc;

use iris_fs::{Cred, Fs, ROOT_INO};
use iris_media::SimMedia;
use iris_store::{OpenOptions, Store};
use libfuzzer_sys::fuzz_target;

/// Most entries visited in all (a corrupt directory may be huge or cyclic).
const MAX_VISITS: usize = 200;

fn walk(fs: &Fs, c: &Cred, dir: u64, depth: u32, visits: &mut usize) {
    if depth > 8 {
        return;
    }
    let Ok(entries) = fs.readdir(dir, 0, 64) else {
        return;
    };
    for e in entries {
        if *visits >= MAX_VISITS {
            return;
        }
        *visits += 1;
        let _ = fs.resolve(c, dir, &e.name, false);
        let Ok(inode) = fs.getattr(e.ino) else {
            continue;
        };
        let _ = fs.listxattr(c, e.ino);
        let _ = fs.getxattr(c, e.ino, b"user.a");
        match inode.mode & libc::S_IFMT {
            libc::S_IFDIR if e.name != b"." && e.name != b".." => {
                walk(fs, c, e.ino, depth + 1, visits)
            }
            libc::S_IFLNK => {
                let _ = fs.readlink(c, dir, &e.name);
            }
            libc::S_IFREG => {
                let mut buf = vec![0u8; 3000];
                let _ = fs.read(e.ino, 0, &mut buf);
                let _ = fs.read(e.ino, inode.size.saturating_sub(100), &mut buf);
                let _ = fs.read(e.ino, 70_000, &mut buf[..10]);
            }
            _ => {}
        }
    }
}

/// A boot id no image can name (a hash of the image itself): every open is the first after a
/// reboot, which trusts nothing of the working header. (A header of the running boot is the
/// live shared state of cooperating processes, trusted as such; forging one is out of scope.)
fn boot_of(data: &[u8]) -> u128 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    u128::from(h.finish()) << 64 | 0x1715
}

fuzz_target!(|data: &[u8]| {
    let sim = Arc::new(SimMedia::from_image(data));
    let opts = OpenOptions {
        boot_id: Some(boot_of(data)),
        commit_interval: None,
    };
    let Ok(store) = Store::open_alone_on(Box::new(sim), &opts) else {
        return;
    };
    let Ok(fs) = Fs::on_store(store) else { return };
    let c = Cred::root();
    let mut visits = 0;
    walk(&fs, &c, ROOT_INO, 0, &mut visits);
    let _ = fs.check();
    if let Ok(f) = fs.open(&c, ROOT_INO, b"d/f", libc::O_RDWR, 0) {
        let _ = fs.write(f.ino, 100, &[7u8; 5000]);
        let _ = fs.truncate(f.ino, 333);
        let _ = fs.setxattr(&c, f.ino, b"user.a", b"v", 0);
    }
    if let Ok(n) = fs.open(&c, ROOT_INO, b"new", libc::O_CREAT | libc::O_RDWR, 0o644) {
        let _ = fs.write(n.ino, 0, &[1u8; 600]);
    }
    let _ = fs.rename(&c, ROOT_INO, b"d/f", ROOT_INO, b"g", 0);
    let _ = fs.link(&c, ROOT_INO, b"g", ROOT_INO, b"h", false);
    let _ = fs.unlink(&c, ROOT_INO, b"big");
    let _ = fs.mkdir(&c, ROOT_INO, b"e", 0o755);
    let _ = fs.rmdir(&c, ROOT_INO, b"d");
    let _ = fs.symlink(&c, b"g", ROOT_INO, b"s2");
    let _ = fs.sync();
    let _ = fs.check();
});
