//! Fuzz target: any bytes as a volume image, opened by a process alone with it (a working header
//! of the target's boot, 7, joined with its locks set up afresh; any other rebuilt from the
//! superblocks), then a full scan, a verification, and a few writes. Must never panic, hang or
//! misbehave; errors are fine. Seeds: `cargo run --example seeds -- corpus/open_scan`; run with
//! `cargo +nightly fuzz run open_scan corpus/open_scan -- -max_len=163840` from
//! crates/iris-store/fuzz.
#![no_main]

use std::sync::Arc;

use iris_media::SimMedia;
use iris_store::{Key, OpenOptions, Store};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let sim = Arc::new(SimMedia::from_image(data));
    let opts = OpenOptions {
        boot_id: Some(7),
        commit_interval: None,
    };
    let Ok(store) = Store::open_alone_on(Box::new(sim), &opts) else {
        return;
    };
    let _ = store.range(Key::MIN, Key::MAX, 100_000);
    let _ = store.verify();
    let _ = store.put(Key::new(1, 1), b"fuzz");
    let _ = store.delete(Key::new(1, 2));
    let _ = store.commit();
});
