//! Fuzz target: any bytes as a sequence of file-system operations (create, open with flags,
//! write at offsets through the inode and through an open file's block map, read back, truncate,
//! zero and allocate ranges, rename with flags, link, unlink, mkdir, rmdir, symlink, xattrs,
//! chmod, sync) on a fresh small volume. Errors are fine (no space, no such file, ...); a panic,
//! a hang, a write that does not read back, or a file system `check` finds a problem in (after
//! the run, and again reopened) is a bug. Run with `cargo +nightly fuzz run fs_seq` from
//! crates/iris-fs/fuzz.
#![no_main]

use std::sync::Arc;

use iris_fs::{Cred, Fs, ROOT_INO};
use iris_media::SimMedia;
use iris_store::{CreateOptions, OpenOptions, Store};
use libfuzzer_sys::fuzz_target;

/// The paths operations name: few, so that they meet.
const PATHS: [&[u8]; 8] = [b"a", b"b", b"d", b"d/a", b"d/e", b"d/e/b", b"s", b"d/../c"];

/// Reads bytes of the input as operands.
struct Ops<'a>(&'a [u8]);

impl Ops<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from(self.byte()?) << 8 | u16::from(self.byte()?))
    }
    fn path(&mut self) -> Option<&'static [u8]> {
        Some(PATHS[usize::from(self.byte()?) % PATHS.len()])
    }
    /// An offset: small, near a block boundary, or far out.
    fn offset(&mut self) -> Option<u64> {
        let v = u64::from(self.u16()?);
        Some(match v % 4 {
            0 => v / 4,
            1 => (v / 4 % 40) * 512 + v % 3,
            2 => (v / 4 % 8) * 4096 - (v % 7).min((v / 4 % 8) * 4096),
            _ => (v / 4) * 4096 + 100,
        })
    }
}

fn mkfs(bs: u32) -> (Arc<SimMedia>, Fs) {
    let size = 2u64 << 20;
    let sim = Arc::new(SimMedia::new(size));
    let opts = CreateOptions {
        block_size: bs,
        size_limit_bytes: size,
        initial_bytes: size,
        ..CreateOptions::default()
    };
    let boot = OpenOptions {
        boot_id: Some(1),
        commit_interval: None,
    };
    let store = Store::create_on(Box::new(Arc::clone(&sim)), &opts, &boot).expect("create");
    (sim, Fs::on_store(store).expect("fs"))
}

fn assert_clean(fs: &Fs, when: &str) {
    let report = fs.check().expect("check");
    assert!(report.problems.is_empty(), "{when}: {:?}", report.problems);
}

fn run(fs: &Fs, ops: &mut Ops<'_>) -> Option<()> {
    let c = Cred::root();
    let mut cache = None;
    for _ in 0..64 {
        let op = ops.byte()?;
        match op % 18 {
            0 | 1 => {
                let flags = [
                    libc::O_CREAT | libc::O_RDWR,
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                    libc::O_RDWR | libc::O_TRUNC,
                    libc::O_RDONLY,
                    libc::O_CREAT | libc::O_RDWR | libc::O_APPEND,
                ][usize::from(ops.byte()?) % 5];
                if let Ok(i) = fs.open(&c, ROOT_INO, ops.path()?, flags, 0o644) {
                    if i.mode & libc::S_IFMT == libc::S_IFREG {
                        cache = Some(fs.file_cache(i.ino));
                    }
                }
            }
            2 | 3 | 4 => {
                let Ok(ino) = fs.resolve(&c, ROOT_INO, ops.path()?, true) else {
                    continue;
                };
                let off = ops.offset()?;
                let len = usize::from(ops.u16()? % 9000);
                let fill = ops.byte()?;
                let data: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
                if let Ok(n) = fs.write(ino, off, &data) {
                    let mut back = vec![0u8; n];
                    let got = fs.read(ino, off, &mut back).expect("read back");
                    assert_eq!(got, n, "short read back at {off}");
                    assert!(back == data[..n], "write at {off}+{n} reads back otherwise");
                }
            }
            5 => {
                let Some(f) = &cache else { continue };
                let off = ops.offset()?;
                let len = usize::from(ops.u16()? % 5000);
                let data = vec![ops.byte()?; len];
                if let Ok(Some(n)) = fs.write_file(f, off, &data) {
                    let mut back = vec![0u8; n];
                    if let Ok(Some(got)) = fs.read_file(f, off, &mut back) {
                        assert_eq!(got, n, "short read back through the map at {off}");
                        assert!(
                            back == data[..n],
                            "mapped write at {off}+{n} reads back otherwise"
                        );
                    }
                }
            }
            6 => {
                let Some(f) = &cache else { continue };
                let mut buf = vec![0u8; usize::from(ops.u16()? % 9000)];
                let _ = fs.read_file(f, ops.offset()?, &mut buf);
            }
            7 => {
                if let Ok(ino) = fs.resolve(&c, ROOT_INO, ops.path()?, true) {
                    let _ = fs.truncate(ino, ops.offset()?);
                }
            }
            8 => {
                if let Ok(ino) = fs.resolve(&c, ROOT_INO, ops.path()?, true) {
                    let (off, len, keep) = (ops.offset()?, u64::from(ops.u16()?), ops.byte()? & 1);
                    if op & 0x80 != 0 {
                        let _ = fs.zero_range(ino, off, len, keep == 1);
                    } else {
                        let _ = fs.allocate(ino, off, len, keep == 1);
                    }
                }
            }
            9 | 10 => {
                let flags = [0, 1, 2][usize::from(ops.byte()?) % 3];
                let _ = fs.rename(&c, ROOT_INO, ops.path()?, ROOT_INO, ops.path()?, flags);
            }
            11 => {
                let _ = fs.link(&c, ROOT_INO, ops.path()?, ROOT_INO, ops.path()?, false);
            }
            12 => {
                let _ = fs.unlink(&c, ROOT_INO, ops.path()?);
            }
            13 => {
                let _ = fs.mkdir(&c, ROOT_INO, ops.path()?, 0o755);
            }
            14 => {
                let _ = fs.rmdir(&c, ROOT_INO, ops.path()?);
            }
            15 => {
                let _ = fs.symlink(&c, ops.path()?, ROOT_INO, ops.path()?);
            }
            16 => {
                if let Ok(ino) = fs.resolve(&c, ROOT_INO, ops.path()?, false) {
                    let value = vec![ops.byte()?; usize::from(ops.u16()? % 3000)];
                    match ops.byte()? % 3 {
                        0 => {
                            let _ = fs.setxattr(&c, ino, b"user.x", &value, 0);
                        }
                        1 => {
                            let _ = fs.removexattr(&c, ino, b"user.x");
                        }
                        _ => {
                            let _ = fs.chmod(&c, ino, u32::from(ops.u16()?) & 0o7777);
                        }
                    }
                }
            }
            _ => {
                let _ = fs.sync();
            }
        }
    }
    Some(())
}

fuzz_target!(|data: &[u8]| {
    let Some((first, rest)) = data.split_first() else {
        return;
    };
    let bs = [512u32, 1024, 4096][usize::from(*first) % 3];
    let (sim, fs) = mkfs(bs);
    let _ = run(&fs, &mut Ops(rest));
    assert_clean(&fs, "after the run");
    drop(fs);
    let boot = OpenOptions {
        boot_id: Some(2),
        commit_interval: None,
    };
    let store = Store::open_alone_on(Box::new(SimMedia::from_image(&sim.working_image())), &boot)
        .expect("reopen");
    let fs = Fs::on_store(store).expect("fs");
    assert_clean(&fs, "reopened");
});
