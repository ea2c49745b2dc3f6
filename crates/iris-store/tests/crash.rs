//! Simulated power loss at many points: a random workload runs on simulated media that loses power
//! at a random persist; what stable media holds then (persisted bytes plus a random subset of the
//! unpersisted 8-byte words) is reopened as after a reboot. It must open, verify clean with no
//! leaked block, and hold exactly the last acknowledged commit, or the commit that was in flight.
//! Then a second power loss strikes while working on the recovered volume (recovery, growth and
//! commit paths again), and the same must hold.
//!
//! `IRIS_CRASH_POINTS` sets the number of crash points (default 2000; 100000 for a long run).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use iris_media::SimMedia;
use iris_store::{CreateOptions, Key, Op, Patch, Store, ThenPatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Model = BTreeMap<Key, Vec<u8>>;

/// Run random operations until power is lost (or `max_ops` ran). Returns (the durable state:
/// the last acknowledged commit and the synced puts acknowledged since, the states an
/// operation in flight when power was lost may have made durable).
fn workload(
    rng: &mut StdRng,
    s: &Store,
    model: &mut Model,
    bs: usize,
    max_ops: usize,
) -> (Model, Vec<Model>) {
    let mut committed = model.clone();
    let mut version = rng.gen::<u32>() as u64;
    for _ in 0..max_ops {
        version += 1;
        let key = k(rng.gen_range(0..300));
        let r = match rng.gen_range(0..100) {
            0..=49 => {
                let len = if rng.gen_bool(0.5) {
                    rng.gen_range(0..bs / 4)
                } else {
                    rng.gen_range(0..=bs)
                };
                let v = value(key.lo, version, len);
                let r = s.put(key, &v);
                if r.is_ok() {
                    model.insert(key, v);
                }
                r
            }
            50..=64 => {
                let r = s.delete(key);
                if r.is_ok() {
                    model.remove(&key);
                }
                r.map(|_| ())
            }
            65..=74 => {
                let n = rng.gen_range(1..8);
                let mut owned = Vec::new();
                for j in 0..n {
                    let key = k(rng.gen_range(0..300));
                    let del = rng.gen_bool(0.3);
                    owned.push((
                        key,
                        del,
                        value(key.lo, version * 16 + j, rng.gen_range(0..=bs)),
                    ));
                }
                let ops: Vec<Op> = owned
                    .iter()
                    .map(|(key, del, v)| {
                        if *del {
                            Op::Delete(*key)
                        } else {
                            Op::Put(*key, v)
                        }
                    })
                    .collect();
                let r = s.apply(&ops);
                if r.is_ok() {
                    for (key, del, v) in owned {
                        if del {
                            model.remove(&key);
                        } else {
                            model.insert(key, v);
                        }
                    }
                }
                r
            }
            75..=84 => {
                // A put a sync is expected after, then the sync, as a file's under fdatasync:
                // into the intent log when it may (its key's and its "inode"'s changes since
                // the last commit all logged), else committed.
                let key = k(rng.gen_range(0..300));
                let inode = Key::new(key.hi, 1 << 60);
                if !model.contains_key(&inode) {
                    let r = s.put(inode, &[0u8; 16]);
                    if r.is_ok() {
                        model.insert(inode, vec![0u8; 16]);
                    }
                    r
                } else {
                    let v = value(key.lo, version, rng.gen_range(bs / 4 + 1..=bs));
                    let commits = s.stats().expect("stats").commits;
                    let then = ThenPatch {
                        key: inode,
                        unless_unchanged_since: None,
                        patch: |_: &[u8], _: bool, p: &mut Patch| p.set(0, version),
                        sync_expected: true,
                        only_if_unchanged_since: None,
                    };
                    let r = s
                        .put_block_then_patch(
                            key,
                            v.len(),
                            |out| out.copy_from_slice(&v),
                            Some(then),
                        )
                        .and_then(|_| {
                            s.commit_through(s.written_gen(key).max(s.written_gen(inode)))
                        });
                    // Logged: the durable state gains exactly this put and its patch.
                    let mut logged = committed.clone();
                    logged.insert(key, v.clone());
                    if let Some(i) = logged.get_mut(&inode) {
                        i[..8].copy_from_slice(&version.to_le_bytes());
                    }
                    match r {
                        Ok(_) => {
                            model.insert(key, v);
                            if let Some(i) = model.get_mut(&inode) {
                                i[..8].copy_from_slice(&version.to_le_bytes());
                            }
                            committed = if s.stats().expect("stats").commits > commits {
                                model.clone()
                            } else {
                                logged
                            };
                            Ok(())
                        }
                        Err(iris_store::StoreError::NoSpace) => Ok(()),
                        Err(_) => {
                            let mut all = model.clone();
                            all.insert(key, v);
                            if let Some(i) = all.get_mut(&inode) {
                                i[..8].copy_from_slice(&version.to_le_bytes());
                            }
                            return (committed, vec![logged, all, model.clone()]);
                        }
                    }
                }
            }
            _ => match s.commit() {
                Ok(_) => {
                    committed = model.clone();
                    Ok(())
                }
                Err(_) => return (committed, vec![model.clone()]),
            },
        };
        if let Err(e) = r {
            // Out of space is a legal answer on a small volume; anything else ends the run
            // (power is gone: growth or a failed commit).
            if !matches!(e, iris_store::StoreError::NoSpace) {
                return (committed, vec![model.clone()]);
            }
        }
    }
    // Power never failed during the run: fail it now.
    (committed, Vec::new())
}

fn check(
    image: &[u8],
    boot: u128,
    committed: &Model,
    in_flight: &[Model],
    seed: u64,
) -> (Arc<SimMedia>, Store, Model) {
    let (sim, s) = reopen_image(image, boot);
    let s = s.unwrap_or_else(|e| panic!("seed {seed}: reopen failed: {e}"));
    let report = s
        .verify()
        .unwrap_or_else(|e| panic!("seed {seed}: verify failed: {e}"));
    assert_eq!(
        report.leaked_blocks, 0,
        "seed {seed}: leaked blocks after recovery"
    );
    let got: Model = dump(&s).into_iter().collect();
    let ok = &got == committed || in_flight.contains(&got);
    assert!(
        ok,
        "seed {seed}: recovered {} entries, committed had {}, in flight {:?}",
        got.len(),
        committed.len(),
        in_flight.iter().map(|m| m.len()).collect::<Vec<_>>()
    );
    (sim, s, got)
}

fn one_crash_point(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let bs: u32 = if seed.is_multiple_of(2) { 512 } else { 4096 };
    let size: u64 = if bs == 512 { 1 << 20 } else { 4 << 20 };
    let sim = Arc::new(SimMedia::new(size));
    // Start small so the volume grows during the run.
    sim.set_backed_len(size / 4);
    let opts = CreateOptions {
        block_size: bs,
        size_limit_bytes: size,
        initial_bytes: size / 4,
        inline_max: None,
        // A third of the points run on a Bε-tree (buffers of a quarter block).
        buffer_bytes: if seed % 3 == 2 { bs / 4 } else { 0 },
    };
    let s = Store::create_on(Box::new(sim.clone()), &opts, &boot(1)).expect("create");
    let mut model = Model::new();
    sim.crash_at_persist(rng.gen_range(0..40));
    let (committed, in_flight) = workload(&mut rng, &s, &mut model, bs as usize, 400);
    sim.lose_power();
    let keep = [0.0, 0.5, 1.0][rng.gen_range(0..3)];
    let image = sim.crash_image(&mut rng, keep);
    drop(s);

    // Every other point: power fails again during recovery (its replay of the intent log and
    // the commit that ends it), and recovery starts over from what that left.
    let image = if rng.gen_bool(0.5) {
        let sim = Arc::new(SimMedia::from_image(&image));
        sim.crash_at_persist(rng.gen_range(0..4));
        drop(Store::open_on(Box::new(sim.clone()), &boot(5)));
        sim.lose_power();
        sim.crash_image(&mut rng, keep)
    } else {
        image
    };

    // First reboot.
    let (sim2, s2, mut model2) = check(&image, 2, &committed, &in_flight, seed);
    // Second power loss while working on the recovered volume.
    sim2.crash_at_persist(rng.gen_range(0..20));
    let (committed2, in_flight2) = workload(&mut rng, &s2, &mut model2, bs as usize, 200);
    sim2.lose_power();
    let image2 = sim2.crash_image(&mut rng, keep);
    drop(s2);
    check(&image2, 3, &committed2, &in_flight2, seed);
}

#[test]
fn power_loss_at_many_points() {
    let points: u64 = std::env::var("IRIS_CRASH_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let base: u64 = std::env::var("IRIS_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    std::thread::scope(|scope| {
        let workers = 2u64;
        for w in 0..workers {
            scope.spawn(move || {
                let mut seed = base + w;
                while seed < base + points {
                    one_crash_point(seed);
                    seed += workers;
                }
            });
        }
    });
}

#[test]
fn recovery_wipes_a_torn_superblock_so_no_later_tear_completes_it() {
    // A superblock slot that holds no valid superblock after a power loss holds pieces of a
    // commit that never completed. Recovery wipes it, durably: otherwise a later torn write of
    // the same slot can complete those pieces into a valid superblock of a state never
    // acknowledged, over blocks since reused (the many-points test found a wrong state and a
    // corrupt node that way at seeds 2579 and 3666 of `IRIS_CRASH_SEED=777`, 60,000 points).
    let bs = 4096usize;
    for torn in [0usize, 1] {
        let (sim, s) = sim_store(4 << 20, bs as u32);
        let mut states = Vec::new();
        for round in 0..3u64 {
            s.put(k(round), &value(round, round, 100)).expect("put");
            s.commit().expect("commit");
            states.push(dump(&s));
        }
        drop(s);
        let mut image = sim.working_image();
        // Tear slot `torn`: one word of it from another write.
        let at = torn * bs + 64;
        image[at..at + 8].copy_from_slice(&0x5a5a_5a5a_5a5a_5a5au64.to_ne_bytes());
        let (sim2, s2) = reopen_image(&image, 2);
        let s2 = s2.expect("opens from the other slot");
        // The newest commit, or (its slot torn) the one before.
        assert!(
            states[1..].contains(&dump(&s2)),
            "slot {torn} torn: another state"
        );
        let durable = sim2.crash_image(&mut StdRng::seed_from_u64(1), 0.0);
        assert!(
            durable[torn * bs..torn * bs + 512].iter().all(|&b| b == 0),
            "slot {torn} still holds the torn superblock"
        );
        assert_eq!(s2.verify().expect("verify").leaked_blocks, 0);
    }
}
