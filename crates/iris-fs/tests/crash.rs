//! File-level crash tests: random file operations on simulated media, power loss at a random
//! persist, reopen as after a reboot. The volume must verify clean (no leaked block, the store's
//! fsck) and the file tree (names, types, sizes, contents, symlink targets) must equal the tree
//! at the last acknowledged commit, or the one being committed when power failed. Multi-block
//! writes are single transactions, so a file never shows half of one write. Half the writes go
//! through files' block maps, as the interposer's do (a block the map knows, written since the
//! last commit, is overwritten where it is; a committed one must not be).

mod common;
use common::create;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use iris_fs::{Cred, FileCache, Fs, ROOT_INO};
use iris_media::SimMedia;
use iris_store::{CreateOptions, Key, OpenOptions, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A file tree: path -> description (contents for files, target for symlinks, "dir").
type Tree = BTreeMap<String, String>;

fn snapshot(fs: &Fs) -> Tree {
    let mut out = Tree::new();
    walk(fs, ROOT_INO, "", &mut out);
    out
}

fn walk(fs: &Fs, dir: u64, prefix: &str, out: &mut Tree) {
    let mut pos = 0;
    loop {
        let batch = fs.readdir(dir, pos, 64).expect("readdir");
        let Some(last) = batch.last() else { break };
        pos = last.next;
        for e in batch {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let path = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
            let i = fs.getattr(e.ino).expect("getattr");
            if i.is_dir() {
                out.insert(path.clone(), "dir".into());
                walk(fs, e.ino, &path, out);
            } else if i.is_symlink() {
                let t = fs
                    .readlink(&Cred::root(), ROOT_INO, path.as_bytes())
                    .expect("readlink");
                out.insert(path, format!("-> {}", String::from_utf8_lossy(&t)));
            } else {
                let mut buf = vec![0u8; i.size as usize];
                let n = fs.read(e.ino, 0, &mut buf).expect("read");
                assert_eq!(n as u64, i.size, "{path}: short read");
                // Contents summarised by a hash so trees compare quickly.
                let h = buf.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
                });
                out.insert(path, format!("file {} {h:x}", i.size));
            }
        }
    }
}

const NAMES: [&str; 6] = ["a", "b", "c", "d/e", "d/f", "d/g/h"];

/// Block maps of the files written so far, kept as open files keep theirs.
type Maps = HashMap<u64, Arc<FileCache>>;

fn random_op(rng: &mut StdRng, fs: &Fs, bs: usize, maps: &mut Maps) {
    let c = Cred::root();
    let name = format!("/{}", NAMES[rng.gen_range(0..NAMES.len())]);
    let _ = match rng.gen_range(0..10) {
        0..=3 => fs
            .open(
                &c,
                ROOT_INO,
                name.as_bytes(),
                libc::O_CREAT | libc::O_RDWR,
                0o644,
            )
            .and_then(|i| {
                let (off, len) = match rng.gen_range(0..10) {
                    // Whole blocks, the overwrites that may go in place.
                    0..=2 => ((rng.gen_range(0..3) * bs) as u64, bs),
                    3..=5 => (rng.gen_range(0..3 * bs) as u64, rng.gen_range(1..4 * bs)),
                    _ => (rng.gen_range(0..3 * bs) as u64, rng.gen_range(1..200)),
                };
                let data = vec![rng.gen::<u8>(); len];
                if rng.gen_bool(0.5) {
                    let map = maps.entry(i.ino).or_insert_with(|| fs.file_cache(i.ino));
                    fs.write_file(map, off, &data).map(|_| ())
                } else {
                    fs.write(i.ino, off, &data).map(|_| ())
                }
            }),
        4 => fs
            .resolve(&c, ROOT_INO, name.as_bytes(), true)
            .and_then(|ino| match rng.gen_range(0..4) {
                0 | 1 => fs.truncate(ino, rng.gen_range(0..3 * bs) as u64),
                // fallocate: now and then past one transaction's 256 blocks.
                n => {
                    let blocks = if n == 3 && rng.gen_bool(0.3) { 300 } else { 4 };
                    let off = rng.gen_range(0..3 * bs) as u64;
                    let len = rng.gen_range(1..blocks * bs) as u64;
                    fs.allocate(ino, off, len, rng.gen_bool(0.3))
                }
            }),
        5 => fs.unlink(&c, ROOT_INO, name.as_bytes()),
        6 => {
            let to = format!("/{}", NAMES[rng.gen_range(0..NAMES.len())]);
            fs.rename(&c, ROOT_INO, name.as_bytes(), ROOT_INO, to.as_bytes(), 0)
        }
        7 => fs
            .mkdir(&c, ROOT_INO, b"/d", 0o755)
            .and_then(|_| fs.mkdir(&c, ROOT_INO, b"/d/g", 0o755))
            .map(|_| ()),
        8 => fs.symlink(&c, b"a", ROOT_INO, name.as_bytes()).map(|_| ()),
        _ => fs
            .resolve(&c, ROOT_INO, name.as_bytes(), true)
            .and_then(|ino| fs.append(ino, &[rng.gen::<u8>(); 100]).map(|_| ())),
    };
}

/// The file system of crash point `seed` on a fresh 8 MiB simulated medium: blocks of 512
/// bytes at every third point, else 4 KiB; every other point a Bε-tree. Returns its block size.
fn point_fs(seed: u64) -> (Arc<SimMedia>, Fs, u32) {
    let bs: u32 = if seed.is_multiple_of(3) { 512 } else { 4096 };
    let size = 8u64 << 20;
    let sim = Arc::new(SimMedia::new(size));
    let opts = CreateOptions {
        block_size: bs,
        size_limit_bytes: size,
        initial_bytes: size,
        inline_max: None,
        buffer_bytes: if seed % 2 == 1 { bs / 4 } else { 0 },
    };
    let store = Store::create_on(Box::new(sim.clone()), &opts, &boot(1)).expect("create");
    (sim, Fs::on_store(store).expect("fs"), bs)
}

/// The file system on `image` (what stable media held at a power loss), opened as after a
/// reboot: the store must verify with no leaked block and the file system check clean.
fn rebooted_clean(image: &[u8], seed: u64) -> Fs {
    let store = Store::open_on(Box::new(Arc::new(SimMedia::from_image(image))), &boot(2))
        .unwrap_or_else(|e| panic!("seed {seed}: reopen: {e}"));
    let report = store
        .verify()
        .unwrap_or_else(|e| panic!("seed {seed}: verify: {e}"));
    assert_eq!(report.leaked_blocks, 0, "seed {seed}: leaked blocks");
    let fs = Fs::on_store(store).expect("fs");
    let check = fs
        .check()
        .unwrap_or_else(|e| panic!("seed {seed}: fs check: {e}"));
    assert!(
        check.problems.is_empty(),
        "seed {seed}: {:?}",
        check.problems
    );
    fs
}

fn one_point(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (sim, fs, bs) = point_fs(seed);
    let mut committed = snapshot(&fs);
    sim.crash_at_persist(rng.gen_range(1..30));
    let mut in_flight = None;
    let mut maps = Maps::new();
    for _ in 0..300 {
        random_op(&mut rng, &fs, bs as usize, &mut maps);
        if rng.gen_bool(0.1) {
            let attempted = snapshot(&fs);
            match fs.sync() {
                Ok(()) => committed = attempted,
                Err(_) => {
                    in_flight = Some(attempted);
                    break;
                }
            }
        }
    }
    sim.lose_power();
    let image = sim.crash_image(&mut rng, 0.5);
    drop(fs);
    let fs = rebooted_clean(&image, seed);
    let got = snapshot(&fs);
    assert!(
        got == committed || in_flight.as_ref() == Some(&got),
        "seed {seed}: tree after power loss is neither the committed nor the in-flight one\n got {got:?}\n committed {committed:?}"
    );
}

/// Run crash points 0.. (`IRIS_FS_CRASH_POINTS`, default 300) of `point`, on two threads.
fn run_points(point: fn(u64)) {
    let points: u64 = std::env::var("IRIS_FS_CRASH_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    std::thread::scope(|s| {
        for w in 0..2u64 {
            s.spawn(move || {
                let mut seed = w;
                while seed < points {
                    point(seed);
                    seed += 2;
                }
            });
        }
    });
}

#[test]
fn power_loss_keeps_the_last_committed_file_tree() {
    run_points(one_point);
}

/// Opening options of boot `n` (a reopen with another boot id is a reboot), no commit timer.
fn boot(n: u128) -> OpenOptions {
    OpenOptions {
        boot_id: Some(n),
        commit_interval: None,
    }
}

/// A file system on a fresh simulated medium of `size` bytes, all backed, with blocks of `bs`.
fn sim_fs(size: u64, bs: u32) -> (Arc<SimMedia>, Fs) {
    let sim = Arc::new(SimMedia::new(size));
    let opts = CreateOptions {
        block_size: bs,
        size_limit_bytes: size,
        initial_bytes: size,
        ..CreateOptions::default()
    };
    let store = Store::create_on(Box::new(sim.clone()), &opts, &boot(1)).expect("create");
    (sim, Fs::on_store(store).expect("fs"))
}

/// One power loss during the unlink of a file that filled the volume: the purge runs in several
/// transactions, with commits between them once the reserve runs out, so the last commit may
/// hold the file half deleted (an orphan). Reopened as after a reboot, the volume must verify
/// clean with the file either whole under its name or gone without a trace. Returns whether the
/// last commit held a half-deleted orphan.
fn unlink_point(seed: u64) -> bool {
    let mut rng = StdRng::seed_from_u64(seed);
    let size = 4u64 << 20;
    let (sim, fs) = sim_fs(size, 512);
    let c = Cred::root();
    let ino = create(&fs, b"big");
    let mut size_written = 0u64;
    for len in [16 << 10, 512] {
        let chunk = vec![0xa5u8; len];
        while fs.write(ino, size_written, &chunk).is_ok() {
            size_written += len as u64;
        }
    }
    fs.sync().expect("sync");
    assert!(size_written / 512 > 3 * 1024, "{size_written}");
    sim.crash_at_persist(rng.gen_range(1..12));
    let unlinked = fs.unlink(&c, ROOT_INO, b"big");
    sim.lose_power();
    let image = sim.crash_image(&mut rng, 0.5);
    drop(fs);
    let store = Store::open_on(Box::new(Arc::new(SimMedia::from_image(&image))), &boot(2))
        .unwrap_or_else(|e| panic!("seed {seed}: reopen: {e}"));
    let orphan = Key::new(0, (5 << 56) | ino);
    let half_deleted = store
        .get_with(orphan, |_| ())
        .expect("orphan lookup")
        .is_some();
    let fs = Fs::on_store(store).expect("fs");
    assert_eq!(
        fs.store().verify().expect("verify").leaked_blocks,
        0,
        "seed {seed} ({unlinked:?})"
    );
    let check = fs.check().expect("check");
    assert!(
        check.problems.is_empty(),
        "seed {seed}: {:?}",
        check.problems
    );
    assert!(
        fs.store()
            .get_with(orphan, |_| ())
            .expect("lookup")
            .is_none(),
        "seed {seed}: the orphan was reclaimed"
    );
    match fs.resolve(&c, ROOT_INO, b"big", true) {
        Ok(found) => {
            assert!(!half_deleted, "seed {seed}: named and an orphan");
            assert_eq!(fs.getattr(found).expect("stat").size, size_written);
            let mut buf = vec![0u8; size_written as usize];
            assert_eq!(fs.read(found, 0, &mut buf).expect("read"), buf.len());
            assert!(buf.iter().all(|&b| b == 0xa5), "seed {seed}: contents");
        }
        Err(e) => {
            assert_eq!(e, iris_fs::Errno::ENOENT, "seed {seed}");
            fs.sync().expect("sync");
            let st = fs.statfs().expect("statfs");
            assert!(
                st.blocks_free * 512 > size - (512 << 10),
                "seed {seed}: the file's space came back: {st:?}"
            );
        }
    }
    half_deleted
}

#[test]
fn power_loss_during_the_unlink_of_a_big_file_leaves_it_whole_or_gone() {
    let halfway = (0..12u64).filter(|&seed| unlink_point(seed)).count();
    assert!(halfway > 0, "no power loss landed between two purge steps");
}

/// A file system on simulated media with two new files, `/a` and `/b`.
fn two_files() -> (Arc<SimMedia>, Fs, u64, u64) {
    let (sim, fs) = sim_fs(8 << 20, 4096);
    let (a, b) = (create(&fs, b"/a"), create(&fs, b"/b"));
    (sim, fs, a, b)
}

/// Commits made since the volume was opened.
fn commits(fs: &Fs) -> u64 {
    fs.store().stats().expect("stats").commits
}

#[test]
fn a_file_sync_commits_unless_the_files_changes_are_committed_and_survives_power_loss() {
    // fsync of a file commits the whole tree, unless every change to that file is in the last
    // commit already: then it returns at once, and other files' changes stay uncommitted.
    let (sim, fs, a, b) = two_files();
    fs.write(a, 0, &[1u8; 5000]).expect("write a");
    fs.sync().expect("sync");
    let before = commits(&fs);
    fs.write(b, 0, b"only in memory").expect("write b");
    fs.sync_inode(a).expect("sync a");
    assert_eq!(commits(&fs), before, "a clean file's sync committed");
    // A small write into a's block (copied at its first write after the commit, in place at
    // the second), an append, then a's sync: all of it durable.
    fs.write(a, 10, b"first").expect("write a");
    fs.write(a, 20, b"second").expect("write a in place");
    fs.write(a, 5000, b"tail").expect("append a");
    assert_eq!(commits(&fs), before, "a write committed");
    fs.sync_inode(a).expect("sync a");
    assert_eq!(commits(&fs), before + 1);
    fs.write(b, 100, b"after").expect("write b");
    let mut rng = StdRng::seed_from_u64(7);
    let image = sim.crash_image(&mut rng, 0.5);
    drop(fs);
    let store =
        Store::open_on(Box::new(Arc::new(SimMedia::from_image(&image))), &boot(2)).expect("reopen");
    let fs = Fs::on_store(store).expect("fs");
    let mut got = vec![0u8; 5004];
    assert_eq!(fs.read(a, 0, &mut got).expect("read a"), 5004);
    assert_eq!(&got[10..15], b"first");
    assert_eq!(&got[20..26], b"second");
    assert_eq!(&got[5000..], b"tail");
    // b's first write went into a's commit (a commit is of the whole tree); its second did not.
    assert_eq!(fs.getattr(b).expect("stat b").size, 14);
}

#[test]
fn a_write_of_a_file_synced_after_each_write_goes_into_the_log_and_survives_power_loss() {
    // Under fdatasync after every write, the write after a sync persists its block and a record
    // of the intent log instead of committing, and the sync that follows has nothing to do.
    // After power loss, replay puts every such write back on top of the last commit.
    let (sim, fs, a, b) = two_files();
    fs.write(a, 0, &[1u8; 16384]).expect("write a");
    fs.write(b, 0, &[2u8; 4096]).expect("write b");
    // A sync, one write, a sync: the pattern the hint follows (the first write is not logged).
    fs.sync_inode(a).expect("sync a");
    fs.write(a, 0, &[1u8; 4096]).expect("write a");
    fs.sync_inode(a).expect("sync a");
    let base = commits(&fs);
    // Whole blocks, parts of blocks, and a write that grows the file: none commits.
    for (i, (off, len)) in [
        (4096u64, 4096usize),
        (100, 512),
        (8192, 4096),
        (12300, 300),
        (16384, 4096),
    ]
    .into_iter()
    .enumerate()
    {
        fs.write(a, off, &vec![10 + i as u8; len]).expect("write a");
        fs.sync_inode(a).expect("sync a");
        assert_eq!(commits(&fs), base, "synced write {i} committed");
    }
    assert_eq!(fs.getattr(a).expect("stat a").size, 20480);
    // A write the sync hint does not cover (a second one since the sync) is not logged: the
    // file's next sync commits it, b's write with it (a commit is of the whole tree).
    fs.write(a, 0, &[3u8; 4096]).expect("write a");
    fs.write(a, 4096, &[4u8; 4096]).expect("write a again");
    fs.write(b, 0, &[5u8; 4096]).expect("write b");
    assert_eq!(commits(&fs), base, "an unsynced write committed");
    fs.sync_inode(a).expect("sync a");
    assert_eq!(
        commits(&fs),
        base + 1,
        "a sync of unlogged writes did not commit"
    );
    // The pattern again (its first write committed by its sync), then a logged write; then a
    // write never synced.
    fs.write(a, 4096, &[7u8; 4096]).expect("write a");
    fs.sync_inode(a).expect("sync a");
    assert_eq!(commits(&fs), base + 2);
    fs.write(a, 8192, &[6u8; 4096]).expect("write a");
    fs.sync_inode(a).expect("sync a");
    assert_eq!(
        commits(&fs),
        base + 2,
        "a synced write after a commit committed"
    );
    // (The first write after that sync is logged, as the hint expects a sync: it may survive;
    // the second is not.)
    fs.write(a, 16384, &[8u8; 4096]).expect("unsynced write a");
    fs.write(a, 0, &[9u8; 100]).expect("unsynced write a");
    // The synced state survives power loss; the write never synced does not.
    let mut rng = StdRng::seed_from_u64(11);
    let image = sim.crash_image(&mut rng, 0.5);
    drop(fs);
    let store =
        Store::open_on(Box::new(Arc::new(SimMedia::from_image(&image))), &boot(2)).expect("reopen");
    let report = store.verify().expect("verify");
    assert_eq!(report.leaked_blocks, 0, "leaked blocks after replay");
    let fs = Fs::on_store(store).expect("fs");
    assert!(fs.check().expect("fs check").problems.is_empty());
    assert_eq!(fs.getattr(a).expect("stat a").size, 20480, "size of a");
    let mut got = vec![0u8; 20480];
    assert_eq!(fs.read(a, 0, &mut got).expect("read a"), 20480);
    assert!(
        got[..4096].iter().all(|&x| x == 3),
        "unsynced write survived"
    );
    assert!(
        got[4096..8192].iter().all(|&x| x == 7),
        "committed write lost"
    );
    assert!(
        got[8192..12288].iter().all(|&x| x == 6),
        "synced write after the commit lost"
    );
    assert!(got[12288..12300].iter().all(|&x| x == 1));
    assert!(
        got[12300..12600].iter().all(|&x| x == 13),
        "logged write lost"
    );
    assert!(got[12600..16384].iter().all(|&x| x == 1));
    assert!(
        got[16384..].iter().all(|&x| x == 14) || got[16384..].iter().all(|&x| x == 8),
        "logged growth lost"
    );
    let mut gb = vec![0u8; 4096];
    assert_eq!(fs.read(b, 0, &mut gb).expect("read b"), 4096);
    assert!(
        gb.iter().all(|&x| x == 5),
        "b's write was committed with a's sync"
    );
}

#[test]
fn a_write_through_a_block_map_changes_no_committed_block() {
    // The map knows where the block is and the stamp has not moved, but a commit made the
    // block part of the durable state: the write must copy it, not change it where it is.
    let (sim, fs, a, _) = two_files();
    let map = fs.file_cache(a);
    for byte in 1..=3u8 {
        // New, then (the map's hint) in place, then (the map's location) in place.
        assert_eq!(
            fs.write_file(&map, 4096, &[byte; 4096]).expect("write"),
            Some(4096)
        );
    }
    for _ in 0..2 {
        // A new block (out of line: too long to sit in its leaf), then in place: the map
        // knows it.
        fs.write_file(&map, 100, &[9u8; 2000]).expect("small write");
    }
    fs.sync().expect("commit");
    // (The small write first: the copy of the other block moves the data's stamp.)
    fs.write_file(&map, 150, &[8u8; 200])
        .expect("small write after the commit");
    fs.write_file(&map, 4096, &[4u8; 4096])
        .expect("write after the commit");
    let mut got = vec![0u8; 8192];
    assert_eq!(fs.read(a, 0, &mut got).expect("read"), 8192);
    assert!(
        got[4096..].iter().all(|&x| x == 4),
        "the write is not there"
    );
    assert!(got[150..350].iter().all(|&x| x == 8));
    // Every byte not persisted kept, as if the caches wrote everything back: a committed block
    // changed in place would show the new bytes.
    let mut rng = StdRng::seed_from_u64(5);
    let image = sim.crash_image(&mut rng, 1.0);
    drop(fs);
    let store =
        Store::open_on(Box::new(Arc::new(SimMedia::from_image(&image))), &boot(2)).expect("reopen");
    let fs = Fs::on_store(store).expect("fs");
    assert_eq!(fs.read(a, 0, &mut got).expect("read"), 8192);
    assert!(
        got[4096..].iter().all(|&x| x == 3),
        "a committed block was changed in place"
    );
    assert!(got[100..2100].iter().all(|&x| x == 9));
    assert!(got[..100].iter().all(|&x| x == 0) && got[2100..4096].iter().all(|&x| x == 0));
    // And the writes of the new generation went where the map now says.
    let map = fs.file_cache(a);
    for byte in 5..=7u8 {
        fs.write_file(&map, 4096, &[byte; 4096]).expect("write");
        assert_eq!(fs.read(a, 4096, &mut got[..4096]).expect("read"), 4096);
        assert!(got[..4096].iter().all(|&x| x == byte));
    }
}

#[test]
fn reads_through_a_block_map_see_every_change_of_the_block() {
    // A read the map answers skips the read section: it must still see each new value, a
    // truncation and bytes changed in place, never the old ones.
    let (_sim, fs, a, _) = two_files();
    let map = fs.file_cache(a);
    let mut got = vec![0u8; 4096];
    let read = |got: &mut [u8]| {
        fs.read_file(&map, 0, got)
            .expect("read")
            .expect("not shadowed")
    };
    fs.write(a, 0, &[1u8; 4096]).expect("write");
    assert_eq!(read(&mut got), 4096);
    assert!(got.iter().all(|&x| x == 1));
    assert_eq!(read(&mut got), 4096, "a read from the map");
    // In place (no stamp moves), through another path than the map's owner.
    fs.write(a, 100, &[2u8; 50]).expect("write in place");
    assert_eq!(read(&mut got), 4096);
    assert!(got[100..150].iter().all(|&x| x == 2) && got[150..].iter().all(|&x| x == 1));
    // Copied to a new block after a commit.
    fs.sync().expect("commit");
    fs.write(a, 0, &[3u8; 4096]).expect("copy");
    assert_eq!(read(&mut got), 4096);
    assert!(got.iter().all(|&x| x == 3));
    // Truncated, then extended: zeros, not the old block.
    fs.truncate(a, 10).expect("truncate");
    assert_eq!(read(&mut got), 10);
    fs.truncate(a, 4096).expect("extend");
    assert_eq!(read(&mut got), 4096);
    assert!(got[..10].iter().all(|&x| x == 3) && got[10..].iter().all(|&x| x == 0));
}

#[test]
fn reads_through_a_block_map_never_see_half_a_write() {
    // One thread rewrites a block (in place and, after commits, copied) with uniform bytes;
    // another reads it through a block map: every read is one write's bytes.
    let (_sim, fs, a, _) = two_files();
    fs.write(a, 0, &[0u8; 4096]).expect("write");
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let map = fs.file_cache(a);
            for round in 1..20000u32 {
                let byte = (round % 251) as u8;
                fs.write_file(&map, 0, &[byte; 4096]).expect("write");
                if round % 97 == 0 {
                    fs.sync().expect("commit");
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Release);
        });
        let map = fs.file_cache(a);
        let mut got = vec![0u8; 4096];
        let mut reads = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Acquire) || reads < 1000 {
            let off = [0usize, 512, 4000][reads as usize % 3];
            let n = fs
                .read_file(&map, off as u64, &mut got[..4096 - off])
                .expect("read")
                .expect("not shadowed");
            assert_eq!(n, 4096 - off);
            let first = got[0];
            assert!(
                got[..n].iter().all(|&x| x == first),
                "read {reads} at {off}: half a write"
            );
            reads += 1;
        }
    });
}

#[test]
fn a_read_past_the_values_end_inside_the_file_reads_zeros() {
    // A short last block, then the file extended by truncate: bytes past the block's value
    // read as zeros, through the map and without it (a read starting past the value's end
    // used to slice out of bounds).
    let (_sim, fs, a, _) = two_files();
    fs.write(a, 0, &[7u8; 100]).expect("write");
    fs.truncate(a, 4096).expect("extend");
    let map = fs.file_cache(a);
    let mut got = vec![1u8; 10];
    for _ in 0..2 {
        // The second read finds the block in the map.
        assert_eq!(fs.read_file(&map, 200, &mut got).expect("read"), Some(10));
        assert!(got.iter().all(|&x| x == 0), "{got:?}");
        got.fill(1);
        assert_eq!(fs.read(a, 200, &mut got).expect("read"), 10);
        assert!(got.iter().all(|&x| x == 0), "{got:?}");
        got.fill(1);
        assert_eq!(fs.read_file(&map, 95, &mut got).expect("read"), Some(10));
        assert_eq!(&got[..5], &[7u8; 5]);
        assert!(got[5..].iter().all(|&x| x == 0));
    }
}

/// The contents of file `ino` (all its bytes, its size their length).
fn contents(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).expect("stat").size as usize;
    let mut buf = vec![0u8; size];
    let n = fs.read(ino, 0, &mut buf).expect("read");
    buf.truncate(n);
    buf
}

/// One power loss among random writes, most of them each followed by the file's sync (the
/// writes the intent log takes), some not, truncations, appends and whole-tree syncs. After
/// the reboot every file must hold one of its states since its last acknowledged sync (its
/// own, or a commit's): a state as of one of its operations, never a mix, never older.
fn synced_writes_point(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (sim, fs, bs) = point_fs(seed);
    let files: Vec<u64> = (0..3)
        .map(|i| create(&fs, format!("/f{i}").as_bytes()))
        .collect();
    fs.sync().expect("commit");
    // Each file's states since its last durable point (its sync, or any commit).
    let mut history: HashMap<u64, Vec<Vec<u8>>> =
        files.iter().map(|&f| (f, vec![Vec::new()])).collect();
    let mut maps = Maps::new();
    sim.crash_at_persist(rng.gen_range(1..80));
    let bsz = bs as usize;
    for _ in 0..200 {
        let f = files[rng.gen_range(0..files.len())];
        let commits_before = commits(&fs);
        let op = rng.gen_range(0..20);
        let done = match op {
            0..=11 => {
                let (off, len) = match rng.gen_range(0..4) {
                    0 | 1 => ((rng.gen_range(0..6) * bsz) as u64, bsz),
                    2 => (rng.gen_range(0..6 * bsz) as u64, rng.gen_range(1..300)),
                    _ => (rng.gen_range(0..6 * bsz) as u64, rng.gen_range(1..3 * bsz)),
                };
                let data = vec![rng.gen::<u8>() | 1; len];
                let written = if rng.gen_bool(0.5) {
                    let map = maps.entry(f).or_insert_with(|| fs.file_cache(f));
                    fs.write_file(map, off, &data).map(|_| ())
                } else {
                    fs.write(f, off, &data).map(|_| ())
                };
                // Most writes are synced at once, as under fdatasync=1.
                written.and_then(|()| {
                    if op < 9 {
                        fs.sync_inode(f).map(|()| true)
                    } else {
                        Ok(false)
                    }
                })
            }
            12 | 13 => fs
                .append(f, &vec![rng.gen::<u8>() | 1; rng.gen_range(1..200)])
                .and_then(|_| fs.sync_inode(f).map(|()| true)),
            14 => fs
                .truncate(f, rng.gen_range(0..6 * bsz) as u64)
                .map(|()| false),
            15 => fs.sync_inode(f).map(|()| true),
            _ => fs.sync().map(|()| true),
        };
        // The op's effect (made or not) is one more state the file may be found in.
        history.get_mut(&f).expect("file").push(contents(&fs, f));
        match done {
            Ok(true) => {
                // Synced: nothing older may come back; a commit made every file durable.
                let committed = commits(&fs) > commits_before;
                for (&g, h) in history.iter_mut() {
                    if g == f || committed {
                        *h = vec![contents(&fs, g)];
                    }
                }
            }
            Ok(false) => {}
            Err(_) => break,
        }
    }
    sim.lose_power();
    let image = sim.crash_image(&mut rng, 0.5);
    drop(maps);
    drop(fs);
    let fs = rebooted_clean(&image, seed);
    for (&f, states) in &history {
        let got = contents(&fs, f);
        assert!(
            states.contains(&got),
            "seed {seed}: file {f} after power loss ({} bytes) is none of its {} states since its last sync",
            got.len(),
            states.len()
        );
    }
}

#[test]
fn power_loss_keeps_every_synced_write() {
    run_points(synced_writes_point);
}

#[test]
fn appends_synced_each_time_go_into_the_log_and_survive_power_loss() {
    // A database's log (redis's append-only file under appendfsync always): each record
    // appended, then synced. Those inside a block go into the intent log, short values too.
    let (sim, fs, a, _) = two_files();
    let map = fs.file_cache(a);
    fs.sync_inode(a).expect("sync");
    fs.append_file(&map, &[1u8; 100]).expect("append");
    fs.sync_inode(a).expect("sync");
    let base = commits(&fs);
    let mut want = vec![1u8; 100];
    for i in 0..30u8 {
        let record = vec![i + 2; 100];
        assert_eq!(
            fs.append_file(&map, &record).expect("append"),
            Some(want.len() as u64)
        );
        fs.sync_inode(a).expect("sync");
        want.extend_from_slice(&record);
    }
    assert_eq!(commits(&fs), base, "a synced append committed");
    let mut rng = StdRng::seed_from_u64(3);
    let image = sim.crash_image(&mut rng, 0.5);
    drop(map);
    drop(fs);
    let store =
        Store::open_on(Box::new(Arc::new(SimMedia::from_image(&image))), &boot(2)).expect("reopen");
    assert_eq!(store.verify().expect("verify").leaked_blocks, 0);
    let fs = Fs::on_store(store).expect("fs");
    assert_eq!(contents(&fs, a), want, "synced appends after power loss");
}

/// One run of small writes each followed by its file's sync, on a fresh volume of `bs`-byte
/// blocks, power lost at persist `crash_at` (none if `None`): the contents of the file after
/// the last write whose sync returned, and after the write in flight when power failed (if
/// any), then the volume as stable media would hold it. Returns the persists a whole run made.
fn synced_small_writes(seed: u64, bs: u32, crash_at: Option<u64>) -> u64 {
    const FILE: usize = 6 * 4096;
    let mut rng = StdRng::seed_from_u64(seed);
    let (sim, fs) = sim_fs(4 << 20, bs);
    let ino = create(&fs, b"f");
    let mut content: Vec<u8> = (0..FILE).map(|i| (i / 7) as u8).collect();
    fs.write(ino, 0, &content).expect("lay out");
    fs.sync().expect("commit");
    // The sync hint's pattern: a sync, a write, a sync; from then on each write is synced.
    fs.sync_inode(ino).expect("sync");
    let start = sim.persist_count();
    if let Some(n) = crash_at {
        sim.crash_at_persist(n);
    }
    let mut in_flight = None;
    for i in 0..150u32 {
        // Mostly a few hundred bytes inside one block (data records, once the block's first
        // synced write since the commit named it), now and then a whole block or a write across
        // two; the log (64 KiB here) fills and commits every few dozen writes.
        let len = match rng.gen_range(0..10) {
            0 => bs as usize,
            1 => rng.gen_range(1..2 * bs as usize),
            _ => rng.gen_range(1..=700.min(bs as usize)),
        };
        let off = rng.gen_range(0..=FILE - len);
        let data: Vec<u8> = (0..len).map(|j| (i as usize * 31 + j) as u8).collect();
        let mut next = content.clone();
        next[off..off + len].copy_from_slice(&data);
        let done = fs
            .write(ino, off as u64, &data)
            .and_then(|_| fs.sync_inode(ino));
        if done.is_err() {
            in_flight = Some(next);
            break;
        }
        content = next;
        let mut got = vec![0u8; FILE];
        assert_eq!(fs.read(ino, 0, &mut got).expect("read"), FILE);
        assert!(got == content, "seed {seed}: write {i} does not read back");
    }
    let persists = sim.persist_count() - start;
    if crash_at.is_none() {
        return persists;
    }
    sim.lose_power();
    let image = sim.crash_image(&mut rng, 0.5);
    drop(fs);
    let fs = rebooted_clean(&image, seed);
    let mut got = vec![0u8; FILE];
    assert_eq!(fs.read(ino, 0, &mut got).expect("read"), FILE);
    assert!(
        got == content || in_flight.as_ref() == Some(&got),
        "seed {seed}, bs {bs}, power lost at persist {crash_at:?}: the file is neither as \
         after its last synced write nor with the write in flight"
    );
    persists
}

#[test]
fn small_writes_synced_one_by_one_survive_power_loss_at_every_persist() {
    // Most of these go into data records (the bytes in the log, then into the block where it
    // is): replay must put every acknowledged one back, whatever the power loss tore.
    for (seed, bs) in [(1u64, 4096u32), (2, 1024)] {
        let persists = synced_small_writes(seed, bs, None);
        assert!(persists > 100, "{persists} persists");
        std::thread::scope(|s| {
            for w in 0..2u64 {
                s.spawn(move || {
                    let mut n = w;
                    while n <= persists {
                        synced_small_writes(seed, bs, Some(n));
                        n += 2;
                    }
                });
            }
        });
    }
}
