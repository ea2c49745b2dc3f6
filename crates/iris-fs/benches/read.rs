//! Iris's own cost per random read, without fio (issue #6: at most the memcpy floor + 100 ns):
//! a 128 MiB file on a volume in /dev/shm read at random offsets through `Fs::read_file` (an
//! open file's block map, as the interposer reads), against the same reads as plain `memcpy`
//! out of a mapped 128 MiB /dev/shm file. Both mappings get 2 MiB pages where the kernel allows;
//! one thread; the two alternate three times and the medians are printed.
//!
//! Run: `cargo bench -p iris-fs`. `IRIS_BENCH_SECS` (default 1.5) sets the seconds per run,
//! `IRIS_BENCH_SIZES` (default `4096,512`) the read sizes.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use iris_fs::{Cred, Fs, ROOT_INO};
use iris_media::Mapping;
use iris_store::CreateOptions;

/// Bytes of the file (and of the floor's mapping).
const FILE_BYTES: u64 = 128 << 20;
/// Reads between two looks at the clock.
const CHUNK: u64 = 4096;

/// Files of this run, removed at the end (also on panic).
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// xorshift64: a cheap random offset per read.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Nanoseconds per call of `read(offset)` at random multiples of `size`, over `secs`.
fn measure(size: u64, secs: Duration, seed: u64, mut read: impl FnMut(u64)) -> f64 {
    let mut rng = Rng(seed);
    let slots = FILE_BYTES / size;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < secs {
        for _ in 0..CHUNK {
            read((rng.next() % slots) * size);
        }
        n += CHUNK;
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let secs = Duration::from_secs_f64(
        std::env::var("IRIS_BENCH_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1.5),
    );
    let pid = std::process::id();
    let floor_path = PathBuf::from(format!("/dev/shm/iris-read-bench-{pid}.bin"));
    let volume_path = PathBuf::from(format!("/dev/shm/iris-read-bench-{pid}.vol"));
    let _cleanup = Cleanup(vec![floor_path.clone(), volume_path.clone()]);
    let len = FILE_BYTES as usize;

    // The floor: a mapped /dev/shm file, every page touched, then huge pages.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&floor_path)
        .expect("create the floor file");
    file.set_len(FILE_BYTES).expect("size the floor file");
    let map = Mapping::new(&file, len).expect("map the floor file");
    let base = map.as_mut_ptr() as usize;
    // SAFETY: the file is this process's own (pid in its name), backed (set_len on tmpfs) and
    // not resized while mapped; nothing else refers to its bytes.
    unsafe { std::ptr::write_bytes(map.as_mut_ptr(), 0x5a, len) };
    let _ = map.collapse(0, len);

    // Iris: the same bytes in a file of a fresh volume, committed, pages settled.
    let opts = CreateOptions {
        size_limit_bytes: 2 * FILE_BYTES,
        initial_bytes: FILE_BYTES + (16 << 20),
        ..CreateOptions::default()
    };
    let fs = Fs::create_volume(&volume_path, &opts).expect("create the volume");
    let ino = fs
        .open(
            &Cred::root(),
            ROOT_INO,
            b"f",
            libc::O_CREAT | libc::O_RDWR,
            0o644,
        )
        .expect("create the file")
        .ino;
    let chunk = vec![0x5au8; 1 << 20];
    for i in 0..FILE_BYTES >> 20 {
        fs.write(ino, i << 20, &chunk).expect("fill the file");
    }
    fs.store().commit().expect("commit");
    fs.store().settle_pages();
    let map_of_file = fs.file_cache(ino);
    // The reader's buffer starts a page, as fio's do: where malloc puts a 4 KiB buffer varies,
    // and one that starts a few bytes past a page boundary makes every 4 KiB copy from a
    // page-aligned block 3-4x slower (its stores alias the loads after them by address bits
    // 0-11; measured with the buffer 16 bytes past a page: floor 2026-2494 ns, Iris 1883-2019
    // ns against 463-649 and 601-651 page-aligned), which says nothing about Iris.
    let mut backing = vec![0u8; 2 * 4096];
    let start = backing.as_ptr().align_offset(4096);
    let buf = &mut backing[start..start + 4096];
    for off in (0..FILE_BYTES).step_by(4096) {
        fs.read_file(&map_of_file, off, buf)
            .expect("warm read")
            .expect("not shadowed");
    }

    println!("iris-fs read bench: random reads of a 128 MiB file in /dev/shm, 1 thread, ns/read");
    println!(
        "  (medians of 3 alternated runs of {:.1} s each)",
        secs.as_secs_f64()
    );
    println!(
        "  {:>6} {:>10} {:>10} {:>10}   goal: iris <= floor + 100 ns",
        "size", "floor", "iris", "iris-floor"
    );
    let sizes: Vec<u64> = std::env::var("IRIS_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![4096, 512]);
    for size in sizes.into_iter().filter(|s| (1..=4096).contains(s)) {
        let (mut floor, mut iris) = (Vec::new(), Vec::new());
        for round in 0..3u64 {
            floor.push(measure(size, secs, 17 + round, |off| {
                // SAFETY: `off + size` is within the mapping, which outlives this loop; nothing
                // writes it meanwhile.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (base + off as usize) as *const u8,
                        buf.as_mut_ptr(),
                        size as usize,
                    );
                }
                black_box(&mut *buf);
            }));
            iris.push(measure(size, secs, 17 + round, |off| {
                let n = fs
                    .read_file(&map_of_file, off, &mut buf[..size as usize])
                    .expect("read")
                    .expect("not shadowed");
                black_box((n, &mut *buf));
            }));
        }
        let (f, i) = (median(floor), median(iris));
        println!(
            "  {:>6} {:>10.0} {:>10.0} {:>+10.0}   {}",
            size,
            f,
            i,
            i - f,
            if i <= f + 100.0 { "met" } else { "missed" }
        );
    }
}
