//! Corrupt volumes: every single-byte flip of both superblocks, flips across every node, and
//! truncations. Opening (as after a reboot, so nothing is trusted) must give a clear error, or the
//! older superblock's state, or (for bytes no check covers) a volume whose full scan and
//! verification return errors instead of panicking. Never a panic.

mod common;

use std::collections::BTreeMap;

use common::*;
use iris_store::{Key, Store};

/// A committed volume image with two generations: `old` committed first, then `new`.
type Entries = Vec<(Key, Vec<u8>)>;

fn image() -> (Vec<u8>, Entries, Entries, u32) {
    image_buffered(0)
}

/// [`image`] of a Bε-tree whose internal nodes buffer up to `buffer` bytes.
fn image_buffered(buffer: u32) -> (Vec<u8>, Entries, Entries, u32) {
    let bs = 512u32;
    let (sim, s) = sim_store_buffered(1 << 20, bs, buffer);
    for i in 0..150u64 {
        let len = if i % 5 == 0 {
            512
        } else {
            (i as usize * 3) % 100
        };
        s.put(k(i), &value(i, 0, len)).expect("put");
    }
    s.commit().expect("commit");
    let old = dump(&s);
    for i in 0..40u64 {
        s.put(k(i * 3), &value(i, 1, 60)).expect("put");
    }
    s.commit().expect("commit");
    let new = dump(&s);
    assert_eq!(s.shape().expect("shape").messages > 0, buffer > 0);
    let mut rng = rand::rngs::mock::StepRng::new(0, 0);
    let img = sim.crash_image(&mut rng, 0.0);
    drop(s);
    (img, old, new, bs)
}

/// Open and read everything; returns the contents if every step succeeded.
fn try_all(img: &[u8]) -> Option<Entries> {
    let (_sim, s) = reopen_image(img, 99);
    let s: Store = s.ok()?;
    let all = s.range(Key::MIN, Key::MAX, usize::MAX).ok()?;
    s.verify().ok()?;
    // Writes on a possibly damaged tree must not panic either.
    let _ = s.put(k(1), b"after");
    let _ = s.delete(k(2));
    let _ = s.commit();
    Some(all)
}

#[test]
fn every_superblock_byte_flip_errs_or_falls_back() {
    let (img, old, new, bs) = image();
    assert_eq!(try_all(&img).as_ref(), Some(&new));
    for sb in 0..2usize {
        for i in 0..512usize {
            let mut bad = img.clone();
            bad[sb * bs as usize + i] ^= 0xff;
            if let Some(got) = try_all(&bad) {
                assert!(
                    got == new || got == old,
                    "superblock {sb} byte {i}: unexpected contents"
                );
            }
        }
    }
    // Both superblocks gone: a clear error.
    let mut bad = img.clone();
    bad[0] ^= 1;
    bad[bs as usize] ^= 1;
    let (_sim, r) = reopen_image(&bad, 99);
    let err = r.err().expect("no valid superblock");
    assert!(err.to_string().contains("no valid superblock"), "{err}");
}

#[test]
fn node_byte_flips_never_panic_and_are_caught_by_checksums() {
    node_byte_flips(image());
}

#[test]
fn bepsilon_node_byte_flips_never_panic_and_are_caught_by_checksums() {
    node_byte_flips(image_buffered(128));
}

fn node_byte_flips((img, _old, new, bs): (Vec<u8>, Entries, Entries, u32)) {
    let bs = bs as usize;
    let magics: [&[u8]; 2] = [b"IRL2", b"IRI2"];
    let nodes: Vec<usize> = (0..img.len() / bs)
        .filter(|b| magics.contains(&&img[b * bs..b * bs + 4]))
        .collect();
    assert!(
        nodes.len() > 10,
        "expected a multi-node tree, found {}",
        nodes.len()
    );
    let mut errors = 0;
    let mut trials = 0;
    for &b in &nodes {
        for i in (0..bs).step_by(7).chain(0..40) {
            let mut bad = img.clone();
            bad[b * bs + i] ^= 0x5a;
            trials += 1;
            match try_all(&bad) {
                None => errors += 1,
                // A flip in a node of neither committed tree (garbage) changes nothing.
                Some(got) => assert_eq!(got, new, "node {b} byte {i}: silent corruption"),
            }
        }
    }
    assert!(
        errors > trials / 4,
        "only {errors} of {trials} flips detected"
    );
}

#[test]
fn truncated_volumes_give_errors() {
    let (img, _old, new, _bs) = image();
    for len in [
        0usize,
        100,
        511,
        512,
        1000,
        4096,
        20_000,
        img.len() / 2,
        img.len() - 512,
    ] {
        let _ = try_all(&img[..len]);
    }
    assert_eq!(try_all(&img).as_ref(), Some(&new));
    let (_sim, r) = reopen_image(&img[..img.len() / 2], 99);
    assert!(r.is_err(), "a volume half its recorded size must not open");
    let keys: BTreeMap<_, _> = new.into_iter().collect();
    assert!(!keys.is_empty());
}

/// `img` with both superblocks saying format `version` (checksums redone).
fn as_format(img: &[u8], bs: usize, version: u32) -> Vec<u8> {
    let mut old = img.to_vec();
    for sb in 0..2 {
        let s = &mut old[sb * bs..sb * bs + 512];
        s[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc32c::crc32c(&s[..508]);
        s[508..512].copy_from_slice(&crc.to_le_bytes());
    }
    old
}

#[test]
fn a_volume_of_an_older_or_newer_format_is_refused_with_a_message_that_says_why() {
    let (img, _old, _new, bs) = image();
    for version in [
        5,
        iris_store::OLDEST_READ_VERSION - 1,
        iris_store::FORMAT_VERSION + 1,
    ] {
        let (_sim, r) = reopen_image(&as_format(&img, bs as usize, version), 7);
        let msg = match r {
            Ok(_) => panic!("format {version} opened"),
            Err(e) => e.to_string(),
        };
        assert!(
            msg.contains(&format!("format version {version}"))
                && msg.contains("mkfs")
                && !msg.contains("corrupt"),
            "{msg}"
        );
    }
    // One slot of another format (an upgrade half made by another build): refused too, not
    // rolled back to the other slot.
    let mut one = img.clone();
    let newer = as_format(&img, bs as usize, iris_store::FORMAT_VERSION + 1);
    one[..512].copy_from_slice(&newer[..512]);
    let (_sim, r) = reopen_image(&one, 7);
    assert!(
        matches!(r, Err(iris_store::StoreError::Format { .. })),
        "one slot of another format opened"
    );
    // The same image at its own version (a volume without an intent log) opens: only the
    // version was refused. So does a volume of the first version with a log (no data records
    // in it), which the next commit makes of this version.
    let (_sim, r) = reopen_image(&as_format(&img, bs as usize, iris_store::NO_LOG_VERSION), 7);
    assert!(r.is_ok());
    let (sim, r) = reopen_image(&as_format(&img, bs as usize, iris_store::LOG_VERSION), 7);
    let s = r.expect("a volume of the first version with a log");
    assert!(
        s.stats().expect("stats").log_capacity > 0,
        "its log was not read"
    );
    s.put(iris_store::Key::new(9, 9), b"x").expect("put");
    s.commit().expect("commit");
    drop(s);
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(5);
    let after = sim.crash_image(&mut rng, 0.0);
    let newest = (0..2)
        .map(|slot| &after[slot * bs as usize..slot * bs as usize + 512])
        .map(|sb| {
            (
                u64::from_le_bytes(sb[16..24].try_into().expect("8 bytes")),
                u32::from_le_bytes(sb[8..12].try_into().expect("4 bytes")),
            )
        })
        .max()
        .expect("two slots");
    assert_eq!(newest.1, iris_store::FORMAT_VERSION, "the commit's version");
}
