//! End-to-end: unmodified Debian programs under `iris run`, results asserted.

use std::path::PathBuf;
use std::process::{Command, Output};

const IRIS: &str = env!("CARGO_BIN_EXE_iris");

struct Volume(PathBuf);

impl Volume {
    fn new(name: &str) -> Volume {
        let p = PathBuf::from(format!(
            "/dev/shm/iris-e2e-{}-{name}.vol",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        Volume(p)
    }

    /// `iris run --volume V -- sh -c SCRIPT`
    fn sh(&self, script: &str) -> Output {
        let out = Command::new(IRIS)
            .args(["run", "--volume"])
            .arg(&self.0)
            .args(["--", "sh", "-c", script])
            .output()
            .expect("run iris");
        if !out.status.success() {
            eprintln!(
                "script failed: {script}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        out
    }

    fn sh_ok(&self, script: &str) -> String {
        let out = self.sh(script);
        assert!(out.status.success(), "script failed: {script}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn fsck_clean(&self) {
        let out = Command::new(IRIS)
            .arg("fsck")
            .arg(&self.0)
            .output()
            .expect("fsck");
        assert!(
            out.status.success(),
            "fsck: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn exit_status_is_the_commands() {
    let v = Volume::new("exit");
    assert_eq!(v.sh("exit 7").status.code(), Some(7));
}

#[test]
fn paths_outside_the_prefix_are_untouched() {
    let v = Volume::new("host");
    let host = format!("/dev/shm/iris-e2e-host-{}", std::process::id());
    v.sh_ok(&format!(
        "sqlite3 {host} 'create table t(x); insert into t values(1);'"
    ));
    assert!(std::fs::metadata(&host).expect("host file").len() > 0);
    std::fs::remove_file(&host).ok();
}

#[test]
fn sqlite3_transactions_survive_and_check_clean() {
    let v = Volume::new("sqlite");
    let mut sql = String::from("create table t(id integer primary key, v text);");
    for chunk in 0..10 {
        sql.push_str("begin;");
        for i in 0..1000 {
            let id = chunk * 1000 + i;
            sql.push_str(&format!(
                "insert into t values({id}, 'row-{id}-{}');",
                "x".repeat(id % 50)
            ));
        }
        sql.push_str("commit;");
    }
    std::fs::write(
        format!("/dev/shm/iris-e2e-{}.sql", std::process::id()),
        &sql,
    )
    .expect("sql");
    v.sh_ok(&format!(
        "sqlite3 /iris/db.sqlite < /dev/shm/iris-e2e-{}.sql",
        std::process::id()
    ));
    std::fs::remove_file(format!("/dev/shm/iris-e2e-{}.sql", std::process::id())).ok();
    // A second run (a new process) sees the data, and the database checks clean.
    let out = v.sh_ok(
        "sqlite3 /iris/db.sqlite 'pragma integrity_check; select count(*), sum(id) from t;'",
    );
    assert_eq!(out, "ok\n10000|49995000\n");
    // Deletes and a rollback.
    let out = v.sh_ok(
        "sqlite3 /iris/db.sqlite 'delete from t where id % 2 = 0; begin; delete from t; rollback; select count(*) from t; pragma integrity_check;'",
    );
    assert_eq!(out, "5000\nok\n");
    v.fsck_clean();
}

#[test]
fn fio_random_write_then_read_verifies() {
    let v = Volume::new("fio");
    for rw in ["randwrite", "randread"] {
        let out = v.sh_ok(&format!(
            "fio --name=j --directory=/iris --size=16m --bs=4k --rw={rw} --ioengine=psync \
             --verify=crc32c --do_verify=1 --output-format=terse --terse-version=3"
        ));
        let fields: Vec<&str> = out.trim().split(';').collect();
        // terse v3: field 5 is the error code.
        assert_eq!(fields.get(4), Some(&"0"), "fio {rw} error: {out}");
    }
    v.fsck_clean();
}
