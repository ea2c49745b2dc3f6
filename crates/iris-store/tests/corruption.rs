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

/// `img` as format version 5 wrote it: node magics "IRLF"/"IRIN" with checksums over the whole
/// block, superblocks saying version 5.
fn as_format_5(img: &[u8], bs: usize) -> Vec<u8> {
    let mut old = img.to_vec();
    for b in 0..old.len() / bs {
        let node = &mut old[b * bs..(b + 1) * bs];
        let magic: &[u8; 4] = match &node[..4] {
            b"IRL2" => b"IRLF",
            b"IRI2" => b"IRIN",
            _ => continue,
        };
        node[..4].copy_from_slice(magic);
        node[16..20].fill(0);
        let crc = crc32c::crc32c(node);
        node[16..20].copy_from_slice(&crc.to_le_bytes());
    }
    for sb in 0..2 {
        let s = &mut old[sb * bs..sb * bs + 512];
        s[8..12].copy_from_slice(&5u32.to_le_bytes());
        let crc = crc32c::crc32c(&s[..508]);
        s[508..512].copy_from_slice(&crc.to_le_bytes());
    }
    old
}

#[test]
fn a_format_5_volume_is_read_checked_and_written() {
    let (img, _old, new, bs) = image();
    let v5 = as_format_5(&img, bs as usize);
    assert_ne!(v5, img, "the image has nodes to convert");
    // Opened as after a reboot: every committed node's checksum is checked, the old way (the
    // new way, without the free gap, would not match).
    let (sim, s) = reopen_image(&v5, 7);
    let s = s.expect("open a format 5 volume");
    assert_eq!(s.range(Key::MIN, Key::MAX, usize::MAX).expect("scan"), new);
    s.verify().expect("verify");
    // Writes go on in format 6 (copies of old nodes included) and survive another reboot.
    s.put(k(3), b"written in format 6").expect("put");
    s.commit().expect("commit");
    let mut want: BTreeMap<Key, Vec<u8>> = new.into_iter().collect();
    want.insert(k(3), b"written in format 6".to_vec());
    let mut rng = rand::rngs::mock::StepRng::new(0, 0);
    let after = sim.crash_image(&mut rng, 0.0);
    drop(s);
    assert_eq!(
        &after[bs as usize + 8..bs as usize + 12],
        &6u32.to_le_bytes()
    );
    let (_sim, s) = reopen_image(&after, 8);
    let s = s.expect("reopen after the commit");
    let got: BTreeMap<Key, Vec<u8>> = s
        .range(Key::MIN, Key::MAX, usize::MAX)
        .expect("scan")
        .into_iter()
        .collect();
    assert_eq!(got, want);
    s.verify().expect("verify");
}
