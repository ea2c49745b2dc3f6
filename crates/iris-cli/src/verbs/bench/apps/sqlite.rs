//! sqlite3: one row inserted per transaction with `synchronous=FULL` (rollback journal): every
//! insert creates, syncs and deletes a journal and syncs the database.

use std::process::Stdio;

use super::{Place, Sizes};
use crate::verbs::bench::process::Stop;

/// Bytes of random payload per row.
const ROW_BYTES: u32 = 100;

/// The result this benchmark reports.
pub fn names(sizes: Sizes) -> Vec<(String, String)> {
    vec![(
        "sqlite3 INSERT, synchronous=FULL".into(),
        format!(
            "PRAGMA synchronous=FULL; {} x INSERT INTO t(v) VALUES(randomblob({ROW_BYTES})), \
             one transaction each",
            sizes.sqlite_rows
        ),
    )]
}

/// The SQL the benchmark feeds sqlite3: `synchronous=FULL` when `durable`, else OFF (the run
/// on tmpfs with syncs off).
fn script(sizes: Sizes, durable: bool) -> String {
    let sync = if durable { "FULL" } else { "OFF" };
    let mut script =
        format!("PRAGMA synchronous={sync};\nCREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);\n");
    for _ in 0..sizes.sqlite_rows {
        script.push_str(&format!(
            "INSERT INTO t(v) VALUES(randomblob({ROW_BYTES}));\n"
        ));
    }
    script
}

/// Inserts per second (the process's whole run: opening the database is noise next to the
/// synced transactions).
pub fn run(place: &Place, sizes: Sizes) -> Result<Vec<f64>, Stop> {
    let dir = place.dir("sqlite")?;
    let script_path = place.scratch().join("sqlite-inserts.sql");
    std::fs::write(&script_path, script(sizes, place.durable()))
        .map_err(|e| Stop::Failed(crate::failure::host_failure(&script_path, &e)))?;
    let stdin = std::fs::File::open(&script_path)
        .map_err(|e| Stop::Failed(crate::failure::host_failure(&script_path, &e)))?;
    let mut cmd = place.command("sqlite3");
    cmd.arg(dir.join("bench.db")).stdin(Stdio::from(stdin));
    let out = place.run(&mut cmd);
    let _ = std::fs::remove_file(&script_path);
    let out = out?;
    let secs = out.elapsed.as_secs_f64();
    if secs <= 0.0 {
        return Err(Stop::Failed("sqlite3 took no time".into()));
    }
    Ok(vec![sizes.sqlite_rows as f64 / secs])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unsynced_run_turns_the_syncs_off_and_inserts_as_many_rows() {
        let sizes = Sizes::new(true);
        let (durable, unsynced) = (script(sizes, true), script(sizes, false));
        assert!(durable.starts_with("PRAGMA synchronous=FULL;"));
        assert!(unsynced.starts_with("PRAGMA synchronous=OFF;"));
        let inserts = |s: &str| s.matches("INSERT INTO").count() as u64;
        assert_eq!(inserts(&durable), sizes.sqlite_rows);
        assert_eq!(inserts(&unsynced), sizes.sqlite_rows);
    }
}
