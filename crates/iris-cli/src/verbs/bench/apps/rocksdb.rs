//! RocksDB's db_bench: fillrandom then readrandom in one process, default options (WAL on, not
//! synced per write), no compression.

use super::{number_before, Place, Sizes};
use crate::verbs::bench::process::Stop;

/// Bytes per value.
const VALUE_BYTES: u32 = 100;
/// The db_bench benchmarks run, in order.
const BENCHMARKS: [&str; 2] = ["fillrandom", "readrandom"];

/// The results this benchmark reports.
pub fn names(sizes: Sizes) -> Vec<(String, String)> {
    BENCHMARKS
        .iter()
        .map(|b| {
            (
                format!("db_bench {b}"),
                format!(
                    "db_bench --benchmarks=fillrandom,readrandom --num={} --value_size={VALUE_BYTES} \
                     --compression_type=none",
                    sizes.rocksdb_keys
                ),
            )
        })
        .collect()
}

/// Operations per second of each benchmark, as db_bench reports them.
pub fn run(place: &Place, sizes: Sizes) -> Result<Vec<f64>, Stop> {
    let dir = place.dir("rocksdb")?;
    let mut cmd = place.command("db_bench");
    cmd.arg(format!("--db={}", dir.join("db").display()))
        .arg(format!("--benchmarks={}", BENCHMARKS.join(",")))
        .arg(format!("--num={}", sizes.rocksdb_keys))
        .arg(format!("--value_size={VALUE_BYTES}"))
        .args(["--compression_type=none", "--threads=1"]);
    let out = place.run(&mut cmd)?;
    BENCHMARKS
        .iter()
        .map(|b| {
            out.stdout
                .lines()
                .find(|l| l.split_whitespace().next() == Some(b))
                .and_then(|l| number_before(l, "ops/sec"))
                .ok_or_else(|| Stop::Failed(format!("db_bench printed no {b} rate")))
        })
        .collect()
}
