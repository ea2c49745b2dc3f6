//! Model-based property test: random sequences of put/get/delete/scan/batch/commit/snapshot/
//! reopen (same boot, as after a killed process) and power loss (reboot), checked step by step
//! against a `BTreeMap`.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use iris_media::SimMedia;
use iris_store::{Key, Op, Store};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Step {
    Put(u16, u16),
    Get(u16),
    Delete(u16),
    Scan(u16, u16, u8),
    Batch(Vec<(u16, Option<u16>)>),
    Commit,
    Snapshot,
    ReadSnapshot(u16),
    ReopenSameBoot,
    PowerLoss(bool),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        30 => (0u16..200, 0u16..=4096).prop_map(|(k, l)| Step::Put(k, l)),
        10 => (0u16..200).prop_map(Step::Get),
        12 => (0u16..200).prop_map(Step::Delete),
        5 => (0u16..200, 0u16..200, 0u8..50).prop_map(|(a, b, n)| Step::Scan(a, b, n)),
        6 => prop::collection::vec((0u16..200, prop::option::of(0u16..=4096)), 1..10).prop_map(Step::Batch),
        6 => Just(Step::Commit),
        1 => Just(Step::Snapshot),
        2 => (0u16..200).prop_map(Step::ReadSnapshot),
        2 => Just(Step::ReopenSameBoot),
        2 => any::<bool>().prop_map(Step::PowerLoss),
    ]
}

fn key(i: u16) -> Key {
    Key::new(u64::from(i % 3), u64::from(i))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, .. ProptestConfig::default() })]

    #[test]
    fn store_matches_btreemap(steps in prop::collection::vec(step(), 1..200), bs_pick in 0u8..2, buffer_pick in 0u8..3) {
        let bs: u32 = if bs_pick == 0 { 512 } else { 4096 };
        // Both shapes on the same code: a B+-tree, a Bε-tree with tiny buffers (flushes on
        // nearly every insert), and one with buffers of a quarter block.
        let buffer = [0, 64, bs / 4][buffer_pick as usize];
        let (mut sim, mut s): (Arc<SimMedia>, Store) = sim_store_buffered(8 << 20, bs, buffer);
        let mut model: BTreeMap<Key, Vec<u8>> = BTreeMap::new();
        let mut committed = model.clone();
        let mut snap: Option<BTreeMap<Key, Vec<u8>>> = None;
        let mut boot_id = 1u128;
        let mut version = 0u64;
        let clamp = |l: u16| (l as usize).min(bs as usize);
        for st in steps {
            version += 1;
            match st {
                Step::Put(i, l) => {
                    let v = value(u64::from(i), version, clamp(l));
                    s.put(key(i), &v).expect("put");
                    model.insert(key(i), v);
                }
                Step::Get(i) => {
                    let got = s.get_with(key(i), |b| b.to_vec()).expect("get");
                    prop_assert_eq!(got.as_ref(), model.get(&key(i)));
                }
                Step::Delete(i) => {
                    prop_assert_eq!(s.delete(key(i)).expect("delete"), model.remove(&key(i)).is_some());
                }
                Step::Scan(a, b, n) => {
                    let (lo, hi) = (key(a).min(key(b)), key(a).max(key(b)));
                    let got = s.range(lo, hi, n as usize).expect("range");
                    let want: Vec<_> = model.range(lo..hi).take(n as usize).map(|(k, v)| (*k, v.clone())).collect();
                    prop_assert_eq!(got, want);
                }
                Step::Batch(ops) => {
                    let owned: Vec<(Key, Option<Vec<u8>>)> = ops
                        .iter()
                        .enumerate()
                        .map(|(j, (i, l))| (key(*i), l.map(|l| value(u64::from(*i), version * 64 + j as u64, clamp(l)))))
                        .collect();
                    let batch: Vec<Op> = owned
                        .iter()
                        .map(|(k, v)| match v { Some(v) => Op::Put(*k, v), None => Op::Delete(*k) })
                        .collect();
                    s.apply(&batch).expect("batch");
                    for (k, v) in owned {
                        match v { Some(v) => { model.insert(k, v); } None => { model.remove(&k); } }
                    }
                }
                Step::Commit => {
                    s.commit().expect("commit");
                    committed = model.clone();
                }
                Step::Snapshot => {
                    let _ = s.snapshot_delete("p");
                    s.snapshot_create("p").expect("snapshot");
                    committed = model.clone();
                    snap = Some(model.clone());
                }
                Step::ReadSnapshot(i) => {
                    if let Some(m) = &snap {
                        let got = s.snapshot("p").expect("view").get(key(i)).expect("get");
                        prop_assert_eq!(got.as_ref(), m.get(&key(i)));
                    }
                }
                Step::ReopenSameBoot => {
                    // A killed process: no drop, no commit. The next opener continues.
                    std::mem::forget(s);
                    s = Store::open_on(Box::new(sim.clone()), &boot(boot_id)).expect("reopen");
                }
                Step::PowerLoss(keep_some) => {
                    let mut rng = rand::rngs::mock::StepRng::new(version, 0x9e37_79b9_7f4a_7c15);
                    sim.lose_power();
                    let image = sim.crash_image(&mut rng, if keep_some { 0.5 } else { 0.0 });
                    drop(s);
                    boot_id += 1;
                    let (sim2, s2) = reopen_image(&image, boot_id);
                    sim = sim2;
                    s = s2.expect("reopen after power loss");
                    model = committed.clone();
                }
            }
        }
        let got: BTreeMap<_, _> = dump(&s).into_iter().collect();
        prop_assert_eq!(&got, &model);
        prop_assert_eq!(s.verify().expect("verify").leaked_blocks, 0);
        if buffer == 0 {
            prop_assert_eq!(s.shape().expect("shape").messages, 0);
        }
    }
}
