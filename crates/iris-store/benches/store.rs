//! Iris store vs LMDB (heed) vs redb vs raw-mmap floors: random 4 KiB block gets and puts,
//! 1 and 2 threads, everything in /dev/shm. A plain harness (no criterion) that prints tables.
//!
//! Run: `cargo bench -p iris-store`.
//!
//! Environment:
//! - `IRIS_BENCH_SECS` (default 1.5): measured seconds per cell (each cell also gets a short
//!   unmeasured warm-up).
//! - `IRIS_BENCH_BIG=1`: add a 4 GiB key space (1,048,576 keys, fully preloaded; one system at a
//!   time). Peak memory is about 12 GiB (redb: 8 GiB file + 4 GiB cache) and it adds ~3 minutes,
//!   most of it preloading (redb alone ~45 s).
//! - `IRIS_BENCH_ONLY=SYSTEM[:CELL],...` (e.g. `Iris:put_batch,floor`): run only these cells
//!   (systems: floor, Iris, LMDB, redb, shapes; cells: the ids in the ratio table's code), for
//!   profiling one workload. `IRIS_BENCH_KEYS=32768,...` picks the key spaces,
//!   `IRIS_BENCH_THREADS=1` (or 2) the thread count.
//! - `IRIS_BENCH_BUFFER=BYTES`: the Iris volume of the block cells with message buffers of this
//!   size (a Bε-tree; default 0, a plain B+-tree, as the file system's volumes).
//! - `IRIS_READ_NS` / `IRIS_WRITE_NS` are Iris's own latency model; the bench prints them when set
//!   because they slow Iris (and only Iris) down on purpose.
//!
//! Every file is created under /dev/shm with the process id in its name and removed when the
//! system's cells are done (also on panic, by a drop guard).

use std::fs;
use std::hint::black_box;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use heed::types::Bytes;
use heed::{CommitOrAbort, EnvOpenOptions};
use iris_media::Mapping;
use iris_store::{CreateOptions, Key, Store};
use redb::{ReadableDatabase, TableDefinition};

const BLOCK: usize = 4096;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// Iris puts commit every this many puts (all threads together), emulating a commit timer.
const IRIS_COMMIT_EVERY: u64 = 10_000;
/// Puts per write transaction in the "batched" LMDB / redb cells.
const BATCH: u64 = 1_000;
/// Puts per transaction / commit while preloading.
const PRELOAD_BATCH: usize = 10_000;
/// Operations between two looks at the stop flag in the fast loops.
const CHUNK: u64 = 64;

const REDB_TABLE: TableDefinition<u128, &[u8]> = TableDefinition::new("kv");

// ---------------------------------------------------------------------------------------------
// Small helpers

/// splitmix64: a fast, decent per-thread generator, identical for every system.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
    }

    #[inline]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Removes the paths it holds when dropped (files or directories), so a panic cleans up too.
struct Cleanup(Vec<PathBuf>);

impl Cleanup {
    fn remove_now(&mut self) {
        for p in self.0.drain(..) {
            if p.is_dir() {
                let _ = fs::remove_dir_all(&p);
            } else {
                let _ = fs::remove_file(&p);
            }
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.remove_now();
    }
}

/// Bytes actually allocated for a file, or for all files of a directory.
fn footprint(p: &Path) -> u64 {
    match fs::metadata(p) {
        Ok(m) if m.is_dir() => fs::read_dir(p)
            .map(|rd| rd.flatten().map(|e| footprint(&e.path())).sum())
            .unwrap_or(0),
        Ok(m) => m.blocks() * 512,
        Err(_) => 0,
    }
}

fn shm_path(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/iris-bench-{}-{name}", std::process::id()))
}

fn iris_key(i: u64) -> Key {
    Key::new(0, i)
}

/// The same 128-bit key for LMDB, big-endian so byte order equals numeric order.
fn lmdb_key(i: u64) -> [u8; 16] {
    u128::from(i).to_be_bytes()
}

fn stamp(val: &mut [u8], n: u64) {
    val[..8].copy_from_slice(&n.to_le_bytes());
}

fn human_bytes(b: u64) -> String {
    if b >= GIB {
        format!("{:.2} GiB", b as f64 / GIB as f64)
    } else {
        format!("{:.0} MiB", b as f64 / MIB as f64)
    }
}

fn human_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} M", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1} k", r / 1e3)
    } else {
        format!("{r:.0} ")
    }
}

// ---------------------------------------------------------------------------------------------
// The measuring loop

struct Stop(AtomicBool);

impl Stop {
    #[inline]
    fn go(&self) -> bool {
        !self.0.load(Ordering::Relaxed)
    }
}

/// Run `body(thread_index, stop)` on `threads` threads for `secs` seconds; each body returns the
/// operations it completed. Returns (total ops, wall seconds from start to the last thread done).
fn run_threads<F>(threads: usize, secs: f64, body: &F) -> (u64, f64)
where
    F: Fn(usize, &Stop) -> u64 + Sync,
{
    let stop = Stop(AtomicBool::new(false));
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, barrier) = (&stop, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let n = body(t, stop);
                    (n, Instant::now())
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.0.store(true, Ordering::Relaxed);
        let mut ops = 0;
        let mut end = start;
        for h in handles {
            let (n, e) = h.join().expect("bench thread panicked");
            ops += n;
            end = end.max(e);
        }
        (ops, (end - start).as_secs_f64())
    })
}

#[derive(Clone)]
struct Row {
    system: &'static str,
    /// Stable id used to pair rows for the ratio table.
    id: &'static str,
    label: String,
    threads: usize,
    ops: u64,
    secs: f64,
}

impl Row {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.secs
    }
    fn rate_per_core(&self) -> f64 {
        self.rate() / self.threads as f64
    }
    fn ns_per_op_core(&self) -> f64 {
        1e9 / self.rate_per_core()
    }
}

struct Bench {
    secs: f64,
    warm: f64,
    rows: Vec<Row>,
    only: Only,
}

/// Which cells to run (`IRIS_BENCH_ONLY`): every cell when empty.
#[derive(Clone, Default)]
struct Only(Vec<(String, Option<String>)>);

impl Only {
    fn from_env() -> Self {
        let v = std::env::var("IRIS_BENCH_ONLY").unwrap_or_default();
        Only(
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| match s.split_once(':') {
                    Some((sys, id)) => (sys.to_string(), Some(id.to_string())),
                    None => (s.to_string(), None),
                })
                .collect(),
        )
    }

    /// Whether any cell of `system` runs.
    fn system(&self, system: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|(s, _)| s == system)
    }

    /// Whether cells with `threads` threads run (`IRIS_BENCH_THREADS=1` or `2`; both if unset).
    fn threads(&self, threads: usize) -> bool {
        std::env::var("IRIS_BENCH_THREADS")
            .ok()
            .and_then(|t| t.parse::<usize>().ok())
            .is_none_or(|t| t == threads)
    }

    /// Whether cell `id` of `system` runs.
    fn cell(&self, system: &str, id: &str) -> bool {
        self.0.is_empty()
            || self
                .0
                .iter()
                .any(|(s, i)| s == system && i.as_deref().is_none_or(|i| i == id))
    }
}

impl Bench {
    fn cell<F>(
        &mut self,
        system: &'static str,
        id: &'static str,
        label: &str,
        threads: usize,
        body: F,
    ) where
        F: Fn(usize, &Stop) -> u64 + Sync,
    {
        if !self.only.cell(system, id) || !self.only.threads(threads) {
            return;
        }
        run_threads(threads, self.warm, &body);
        let (ops, secs) = run_threads(threads, self.secs, &body);
        let row = Row {
            system,
            id,
            label: label.to_string(),
            threads,
            ops,
            secs,
        };
        println!(
            "  {:<6} {:<53} {:>3} {:>11} {:>11} {:>10.0}",
            row.system,
            row.label,
            row.threads,
            human_rate(row.rate()),
            human_rate(row.rate_per_core()),
            row.ns_per_op_core()
        );
        self.rows.push(row);
    }
}

// ---------------------------------------------------------------------------------------------
// Systems

/// A key space: `keys` keys of 4 KiB, all preloaded in the random order `perm`.
struct Space {
    keys: u64,
    perm: Vec<u64>,
}

impl Space {
    fn new(keys: u64) -> Self {
        assert!(keys.is_power_of_two());
        let mut perm: Vec<u64> = (0..keys).collect();
        let mut rng = Rng::new(0xC0FFEE ^ keys);
        for i in (1..perm.len()).rev() {
            let j = (rng.next() % (i as u64 + 1)) as usize;
            perm.swap(i, j);
        }
        Space { keys, perm }
    }
    fn mask(&self) -> u64 {
        self.keys - 1
    }
    fn bytes(&self) -> u64 {
        self.keys * BLOCK as u64
    }
}

fn seed(cell: u64, t: usize) -> u64 {
    cell * 1000 + t as u64 + 1
}

fn bench_floor(b: &mut Bench, sp: &Space, notes: &mut Vec<String>) {
    let path = shm_path("floor.bin");
    let mut guard = Cleanup(vec![path.clone()]);
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("create floor file");
    file.set_len(sp.bytes()).expect("size floor file");
    let len = usize::try_from(sp.bytes()).expect("floor file fits the address space");
    // Mapped as Iris maps its volume: 2 MiB-aligned, huge pages where the kernel allows.
    let map = Mapping::new(&file, len).expect("map floor file");
    let base = map.as_mut_ptr() as usize;
    // SAFETY: the file is private to this process (pid in its name), fully backed (set_len on
    // tmpfs) and not resized while mapped; nothing else refers to the bytes yet.
    unsafe { std::ptr::write_bytes(map.as_mut_ptr(), 0x5a, len) }; // prefault every page
    let _ = map.collapse(0, len);
    let mask = sp.mask();

    for threads in [1, 2] {
        b.cell(
            "floor",
            "read",
            "read: random 4 KiB memcpy out of mmap",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(1, t));
                let mut buf = vec![0u8; BLOCK];
                let mut n = 0;
                while stop.go() {
                    for _ in 0..CHUNK {
                        let off = (rng.next() & mask) as usize * BLOCK;
                        // SAFETY: `off + BLOCK` is within the mapping, which outlives the cell;
                        // nobody writes the mapping during read cells.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                (base + off) as *const u8,
                                buf.as_mut_ptr(),
                                BLOCK,
                            );
                        }
                        black_box(&mut buf);
                    }
                    n += CHUNK;
                }
                n
            },
        );
    }
    for threads in [1, 2] {
        b.cell(
            "floor",
            "write",
            "write: random 4 KiB memcpy into mmap",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(2, t));
                let mut val = vec![0xa5u8; BLOCK];
                let per = sp.keys / threads as u64;
                let mut n = 0;
                while stop.go() {
                    for _ in 0..CHUNK {
                        // Each thread owns the blocks congruent to its index: no racing writes.
                        let idx = (rng.next() % per) * threads as u64 + t as u64;
                        stamp(&mut val, n);
                        // SAFETY: in bounds; blocks are disjoint between threads.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                val.as_ptr(),
                                (base + idx as usize * BLOCK) as *mut u8,
                                BLOCK,
                            );
                        }
                        n += 1;
                    }
                }
                n
            },
        );
    }
    black_box(&map);
    drop(map);
    notes.push(format!("floor file {}", human_bytes(footprint(&path))));
    guard.remove_now();
}

/// The message-buffer size of the Iris volume in the block cells: `IRIS_BENCH_BUFFER` bytes, else
/// 0 (a plain B+-tree, the shape the file system uses).
fn buffer_bytes() -> u32 {
    std::env::var("IRIS_BENCH_BUFFER")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Random 4 KiB puts over the key space `mask` names, in rounds of 16 until `stop`, calling
/// `after` after each put; how many were made.
fn iris_random_puts(
    store: &Store,
    mask: u64,
    seed: u64,
    stop: &Stop,
    mut after: impl FnMut(),
) -> u64 {
    let mut rng = Rng::new(seed);
    let mut val = vec![0xa5u8; BLOCK];
    let mut n = 0;
    while stop.go() {
        for _ in 0..16 {
            let k = rng.next() & mask;
            stamp(&mut val, n);
            store.put(iris_key(k), &val).expect("Iris put");
            after();
            n += 1;
        }
    }
    n
}

fn bench_iris(b: &mut Bench, sp: &Space, notes: &mut Vec<String>) {
    let path = shm_path("iris.vol");
    let mut guard = Cleanup(vec![path.clone()]);
    let _ = fs::remove_file(&path);
    let opts = CreateOptions {
        block_size: BLOCK as u32,
        size_limit_bytes: sp.bytes() * 2 + 512 * MIB,
        initial_bytes: 64 * MIB,
        inline_max: None,
        buffer_bytes: buffer_bytes(),
    };
    let store = Store::create(&path, &opts).expect("create Iris volume");
    let val = vec![0xa5u8; BLOCK];
    let t0 = Instant::now();
    for (i, &k) in sp.perm.iter().enumerate() {
        store.put(iris_key(k), &val).expect("Iris preload put");
        if (i + 1).is_multiple_of(PRELOAD_BATCH) {
            store.commit().expect("Iris preload commit");
        }
    }
    store.commit().expect("Iris preload commit");
    let pre = t0.elapsed().as_secs_f64();
    store.settle_pages(); // huge pages, as the floor has
    notes.push(format!(
        "Iris preload {:.2} s ({}puts/s, commit every {PRELOAD_BATCH})",
        pre,
        human_rate(sp.keys as f64 / pre)
    ));
    // Read every key once so no system pays first-touch costs (page-table faults, cold caches)
    // inside a measured cell.
    let mut buf = vec![0u8; BLOCK];
    for k in 0..sp.keys {
        store.get(iris_key(k), &mut buf).expect("Iris warm get");
    }
    let mask = sp.mask();
    let store = &store;

    for threads in [1, 2] {
        b.cell(
            "Iris",
            "get_addr",
            "get_with(k, |v| v.as_ptr()): address only, no copy",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(3, t));
                let mut n = 0;
                while stop.go() {
                    for _ in 0..CHUNK {
                        let k = rng.next() & mask;
                        let p = store
                            .get_with(iris_key(k), |v| v.as_ptr())
                            .expect("Iris get_with")
                            .expect("Iris key missing");
                        black_box(p);
                    }
                    n += CHUNK;
                }
                n
            },
        );
    }
    for threads in [1, 2] {
        b.cell(
            "Iris",
            "get_copy",
            "get(k, &mut buf): copy 4 KiB into caller buffer",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(4, t));
                let mut buf = vec![0u8; BLOCK];
                let mut n = 0;
                while stop.go() {
                    for _ in 0..CHUNK {
                        let k = rng.next() & mask;
                        let len = store
                            .get(iris_key(k), &mut buf)
                            .expect("Iris get")
                            .expect("Iris key missing");
                        black_box((len, &mut buf));
                    }
                    n += CHUNK;
                }
                n
            },
        );
    }
    let total = AtomicU64::new(0);
    for threads in [1, 2] {
        b.cell(
            "Iris",
            "put_batch",
            "put(k, v), commit() every 10,000 puts (all threads)",
            threads,
            |t, stop| {
                iris_random_puts(store, mask, seed(5, t), stop, || {
                    if (total.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(IRIS_COMMIT_EVERY)
                    {
                        store.commit().expect("Iris commit");
                    }
                })
            },
        );
    }
    if b.only.cell("Iris", "put_timer") {
        steady_timer_state(store, sp, &path, notes);
    }
    for threads in [1, 2] {
        b.cell(
            "Iris",
            "put_timer",
            "put(k, v), one commit() per cell (timer: 5 s default)",
            threads,
            |t, stop| {
                let n = iris_random_puts(store, mask, seed(7, t), stop, || {});
                // The commit a timer would make, inside the measured time: one per cell of
                // IRIS_BENCH_SECS, more often than the default timer's one per 5 s.
                if t == 0 {
                    store.commit().expect("Iris commit");
                }
                n
            },
        );
    }
    for threads in [1, 2] {
        b.cell(
            "Iris",
            "put_op",
            "put(k, v) + commit() per put (durable per op)",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(6, t));
                let mut val = vec![0xa5u8; BLOCK];
                let mut n = 0;
                while stop.go() {
                    let k = rng.next() & mask;
                    stamp(&mut val, n);
                    store.put(iris_key(k), &val).expect("Iris put");
                    store.commit().expect("Iris commit");
                    n += 1;
                }
                n
            },
        );
    }
    store.commit().expect("Iris final commit");
    let st = store.stats().expect("Iris stats");
    notes.push(format!(
        "Iris volume {} allocated (tree height {}, {} commits)",
        human_bytes(footprint(&path)),
        st.tree_height,
        st.commits
    ));
    guard.remove_now();
}

/// Bring the volume to the size a timer's commits keep it at, outside any measured cell, and
/// note what that took. At these rates a commit every 5 s comes after every key was written
/// many times, so the volume holds two versions of most keys: the committed one and the
/// working one. The first pass after the preload (every key once) grows the volume by a copy of
/// every value, space the kernel must back with fresh memory; from the commit after it on, the
/// old versions' blocks, already backed, take the new ones. Without this pass a cell over a
/// large key space measured that growth: at 262,144 keys one 1.5 s cell is about one pass.
fn steady_timer_state(store: &Store, sp: &Space, path: &Path, notes: &mut Vec<String>) {
    let val = vec![0x5au8; BLOCK];
    let before = footprint(path);
    let t = Instant::now();
    for &k in &sp.perm {
        store.put(iris_key(k), &val).expect("Iris growth pass put");
    }
    store.commit().expect("Iris growth pass commit");
    let secs = t.elapsed().as_secs_f64();
    notes.push(format!(
        "Iris before the timer cells, every key once and a commit: {:.0} ns per put, volume {} -> {} (the growth a timer's first interval pays)",
        secs * 1e9 / sp.keys as f64,
        human_bytes(before),
        human_bytes(footprint(path)),
    ));
}

/// Key `i` of the insert cells: a scramble of `i`, so consecutive inserts land all over the tree.
fn scrambled(i: u64) -> Key {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    Key::new(7, z ^ (z >> 31))
}

/// The two tree shapes on the same code: inserts of new keys with 64-byte values (the shape of
/// metadata and directory entries; each changes a leaf's shape), commits every 10,000 puts, then
/// random gets of what was inserted. One thread, a fresh volume per shape.
fn bench_shapes(b: &mut Bench, notes: &mut Vec<String>) {
    for (system, buffer) in [("B+", 0u32), ("Bε-1K", 1024)] {
        let path = shm_path(&format!("shape-{buffer}.vol"));
        let mut guard = Cleanup(vec![path.clone()]);
        let _ = fs::remove_file(&path);
        let opts = CreateOptions {
            block_size: BLOCK as u32,
            size_limit_bytes: 4 * GIB,
            initial_bytes: 64 * MIB,
            inline_max: None,
            buffer_bytes: buffer,
        };
        let store = Store::create(&path, &opts).expect("create Iris volume");
        let next = AtomicU64::new(0);
        let val = [0x5au8; 64];
        let store = &store;
        b.cell(
            system,
            "insert",
            "insert new key, 64 B value, commit every 10,000",
            1,
            |_, stop| {
                let mut n = 0;
                while stop.go() {
                    for _ in 0..CHUNK {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        store.put(scrambled(i), &val).expect("Iris insert");
                        if (i + 1).is_multiple_of(IRIS_COMMIT_EVERY) {
                            store.commit().expect("Iris commit");
                        }
                    }
                    n += CHUNK;
                }
                n
            },
        );
        store.commit().expect("Iris commit");
        let inserted = next.load(Ordering::Relaxed);
        b.cell(
            system,
            "get_small",
            "get a random inserted key (64 B copy)",
            1,
            |t, stop| {
                let mut rng = Rng::new(seed(9, t));
                let mut buf = [0u8; 64];
                let mut n = 0;
                while stop.go() {
                    for _ in 0..CHUNK {
                        let k = scrambled(rng.next() % inserted);
                        let len = store
                            .get(k, &mut buf)
                            .expect("Iris get")
                            .expect("key missing");
                        black_box((len, &mut buf));
                    }
                    n += CHUNK;
                }
                n
            },
        );
        let shape = store.shape().expect("shape");
        notes.push(format!(
            "{system}: {inserted} keys inserted, height {}, {} leaves, {} internal nodes, {} \
             buffered messages, volume {}",
            shape.height,
            shape.leaf_nodes,
            shape.inner_nodes,
            shape.messages,
            human_bytes(footprint(&path))
        ));
        guard.remove_now();
    }
}

fn bench_lmdb(b: &mut Bench, sp: &Space, notes: &mut Vec<String>) {
    let dir = shm_path("lmdb");
    let mut guard = Cleanup(vec![dir.clone()]);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create LMDB dir");
    // 4 KiB values are overflow values in LMDB (two 4 KiB pages each), and random rewrites need
    // free pages beside the live ones: reserve plenty of address space (the file stays sparse).
    let map_size = (sp.bytes() * 4 + GIB) as usize;
    // SAFETY: the environment is private to this process and opened once; default (safe) flags.
    let env_owned = unsafe {
        EnvOpenOptions::new()
            .map_size(map_size)
            .max_dbs(1)
            .open(&dir)
    }
    .expect("open LMDB env");
    let env = &env_owned;
    let wtxn = env.write_txn().expect("LMDB write txn");
    let db = env
        .create_databases_and_commit(wtxn, |dbo, wtxn| {
            dbo.database_options()
                .types::<Bytes, Bytes>()
                .create(wtxn)
                .map(CommitOrAbort::<_, ()>::Commit)
        })
        .expect("LMDB create db")
        .unwrap_commit();

    let val = vec![0xa5u8; BLOCK];
    let t0 = Instant::now();
    for chunk in sp.perm.chunks(PRELOAD_BATCH) {
        let mut w = env.write_txn().expect("LMDB write txn");
        for &k in chunk {
            db.put(&mut w, &lmdb_key(k), &val).expect("LMDB put");
        }
        w.commit().expect("LMDB commit");
    }
    let pre = t0.elapsed().as_secs_f64();
    notes.push(format!(
        "LMDB preload {:.2} s ({}puts/s, {PRELOAD_BATCH} puts per txn)",
        pre,
        human_rate(sp.keys as f64 / pre)
    ));
    {
        let r = env.read_txn().expect("LMDB read txn");
        for k in 0..sp.keys {
            let v = db.get(&r, &lmdb_key(k)).expect("LMDB warm get");
            black_box(v.map(|v| v[BLOCK - 1]));
        }
    }
    let mask = sp.mask();
    let db = &db;

    for threads in [1, 2] {
        b.cell(
            "LMDB",
            "get_addr",
            "read txn + get per op: address only, no copy",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(3, t));
                let mut n = 0;
                while stop.go() {
                    for _ in 0..CHUNK {
                        let k = rng.next() & mask;
                        let r = env.read_txn().expect("LMDB read txn");
                        let v = db
                            .get(&r, &lmdb_key(k))
                            .expect("LMDB get")
                            .expect("LMDB key missing");
                        black_box(v.as_ptr());
                        drop(r);
                    }
                    n += CHUNK;
                }
                n
            },
        );
    }
    for threads in [1, 2] {
        b.cell(
            "LMDB",
            "get_copy",
            "read txn + get per op: copy 4 KiB into caller buffer",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(4, t));
                let mut buf = vec![0u8; BLOCK];
                let mut n = 0;
                while stop.go() {
                    for _ in 0..CHUNK {
                        let k = rng.next() & mask;
                        let r = env.read_txn().expect("LMDB read txn");
                        let v = db
                            .get(&r, &lmdb_key(k))
                            .expect("LMDB get")
                            .expect("LMDB key missing");
                        buf.copy_from_slice(v);
                        drop(r);
                        black_box(&mut buf);
                    }
                    n += CHUNK;
                }
                n
            },
        );
    }
    for threads in [1, 2] {
        b.cell(
            "LMDB",
            "put_batch",
            "put, 1,000 puts per write txn (default sync flags)",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(5, t));
                let mut val = vec![0xa5u8; BLOCK];
                let mut n = 0;
                while stop.go() {
                    let mut w = env.write_txn().expect("LMDB write txn");
                    for _ in 0..BATCH {
                        let k = rng.next() & mask;
                        stamp(&mut val, n);
                        db.put(&mut w, &lmdb_key(k), &val).expect("LMDB put");
                        n += 1;
                    }
                    w.commit().expect("LMDB commit");
                }
                n
            },
        );
    }
    for threads in [1, 2] {
        b.cell(
            "LMDB",
            "put_op",
            "put, one write txn per put (default sync flags)",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(6, t));
                let mut val = vec![0xa5u8; BLOCK];
                let mut n = 0;
                while stop.go() {
                    let k = rng.next() & mask;
                    stamp(&mut val, n);
                    let mut w = env.write_txn().expect("LMDB write txn");
                    db.put(&mut w, &lmdb_key(k), &val).expect("LMDB put");
                    w.commit().expect("LMDB commit");
                    n += 1;
                }
                n
            },
        );
    }
    notes.push(format!(
        "LMDB files {} allocated",
        human_bytes(footprint(&dir))
    ));
    env_owned.prepare_for_closing().wait();
    guard.remove_now();
}

fn bench_redb(b: &mut Bench, sp: &Space, notes: &mut Vec<String>) {
    let path = shm_path("redb.db");
    let mut guard = Cleanup(vec![path.clone()]);
    let _ = fs::remove_file(&path);
    // redb reads through its own user-space cache (no mmap). Make it big enough to hold the data
    // set (4 KiB values take about two pages), capped at 4 GiB.
    let cache = (sp.bytes() * 2 + 256 * MIB).min(4 * GIB);
    let db = redb::Database::builder()
        .set_cache_size(cache as usize)
        .create(&path)
        .expect("create redb database");
    let val = vec![0xa5u8; BLOCK];
    let t0 = Instant::now();
    for chunk in sp.perm.chunks(PRELOAD_BATCH) {
        let w = db.begin_write().expect("redb write txn");
        {
            let mut tab = w.open_table(REDB_TABLE).expect("redb table");
            for &k in chunk {
                tab.insert(u128::from(k), val.as_slice())
                    .expect("redb insert");
            }
        }
        w.commit().expect("redb commit");
    }
    let pre = t0.elapsed().as_secs_f64();
    notes.push(format!(
        "redb preload {:.2} s ({}puts/s, {PRELOAD_BATCH} puts per txn), cache {}",
        pre,
        human_rate(sp.keys as f64 / pre),
        human_bytes(cache)
    ));
    {
        let r = db.begin_read().expect("redb read txn");
        let tab = r.open_table(REDB_TABLE).expect("redb table");
        for k in 0..sp.keys {
            let g = tab.get(u128::from(k)).expect("redb warm get");
            black_box(g.map(|g| g.value()[BLOCK - 1]));
        }
    }
    let mask = sp.mask();
    let db = &db;

    for threads in [1, 2] {
        b.cell(
            "redb",
            "get_addr",
            "read txn + open_table + get per op: address only",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(3, t));
                let mut n = 0;
                while stop.go() {
                    for _ in 0..CHUNK {
                        let k = rng.next() & mask;
                        let r = db.begin_read().expect("redb read txn");
                        let tab = r.open_table(REDB_TABLE).expect("redb table");
                        let g = tab
                            .get(u128::from(k))
                            .expect("redb get")
                            .expect("redb key missing");
                        black_box(g.value().as_ptr());
                    }
                    n += CHUNK;
                }
                n
            },
        );
    }
    for threads in [1, 2] {
        b.cell(
            "redb",
            "get_copy",
            "read txn + open_table + get per op: copy 4 KiB",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(4, t));
                let mut buf = vec![0u8; BLOCK];
                let mut n = 0;
                while stop.go() {
                    for _ in 0..CHUNK {
                        let k = rng.next() & mask;
                        let r = db.begin_read().expect("redb read txn");
                        let tab = r.open_table(REDB_TABLE).expect("redb table");
                        let g = tab
                            .get(u128::from(k))
                            .expect("redb get")
                            .expect("redb key missing");
                        buf.copy_from_slice(g.value());
                        black_box(&mut buf);
                    }
                    n += CHUNK;
                }
                n
            },
        );
    }
    for threads in [1, 2] {
        b.cell(
            "redb",
            "put_batch",
            "insert, 1,000 per write txn (Durability::Immediate)",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(5, t));
                let mut val = vec![0xa5u8; BLOCK];
                let mut n = 0;
                while stop.go() {
                    let w = db.begin_write().expect("redb write txn");
                    {
                        let mut tab = w.open_table(REDB_TABLE).expect("redb table");
                        for _ in 0..BATCH {
                            let k = rng.next() & mask;
                            stamp(&mut val, n);
                            tab.insert(u128::from(k), val.as_slice())
                                .expect("redb insert");
                            n += 1;
                        }
                    }
                    w.commit().expect("redb commit");
                }
                n
            },
        );
    }
    for threads in [1, 2] {
        b.cell(
            "redb",
            "put_op",
            "insert, 1 write txn per put (Durability::Immediate)",
            threads,
            |t, stop| {
                let mut rng = Rng::new(seed(6, t));
                let mut val = vec![0xa5u8; BLOCK];
                let mut n = 0;
                while stop.go() {
                    let k = rng.next() & mask;
                    stamp(&mut val, n);
                    let w = db.begin_write().expect("redb write txn");
                    {
                        let mut tab = w.open_table(REDB_TABLE).expect("redb table");
                        tab.insert(u128::from(k), val.as_slice())
                            .expect("redb insert");
                    }
                    w.commit().expect("redb commit");
                    n += 1;
                }
                n
            },
        );
    }
    notes.push(format!(
        "redb file {} allocated",
        human_bytes(footprint(&path))
    ));
    guard.remove_now();
}

// ---------------------------------------------------------------------------------------------
// Reporting

/// (what Iris does, Iris row id, LMDB/redb row id, floor row id)
const COMPARISONS: [(&str, &str, &str, &str); 5] = [
    (
        "get, address only (no copy)",
        "get_addr",
        "get_addr",
        "read",
    ),
    ("get, copy 4 KiB to caller", "get_copy", "get_copy", "read"),
    (
        "put, batched (Iris commit/10k; txn/1k)",
        "put_batch",
        "put_batch",
        "write",
    ),
    (
        "put, timer commit (Iris one per cell)",
        "put_timer",
        "put_timer",
        "write",
    ),
    (
        "put, durable per op (commit/txn per put)",
        "put_op",
        "put_op",
        "write",
    ),
];

fn find<'a>(rows: &'a [Row], system: &str, id: &str, threads: usize) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.system == system && r.id == id && r.threads == threads)
}

fn ratio(iris: Option<&Row>, other: Option<&Row>) -> String {
    match (iris, other) {
        (Some(i), Some(o)) => format!("{:.2}x", i.rate() / o.rate()),
        _ => "-".into(),
    }
}

fn print_ratios(title: &str, rows: &[Row]) {
    println!();
    println!("  ratios, {title}: Iris ops/s / other ops/s (>1.00x = Iris faster)");
    println!(
        "  {:<44} {:>3} {:>10} {:>10} {:>10} {:>10}",
        "workload", "thr", "Iris ns", "Iris/LMDB", "Iris/redb", "Iris/floor"
    );
    for (label, iris_id, other_id, floor_id) in COMPARISONS {
        for threads in [1, 2] {
            let iris = find(rows, "Iris", iris_id, threads);
            println!(
                "  {:<44} {:>3} {:>10} {:>10} {:>10} {:>10}",
                label,
                threads,
                iris.map_or("-".into(), |r| format!("{:.0}", r.ns_per_op_core())),
                ratio(iris, find(rows, "LMDB", other_id, threads)),
                ratio(iris, find(rows, "redb", other_id, threads)),
                ratio(iris, find(rows, "floor", floor_id, threads)),
            );
        }
    }
}

fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

const METHOD: [&str; 10] = [
    "Keys are uniform random over the whole key space. Each key space is fully preloaded in",
    "random order, then every key is read once (warm pass) before the cells. 1 and 2 threads",
    "share one store. LMDB/redb gets open one read transaction per get (like Iris's per-get",
    "lock). ops/s: all threads together; ops/s/core: divided by threads; ns/op: per core.",
    "Floors: plain memcpy of 4 KiB at a random block of a prefaulted mmap of a /dev/shm file",
    "the size of the key space (2 writer threads own disjoint blocks). The floor file and the",
    "Iris volume are mapped with 2 MiB pages where the kernel allows (MADV_COLLAPSE).",
    "LMDB: default env flags (no NO_SYNC / NO_META_SYNC / WRITEMAP); redb: default",
    "Durability::Immediate. On tmpfs, fsync/msync cost next to nothing for every system.",
    "Iris: commit() is its durability point; put cells call it as labelled.",
];

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported (all cells always run).
    let secs: f64 = std::env::var("IRIS_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| *s > 0.0)
        .unwrap_or(1.5);
    let big = std::env::var("IRIS_BENCH_BIG").is_ok_and(|v| v == "1");
    let warm = (secs / 5.0).min(0.1);

    println!("iris-store bench: random 4 KiB values, 128-bit integer keys, files in /dev/shm");
    println!(
        "  cpu: {} ({} cores); {secs} s measured + {warm:.2} s warm-up per cell (IRIS_BENCH_SECS)",
        cpu_model(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for var in ["IRIS_READ_NS", "IRIS_WRITE_NS"] {
        if let Ok(v) = std::env::var(var) {
            println!(
                "  WARNING: {var}={v} is set: Iris adds simulated media latency, others do not"
            );
        }
    }
    for line in METHOD {
        println!("  {line}");
    }
    if !big {
        println!(
            "  (IRIS_BENCH_BIG=1 adds a 4 GiB key space of 1,048,576 keys: ~3 min, ~12 GiB RAM)"
        );
    }

    let only = Only::from_env();
    let mut spaces = vec![32_768u64, 262_144];
    if big {
        spaces.push(1_048_576);
    }
    if let Ok(v) = std::env::var("IRIS_BENCH_KEYS") {
        spaces = v.split(',').filter_map(|k| k.trim().parse().ok()).collect();
    }
    let started = Instant::now();
    for keys in spaces {
        let sp = Space::new(keys);
        let title = format!(
            "{} key space ({} keys x 4 KiB, fully preloaded)",
            human_bytes(sp.bytes()),
            keys
        );
        println!();
        println!("== {title} ==");
        println!(
            "  {:<6} {:<53} {:>3} {:>11} {:>11} {:>10}",
            "system", "workload", "thr", "ops/s", "ops/s/core", "ns/op"
        );
        let mut b = Bench {
            secs,
            warm,
            rows: Vec::new(),
            only: only.clone(),
        };
        let mut notes = Vec::new();
        if only.system("floor") {
            bench_floor(&mut b, &sp, &mut notes);
        }
        if only.system("Iris") {
            bench_iris(&mut b, &sp, &mut notes);
        }
        if only.system("LMDB") {
            bench_lmdb(&mut b, &sp, &mut notes);
        }
        if only.system("redb") {
            bench_redb(&mut b, &sp, &mut notes);
        }
        for n in &notes {
            println!("  note: {n}");
        }
        print_ratios(&title, &b.rows);
    }
    if only.system("shapes") {
        println!();
        println!("== tree shapes: B+-tree (buffer 0) and Bε-tree (1 KiB buffers), same code ==");
        let mut b = Bench {
            secs,
            warm,
            rows: Vec::new(),
            only: Only::default(),
        };
        let mut notes = Vec::new();
        bench_shapes(&mut b, &mut notes);
        for n in &notes {
            println!("  note: {n}");
        }
        for id in ["insert", "get_small"] {
            if let (Some(be), Some(bp)) =
                (find(&b.rows, "Bε-1K", id, 1), find(&b.rows, "B+", id, 1))
            {
                println!("  {id}: Bε / B+ = {:.2}x", be.rate() / bp.rate());
            }
        }
    }
    println!();
    println!(
        "done in {:.1} s; all /dev/shm/iris-bench-{}-* files removed",
        started.elapsed().as_secs_f64(),
        std::process::id()
    );
}
