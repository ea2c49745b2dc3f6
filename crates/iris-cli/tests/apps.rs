//! Several processes on one volume through the interposer: record locks, flock, shared offsets
//! after fork, concurrent sqlite3 writers.

use std::path::PathBuf;
use std::process::Command;

const IRIS: &str = env!("CARGO_BIN_EXE_iris");

struct Volume(PathBuf);

impl Volume {
    fn new(name: &str) -> Volume {
        let p = PathBuf::from(format!(
            "/dev/shm/iris-apps-{}-{name}.vol",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        Volume(p)
    }

    fn sh_ok(&self, script: &str) -> String {
        let out = Command::new(IRIS)
            .args(["run", "--volume"])
            .arg(&self.0)
            .args(["--", "sh", "-c", script])
            .output()
            .expect("run iris");
        assert!(
            out.status.success(),
            "script failed: {script}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn record_locks_and_flock_work_across_processes() {
    let v = Volume::new("locks");
    let script = r#"
import fcntl, os, sys, time
f = open("/iris/lockme", "a+")
if sys.argv[1] == "hold":
    fcntl.lockf(f, fcntl.LOCK_EX)
    fcntl.flock(f, fcntl.LOCK_EX)
    open("/iris/held", "w").close()
    time.sleep(1.0)
    sys.exit(0)
while not os.path.exists("/iris/held"):
    time.sleep(0.01)
try:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("lockf: granted while held")
except OSError as e:
    print("lockf: busy", e.errno == 11 or e.errno == 13)
try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("flock: granted while held")
except OSError as e:
    print("flock: busy", e.errno == 11)
t = time.time()
fcntl.lockf(f, fcntl.LOCK_EX)
fcntl.flock(f, fcntl.LOCK_EX)
print("waited", time.time() - t > 0.3)
"#;
    std::fs::write(
        format!("/dev/shm/iris-lk-{}.py", std::process::id()),
        script,
    )
    .expect("script");
    let py = format!("/dev/shm/iris-lk-{}.py", std::process::id());
    let out = v.sh_ok(&format!("python3 {py} hold & python3 {py} try; wait"));
    std::fs::remove_file(&py).ok();
    assert_eq!(out, "lockf: busy True\nflock: busy True\nwaited True\n");
}

#[test]
fn fork_shares_the_file_offset() {
    let v = Volume::new("fork");
    let out = v.sh_ok(
        r#"python3 -c '
import os
fd = os.open("/iris/shared", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
for i in range(50):
    pid = os.fork()
    if pid == 0:
        os.write(fd, b"c%02d\n" % i)
        os._exit(0)
    os.waitpid(pid, 0)
    os.write(fd, b"p%02d\n" % i)
os.close(fd)
data = open("/iris/shared", "rb").read()
print(len(data), data.count(b"\n"), data[:8])
'"#,
    );
    assert_eq!(out, "400 100 b'c00\\np00\\n'\n");
}

#[test]
fn concurrent_sqlite3_writers() {
    let v = Volume::new("sqlite-mp");
    v.sh_ok("sqlite3 /iris/mp.db 'create table t(w, i);'");
    let writer = |w: u32| {
        format!(
            "(for i in $(seq 1 200); do echo \"insert into t values({w}, $i);\"; done) | \
             sqlite3 -cmd '.timeout 20000' /iris/mp.db"
        )
    };
    let out = v.sh_ok(&format!(
        "{} & {} & {} & wait; sqlite3 /iris/mp.db 'pragma integrity_check; select count(*), count(distinct w) from t;'",
        writer(1),
        writer(2),
        writer(3)
    ));
    assert_eq!(out, "ok\n600|3\n");
}
