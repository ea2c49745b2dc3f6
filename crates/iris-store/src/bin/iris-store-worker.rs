//! Drives a volume from a separate process, for the multi-process and kill -9 tests:
//!
//! - `writer VOLUME PREFIX COMMIT_EVERY`: put keys (PREFIX, 0..) forever, committing every
//!   COMMIT_EVERY puts and printing `acked N` once puts 0..=N are committed.
//! - `overwriter VOLUME PREFIX KEYS`: write KEYS whole-block keys (PREFIX, 0..KEYS), then
//!   overwrite all of them round after round (the in-place path of one writer partition),
//!   committing after each round and printing `acked R` (see [`block`] for the contents).
//! - `rewriter VOLUME PREFIX KEYS`: like `overwriter`, but each round writes each key twice:
//!   round 2R by copying it (the block is the last commit's), then round 2R + 1 as one 4 KiB
//!   write in place (`Store::write_in_place`, at the location the copy returned for every other
//!   key, found in the tree for the rest; copied when another process's commit came between);
//!   prints `acked R` and `fast N` (writes in place so far) after each round's commit.
//! - `patcher VOLUME PREFIX KEYS`: like `overwriter`, but each round rewrites every key in eight
//!   512-byte writes (in place when the store allows, every other one by
//!   `Store::overwrite_known`; else by copying the block; see [`chunk`]).
//! - `pairer VOLUME PREFIX KEYS`: the patcher's keys (KEYS even); every round writes the first
//!   half of each key (chunks 0-3) and the second half of each odd key as the patcher does,
//!   then, for each even key i, chunks 4-7 of i and chunks 0-3 of i + 1 as one write of a pair
//!   in place (`Store::write_pair_in_place`; else both copied: another process's commit
//!   between the halves and the pairs leaves the blocks the last commit's), commits, and prints
//!   `acked R` and `fast N` (pairs written in place so far).
//! - `grouper VOLUME PREFIX GROUPS`: GROUPS groups of eight (`$IRIS_GROUP`) whole-block keys,
//!   each key of a group in another region of the writer partitions (so in several of them);
//!   every round writes each group twice, as one atomic write of its eight blocks
//!   (`Store::overwrite_blocks`, which takes only the groups' partition locks, when it applies;
//!   else a batch), commits, and prints `acked R` (the round value of the second write) and
//!   `fast N` (overwrites so far that took the partition path).
//! - `preparer VOLUME PREFIX GROUPS`: GROUPS groups of 16 whole-block keys (laid out as the
//!   grouper's);
//!   every round writes each group in one transaction whose blocks were filled outside the
//!   lock (`Store::prepare_blocks`), commits, and prints `acked R`.
//! - `appender VOLUME PREFIX KEYS`: KEYS values of 2000 bytes, each with a size record (an
//!   8-byte value, as a file's inode holds its size); every round appends 16 bytes to each
//!   value and sets its size record in the same call (`Store::append_in_place`, when it
//!   applies; else the value and its record are put again, in one batch), commits every
//!   fourth round, and prints `acked R`. Byte j of value i is [`appended`]`(prefix, i, j)` whatever the length.
//! - `syncer VOLUME PREFIX KEYS`: writes number n = 0, 1, ... go to key (PREFIX, n % KEYS), a
//!   whole block of round n / KEYS (see [`block`]), each setting a count record (8 bytes at
//!   [`size_key`]`(PREFIX, 0)`, as a file's inode holds its size) to n + 1 in the same call and
//!   expecting a sync (`ThenPatch::sync_expected`: the intent log takes it), then syncing as a
//!   file's sync does (`Store::commit_through` the keys' written generation), then printing
//!   `acked n`.
//! - `small-syncer VOLUME PREFIX KEYS`: as `syncer`, but of every eight rounds of a key only
//!   the first writes its whole block; the other seven each write one 512-byte chunk of it
//!   (chunk r % 8 of round r: [`chunk`]`(PREFIX, i, r, r % 8)` at byte 512 * (r % 8)), through a data record of the intent log
//!   when the store takes one (`Store::write_in_place_logged`), else by copying the block.
//! - `open VOLUME PREFIX N`: open the volume (recovering it, if the header is not of this
//!   boot: `$IRIS_BOOT_ID` names another than the kernel's), print `opened` and exit.
//! - `fill VOLUME PREFIX COUNT OTHER`: put COUNT keys of PREFIX without committing, print `done`,
//!   wait for a line on stdin, then count the keys of prefix OTHER it sees and print `saw N`.

use std::io::{BufRead, Write};
use std::path::Path;

use iris_store::{Key, Op, OpenOptions, Patch, Store, ThenPatch};

/// Keys in one group of the grouper: `$IRIS_GROUP`, else eight.
fn group_size() -> u64 {
    std::env::var("IRIS_GROUP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
}

/// Keys of one region of the store's writer partitions (`header::REGION_BITS`): keys of one
/// high word in different regions take different partition locks.
const REGION_KEYS: u64 = 1 << 13;

/// Key `j` of group `g` of the grouper: a region of the key space per member.
fn group_key(prefix: u64, g: u64, j: u64) -> Key {
    Key::new(prefix, j * REGION_KEYS + g)
}

/// Write round `r` of group `g` atomically; true if it took the partition path.
fn write_group(store: &Store, prefix: u64, g: u64, r: u64) -> Result<bool, String> {
    let keys: Vec<Key> = (0..group_size()).map(|j| group_key(prefix, g, j)).collect();
    let none = None::<iris_store::NoPatch>;
    let done = store
        .overwrite_blocks(
            &keys,
            |_, len| len == 4096,
            |j, _old, out| out.copy_from_slice(&block(prefix, keys[j].lo, r)),
            |_, _| {},
            none,
        )
        .map_err(|e| e.to_string())?;
    if done.is_some() {
        return Ok(true);
    }
    let vals: Vec<Vec<u8>> = keys.iter().map(|k| block(prefix, k.lo, r)).collect();
    let ops: Vec<Op> = keys
        .iter()
        .zip(&vals)
        .map(|(k, v)| Op::Put(*k, v))
        .collect();
    store.apply(&ops).map_err(|e| e.to_string())?;
    Ok(false)
}

/// Keys in one group of the preparer.
const PREPARED_GROUP: u64 = 16;

/// Write round `r` of the preparer's group `g` (keys as the grouper's, one transaction), its
/// blocks filled outside the lock when the store can (`Store::prepare_blocks`).
fn write_prepared(store: &Store, prefix: u64, g: u64, r: u64) -> Result<(), String> {
    let key = |j: u64| group_key(prefix, g, j);
    let prepared = store
        .prepare_blocks(PREPARED_GROUP as usize, |j, out| {
            out.copy_from_slice(&block(prefix, key(j as u64).lo, r))
        })
        .map_err(|e| e.to_string())?;
    store
        .transact(|tx| {
            for j in 0..PREPARED_GROUP {
                let put = match &prepared {
                    Some(p) if (j as usize) < p.len() => tx.put_prepared(key(j), p, j as usize)?,
                    _ => None,
                };
                if put.is_none() {
                    tx.put(key(j), &block(prefix, key(j).lo, r))?;
                }
            }
            Ok(())
        })
        .map_err(|e| e.to_string())
}

fn value(prefix: u64, i: u64) -> Vec<u8> {
    let len = 100 + (i as usize * 131) % 3996;
    (0..len)
        .map(|j| (prefix as usize * 7 + i as usize + j) as u8)
        .collect()
}

/// Round `r` of key `i` in the overwriter: the round in the first 8 bytes, then one byte
/// derived from (prefix, i, r) repeated, so a torn or foreign block is recognisable.
fn block(prefix: u64, i: u64, r: u64) -> Vec<u8> {
    let mut b = vec![(prefix * 31 + i * 7 + r) as u8 | 1; 4096];
    b[..8].copy_from_slice(&r.to_le_bytes());
    b
}

/// Round `r` of 512-byte chunk `c` of key `i` in the patcher: the round in the first 8 bytes,
/// then one byte derived from (prefix, i, r, c) repeated.
fn chunk(prefix: u64, i: u64, r: u64, c: u64) -> Vec<u8> {
    let mut b = vec![(prefix * 31 + i * 7 + r * 3 + c) as u8 | 1; 512];
    b[..8].copy_from_slice(&r.to_le_bytes());
    b
}

/// A synced worker's count record of `prefix`, put at 0 and committed.
fn counted(store: &Store, prefix: u64) -> Result<Key, String> {
    let count = size_key(prefix, 0);
    store
        .put(count, &0u64.to_le_bytes())
        .map_err(|e| e.to_string())?;
    store.commit().map_err(|e| e.to_string())?;
    Ok(count)
}

/// Byte `j` of the appender's value `i`.
fn appended(prefix: u64, i: u64, j: u64) -> u8 {
    (prefix * 13 + i * 3 + j * 7) as u8
}

/// The appender's size record of value `i`.
fn size_key(prefix: u64, i: u64) -> Key {
    Key::new(prefix, (1 << 40) | i)
}

/// Put value `i` of the appender back at its first 2000 bytes, with its size record.
fn reset_appended(store: &Store, prefix: u64, i: u64) -> Result<(), String> {
    let v: Vec<u8> = (0..2000).map(|j| appended(prefix, i, j)).collect();
    let size = 2000u64.to_le_bytes();
    store
        .apply(&[
            Op::Put(Key::new(prefix, i), &v),
            Op::Put(size_key(prefix, i), &size),
        ])
        .map_err(|e| e.to_string())
}

/// Where the tree says `k`'s out-of-line value is, with the change stamp read before the
/// lookup (`None` when absent or inline).
fn known_location(store: &Store, k: Key) -> Result<Option<iris_store::Known>, String> {
    store
        .read(|view| {
            let stamp = view.change_stamp(k);
            Ok(match view.get_located(k)? {
                Some(iris_store::Located::Block(at)) => Some(iris_store::Known { stamp, at }),
                _ => None,
            })
        })
        .map_err(|e| e.to_string())
}

/// Bytes `data` at byte `at` of the (4 KiB) value of `k`: in place when the store allows, else
/// by copying the block.
fn write_or_copy(store: &Store, k: Key, at: usize, data: &[u8]) -> Result<(), String> {
    // Every other chunk at the location the tree gives, by the leanest way
    // (`Store::overwrite_known`), when it applies.
    if (at / 512) % 2 == 1 {
        if let Some(known) = known_location(store, k)? {
            if store
                .overwrite_known(k, at, data, known, (k, known.stamp))
                .map_err(|e| e.to_string())?
            {
                return Ok(());
            }
        }
    }
    let none = None::<iris_store::NoPatch>;
    let done = store
        .write_in_place(k, at, data, none, None)
        .map_err(|e| e.to_string())?;
    if done.is_none() {
        store
            .put_sized(
                k,
                |old| old.unwrap_or(4096),
                |old, out| {
                    if let Some(o) = old {
                        out.copy_from_slice(o);
                    }
                    out[at..at + data.len()].copy_from_slice(data);
                },
            )
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("iris-store-worker: {e}");
        std::process::exit(1);
    }
}

/// Print `line` to the test that runs this worker, at once.
fn say(out: &mut impl Write, line: &str) -> Result<(), String> {
    writeln!(out, "{line}").map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())
}

fn arg(args: &[String], i: usize) -> Result<&str, String> {
    args.get(i)
        .map(String::as_str)
        .ok_or_else(|| "missing argument".to_string())
}

fn num(args: &[String], i: usize) -> Result<u64, String> {
    arg(args, i)?
        .parse()
        .map_err(|e| format!("argument {i}: {e}"))
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let mode = arg(&args, 1)?;
    // `$IRIS_BOOT_ID`: open as in that boot (another one than the header's: as after a reboot).
    let opts = OpenOptions {
        boot_id: std::env::var("IRIS_BOOT_ID")
            .ok()
            .and_then(|v| v.parse().ok()),
        ..OpenOptions::default()
    };
    let store = Store::open(Path::new(arg(&args, 2)?), &opts).map_err(|e| e.to_string())?;
    let prefix = num(&args, 3)?;
    let mut out = std::io::stdout();
    match mode {
        "writer" => {
            let every = num(&args, 4)?.max(1);
            let mut i = 0u64;
            loop {
                store
                    .put(Key::new(prefix, i), &value(prefix, i))
                    .map_err(|e| e.to_string())?;
                if (i + 1).is_multiple_of(every) {
                    store.commit().map_err(|e| e.to_string())?;
                    say(&mut out, &format!("acked {i}"))?;
                }
                i += 1;
            }
        }
        "overwriter" => {
            let keys = num(&args, 4)?;
            let mut r = 0u64;
            loop {
                for i in 0..keys {
                    let v = block(prefix, i, r);
                    store
                        .put_block(Key::new(prefix, i), v.len(), |out| out.copy_from_slice(&v))
                        .map_err(|e| e.to_string())?;
                }
                store.commit().map_err(|e| e.to_string())?;
                say(&mut out, &format!("acked {r}"))?;
                r += 1;
            }
        }
        "rewriter" => {
            let keys = num(&args, 4)?;
            let (mut r, mut in_place) = (0u64, 0u64);
            loop {
                for i in 0..keys {
                    let k = Key::new(prefix, i);
                    let v = block(prefix, i, 2 * r);
                    store
                        .put_block(k, v.len(), |out| out.copy_from_slice(&v))
                        .map_err(|e| e.to_string())?;
                    let known = if i % 2 == 0 {
                        known_location(&store, k)?
                    } else {
                        None
                    };
                    let w = block(prefix, i, 2 * r + 1);
                    // Not in place when another process's commit made the block the last
                    // commit's since the put, or when this call found a killed writer's lock
                    // and repaired instead: then the block is copied, as a caller would.
                    let done = store
                        .write_in_place(k, 0, &w, None::<iris_store::NoPatch>, known)
                        .map_err(|e| e.to_string())?;
                    if done.is_some() {
                        in_place += 1;
                    } else {
                        store
                            .put_block(k, w.len(), |out| out.copy_from_slice(&w))
                            .map_err(|e| e.to_string())?;
                    }
                }
                store.commit().map_err(|e| e.to_string())?;
                say(&mut out, &format!("acked {r}\nfast {in_place}"))?;
                r += 1;
            }
        }
        "patcher" => {
            let keys = num(&args, 4)?;
            for i in 0..keys {
                let mut v = Vec::new();
                for c in 0..8 {
                    v.extend(chunk(prefix, i, 0, c));
                }
                store
                    .put_block(Key::new(prefix, i), v.len(), |out| out.copy_from_slice(&v))
                    .map_err(|e| e.to_string())?;
            }
            store.commit().map_err(|e| e.to_string())?;
            say(&mut out, "acked 0")?;
            let mut r = 1u64;
            loop {
                for i in 0..keys {
                    for c in 0..8u64 {
                        let data = chunk(prefix, i, r, c);
                        write_or_copy(&store, Key::new(prefix, i), (c * 512) as usize, &data)?;
                    }
                }
                store.commit().map_err(|e| e.to_string())?;
                say(&mut out, &format!("acked {r}"))?;
                r += 1;
            }
        }
        "pairer" => {
            let keys = num(&args, 4)? & !1;
            let piece = |i: u64, r: u64, chunks: std::ops::Range<u64>| -> Vec<u8> {
                chunks.flat_map(|c| chunk(prefix, i, r, c)).collect()
            };
            for i in 0..keys {
                let v = piece(i, 0, 0..8);
                store
                    .put_block(Key::new(prefix, i), v.len(), |out| out.copy_from_slice(&v))
                    .map_err(|e| e.to_string())?;
            }
            store.commit().map_err(|e| e.to_string())?;
            say(&mut out, "acked 0")?;
            let write = |i: u64, at: usize, data: &[u8]| {
                write_or_copy(&store, Key::new(prefix, i), at, data)
            };
            let (mut r, mut fast) = (1u64, 0u64);
            loop {
                // Each block copied once (the last commit's), so the pairs can go in place.
                for i in 0..keys {
                    if i % 2 == 0 {
                        write(i, 0, &piece(i, r, 0..4))?;
                    } else {
                        write(i, 2048, &piece(i, r, 4..8))?;
                    }
                }
                for i in (0..keys).step_by(2) {
                    let (tail, head) = (piece(i, r, 4..8), piece(i + 1, r, 0..4));
                    let none = None::<iris_store::NoPatch>;
                    let done = store
                        .write_pair_in_place(
                            (Key::new(prefix, i), 2048, &tail, None),
                            (Key::new(prefix, i + 1), &head, None),
                            |_, _| {},
                            none,
                        )
                        .map_err(|e| e.to_string())?;
                    if done.is_some() {
                        fast += 1;
                    } else {
                        write(i, 2048, &tail)?;
                        write(i + 1, 0, &head)?;
                    }
                }
                store.commit().map_err(|e| e.to_string())?;
                say(&mut out, &format!("acked {r}\nfast {fast}"))?;
                r += 1;
            }
        }
        "preparer" => {
            let groups = num(&args, 4)?;
            let mut r = 0u64;
            loop {
                for g in 0..groups {
                    write_prepared(&store, prefix, g, r)?;
                }
                store.commit().map_err(|e| e.to_string())?;
                say(&mut out, &format!("acked {r}"))?;
                r += 1;
            }
        }
        "grouper" => {
            let groups = num(&args, 4)?;
            let (mut r, mut fast) = (0u64, 0u64);
            loop {
                for pass in 0..2 {
                    for g in 0..groups {
                        fast += u64::from(write_group(&store, prefix, g, 2 * r + pass)?);
                    }
                }
                store.commit().map_err(|e| e.to_string())?;
                say(&mut out, &format!("acked {}\nfast {fast}", 2 * r + 1))?;
                r += 1;
            }
        }
        "appender" => {
            let keys = num(&args, 4)?;
            let mut lens = vec![2000u64; keys as usize];
            for i in 0..keys {
                reset_appended(&store, prefix, i)?;
            }
            store.commit().map_err(|e| e.to_string())?;
            say(&mut out, "acked 0")?;
            for r in 1.. {
                for i in 0..keys {
                    let len = lens[i as usize];
                    let data: Vec<u8> = (len..len + 16).map(|j| appended(prefix, i, j)).collect();
                    let then = Some(ThenPatch {
                        key: size_key(prefix, i),
                        unless_unchanged_since: None,
                        patch: |_: &[u8], _: bool, p: &mut Patch| p.set(0, len + 16),
                        sync_expected: false,
                        only_if_unchanged_since: None,
                    });
                    let done = store
                        .append_in_place(Key::new(prefix, i), len as usize, &data, then)
                        .map_err(|e| e.to_string())?;
                    lens[i as usize] = if done.is_some() {
                        len + 16
                    } else {
                        reset_appended(&store, prefix, i)?;
                        2000
                    };
                }
                // Not every round: a commit makes the values part of it, and the next append
                // to each puts it back instead.
                if r % 4 == 0 {
                    store.commit().map_err(|e| e.to_string())?;
                    say(&mut out, &format!("acked {r}"))?;
                }
            }
            Ok(())
        }
        "syncer" => {
            let keys = num(&args, 4)?.max(1);
            let count = counted(&store, prefix)?;
            for n in 0u64.. {
                let key = Key::new(prefix, n % keys);
                let v = block(prefix, n % keys, n / keys);
                let then = Some(ThenPatch {
                    key: count,
                    unless_unchanged_since: None,
                    patch: |_: &[u8], _: bool, p: &mut Patch| p.set(0, n + 1),
                    sync_expected: true,
                    only_if_unchanged_since: None,
                });
                store
                    .put_block_then_patch(key, v.len(), |out| out.copy_from_slice(&v), then)
                    .map_err(|e| e.to_string())?;
                let gen = store.written_gen(key).max(store.written_gen(count));
                store.commit_through(gen).map_err(|e| e.to_string())?;
                say(&mut out, &format!("acked {n}"))?;
            }
            Ok(())
        }
        "small-syncer" => {
            let keys = num(&args, 4)?.max(1);
            let count = counted(&store, prefix)?;
            let mut logged = 0u64;
            for n in 0u64.. {
                let (i, r) = (n % keys, n / keys);
                let key = Key::new(prefix, i);
                let then = || ThenPatch {
                    key: count,
                    unless_unchanged_since: None,
                    patch: move |_: &[u8], _: bool, p: &mut Patch| p.set(0, n + 1),
                    sync_expected: true,
                    only_if_unchanged_since: None,
                };
                if r % 8 == 0 {
                    let v = block(prefix, i, r);
                    store
                        .put_block_then_patch(
                            key,
                            v.len(),
                            |out| out.copy_from_slice(&v),
                            Some(then()),
                        )
                        .map_err(|e| e.to_string())?;
                } else {
                    let c = r % 8;
                    let at = (c * 512) as usize;
                    let bytes = chunk(prefix, i, r, c);
                    let placed = store
                        .write_in_place_logged(key, at, &bytes, then())
                        .map_err(|e| e.to_string())?;
                    if placed.is_some() {
                        logged += 1;
                    } else {
                        store
                            .put_sized_then_patch(
                                key,
                                |_| 4096,
                                |old, out| {
                                    if let Some(o) = old {
                                        out.copy_from_slice(&o[..4096]);
                                    }
                                    out[at..at + 512].copy_from_slice(&bytes);
                                },
                                Some(then()),
                            )
                            .map_err(|e| e.to_string())?;
                    }
                }
                let gen = store.written_gen(key).max(store.written_gen(count));
                store.commit_through(gen).map_err(|e| e.to_string())?;
                say(&mut out, &format!("acked {n}"))?;
                say(&mut out, &format!("fast {logged}"))?;
            }
            Ok(())
        }
        "fill" => {
            let count = num(&args, 4)?;
            let other = num(&args, 5)?;
            for i in 0..count {
                store
                    .put(Key::new(prefix, i), &value(prefix, i))
                    .map_err(|e| e.to_string())?;
            }
            say(&mut out, "done")?;
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            let mut seen = 0u64;
            for i in 0..count {
                let ok = store
                    .get_with(Key::new(other, i), |v| v == value(other, i).as_slice())
                    .map_err(|e| e.to_string())?;
                if ok == Some(true) {
                    seen += 1;
                }
            }
            say(&mut out, &format!("saw {seen}"))?;
            Ok(())
        }
        "open" => say(&mut out, "opened"),
        other => Err(format!("unknown mode {other}")),
    }
}
