//! `iris bench`: the quick run measures every target it can set up, writes JSON with positive
//! numbers and an SVG chart, and leaves no mount, loop device or scratch file behind, also when
//! interrupted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const IRIS: &str = env!("CARGO_BIN_EXE_iris");

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// An output directory of its own, removed at the end.
struct OutDir(PathBuf);

impl OutDir {
    fn new(name: &str) -> OutDir {
        let p = std::env::temp_dir().join(format!("iris-bench-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("out dir");
        OutDir(p)
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Held by every test here: a run's files beside its volume in /dev/shm are told apart from
/// other runs' only by their absence before it (see [`iris_files`]).
static ONE_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One run at a time (a test that failed holding the lock does not stop the others).
fn one_run() -> std::sync::MutexGuard<'static, ()> {
    ONE_RUN.lock().unwrap_or_else(|e| e.into_inner())
}

/// The names of the files Iris keeps in /dev/shm (`iris-<kind>-<volume id>` and the like).
fn iris_files() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("iris-"))
        .collect()
}

/// Mounts and loop devices that mention `scratch` (the run's scratch directory).
fn leftovers(scratch: &Path) -> Vec<String> {
    let needle = scratch.display().to_string();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let loops = Command::new("losetup")
        .arg("-a")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    mounts
        .lines()
        .chain(loops.lines())
        .filter(|l| l.contains(&needle))
        .map(str::to_string)
        .collect()
}

/// The targets a quick run can measure here: the kernel ones need root.
fn targets() -> &'static str {
    if is_root() {
        "iris,floor,tmpfs,ext4,xfs,memcpy"
    } else {
        "iris,floor,tmpfs,memcpy"
    }
}

#[test]
fn quick_bench_writes_positive_numbers_and_a_chart() {
    let _one = one_run();
    let before = iris_files();
    let out = OutDir::new("quick");
    let child = Command::new(IRIS)
        .args(["bench", "--quick", "--targets", targets(), "--out-dir"])
        .arg(&out.0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iris bench");
    let scratch = PathBuf::from(format!("/dev/shm/iris-bench-{}", child.id()));
    let run = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("iris/kernel") && stdout.contains("iris/floor"),
        "{stdout}"
    );

    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(out.0.join("bench.json")).expect("bench.json"),
    )
    .expect("JSON");
    let ran: Vec<&str> = json["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for must in ["iris", "floor", "tmpfs", "memcpy"] {
        assert!(ran.contains(&must), "{must} did not run: {ran:?}\n{stderr}");
    }
    for skipped in json["skipped"].as_array().expect("skipped") {
        // Only a missing tool may skip a kernel target when running as root.
        assert!(
            !skipped["reason"].as_str().unwrap_or("").is_empty(),
            "{skipped}"
        );
    }
    let cells = json["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 3, "{json}");
    for cell in cells {
        for target in &ran {
            let iops = cell["results"][target]["iops"].as_f64().unwrap_or(0.0);
            assert!(
                iops > 0.0,
                "{target} in {}: {}",
                cell["label"],
                cell["results"]
            );
            let p99 = cell["results"][target]["p99_ns"].as_f64().unwrap_or(0.0);
            assert!(p99 > 0.0, "{target} in {}", cell["label"]);
        }
        assert!(cell["iris_over_floor"].as_f64().unwrap_or(0.0) > 0.0);
    }
    assert!(!json["goals"].as_array().expect("goals").is_empty());

    let svg = std::fs::read_to_string(out.0.join("bench.svg")).expect("bench.svg");
    assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.matches("<rect ").count() > 3 * ran.len());

    assert!(!scratch.exists(), "{} left behind", scratch.display());
    assert_eq!(leftovers(&scratch), Vec::<String>::new());
    let left: Vec<String> = iris_files().difference(&before).cloned().collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}

#[test]
fn an_interrupted_bench_removes_its_mounts_and_loop_devices() {
    if !is_root() {
        eprintln!("skipped: needs root for loop devices and mounts");
        return;
    }
    let _one = one_run();
    let out = OutDir::new("interrupt");
    let mut child = Command::new(IRIS)
        .args([
            "bench",
            "--quick",
            "--runtime",
            "30",
            "--targets",
            "ext4,iris",
            "--out-dir",
        ])
        .arg(&out.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iris bench");
    let scratch = PathBuf::from(format!("/dev/shm/iris-bench-{}", child.id()));
    // Wait until ext4 is mounted and fio is running on it.
    let start = Instant::now();
    while !(leftovers(&scratch).len() >= 2 && start.elapsed() > Duration::from_secs(2)) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no mount appeared"
        );
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "bench ended early"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let signalled = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(signalled.success());
    let run = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_eq!(leftovers(&scratch), Vec::<String>::new());
    assert!(!scratch.exists(), "{} left behind", scratch.display());
    assert!(!out.0.join("bench.json").exists());
}

#[test]
fn rounds_report_each_targets_median_run() {
    let _one = one_run();
    let out = OutDir::new("rounds");
    let run = Command::new(IRIS)
        .args([
            "bench",
            "--quick",
            "--rounds",
            "3",
            "--targets",
            "iris,floor",
        ])
        .arg("--out-dir")
        .arg(&out.0)
        .stdin(Stdio::null())
        .output()
        .expect("run iris bench");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(out.0.join("bench.json")).expect("bench.json"),
    )
    .expect("JSON");
    assert_eq!(json["rounds"].as_u64(), Some(3));
    for cell in json["cells"].as_array().expect("cells") {
        for target in ["iris", "floor"] {
            let r = &cell["results"][target];
            let mut runs: Vec<f64> = r["iops_runs"]
                .as_array()
                .unwrap_or_else(|| panic!("no runs for {target}: {cell}"))
                .iter()
                .filter_map(Value::as_f64)
                .collect();
            assert_eq!(runs.len(), 3, "{target}: {cell}");
            runs.sort_by(f64::total_cmp);
            assert_eq!(r["iops"].as_f64(), Some(runs[1]), "{target}: {cell}");
        }
    }

    for bad in ["0", "10"] {
        let run = Command::new(IRIS)
            .args(["bench", "--quick", "--rounds", bad, "--targets", "iris"])
            .arg("--out-dir")
            .arg(&out.0)
            .stdin(Stdio::null())
            .output()
            .expect("run iris bench");
        assert!(!run.status.success(), "--rounds {bad} accepted");
        assert!(
            String::from_utf8_lossy(&run.stderr).contains("--rounds must be 1 to 9"),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
}
