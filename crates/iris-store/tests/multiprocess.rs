//! Several processes on one volume: concurrent writers see each other's puts at once, and a
//! writer killed with SIGKILL at random instants loses no acknowledged commit (nor, on the same
//! boot, any completed put), and leaves the volume clean for the next opener.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use iris_store::{CreateOptions, Key, OpenOptions, Store};
use rand::{Rng, SeedableRng};

const WORKER: &str = env!("CARGO_BIN_EXE_iris-store-worker");

fn value(prefix: u64, i: u64) -> Vec<u8> {
    let len = 100 + (i as usize * 131) % 3996;
    (0..len)
        .map(|j| (prefix as usize * 7 + i as usize + j) as u8)
        .collect()
}

fn volume(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("iris-mp-{}-{name}.vol", std::process::id()));
    let _ = std::fs::remove_file(&p);
    let opts = CreateOptions {
        size_limit_bytes: 512 << 20,
        initial_bytes: 4 << 20,
        ..CreateOptions::default()
    };
    drop(Store::create(&p, &opts).expect("create"));
    p
}

#[test]
fn two_processes_see_each_others_puts_without_commit() {
    let path = volume("two");
    let store = Store::open(&path, &OpenOptions::default()).expect("open");
    let mut child = Command::new(WORKER)
        .args(["fill", path.to_str().expect("utf8"), "1", "3000", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Write our own keys while the child writes its keys.
    for i in 0..3000 {
        store.put(Key::new(2, i), &value(2, i)).expect("put");
    }
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().expect("line").expect("read"), "done");
    for i in 0..3000 {
        let ok = store
            .get_with(Key::new(1, i), |v| v == value(1, i).as_slice())
            .expect("get");
        assert_eq!(ok, Some(true), "child's key {i} not visible");
    }
    writeln!(child.stdin.take().expect("stdin")).expect("signal");
    assert_eq!(lines.next().expect("line").expect("read"), "saw 3000");
    assert!(child.wait().expect("wait").success());
    assert_eq!(store.verify().expect("verify").leaked_blocks, 0);
    drop(store);
    std::fs::remove_file(&path).ok();
}

#[test]
fn kill_9_loses_no_acknowledged_commit() {
    let path = volume("kill");
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    for round in 0..50u64 {
        let prefix = 100 + round;
        let mut child = Command::new(WORKER)
            .args([
                "writer",
                path.to_str().expect("utf8"),
                &prefix.to_string(),
                "7",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let stdout = child.stdout.take().expect("stdout");
        let reader = std::thread::spawn(move || {
            let mut last = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("acked ") {
                    last = n.parse::<u64>().ok();
                }
            }
            last
        });
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..120)));
        child.kill().expect("kill -9");
        child.wait().expect("wait");
        let acked = reader.join().expect("reader");

        // Same boot: the working tree survives the kill.
        let s = Store::open(&path, &OpenOptions::default()).expect("open after kill");
        if let Some(n) = acked {
            for i in 0..=n {
                let ok = s
                    .get_with(Key::new(prefix, i), |v| v == value(prefix, i).as_slice())
                    .expect("get");
                assert_eq!(
                    ok,
                    Some(true),
                    "round {round}: acked key {i} missing after kill"
                );
            }
        }
        let report = s.verify().expect("verify after kill");
        assert_eq!(report.leaked_blocks, 0, "round {round}");
        drop(s);

        // As after power loss: only commits count, and every acknowledged one is there.
        if round % 10 == 9 {
            let opts = OpenOptions {
                boot_id: Some(u128::from(round) + 1),
                commit_interval: None,
            };
            let s = Store::open(&path, &opts).expect("open as after reboot");
            if let Some(n) = acked {
                for i in 0..=n {
                    assert!(s
                        .get_with(Key::new(prefix, i), |_| ())
                        .expect("get")
                        .is_some());
                }
            }
            assert_eq!(s.verify().expect("verify").leaked_blocks, 0);
        }
    }
    std::fs::remove_file(&path).ok();
}
