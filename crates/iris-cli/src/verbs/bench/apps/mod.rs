//! `iris bench --apps`: real applications on Iris against the same applications on ext4 over
//! the same medium (a loop device over a /dev/shm file): redis SET with `appendfsync always`,
//! sqlite3 inserts with `synchronous=FULL`, RocksDB db_bench fillrandom and readrandom. Each
//! also runs on tmpfs with its syncs turned off (`appendfsync no`, `synchronous=OFF`): what the
//! application reaches when durability costs nothing on the kernel's fastest path. Iris's
//! durable run at 1.00x of that or more gives the application its durability for free (it can
//! be above: Iris also saves the system calls tmpfs pays).

mod redis;
mod rocksdb;
mod sqlite;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::process::{self, Stop};
use super::steps::Steps;
use super::targets::FioTarget;

/// The longest one application run may take.
const APP_TIMEOUT: Duration = Duration::from_secs(600);

/// One application benchmark: Iris's and ext4's operations per second.
#[derive(Clone, Debug)]
pub struct AppResult {
    /// What ran, e.g. "redis SET, appendfsync always, 1 client".
    pub name: String,
    /// The exact workload, for the report.
    pub detail: String,
    /// Operations per second on Iris, or why there is no number.
    pub iris: Result<f64, String>,
    /// Operations per second on ext4, or why there is no number.
    pub ext4: Result<f64, String>,
    /// Operations per second on tmpfs with the application's syncs off, or why there is no
    /// number.
    pub unsynced: Result<f64, String>,
}

impl AppResult {
    /// Iris over ext4.
    pub fn ratio(&self) -> Option<f64> {
        match (&self.iris, &self.ext4) {
            (Ok(a), Ok(b)) if *b > 0.0 => Some(a / b),
            _ => None,
        }
    }

    /// Iris (durable) over the application on tmpfs with its syncs off (1.00x or more: its
    /// durability costs it nothing).
    pub fn of_unsynced(&self) -> Option<f64> {
        match (&self.iris, &self.unsynced) {
            (Ok(a), Ok(b)) if *b > 0.0 => Some(a / b),
            _ => None,
        }
    }

    /// The sides that produced no number.
    pub fn failures(&self) -> usize {
        [&self.iris, &self.ext4, &self.unsynced]
            .iter()
            .filter(|r| r.is_err())
            .count()
    }
}

/// Where an application runs: a directory (as the application sees it) and the environment
/// that puts it on its target.
pub struct Place<'a> {
    target: &'a FioTarget,
    scratch: &'a Path,
    durable: bool,
}

impl Place<'_> {
    /// A command for `program` with the target's environment.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.envs(self.target.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// A fresh directory `name` on the target (made through the target, so under Iris it is
    /// made in the volume).
    pub fn dir(&self, name: &str) -> Result<PathBuf, Stop> {
        let dir = self.target.dir.join("apps").join(name);
        let mut cmd = self.command("sh");
        cmd.arg("-c")
            .arg("rm -rf \"$1\" && mkdir -p \"$1\"")
            .arg("sh")
            .arg(&dir);
        self.run(&mut cmd)?;
        Ok(dir)
    }

    /// Run `cmd` to completion (it was made by [`Place::command`] or needs no target).
    pub fn run(&self, cmd: &mut Command) -> Result<process::Finished, Stop> {
        process::run(cmd, self.scratch, APP_TIMEOUT)
    }

    /// The scratch directory (on the host, for scripts and logs).
    pub fn scratch(&self) -> &Path {
        self.scratch
    }

    /// Whether the application syncs as its benchmark says (false: the run on tmpfs with its
    /// syncs off).
    pub fn durable(&self) -> bool {
        self.durable
    }
}

/// How big the application runs are.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// redis SETs.
    pub redis_requests: u64,
    /// sqlite3 INSERT transactions.
    pub sqlite_rows: u64,
    /// db_bench keys.
    pub rocksdb_keys: u64,
}

impl Sizes {
    /// Full or quick.
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                redis_requests: 2_000,
                sqlite_rows: 500,
                rocksdb_keys: 20_000,
            }
        } else {
            Sizes {
                redis_requests: 20_000,
                sqlite_rows: 5_000,
                rocksdb_keys: 200_000,
            }
        }
    }
}

/// One application: its results' names and workloads, and how to run it on a place.
struct App {
    program: &'static str,
    names: Vec<(String, String)>,
    run: fn(&Place, Sizes) -> Result<Vec<f64>, Stop>,
}

/// The steps [`run`] reports progress for: three applications on three sides.
pub const STEP_COUNT: u64 = 9;

/// Run every application on Iris, on ext4, and on tmpfs with its syncs off (`unsynced`)
/// (`Err`: that side is not available, and why).
pub fn run(
    iris: Result<&FioTarget, String>,
    ext4: Result<&FioTarget, String>,
    unsynced: Result<&FioTarget, String>,
    scratch: &Path,
    sizes: Sizes,
    steps: &Steps,
) -> Result<Vec<AppResult>, Stop> {
    let benches = [
        App {
            program: "redis",
            names: redis::names(sizes),
            run: redis::run,
        },
        App {
            program: "sqlite3",
            names: sqlite::names(sizes),
            run: sqlite::run,
        },
        App {
            program: "db_bench",
            names: rocksdb::names(sizes),
            run: rocksdb::run,
        },
    ];
    let mut results = Vec::new();
    for App {
        program,
        names,
        run: bench,
    } in benches
    {
        let mut sides = Vec::new();
        for (side, target, durable) in [
            ("iris", &iris, true),
            ("ext4", &ext4, true),
            ("tmpfs, syncs off", &unsynced, false),
        ] {
            steps.start(&format!("{program} on {side}"));
            let outcome = match target {
                Err(why) => Err(why.clone()),
                Ok(target) => {
                    let place = Place {
                        target,
                        scratch,
                        durable,
                    };
                    match bench(&place, sizes) {
                        Ok(v) if v.len() == names.len() => Ok(v),
                        Ok(_) => Err(format!("{program} reported the wrong number of results")),
                        Err(Stop::Interrupted) => return Err(Stop::Interrupted),
                        Err(Stop::Failed(why)) => Err(why),
                    }
                }
            };
            if let Err(why) = &outcome {
                steps.warn(&format!("bench: {program} on {side}: {why}"));
            }
            steps.done();
            sides.push(outcome);
        }
        for (i, (name, detail)) in names.into_iter().enumerate() {
            let pick = |o: &Result<Vec<f64>, String>| o.clone().map(|v| v[i]);
            results.push(AppResult {
                name,
                detail,
                iris: pick(&sides[0]),
                ext4: pick(&sides[1]),
                unsynced: pick(&sides[2]),
            });
        }
    }
    Ok(results)
}

/// The number after `key` in a line such as "fillrandom : 3.0 micros/op 331459 ops/sec".
pub fn number_before(line: &str, unit: &str) -> Option<f64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == unit)?;
    words.get(at.checked_sub(1)?)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_found_before_their_unit() {
        let line = "fillrandom   :       6.243 micros/op 160125 ops/sec 0.125 seconds";
        assert_eq!(number_before(line, "ops/sec"), Some(160125.0));
        assert_eq!(number_before(line, "micros/op"), Some(6.243));
        assert_eq!(number_before(line, "fillrandom"), None);
    }
}
