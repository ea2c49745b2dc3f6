//! Replays one input of the `open_scan` target step by step, saying what each step returns:
//! `cargo run --example replay -- artifacts/open_scan/crash-...` from crates/iris-store/fuzz.

use std::sync::Arc;

use iris_media::SimMedia;
use iris_store::{Key, OpenOptions, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: replay FILE")?;
    let data = std::fs::read(path)?;
    let sim = Arc::new(SimMedia::from_image(&data));
    let opts = OpenOptions {
        boot_id: Some(7),
        commit_interval: None,
    };
    let store = match Store::open_alone_on(Box::new(sim), &opts) {
        Ok(s) => s,
        Err(e) => {
            println!("open: {e}");
            return Ok(());
        }
    };
    println!("open: ok");
    println!(
        "range: {:?}",
        store.range(Key::MIN, Key::MAX, 100_000).map(|r| r.len())
    );
    println!("verify: {:?}", store.verify());
    println!("put: {:?}", store.put(Key::new(1, 1), b"fuzz"));
    println!("delete: {:?}", store.delete(Key::new(1, 2)));
    println!("commit: {:?}", store.commit());
    Ok(())
}
