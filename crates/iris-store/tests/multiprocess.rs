//! Several processes on one volume: concurrent writers see each other's puts at once, and a
//! writer killed with SIGKILL at random instants loses no acknowledged commit (nor, on the same
//! boot, any completed put), and leaves the volume clean for the next opener.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use iris_store::{CreateOptions, Key, OpenOptions, Store};
use rand::{Rng, SeedableRng};

const WORKER: &str = env!("CARGO_BIN_EXE_iris-store-worker");

fn value(prefix: u64, i: u64) -> Vec<u8> {
    let len = 100 + (i as usize * 131) % 3996;
    (0..len)
        .map(|j| (prefix as usize * 7 + i as usize + j) as u8)
        .collect()
}

/// A scratch volume, removed when the test ends, passing or not.
struct Scratch(std::path::PathBuf);

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn volume(name: &str) -> Scratch {
    let p = std::env::temp_dir().join(format!("iris-mp-{}-{name}.vol", std::process::id()));
    let _ = std::fs::remove_file(&p);
    let opts = CreateOptions {
        size_limit_bytes: 512 << 20,
        initial_bytes: 4 << 20,
        ..CreateOptions::default()
    };
    drop(Store::create(&p, &opts).expect("create"));
    Scratch(p)
}

#[test]
fn two_processes_see_each_others_puts_without_commit() {
    let path = volume("two");
    let store = Store::open(&path, &OpenOptions::default()).expect("open");
    let mut child = Command::new(WORKER)
        .args(["fill", path.to_str().expect("utf8"), "1", "3000", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Write our own keys while the child writes its keys.
    for i in 0..3000 {
        store.put(Key::new(2, i), &value(2, i)).expect("put");
    }
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().expect("line").expect("read"), "done");
    for i in 0..3000 {
        let ok = store
            .get_with(Key::new(1, i), |v| v == value(1, i).as_slice())
            .expect("get");
        assert_eq!(ok, Some(true), "child's key {i} not visible");
    }
    writeln!(child.stdin.take().expect("stdin")).expect("signal");
    assert_eq!(lines.next().expect("line").expect("read"), "saw 3000");
    assert!(child.wait().expect("wait").success());
    assert_eq!(store.verify().expect("verify").leaked_blocks, 0);
    drop(store);
}

#[test]
fn kill_9_loses_no_acknowledged_commit() {
    let path = volume("kill");
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    for round in 0..50u64 {
        let prefix = 100 + round;
        let child = worker(&path, "writer", prefix, 7);
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..120)));
        let acked = child.kill();

        // Same boot: the working tree survives the kill.
        let s = Store::open(&path, &OpenOptions::default()).expect("open after kill");
        if let Some(n) = acked {
            for i in 0..=n {
                let ok = s
                    .get_with(Key::new(prefix, i), |v| v == value(prefix, i).as_slice())
                    .expect("get");
                assert_eq!(
                    ok,
                    Some(true),
                    "round {round}: acked key {i} missing after kill"
                );
            }
        }
        let report = s.verify().expect("verify after kill");
        assert_eq!(report.leaked_blocks, 0, "round {round}");
        drop(s);

        // As after power loss: only commits count, and every acknowledged one is there.
        if round % 10 == 9 {
            let opts = OpenOptions {
                boot_id: Some(u128::from(round) + 1),
                commit_interval: None,
            };
            let s = Store::open(&path, &opts).expect("open as after reboot");
            if let Some(n) = acked {
                for i in 0..=n {
                    assert!(s
                        .get_with(Key::new(prefix, i), |_| ())
                        .expect("get")
                        .is_some());
                }
            }
            assert_eq!(s.verify().expect("verify").leaked_blocks, 0);
        }
    }
}

/// The overwriter's block for (prefix, key, round) (see iris-store-worker).
fn block(prefix: u64, i: u64, r: u64) -> Vec<u8> {
    let mut b = vec![(prefix * 31 + i * 7 + r) as u8 | 1; 4096];
    b[..8].copy_from_slice(&r.to_le_bytes());
    b
}

/// A worker child and the thread collecting the last round (or put) it acknowledged.
struct Overwriter {
    child: std::process::Child,
    acked: Option<std::thread::JoinHandle<(Option<u64>, u64)>>,
}

impl Overwriter {
    /// SIGKILL it; the last round it acknowledged.
    fn kill(self) -> Option<u64> {
        self.kill_counting().0
    }

    /// SIGKILL it; the last round it acknowledged and the last `fast N` it printed.
    fn kill_counting(mut self) -> (Option<u64>, u64) {
        // (It may have died already: a failpoint.)
        let _ = self.child.kill();
        self.child.wait().expect("wait");
        self.acked
            .take()
            .map_or((None, 0), |h| h.join().expect("reader"))
    }
}

impl Drop for Overwriter {
    fn drop(&mut self) {
        // A failing test must not leave writers running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn overwriter(path: &std::path::Path, prefix: u64, keys: u64) -> Overwriter {
    worker(path, "overwriter", prefix, keys)
}

/// `iris-store-worker MODE VOLUME PREFIX N` (see the worker for the modes).
fn worker(path: &std::path::Path, mode: &str, prefix: u64, keys: u64) -> Overwriter {
    worker_env(path, mode, prefix, keys, &[])
}

/// A worker that ran until it reached failpoint `point` and died there of SIGKILL.
fn killed_at(
    path: &std::path::Path,
    mode: &str,
    prefix: u64,
    keys: u64,
    point: &str,
) -> Overwriter {
    killed_at_env(path, mode, prefix, keys, point, &[])
}

/// [`killed_at`] with extra environment variables.
fn killed_at_env(
    path: &std::path::Path,
    mode: &str,
    prefix: u64,
    keys: u64,
    point: &str,
    env: &[(&str, &str)],
) -> Overwriter {
    let mut all = vec![("IRIS_FAILPOINT", point)];
    all.extend_from_slice(env);
    let mut victim = worker_env(path, mode, prefix, keys, &all);
    let status = victim.child.wait().expect("wait");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the failpoint {point} did not kill the {mode}"
    );
    victim
}

/// [`worker`] with extra environment variables.
fn worker_env(
    path: &std::path::Path,
    mode: &str,
    prefix: u64,
    keys: u64,
    env: &[(&str, &str)],
) -> Overwriter {
    let mut child = Command::new(WORKER)
        .args([
            mode,
            path.to_str().expect("utf8"),
            &prefix.to_string(),
            &keys.to_string(),
        ])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let acked = std::thread::spawn(move || {
        let (mut last, mut fast) = (None, 0);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("acked ") {
                last = n.parse::<u64>().ok();
            } else if let Some(n) = line.strip_prefix("fast ") {
                fast = n.parse::<u64>().unwrap_or(fast);
            }
        }
        (last, fast)
    });
    Overwriter {
        child,
        acked: Some(acked),
    }
}

/// Every key of `prefix` holds a whole block of one round, at least `acked` when some round was
/// acknowledged.
fn check_overwritten(s: &Store, prefix: u64, keys: u64, acked: Option<u64>, what: &str) {
    for i in 0..keys {
        let round = s
            .get_with(Key::new(prefix, i), |v| {
                let r = u64::from_le_bytes(v[..8].try_into().expect("8 bytes"));
                assert_eq!(v, block(prefix, i, r).as_slice(), "{what}: key {i} torn");
                r
            })
            .expect("get");
        if let Some(a) = acked {
            let r = round.unwrap_or_else(|| panic!("{what}: key {i} missing"));
            assert!(r >= a, "{what}: key {i} at round {r}, {a} was acknowledged");
        }
    }
}

#[test]
fn writers_of_several_partitions_survive_kill_9_of_one_another() {
    let path = volume("parts");
    let keys = 24;
    // Survivors run throughout; victims are killed at random instants, often holding their
    // partition's lock, which the survivors (and this process) must then recover.
    let survivors: Vec<(u64, Overwriter)> =
        (1..=2).map(|p| (p, overwriter(&path, p, keys))).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    for round in 0..30u64 {
        let prefix = 1000 + round;
        let victim = overwriter(&path, prefix, keys);
        std::thread::sleep(Duration::from_millis(rng.gen_range(30..150)));
        let acked = victim.kill();
        let s = Store::open(&path, &OpenOptions::default()).expect("open after kill");
        check_overwritten(
            &s,
            prefix,
            if acked.is_some() { keys } else { 0 },
            acked,
            "victim",
        );
        let report = s.verify().expect("verify after kill");
        assert_eq!(report.leaked_blocks, 0, "round {round}");
    }
    for (prefix, w) in survivors {
        let acked = w.kill();
        assert!(
            acked.is_some_and(|a| a > 0),
            "survivor {prefix} made no progress"
        );
        let s = Store::open(&path, &OpenOptions::default()).expect("open");
        check_overwritten(&s, prefix, keys, acked, "survivor");
        assert_eq!(s.verify().expect("verify").leaked_blocks, 0);
    }
}

/// The patcher's chunk for (prefix, key, round, chunk) (see iris-store-worker).
fn chunk(prefix: u64, i: u64, r: u64, c: u64) -> Vec<u8> {
    let mut b = vec![(prefix * 31 + i * 7 + r * 3 + c) as u8 | 1; 512];
    b[..8].copy_from_slice(&r.to_le_bytes());
    b
}

/// Thirty rounds of a `mode` worker (of `keys` keys, prefix `first_prefix + round`) killed at a
/// random instant beside a survivor of the same mode: after each kill the volume opens, every
/// key of an acknowledged victim passes `check(store, prefix, key, acked)`, and nothing leaked
/// (a kill must not leak: blocks the last commit references that the victim replaced but had
/// not yet noted for freeing are noted by the repair; once, under a full parallel test run, a
/// leaf and an old root leaked before it did). The survivor must have made progress; returns
/// the last `fast N` it printed.
fn kill_rounds(
    name: &str,
    mode: &str,
    keys: u64,
    first_prefix: u64,
    seed: u64,
    check: impl Fn(&Store, u64, u64, Option<u64>),
) -> u64 {
    let path = volume(name);
    let survivor = worker(&path, mode, 1, keys);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for round in 0..30u64 {
        let prefix = first_prefix + round;
        let victim = worker(&path, mode, prefix, keys);
        std::thread::sleep(Duration::from_millis(rng.gen_range(30..150)));
        let acked = victim.kill();
        let s = Store::open(&path, &OpenOptions::default()).expect("open after kill");
        for i in 0..if acked.is_some() { keys } else { 0 } {
            check(&s, prefix, i, acked);
        }
        assert_no_leak(&s, &path, round);
    }
    let (acked, fast) = survivor.kill_counting();
    assert!(
        acked.is_some_and(|a| a > 0),
        "the survivor made no progress"
    );
    fast
}

/// The rounds of the eight 512-byte chunks of key `i`'s value `v` (each must be a whole chunk
/// of the patcher, of the acknowledged round `acked` or later).
fn chunk_rounds(v: &[u8], prefix: u64, i: u64, acked: Option<u64>) -> [u64; 8] {
    let mut rounds = [0u64; 8];
    for c in 0..8u64 {
        let part = &v[(c * 512) as usize..(c as usize + 1) * 512];
        let r = u64::from_le_bytes(part[..8].try_into().expect("8 bytes"));
        assert_eq!(
            part,
            chunk(prefix, i, r, c).as_slice(),
            "key {i} chunk {c} torn"
        );
        assert!(
            acked.is_some_and(|a| r >= a),
            "key {i} chunk {c} at round {r}, acked {acked:?}"
        );
        rounds[c as usize] = r;
    }
    rounds
}

#[test]
fn whole_block_writes_in_place_are_whole_or_absent_after_kill_9() {
    // 4 KiB overwrites of blocks written since the last commit change them where they are: a
    // writer killed in the middle of the copy must leave the block whole (its undo record
    // holds the new bytes; the next locker finishes the copy).
    let fast = kill_rounds(
        "rewrite",
        "rewriter",
        16,
        3000,
        29,
        |s, prefix, i, acked| {
            let v = s
                .get_with(Key::new(prefix, i), |v| v.to_vec())
                .expect("get")
                .expect("present");
            let r = u64::from_le_bytes(v[..8].try_into().expect("8 bytes"));
            assert_eq!(v, block(prefix, i, r), "key {i} torn (round {r})");
            assert!(
                acked.is_some_and(|a| r > 2 * a),
                "key {i} at round {r}, acked {acked:?}"
            );
        },
    );
    assert!(fast > 0, "the survivor wrote no block in place");
}

#[test]
fn pairs_written_in_place_are_whole_per_piece_after_kill_9() {
    // A write of two pieces in place (`Store::write_pair_in_place`: the end of one block and
    // the start of the next) by a writer killed at any instant: each piece is whole, of one
    // round (its redo record finishes it), and no older than the last acknowledged round.
    // (A round's pairs are copied instead when another process's commit came between its
    // halves and its pairs; the survivor must have written some in place.)
    let fast = kill_rounds("pair", "pairer", 16, 4000, 31, |s, prefix, i, acked| {
        s.get_with(Key::new(prefix, i), |v| {
            let rounds = chunk_rounds(v, prefix, i, acked);
            // The paired piece: chunks 4-7 of an even key, 0-3 of an odd one.
            let paired = if i % 2 == 0 {
                &rounds[4..]
            } else {
                &rounds[..4]
            };
            assert!(
                paired.iter().all(|&r| r == paired[0]),
                "key {i}: a piece of several rounds {paired:?}"
            );
        })
        .expect("get")
        .expect("present");
    });
    assert!(fast > 0, "the survivor wrote no pair in place");
}

#[test]
fn small_writes_in_place_are_whole_or_absent_after_kill_9() {
    kill_rounds("patch", "patcher", 16, 2000, 23, |s, prefix, i, acked| {
        s.get_with(Key::new(prefix, i), |v| chunk_rounds(v, prefix, i, acked))
            .expect("get")
            .expect("present");
    });
}

/// The volume verifies without a leaked block; if not, what the leaked blocks held is printed.
fn assert_no_leak(s: &Store, path: &std::path::Path, round: u64) {
    let report = s.verify().expect("verify after kill");
    if report.leaked_blocks > 0 {
        describe_blocks(path, &report.leaked_sample);
    }
    assert_eq!(report.leaked_blocks, 0, "round {round}: {report:?}");
}

/// Print what each of `blocks` holds (node magic and header, or the first bytes of data): what a
/// leaked block was tells which writer lost it.
fn describe_blocks(path: &std::path::Path, blocks: &[u64]) {
    use std::os::unix::fs::FileExt;
    let Ok(f) = std::fs::File::open(path) else {
        return;
    };
    for b in blocks {
        let mut head = [0u8; 32];
        if f.read_exact_at(&mut head, b * 4096).is_ok() {
            eprintln!("  block {b}: {:02x?}", head);
        }
    }
}

/// Every group of the grouper `prefix` holds one round in all eight blocks (whole or absent),
/// at least `acked`; returns how many groups hold some round.
fn check_groups(s: &Store, prefix: u64, groups: u64, acked: Option<u64>, what: &str) -> u64 {
    check_groups_of(s, prefix, groups, 8, acked, what)
}

/// The grouper's members are this many keys apart (the worker's `group_key`): one region of
/// the store's writer partitions each.
const GROUP_STRIDE: u64 = 1 << 13;

/// [`check_groups`] for groups of `size` blocks.
fn check_groups_of(
    s: &Store,
    prefix: u64,
    groups: u64,
    size: u64,
    acked: Option<u64>,
    what: &str,
) -> u64 {
    let mut present = 0;
    for g in 0..groups {
        let rounds: Vec<Option<u64>> = (0..size)
            .map(|j| {
                let k = Key::new(prefix, j * GROUP_STRIDE + g);
                s.get_with(k, |v| {
                    let r = u64::from_le_bytes(v[..8].try_into().expect("8 bytes"));
                    assert_eq!(v, block(prefix, k.lo, r).as_slice(), "{what}: {k:?} torn");
                    r
                })
                .expect("get")
            })
            .collect();
        assert!(
            rounds.iter().all(|r| *r == rounds[0]),
            "{what}: group {g} torn across blocks: {rounds:?}"
        );
        if let Some(a) = acked {
            let r = rounds[0].unwrap_or_else(|| panic!("{what}: group {g} missing"));
            assert!(
                r >= a,
                "{what}: group {g} at round {r}, {a} was acknowledged"
            );
        }
        present += u64::from(rounds[0].is_some());
    }
    present
}

#[test]
fn multi_block_overwrites_are_whole_or_absent_after_kill_9() {
    let path = volume("groups");
    let groups = 6;
    let survivor = worker(&path, "grouper", 1, groups);
    let mut rng = rand::rngs::StdRng::seed_from_u64(29);
    let mut fast_victims = 0;
    for round in 0..30u64 {
        let prefix = 3000 + round;
        let victim = worker(&path, "grouper", prefix, groups);
        std::thread::sleep(Duration::from_millis(rng.gen_range(30..150)));
        let (acked, fast) = victim.kill_counting();
        fast_victims += u64::from(fast > 0);
        let s = Store::open(&path, &OpenOptions::default()).expect("open after kill");
        check_groups(&s, prefix, groups, acked, "victim");
        assert_no_leak(&s, &path, round);
    }
    // Writers that die exactly halfway through publishing a group's eight blocks. A process that
    // had the volume open all along must find the half-published groups whole or absent too:
    // its readers wait for the write sequences the dead writer left odd, until a repair.
    let watcher = Store::open(&path, &OpenOptions::default()).expect("open the watcher");
    for round in 0..5u64 {
        let prefix = 4000 + round;
        let victim = killed_at(&path, "grouper", prefix, groups, "overwrite-publish");
        let (acked, _) = victim.kill_counting();
        let keys: Vec<Key> = (0..groups)
            .flat_map(|g| (0..8u64).map(move |j| Key::new(prefix, j * GROUP_STRIDE + g)))
            .collect();
        // (The survivor, alive, may be mid-change in a partition these keys share at any one
        // look: the dead writer's sequences stay odd at every look.)
        let settled = (0..200).any(|_| {
            watcher
                .wait_for_writers(keys.iter().copied())
                .expect("wait for writers");
            watcher
                .read(|v| Ok(v.in_place_marks(keys.iter().copied()).is_some()))
                .expect("read")
        });
        assert!(
            settled,
            "round {round}: the dead writer's sequences stayed odd"
        );
        check_groups(&watcher, prefix, groups, acked, "halfway victim, watcher");
        let s = Store::open(&path, &OpenOptions::default()).expect("open after kill");
        check_groups(&s, prefix, groups, acked, "halfway victim");
        assert_eq!(s.verify().expect("verify").leaked_blocks, 0);
    }
    let (acked, fast) = survivor.kill_counting();
    assert!(
        acked.is_some_and(|a| a > 1),
        "the survivor made no progress"
    );
    assert!(fast > 0, "no overwrite took the partition path");
    assert!(
        fast_victims > 0,
        "no victim overwrote on the partition path"
    );
    let s = Store::open(&path, &OpenOptions::default()).expect("open");
    assert_eq!(check_groups(&s, 1, groups, acked, "survivor"), groups);
    assert_eq!(s.verify().expect("verify").leaked_blocks, 0);
}

#[test]
fn overwrites_past_the_undo_records_room_are_whole_or_absent_after_kill_9() {
    // Groups of 100 and of 400 blocks: the undo record holds 42 of their old slots, a chain of
    // one or three overflow blocks the rest. Writers killed at random, and two blocks before
    // the end of their publishes (the rolled-back slots then come from the chain's last
    // block), leave every group whole or absent, and no block leaked (the chain included).
    let path = volume("big-groups");
    let groups = 3;
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    let mut fast_victims = 0;
    for round in 0..12u64 {
        let prefix = 5000 + round;
        let size: u64 = if round % 4 < 2 { 100 } else { 400 };
        let size_text = size.to_string();
        let env = [("IRIS_GROUP", size_text.as_str())];
        let victim = if round % 2 == 0 {
            let v = worker_env(&path, "grouper", prefix, groups, &env);
            std::thread::sleep(Duration::from_millis(rng.gen_range(40..160)));
            v
        } else {
            killed_at_env(
                &path,
                "grouper",
                prefix,
                groups,
                "overwrite-publish-late",
                &env,
            )
        };
        let (acked, fast) = victim.kill_counting();
        fast_victims += u64::from(fast > 0 || round % 2 == 1);
        let s = Store::open(&path, &OpenOptions::default()).expect("open after kill");
        check_groups_of(&s, prefix, groups, size, acked, "big-group victim");
        assert_no_leak(&s, &path, round);
    }
    assert!(fast_victims > 0, "no big overwrite took the partition path");
}

#[test]
fn blocks_filled_outside_the_lock_by_a_killed_writer_are_reclaimed() {
    // The preparer fills each group's 16 blocks outside every lock, reserved through one list
    // block, then publishes them in one transaction. Killed at random, or right after filling,
    // it leaves every group whole (a round it acknowledged or a later one) and no block leaked:
    // the reaper frees the list and what it names.
    let path = volume("prepared");
    let groups = 4;
    let mut rng = rand::rngs::StdRng::seed_from_u64(43);
    for round in 0..16u64 {
        let prefix = 6000 + round;
        let victim = if round % 2 == 0 {
            let v = worker(&path, "preparer", prefix, groups);
            std::thread::sleep(Duration::from_millis(rng.gen_range(30..150)));
            v
        } else {
            killed_at(&path, "preparer", prefix, groups, "prepared-filled")
        };
        let acked = victim.kill();
        let s = Store::open(&path, &OpenOptions::default()).expect("open after kill");
        check_groups_of(&s, prefix, groups, 16, acked, "preparer victim");
        assert_no_leak(&s, &path, round);
    }
}

#[test]
fn a_writer_killed_before_noting_the_committed_blocks_it_replaced_leaks_nothing() {
    // A writer that replaces blocks the last commit references notes them to be freed by the
    // next commit only after it published the replacement. Killed in between, the repair must
    // note them itself: they are still reachable from the last commit (so kept now) but from
    // nothing after the next one.
    let path = volume("deferred");
    for round in 0..3u64 {
        killed_at(&path, "overwriter", 10 + round, 64, "defer-free");
        let s = Store::open(&path, &OpenOptions::default()).expect("open after kill");
        for _ in 0..2 {
            s.commit().expect("commit");
            let report = s.verify().expect("verify");
            assert_eq!(report.leaked_blocks, 0, "round {round}: {report:?}");
        }
    }
}

#[test]
fn an_append_killed_between_its_stores_is_whole_or_absent() {
    // An append into a block's unused tail lengthens the value and rewrites its size record
    // (as a file's size) by several stores in place. Killed between them, the repair must put
    // the old length and record back: length and record agree, and the bytes are the writer's.
    let path = volume("append");
    for round in 0..3u64 {
        let prefix = 30 + round;
        let keys = 16;
        killed_at(&path, "appender", prefix, keys, "append-resized");
        let s = Store::open(&path, &OpenOptions::default()).expect("open after kill");
        for i in 0..keys {
            let record = s
                .get_with(Key::new(prefix, (1 << 40) | i), |v| {
                    u64::from_le_bytes(v.try_into().expect("8 bytes"))
                })
                .expect("get")
                .expect("size record");
            let len = s
                .get_with(Key::new(prefix, i), |v| {
                    for (j, b) in v.iter().enumerate() {
                        let want = (prefix * 13 + i * 3 + j as u64 * 7) as u8;
                        assert_eq!(*b, want, "round {round}: value {i} byte {j}");
                    }
                    v.len() as u64
                })
                .expect("get")
                .expect("value");
            assert_eq!(len, record, "round {round}: value {i} and its size record");
        }
        assert_no_leak(&s, &path, round);
    }
}

#[test]
fn a_shared_opener_refuses_a_header_it_does_not_trust_instead_of_rebuilding_it() {
    // Another opener has the volume: its working header is the live state of every process
    // using it. One this build does not trust (here its magic is wiped; in life, another Iris
    // build's layout) must not be rebuilt under them: the open fails, the first store goes on.
    let path = volume("foreign");
    let a = Store::open(&path, &OpenOptions::default()).expect("open");
    a.put(Key::new(1, 1), b"kept").expect("put");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&*path)
            .expect("open file");
        f.write_all_at(&[0u8; 8], 2 * 4096)
            .expect("wipe the header's magic");
    }
    let err = match Store::open(&path, &OpenOptions::default()) {
        Ok(_) => panic!("a shared opener rebuilt a live header"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("another Iris build"), "{err}");
    assert_eq!(
        a.get_with(Key::new(1, 1), |v| v.to_vec())
            .expect("get")
            .as_deref(),
        Some(&b"kept"[..])
    );
    a.put(Key::new(1, 2), b"still writable").expect("put");
    a.commit().expect("commit");
}

#[test]
fn kill_9_then_power_loss_keeps_exactly_the_acknowledged_synced_writes() {
    // A writer whose every write expects a sync and is synced as a file's fdatasync is (the
    // intent log takes them: see the worker's `syncer`) is killed at random instants; each time
    // the volume is then opened as after a reboot, so only the superblocks and the log count.
    // Replay must give back every acknowledged write, and exactly the first writes up to the
    // count record's: no key ahead of it or behind it, no block torn.
    let path = volume("syncer");
    let keys = 8u64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    for round in 0..40u64 {
        let prefix = 300 + round;
        let child = worker(&path, "syncer", prefix, keys);
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..120)));
        let acked = child.kill();
        let opts = OpenOptions {
            boot_id: Some(1000 + u128::from(round)),
            commit_interval: None,
        };
        let s = Store::open(&path, &opts).expect("open as after reboot");
        check_synced(&s, prefix, keys, acked, &format!("round {round}"));
    }
}

/// The count record of a synced worker of `prefix` (writes its records carry), checked past
/// the last acknowledged write (`acked`), after checking the volume leaks no block.
fn synced_count(s: &Store, prefix: u64, acked: Option<u64>, what: &str) -> u64 {
    assert_eq!(s.verify().expect("verify").leaked_blocks, 0, "{what}");
    let count = s
        .get_with(Key::new(prefix, 1 << 40), |v| {
            u64::from_le_bytes(v[..8].try_into().expect("8 bytes"))
        })
        .expect("get count")
        .unwrap_or(0);
    if let Some(n) = acked {
        assert!(
            count > n,
            "{what}: write {n} was acknowledged, the count says {count}"
        );
    }
    count
}

/// What a `syncer` worker of `prefix` left, as a volume opened after it holds it: no leaked
/// block, every acknowledged write (up to `acked`), and exactly the first writes up to its
/// count record's: no key ahead of it or behind it, no block torn.
fn check_synced(s: &Store, prefix: u64, keys: u64, acked: Option<u64>, what: &str) {
    let count = synced_count(s, prefix, acked, what);
    for i in 0..keys {
        let got = s
            .get_with(Key::new(prefix, i), |v| {
                let r = u64::from_le_bytes(v[..8].try_into().expect("8 bytes"));
                assert_eq!(v, block(prefix, i, r).as_slice(), "{what}: key {i} torn");
                r
            })
            .expect("get");
        let want = (count > i).then(|| (count - 1 - i) / keys);
        assert_eq!(got, want, "{what}: key {i} after {count} writes");
    }
}

/// Key `i` of a `small-syncer` of `prefix` after its writes of rounds up to `r`: the whole
/// block of the last round that is a multiple of eight, with the chunks of the rounds after it.
fn small_synced(prefix: u64, i: u64, r: u64) -> Vec<u8> {
    let base = r / 8 * 8;
    let mut b = block(prefix, i, base);
    for later in base + 1..=r {
        let c = later % 8;
        let at = (c * 512) as usize;
        b[at..at + 512].copy_from_slice(&chunk(prefix, i, later, c));
    }
    b
}

#[test]
fn kill_9_then_power_loss_keeps_exactly_the_acknowledged_small_synced_writes() {
    // As above, with most writes 512 bytes into a block a record of the log names: data
    // records (the bytes in the log, then into the block where it is), killed anywhere, then
    // replayed onto whatever the block held. Exactly the first `count` writes, none torn.
    let path = volume("small-syncer");
    let keys = 4u64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(23);
    let mut fast = 0;
    for round in 0..40u64 {
        let prefix = 500 + round;
        let child = worker(&path, "small-syncer", prefix, keys);
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..120)));
        let (acked, logged) = child.kill_counting();
        fast += logged;
        let opts = OpenOptions {
            boot_id: Some(2000 + u128::from(round)),
            commit_interval: None,
        };
        let s = Store::open(&path, &opts).expect("open as after reboot");
        let what = format!("round {round}");
        let count = synced_count(&s, prefix, acked, &what);
        let mut buf = vec![0u8; 4096];
        for i in 0..keys {
            let got = s.get(Key::new(prefix, i), &mut buf).expect("get");
            if count <= i {
                assert_eq!(got, None, "{what}: key {i} ahead of the count {count}");
                continue;
            }
            assert_eq!(got, Some(4096), "{what}: key {i}");
            let last_round = (count - 1 - i) / keys;
            assert!(
                buf == small_synced(prefix, i, last_round),
                "{what}: key {i} is not as after round {last_round} ({count} writes)"
            );
        }
    }
    assert!(fast > 1000, "only {fast} writes went into data records");
}

#[test]
fn a_recovery_killed_during_its_replay_is_made_again_by_the_next_opener() {
    // The first opener after a reboot rebuilds the shared state and replays the intent log.
    // Killed after the first record it applied, it leaves the rest unapplied: the next
    // opener of that boot must not take the half-rebuilt state as live, or the acknowledged
    // writes the replay had not reached yet are lost. Killed after the replay's commit, the
    // next opener rebuilds from that commit, which holds them all.
    for (round, point) in ["replay-applied", "replay-committed"].iter().enumerate() {
        let path = volume(&format!("replay-killed-{round}"));
        let (prefix, keys) = (700u64, 8u64);
        let child = worker(&path, "syncer", prefix, keys);
        std::thread::sleep(Duration::from_millis(150));
        let acked = child.kill().expect("some writes acknowledged");
        assert!(acked >= 2, "too few logged writes to replay ({acked})");
        let boot = 4242 + round as u128;
        let boot_env = boot.to_string();
        killed_at_env(&path, "open", 0, 0, point, &[("IRIS_BOOT_ID", &boot_env)]);
        let opts = OpenOptions {
            boot_id: Some(boot),
            commit_interval: None,
        };
        let s = Store::open(&path, &opts).expect("open in the boot of the killed recovery");
        check_synced(&s, prefix, keys, Some(acked), point);
    }
}

#[test]
fn an_opener_after_a_reboot_waits_out_a_shared_holder_going_away() {
    // The last process closed the volume, but a child it forked just before still holds its
    // shared lock until it execs. An opener of another boot finds the lock shared and the
    // header not of its boot: it waits for the holder to go instead of refusing the volume.
    let path = volume("transient");
    let a = Store::open(&path, &OpenOptions::default()).expect("open");
    a.put(Key::new(1, 1), b"kept").expect("put");
    a.commit().expect("commit");
    drop(a);
    let holder = std::fs::File::open(&*path).expect("open file");
    {
        use std::os::unix::io::AsRawFd;
        // SAFETY: flock on a file descriptor this test owns.
        assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_SH) }, 0);
    }
    let going = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(holder);
    });
    let opts = OpenOptions {
        boot_id: Some(0x5eed),
        commit_interval: None,
    };
    let s = Store::open(&path, &opts).expect("open once the holder went away");
    going.join().expect("holder");
    assert_eq!(
        s.get_with(Key::new(1, 1), |v| v.to_vec())
            .expect("get")
            .as_deref(),
        Some(&b"kept"[..])
    );
}
