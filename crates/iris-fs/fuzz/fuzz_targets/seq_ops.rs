//! The operations of the `fs_seq` fuzz target, shared with its replayer
//! (`cargo run --example replay_seq -- FILE`, which prints each step with IRIS_FUZZ_TRACE=1).

use std::sync::Arc;

use iris_fs::{Cred, Fs, ROOT_INO};
use iris_media::SimMedia;
use iris_store::{CreateOptions, OpenOptions, Store};

/// The paths operations name: few, so that they meet.
const PATHS: [&[u8]; 8] = [b"a", b"b", b"d", b"d/a", b"d/e", b"d/e/b", b"s", b"d/../c"];

/// Reads bytes of the input as operands.
pub struct Ops<'a>(pub &'a [u8]);

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

/// A fresh file system of 2 MiB with `bs`-byte blocks on simulated media.
pub fn mkfs(bs: u32) -> (Arc<SimMedia>, Fs) {
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

/// Panic, naming `when`, if the file system's check finds a problem.
pub fn assert_clean(fs: &Fs, when: &str) {
    let report = fs.check().expect("check");
    assert!(report.problems.is_empty(), "{when}: {:?}", report.problems);
}

/// Up to 64 operations read from `ops`, each through one of the two openers `both`.
pub fn run(both: [&Fs; 2], ops: &mut Ops<'_>) -> Option<()> {
    let trace = std::env::var_os("IRIS_FUZZ_TRACE").is_some();
    macro_rules! t {
        ($($a:tt)*) => {
            if trace {
                eprintln!($($a)*);
            }
        };
    }
    let c = Cred::root();
    let mut cache = None;
    for step in 0..64 {
        let op = ops.byte()?;
        // (Bit 6 picks the opener: two processes sharing the volume.)
        let fs = both[usize::from(op >> 6 & 1)];
        let other = both[usize::from(!op >> 6 & 1)];
        match op % 18 {
            0 | 1 => {
                let flags = [
                    libc::O_CREAT | libc::O_RDWR,
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                    libc::O_RDWR | libc::O_TRUNC,
                    libc::O_RDONLY,
                    libc::O_CREAT | libc::O_RDWR | libc::O_APPEND,
                ][usize::from(ops.byte()?) % 5];
                let path = ops.path()?;
                let r = fs.open(&c, ROOT_INO, path, flags, 0o644);
                t!(
                    "{step}: open {:?} {flags:#o} -> {:?}",
                    lossy(path),
                    r.as_ref().map(|i| i.ino)
                );
                if let Ok(i) = r {
                    if i.mode & libc::S_IFMT == libc::S_IFREG {
                        cache = Some((usize::from(op >> 6 & 1), fs.file_cache(i.ino)));
                    }
                }
            }
            2 | 3 | 4 => {
                let path = ops.path()?;
                let Ok(ino) = fs.resolve(&c, ROOT_INO, path, true) else {
                    continue;
                };
                let off = ops.offset()?;
                let len = usize::from(ops.u16()? % 9000);
                let fill = ops.byte()?;
                let data: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
                let r = fs.write(ino, off, &data);
                t!(
                    "{step}: write {:?} (ino {ino}) at {off} len {len} -> {r:?}",
                    lossy(path)
                );
                // (An empty write succeeds on anything: nothing to read back.)
                if let Ok(n @ 1..) = r {
                    for reader in [fs, other] {
                        let mut back = vec![0u8; n];
                        let got = reader.read(ino, off, &mut back).expect("read back");
                        assert_eq!(got, n, "short read back at {off}");
                        assert!(back == data[..n], "write at {off}+{n} reads back otherwise");
                    }
                }
            }
            5 => {
                let Some((x, f)) = &cache else { continue };
                let fs = both[*x];
                let off = ops.offset()?;
                let len = usize::from(ops.u16()? % 5000);
                let data = vec![ops.byte()?; len];
                let r = fs.write_file(f, off, &data);
                t!(
                    "{step}: write_file ino {} at {off} len {len} of {:#x} -> {r:?}",
                    f.ino(),
                    data.first().copied().unwrap_or(0)
                );
                if let Ok(Some(n @ 1..)) = r {
                    let mut back = vec![0u8; n];
                    let got = fs.read_file(f, off, &mut back);
                    if let Ok(Some(got)) = got {
                        assert_eq!(got, n, "short read back through the map at {off}");
                        if back != data[..n] {
                            let first = back.iter().zip(&data).position(|(a, b)| a != b);
                            let got = first.map(|i| back[i]);
                            panic!("mapped write at {off}+{n} reads back otherwise from byte {first:?} ({got:?})");
                        }
                    }
                }
            }
            6 => {
                // The open file's map and the other opener's walk of the tree agree.
                let Some((x, f)) = &cache else { continue };
                let len = usize::from(ops.u16()? % 9000);
                let off = ops.offset()?;
                let (mut fast, mut slow) = (vec![0u8; len], vec![0u8; len]);
                let r = both[*x].read_file(f, off, &mut fast);
                let s = both[1 - *x].read(f.ino(), off, &mut slow);
                t!(
                    "{step}: read_file ino {} at {off} len {len} -> {r:?}, other {s:?}",
                    f.ino()
                );
                if let (Ok(Some(n)), Ok(m)) = (r, s) {
                    assert_eq!(n, m, "read lengths at {off}");
                    if fast[..n] != slow[..n] {
                        let i = fast.iter().zip(&slow).position(|(a, b)| a != b);
                        panic!("map and tree disagree at {off}+{i:?}");
                    }
                }
            }
            7 => {
                let path = ops.path()?;
                if let Ok(ino) = fs.resolve(&c, ROOT_INO, path, true) {
                    let len = ops.offset()?;
                    let r = fs.truncate(ino, len);
                    t!("{step}: truncate {:?} to {len} -> {r:?}", lossy(path));
                }
            }
            8 => {
                let path = ops.path()?;
                if let Ok(ino) = fs.resolve(&c, ROOT_INO, path, true) {
                    let (off, len, keep) = (ops.offset()?, u64::from(ops.u16()?), ops.byte()? & 1);
                    let r = if op & 0x80 != 0 {
                        fs.zero_range(ino, off, len, keep == 1)
                    } else {
                        fs.allocate(ino, off, len, keep == 1)
                    };
                    t!(
                        "{step}: zero/alloc({}) {:?} {off}+{len} keep {keep} -> {r:?}",
                        op & 0x80,
                        lossy(path)
                    );
                }
            }
            9 | 10 => {
                let flags = [0, 1, 2][usize::from(ops.byte()?) % 3];
                let (from, to) = (ops.path()?, ops.path()?);
                let r = fs.rename(&c, ROOT_INO, from, ROOT_INO, to, flags);
                t!(
                    "{step}: rename {:?} {:?} {flags} -> {r:?}",
                    lossy(from),
                    lossy(to)
                );
            }
            11 => {
                let (from, to) = (ops.path()?, ops.path()?);
                let r = fs.link(&c, ROOT_INO, from, ROOT_INO, to, false);
                t!("{step}: link {:?} {:?} -> {r:?}", lossy(from), lossy(to));
            }
            12 => {
                let path = ops.path()?;
                let r = fs.unlink(&c, ROOT_INO, path);
                t!("{step}: unlink {:?} -> {r:?}", lossy(path));
            }
            13 => {
                let path = ops.path()?;
                let r = fs.mkdir(&c, ROOT_INO, path, 0o755);
                t!("{step}: mkdir {:?} -> {r:?}", lossy(path));
            }
            14 => {
                let path = ops.path()?;
                let r = fs.rmdir(&c, ROOT_INO, path);
                t!("{step}: rmdir {:?} -> {r:?}", lossy(path));
            }
            15 => {
                let (target, path) = (ops.path()?, ops.path()?);
                let r = fs.symlink(&c, target, ROOT_INO, path);
                t!(
                    "{step}: symlink {:?} {:?} -> {r:?}",
                    lossy(target),
                    lossy(path)
                );
            }
            16 => {
                let path = ops.path()?;
                if let Ok(ino) = fs.resolve(&c, ROOT_INO, path, false) {
                    let value = vec![ops.byte()?; usize::from(ops.u16()? % 3000)];
                    let r = match ops.byte()? % 3 {
                        0 => fs.setxattr(&c, ino, b"user.x", &value, 0),
                        1 => fs.removexattr(&c, ino, b"user.x"),
                        _ => fs.chmod(&c, ino, u32::from(ops.u16()?) & 0o7777),
                    };
                    t!("{step}: xattr/chmod {:?} -> {r:?}", lossy(path));
                }
            }
            _ if op & 0x80 != 0 => {
                // fsync of one file: its next writes expect a sync and go into the intent log.
                let path = ops.path()?;
                if let Ok(ino) = fs.resolve(&c, ROOT_INO, path, true) {
                    let r = fs.sync_inode(ino);
                    t!("{step}: sync_inode {:?} -> {r:?}", lossy(path));
                    // Then up to seven small writes near one place, each synced: after the
                    // first, one into a block the log names goes into a data record.
                    let base = ops.offset()?;
                    for j in 0..ops.byte()? % 8 {
                        let off = base + u64::from(ops.u16()? % 4096);
                        let len = usize::from(ops.u16()? % 700) + 1;
                        let data = vec![ops.byte()?; len];
                        let r = fs.write(ino, off, &data);
                        t!("{step}.{j}: synced write at {off} len {len} -> {r:?}");
                        if let Ok(n @ 1..) = r {
                            for reader in [fs, other] {
                                let mut back = vec![0u8; n];
                                let got = reader.read(ino, off, &mut back).expect("read back");
                                assert_eq!(got, n, "short read back at {off}");
                                assert!(back == data[..n], "synced write at {off}+{n} differs");
                            }
                        }
                        let r = fs.sync_inode(ino);
                        t!("{step}.{j}: sync_inode -> {r:?}");
                    }
                }
            }
            _ => {
                let r = fs.sync();
                t!("{step}: sync -> {r:?}");
            }
        }
    }
    Some(())
}

fn lossy(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

/// One input: the block size and a persist to lose power at, then the operations through two
/// openers of the volume (as two processes); checked as the target checks.
pub fn one(data: &[u8]) {
    let Some((first, rest)) = data.split_first() else {
        return;
    };
    let bs = [512u32, 1024, 4096][usize::from(*first) % 3];
    let (sim, fs) = mkfs(bs);
    let same_boot = OpenOptions {
        boot_id: Some(1),
        commit_interval: None,
    };
    let second = Store::open_on(Box::new(Arc::clone(&sim)), &same_boot).expect("second opener");
    let fs2 = Fs::on_store(second).expect("fs");
    // (The first byte's top bits: power lost at that persist from here, if not 0; every later
    // persist fails, and the operations after it with EIO.)
    let crash_at = u64::from(*first >> 2);
    if crash_at != 0 {
        sim.crash_at_persist(crash_at);
    }
    let _ = run([&fs, &fs2], &mut Ops(rest));
    assert_clean(&fs, "after the run");
    assert_clean(&fs2, "after the run, the other opener");
    // What stable media would hold after a power loss now (before the closes commit): the
    // last commit and the intent log's records, with each later word kept or not at random.
    let crashed = {
        use rand::SeedableRng;
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        data.hash(&mut h);
        let mut rng = rand::rngs::StdRng::seed_from_u64(h.finish());
        sim.lose_power();
        sim.crash_image(&mut rng, 0.5)
    };
    drop(fs2);
    drop(fs);
    let boot = OpenOptions {
        boot_id: Some(2),
        commit_interval: None,
    };
    let store = Store::open_alone_on(Box::new(SimMedia::from_image(&sim.working_image())), &boot)
        .expect("reopen");
    let fs = Fs::on_store(store).expect("fs");
    assert_clean(&fs, "reopened");
    drop(fs);
    let boot = OpenOptions {
        boot_id: Some(3),
        commit_interval: None,
    };
    let store = Store::open_alone_on(Box::new(SimMedia::from_image(&crashed)), &boot)
        .expect("reopen after power loss");
    let fs = Fs::on_store(store).expect("fs after power loss");
    assert_clean(&fs, "after power loss");
}
