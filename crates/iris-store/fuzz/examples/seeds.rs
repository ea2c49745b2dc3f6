//! Writes seed images for the `open_scan` target into the directory named by the first
//! argument: small valid volumes (several block sizes, with inline and out-of-line values,
//! deletions, commits, a snapshot, and after the last commit records of the intent log: a
//! synced write's block and a data record), so the fuzzer starts from images that open (and
//! replay their log).
//! Run with `cargo run --example seeds -- corpus/open_scan` from crates/iris-store/fuzz.

use std::sync::Arc;

use iris_media::SimMedia;
use iris_store::{CreateOptions, Key, OpenOptions, Patch, Store, ThenPatch};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: seeds DIR")?;
    std::fs::create_dir_all(&dir)?;
    for (bs, blocks, keys) in [(512u32, 192u64, 40u64), (512, 256, 200), (1024, 160, 60)] {
        let len = u64::from(bs) * blocks;
        let sim = Arc::new(SimMedia::new(len));
        let create = CreateOptions {
            block_size: bs,
            size_limit_bytes: len,
            initial_bytes: len,
            ..CreateOptions::default()
        };
        // (Another boot than the target's 7: it then trusts nothing of the working header.)
        let open = OpenOptions {
            boot_id: Some(1),
            commit_interval: None,
        };
        let store = Store::create_on(Box::new(Arc::clone(&sim)), &create, &open)?;
        for i in 0..keys {
            store.put(Key::new(i % 3, i), &i.to_le_bytes())?;
        }
        store.commit()?;
        store.put_block(Key::new(9, 1), bs as usize, |out| out.fill(0x5a))?;
        store.snapshot_create("s")?;
        for i in (0..keys).step_by(3) {
            store.delete(Key::new(i % 3, i))?;
        }
        store.put(Key::new(9, 2), &[0u8; 16])?;
        store.commit()?;
        // Synced writes after the commit: a copy of (9, 1) named by a record, then a data
        // record of bytes written into it where it is (when the log has room for one).
        let synced = |v: u64| ThenPatch {
            key: Key::new(9, 2),
            unless_unchanged_since: None,
            patch: move |_: &[u8], _: bool, p: &mut Patch| p.set(0, v),
            sync_expected: true,
            only_if_unchanged_since: None,
        };
        store.put_block_then_patch(
            Key::new(9, 1),
            bs as usize,
            |out| out.fill(0x6b),
            Some(synced(1)),
        )?;
        let data = store.write_in_place_logged(Key::new(9, 1), 10, &[0x7c; 200], synced(2))?;
        let log = store.stats()?.log_records;
        drop(store);
        let path = format!("{dir}/seed-{bs}-{keys}");
        let image = sim.working_image();
        std::fs::write(&path, &image)?;
        // Opened as after a reboot, the image replays its log: the synced writes are there.
        let reopened = Store::open_on(
            Box::new(Arc::new(SimMedia::from_image(&image))),
            &OpenOptions {
                boot_id: Some(2),
                commit_interval: None,
            },
        )?;
        let mut value = vec![0u8; bs as usize];
        reopened.get(Key::new(9, 1), &mut value)?;
        let want = |i: usize| match i {
            10..210 if data.is_some() => 0x7c,
            _ => 0x6b,
        };
        if value.iter().enumerate().any(|(i, &b)| b != want(i)) {
            return Err(format!("{path}: the synced writes did not replay").into());
        }
        println!(
            "{path}: {len} bytes, {log} log slots, data record: {}",
            data.is_some()
        );
    }
    Ok(())
}
