//! Writes seed images for the `open_scan` target into the directory named by the first
//! argument: small valid volumes (several block sizes, with inline and out-of-line values,
//! deletions, commits, a snapshot), so the fuzzer starts from images that open.
//! Run with `cargo run --example seeds -- corpus/open_scan` from crates/iris-store/fuzz.

use std::sync::Arc;

use iris_media::SimMedia;
use iris_store::{CreateOptions, Key, OpenOptions, Store};

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
        store.commit()?;
        drop(store);
        let path = format!("{dir}/seed-{bs}-{keys}");
        std::fs::write(&path, sim.working_image())?;
        println!("{path}: {len} bytes");
    }
    Ok(())
}
