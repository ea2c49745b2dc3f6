//! Fuzz target: any bytes as a volume image, opened by a process alone with it as the first
//! after a reboot (the working header rebuilt from the superblocks, nothing trusted), then a full scan, a verification, and a few writes. Must never panic, hang or
//! misbehave; errors are fine. Seeds: `cargo run --example seeds -- corpus/open_scan`; run with
//! `cargo +nightly fuzz run open_scan corpus/open_scan -- -max_len=163840` from
//! crates/iris-store/fuzz.
#![no_main]

use std::sync::Arc;

use iris_media::SimMedia;
use iris_store::{Key, OpenOptions, Store};
use libfuzzer_sys::fuzz_target;

/// A boot id no image can name (a hash of the image itself): every open is the first after a
/// reboot, which trusts nothing of the working header. (A header of the running boot is the
/// live shared state of cooperating processes, trusted as such; forging one is out of scope.)
fn boot_of(data: &[u8]) -> u128 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    u128::from(h.finish()) << 64 | 0x1715
}

fuzz_target!(|data: &[u8]| {
    let sim = Arc::new(SimMedia::from_image(data));
    let opts = OpenOptions {
        boot_id: Some(boot_of(data)),
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
