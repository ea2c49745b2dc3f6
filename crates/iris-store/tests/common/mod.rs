//! Helpers shared by the store's integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use iris_media::SimMedia;
use iris_store::{CreateOptions, Key, OpenOptions, Store};

/// A store on simulated media of `bytes`, block size `bs`, boot 1.
pub fn sim_store(bytes: u64, bs: u32) -> (Arc<SimMedia>, Store) {
    sim_store_buffered(bytes, bs, 0)
}

/// Like [`sim_store`], a Bε-tree whose internal nodes buffer up to `buffer` bytes of messages.
pub fn sim_store_buffered(bytes: u64, bs: u32, buffer: u32) -> (Arc<SimMedia>, Store) {
    let sim = Arc::new(SimMedia::new(bytes));
    let opts = CreateOptions {
        block_size: bs,
        size_limit_bytes: bytes,
        initial_bytes: bytes,
        inline_max: None,
        buffer_bytes: buffer,
    };
    let store = Store::create_on(Box::new(sim.clone()), &opts, &boot(1)).expect("create");
    (sim, store)
}

/// Open options for boot `n`.
pub fn boot(n: u128) -> OpenOptions {
    OpenOptions {
        boot_id: Some(n),
        commit_interval: None,
    }
}

/// Reopen an image (what stable media held) as after a reboot.
pub fn reopen_image(image: &[u8], boot_id: u128) -> (Arc<SimMedia>, iris_store::Result<Store>) {
    let sim = Arc::new(SimMedia::from_image(image));
    let store = Store::open_on(Box::new(sim.clone()), &boot(boot_id));
    (sim, store)
}

/// Key number `i`.
pub fn k(i: u64) -> Key {
    Key::new(i / 7, i)
}

/// Deterministic value bytes for (key, version), of `len` bytes.
pub fn value(i: u64, version: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Everything in the store, in order.
pub fn dump(store: &Store) -> Vec<(Key, Vec<u8>)> {
    store.range(Key::MIN, Key::MAX, usize::MAX).expect("range")
}
