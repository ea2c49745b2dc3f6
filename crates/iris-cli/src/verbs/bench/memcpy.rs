//! The memcpy floor, measured in this process: the cell's access pattern (random aligned blocks
//! of a file per job) as plain loads and stores on a `MAP_SHARED` mapping of a scratch file,
//! one thread per job; for fdatasync cells each store is followed by a fence, all "durability"
//! costs on memory. No interposer, no system call: what the hardware does. The file is mapped
//! with huge pages where the kernel allows, as Iris maps its volume.

use std::fs::OpenOptions;
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{fence, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use iris_media::Mapping;

use super::cells::{Cell, Mode, Rw};
use super::histogram::Histogram;
use super::results::Measurement;
use crate::failure::host_failure;

/// Measure `cell` for `duration` on `cell.jobs` files of `file_bytes` in `scratch`.
pub fn measure(
    scratch: &Path,
    cell: &Cell,
    file_bytes: u64,
    duration: Duration,
) -> Result<Measurement, String> {
    let block_bytes = cell.block_bytes as usize;
    let file_len = usize::try_from(file_bytes).map_err(|_| "file too large".to_string())?;
    if block_bytes == 0 || file_len < block_bytes {
        return Err(format!(
            "file of {file_bytes} bytes holds no {block_bytes}-byte block"
        ));
    }
    let mut maps = Vec::new();
    for job in 0..cell.jobs {
        let path = scratch.join(format!("memcpy.{job}"));
        let map = map_file(&path, file_bytes);
        let _ = std::fs::remove_file(&path); // the mapping keeps the pages
        maps.push(map?);
    }
    let barrier = Barrier::new(maps.len());
    let runs: Vec<(Histogram, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = maps
            .iter_mut()
            .enumerate()
            .map(|(job, map)| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    run_job(map.bytes(), cell, block_bytes, duration, job as u64)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    if runs.len() != maps.len() {
        return Err("a memcpy thread panicked".into());
    }
    let mut all = Histogram::new();
    let mut longest = Duration::ZERO;
    for (h, elapsed) in &runs {
        all.merge(h);
        longest = longest.max(*elapsed);
    }
    if all.count() == 0 || longest.is_zero() {
        return Err("memcpy did nothing".into());
    }
    Ok(Measurement {
        iops: all.count() as f64 / longest.as_secs_f64(),
        mean_ns: all.mean_ns(),
        p99_ns: all.quantile_ns(0.99),
    })
}

/// A scratch file's shared mapping.
struct MappedFile(Mapping);

impl MappedFile {
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is live for `self`'s life, the file backs all of it (set_len),
        // and `&mut self` makes this the only reference into it in this process; nothing else
        // maps the file (see `map_file`).
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr(), self.0.len()) }
    }
}

/// A scratch file of `size_bytes`, mapped shared, given huge pages where the kernel allows (as
/// Iris gives its volume), and written through once (warm: every page present before timing
/// starts).
fn map_file(path: &Path, size_bytes: u64) -> Result<MappedFile, String> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .and_then(|f| f.set_len(size_bytes).map(|()| f))
        .map_err(|e| host_failure(path, &e))?;
    let len = usize::try_from(size_bytes).map_err(|_| "file too large".to_string())?;
    // A file this process just created in its own scratch directory and unlinks at once:
    // nothing else maps or truncates it.
    let mut map = MappedFile(Mapping::new(&file, len).map_err(|e| host_failure(path, &e))?);
    for (i, b) in map.bytes().iter_mut().enumerate() {
        *b = i as u8;
    }
    // A hint, as for the volume: refused, the small pages stay.
    let _ = map.0.collapse(0, len);
    Ok(map)
}

/// One job: random aligned blocks until `duration` passes, each timed.
fn run_job(
    map: &mut [u8],
    cell: &Cell,
    block_bytes: usize,
    duration: Duration,
    seed: u64,
) -> (Histogram, Duration) {
    let block_count = (map.len() / block_bytes) as u64;
    let mut buf = vec![0x5au8; block_bytes];
    let mut hist = Histogram::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (seed + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let start = Instant::now();
    let mut last = start;
    loop {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let at = (rng % block_count) as usize * block_bytes;
        let block = &mut map[at..at + block_bytes];
        match cell.rw {
            Rw::RandRead => {
                buf.copy_from_slice(block);
                black_box(&mut buf);
            }
            Rw::RandWrite => {
                block.copy_from_slice(black_box(&buf));
                if cell.mode == Mode::Durable {
                    fence(Ordering::SeqCst);
                }
            }
        }
        let now = Instant::now();
        hist.record(now.duration_since(last).as_nanos() as u64);
        last = now;
        if now.duration_since(start) >= duration {
            return (hist, now.duration_since(start));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::cells::quick;
    use super::*;

    #[test]
    fn memcpy_measures_something() {
        let dir = std::env::temp_dir();
        let cell = Cell {
            jobs: 2,
            ..quick()[0]
        };
        let m = measure(&dir, &cell, 1 << 20, Duration::from_millis(50)).expect("measure");
        assert!(m.iops > 0.0 && m.mean_ns > 0.0 && m.p99_ns >= 0.0, "{m:?}");
    }
}
