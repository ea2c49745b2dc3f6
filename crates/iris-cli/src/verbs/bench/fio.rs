//! fio: the command line for a cell (unmodified fio, psync, queue depth 1, one file per job),
//! the layout run that fills every target's files before any cell, and reading IOPS and
//! latencies out of fio's JSON.

use std::path::Path;

use serde_json::Value;

use super::cells::{Cell, Mode};
use super::results::Measurement;

/// fio's file names: one per job, the same for every cell, so files are laid out once.
const FILENAME_FORMAT: &str = "--filename_format=bench.$jobnum";
/// The file the jobs of a [`Mode::OneFile`] cell share: the first job's.
const SHARED_FILE: &str = "bench.0";
/// The percentile reported as p99 in fio's JSON.
const P99_KEY: &str = "99.000000";

/// Arguments for one cell against files in `dir`: `runtime_secs` of time-based I/O. In
/// [`Mode::OneFile`] the jobs are threads writing the first job's file, each its own part.
pub fn cell_args(cell: &Cell, dir: &Path, file_bytes: u64, runtime_secs: u64) -> Vec<String> {
    let files = if cell.mode == Mode::OneFile {
        let part = file_bytes / u64::from(cell.jobs.max(1));
        vec![
            format!("--filename={SHARED_FILE}"),
            format!("--size={part}"),
            format!("--offset_increment={part}"),
            "--thread".to_string(),
        ]
    } else {
        vec![FILENAME_FORMAT.to_string(), format!("--size={file_bytes}")]
    };
    let mut args = vec![
        "--name=bench".to_string(),
        format!("--directory={}", dir.display()),
        format!("--rw={}", cell.rw.fio_name()),
        format!("--bs={}", cell.block_bytes),
        "--ioengine=psync".to_string(),
        "--iodepth=1".to_string(),
        format!("--numjobs={}", cell.jobs),
        "--group_reporting".to_string(),
        "--time_based".to_string(),
        format!("--runtime={runtime_secs}"),
        "--norandommap".to_string(),
        "--randrepeat=0".to_string(),
        // Keep the page cache as the layout left it: "warm" means hot.
        "--invalidate=0".to_string(),
        format!("--direct={}", u8::from(cell.mode == Mode::Direct)),
        "--output-format=json".to_string(),
    ];
    args.extend(files);
    if cell.mode == Mode::Durable {
        args.push("--fdatasync=1".to_string());
    }
    args
}

/// Arguments that write `jobs` files of `file_bytes` in `dir` once, sequentially, and flush
/// them: every later cell finds its files full and the same on every target.
pub fn layout_args(dir: &Path, file_bytes: u64, jobs: u32) -> Vec<String> {
    vec![
        "--name=layout".to_string(),
        format!("--directory={}", dir.display()),
        FILENAME_FORMAT.to_string(),
        "--rw=write".to_string(),
        "--bs=1M".to_string(),
        format!("--size={file_bytes}"),
        "--ioengine=psync".to_string(),
        format!("--numjobs={jobs}"),
        "--end_fsync=1".to_string(),
        "--output-format=json".to_string(),
    ]
}

/// IOPS, mean and p99 latency of `cell` from fio's JSON output (text before the JSON, such as
/// fio's warnings, is skipped). For fdatasync cells the latencies are the write's plus the
/// fdatasync's, which fio reports apart.
pub fn parse(output: &str, cell: &Cell) -> Result<Measurement, String> {
    let start = output
        .find('{')
        .ok_or_else(|| "fio printed no JSON".to_string())?;
    let doc: Value = serde_json::Deserializer::from_str(&output[start..])
        .into_iter::<Value>()
        .next()
        .ok_or_else(|| "fio printed no JSON".to_string())?
        .map_err(|e| format!("fio's JSON: {e}"))?;
    let job = doc
        .get("jobs")
        .and_then(|j| j.get(0))
        .ok_or_else(|| "fio's JSON has no job".to_string())?;
    let error = job.get("error").and_then(Value::as_i64).unwrap_or(0);
    if error != 0 {
        return Err(format!(
            "fio job error {error}: {}",
            crate::failure::io_text(&std::io::Error::from_raw_os_error(error as i32))
        ));
    }
    let section = &job[cell.rw.fio_section()];
    let iops = number(section, &["iops"])?;
    if iops <= 0.0 {
        return Err(format!("fio did no {}", cell.rw.fio_name()));
    }
    let mut mean_ns = number(section, &["clat_ns", "mean"])?;
    let mut p99_ns = number(section, &["clat_ns", "percentile", P99_KEY])?;
    if cell.mode == Mode::Durable {
        mean_ns += number(&job["sync"], &["lat_ns", "mean"])?;
        p99_ns += number(&job["sync"], &["lat_ns", "percentile", P99_KEY])?;
    }
    Ok(Measurement {
        iops,
        mean_ns,
        p99_ns,
    })
}

/// The number at `path` under `v`.
fn number(v: &Value, path: &[&str]) -> Result<f64, String> {
    path.iter()
        .try_fold(v, |v, key| v.get(key))
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("fio's JSON lacks {}", path.join(".")))
}

#[cfg(test)]
mod tests {
    use super::super::cells::{quick, Rw};
    use super::*;

    const SAMPLE: &str = r#"fio: some warning
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "bench", "error" : 0,
      "read" : { "iops" : 0.0, "clat_ns" : { "mean" : 0.0, "percentile" : { "99.000000" : 0 } } },
      "write" : { "iops" : 1000.5,
                  "clat_ns" : { "mean" : 800.0, "percentile" : { "99.000000" : 1500 } } },
      "sync" : { "lat_ns" : { "mean" : 200.0, "percentile" : { "99.000000" : 400 } } }
    }
  ]
}
"#;

    #[test]
    fn writes_with_fdatasync_add_the_sync_latency() {
        let durable = quick()
            .into_iter()
            .find(|c| c.mode == Mode::Durable)
            .expect("durable cell");
        let m = parse(SAMPLE, &durable).expect("parse");
        assert_eq!(m.iops, 1000.5);
        assert_eq!(m.mean_ns, 1000.0);
        assert_eq!(m.p99_ns, 1900.0);
        let warm_write = Cell {
            mode: Mode::Warm,
            ..durable
        };
        assert_eq!(parse(SAMPLE, &warm_write).expect("parse").mean_ns, 800.0);
    }

    #[test]
    fn a_pattern_fio_did_not_run_is_an_error() {
        let read = Cell {
            rw: Rw::RandRead,
            ..quick()[0]
        };
        assert!(parse(SAMPLE, &read).is_err());
        assert!(parse("no json here", &read).is_err());
    }

    #[test]
    fn cell_arguments_follow_the_mode() {
        let cells = quick();
        let args = cell_args(&cells[2], Path::new("/iris"), 1 << 20, 5);
        assert!(args.contains(&"--fdatasync=1".to_string()));
        assert!(args.contains(&"--direct=0".to_string()));
        assert!(args.contains(&"--directory=/iris".to_string()));
        assert!(args.contains(&FILENAME_FORMAT.to_string()));
        assert!(!args.contains(&"--thread".to_string()));
        let shared = Cell {
            mode: Mode::OneFile,
            jobs: 2,
            ..cells[1]
        };
        let args = cell_args(&shared, Path::new("/iris"), 1 << 20, 5);
        for want in [
            "--filename=bench.0",
            "--size=524288",
            "--offset_increment=524288",
            "--thread",
            "--direct=0",
            "--numjobs=2",
        ] {
            assert!(args.contains(&want.to_string()), "{want} in {args:?}");
        }
        assert!(!args.contains(&FILENAME_FORMAT.to_string()));
    }
}
