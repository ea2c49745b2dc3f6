//! Every `iris` verb end to end on real volume files under /dev/shm: output, exit status, and the
//! refusals (overwriting a non-volume, a missing path, a duplicate snapshot, a corrupt volume).

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use filetime::FileTime;

const IRIS: &str = env!("CARGO_BIN_EXE_iris");

/// Block size tests create volumes with (the default).
const BLOCK_BYTES: u64 = 4096;

/// A volume path and a host directory of one test, removed on drop.
struct Scratch {
    dir: PathBuf,
    vol: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let base = format!("/dev/shm/iris-cli-{}-{name}", std::process::id());
        let scratch = Scratch {
            dir: PathBuf::from(&base),
            vol: PathBuf::from(format!("{base}.vol")),
        };
        let _ = std::fs::remove_dir_all(&scratch.dir);
        let _ = std::fs::remove_file(&scratch.vol);
        std::fs::create_dir_all(&scratch.dir).expect("scratch dir");
        scratch
    }

    /// A new scratch with a 64 MiB volume made.
    fn with_volume(name: &str) -> Scratch {
        let s = Scratch::new(name);
        iris_ok([
            OsStr::new("mkfs"),
            OsStr::new("--size"),
            OsStr::new("64M"),
            s.vol.as_os_str(),
        ]);
        s
    }

    /// A path under the host directory.
    fn host(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// `iris VERB [ARGS...]` with the volume as the first argument after the verb's words.
    fn on(&self, verb: &[&str], rest: &[&str]) -> Run {
        let mut args: Vec<&OsStr> = verb.iter().map(OsStr::new).collect();
        args.push(self.vol.as_os_str());
        args.extend(rest.iter().map(OsStr::new));
        iris(args)
    }

    fn on_ok(&self, verb: &[&str], rest: &[&str]) -> String {
        let run = self.on(verb, rest);
        assert_eq!(run.code, Some(0), "iris {verb:?} {rest:?}: {run:?}");
        run.stdout
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // A test may leave read-only directories behind: make them removable first.
        let _ = Command::new("chmod")
            .args(["-R", "u+rwx"])
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.vol);
    }
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Failed with `code` and exactly one stderr line, "iris: ..." containing `needle`.
    fn assert_refused(&self, code: i32, needle: &str) {
        assert_eq!(self.code, Some(code), "{self:?}");
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one stderr line expected: {self:?}");
        assert!(lines[0].starts_with("iris: "), "{self:?}");
        assert!(lines[0].contains(needle), "{needle:?} not in {self:?}");
    }
}

fn iris<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = Command::new(IRIS).args(args).output().expect("run iris");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn iris_ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let run = iris(args);
    assert_eq!(run.code, Some(0), "{run:?}");
    run.stdout
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        == 0
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("valid JSON")
}

#[test]
fn every_verb_has_help() {
    let verbs: &[&[&str]] = &[
        &["mkfs"],
        &["run"],
        &["stat"],
        &["df"],
        &["fsck"],
        &["ls"],
        &["cat"],
        &["filefrag"],
        &["put"],
        &["get"],
        &["rm"],
        &["mkdir"],
        &["snapshot"],
        &["snapshot", "create"],
        &["snapshot", "list"],
        &["snapshot", "delete"],
        &["snapshot", "rollback"],
    ];
    for verb in verbs {
        let mut args = verb.to_vec();
        args.push("--help");
        let out = iris_ok(&args);
        assert!(out.contains("Usage: iris"), "{verb:?}: {out}");
    }
    let out = iris_ok(["--help"]);
    for verb in ["mkfs", "df", "put", "get", "snapshot"] {
        assert!(out.contains(verb), "{verb} missing from iris --help");
    }
}

#[test]
fn bad_usage_is_one_line_and_exit_2() {
    iris(["put"]).assert_refused(2, "required arguments");
    iris(["mkfs", "--size", "12X", "/dev/shm/x.vol"]).assert_refused(2, "bad size");
    iris(["frobnicate"]).assert_refused(2, "frobnicate");
    iris(["ls", "--bogus", "v"]).assert_refused(2, "--bogus");
}

#[test]
fn mkfs_refuses_to_overwrite_a_file_that_is_not_a_volume() {
    let s = Scratch::new("mkfs");
    let vol = path_str(&s.vol);
    std::fs::write(&s.vol, "precious data\n").expect("write");
    iris(["mkfs", vol]).assert_refused(1, "not an Iris volume; use --force");
    assert_eq!(
        std::fs::read_to_string(&s.vol).expect("read"),
        "precious data\n",
        "the refused file must be untouched"
    );
    let out = iris_ok(["mkfs", "--size", "64M", "--force", vol]);
    assert!(out.contains("created"), "{out}");
    iris_ok(["fsck", vol]);
    // An existing volume is not recreated without --force either.
    iris(["mkfs", vol]).assert_refused(1, "already an Iris volume");
    iris_ok(["mkfs", "--size", "64M", "--force", vol]);
    // An empty file is fair game.
    std::fs::write(&s.vol, "").expect("truncate");
    iris_ok(["mkfs", "--size", "64M", "--block-size", "512", vol]);
    let st = json(&s.on_ok(&["stat", "--json"], &[]));
    assert_eq!(st["block_size"], 512);
    std::fs::write(&s.vol, "").expect("truncate");
    iris(["mkfs", "--block-size", "1000", vol]).assert_refused(1, "power of two");
}

/// What a host tree holds, entry by entry, to compare two trees.
fn describe_tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let path = root.join(&rel);
        let meta = std::fs::symlink_metadata(&path).expect("lstat");
        let mut line = format!(
            "{} mode={:o} mtime={}.{:09}",
            rel.display(),
            meta.mode(),
            meta.mtime(),
            meta.mtime_nsec()
        );
        if is_root() {
            line.push_str(&format!(" owner={}:{}", meta.uid(), meta.gid()));
        }
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).expect("readlink");
            line.push_str(&format!(" -> {}", target.display()));
        } else if meta.is_file() {
            let data = std::fs::read(&path).expect("read");
            let sum = data
                .iter()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(*b)));
            line.push_str(&format!(" size={} sum={sum:x}", data.len()));
        } else if meta.is_dir() {
            for entry in std::fs::read_dir(&path).expect("readdir") {
                pending.push(rel.join(entry.expect("entry").file_name()));
            }
        }
        out.push(line);
    }
    out.sort();
    out
}

#[test]
fn put_and_get_round_trip_a_tree_keeping_modes_times_and_symlinks() {
    let s = Scratch::with_volume("tree");
    let src = s.host("src");
    std::fs::create_dir_all(src.join("sub/empty")).expect("mkdir");
    std::fs::create_dir_all(src.join("ro")).expect("mkdir");
    std::fs::write(src.join("hello"), "hello\n").expect("write");
    std::fs::write(src.join("ro/inside"), "kept\n").expect("write");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(src.join("sub/big"), &big).expect("write");
    // 5 MiB, all holes but 4 KiB of data at 3 MiB.
    let sparse = std::fs::File::create(src.join("sub/sparse")).expect("create");
    sparse.set_len(5 << 20).expect("set_len");
    std::os::unix::fs::FileExt::write_all_at(&sparse, &[0xab; 4096], 3 << 20).expect("write");
    drop(sparse);
    std::fs::write(src.join("run.sh"), "#!/bin/sh\necho hi\n").expect("write");
    std::os::unix::fs::symlink("hello", src.join("link")).expect("symlink");
    std::os::unix::fs::symlink("/nowhere/at/all", src.join("sub/dangling")).expect("symlink");
    for (rel, mode) in [
        ("hello", 0o640),
        ("run.sh", 0o755),
        ("sub/big", 0o600),
        ("sub/sparse", 0o2644),
        ("sub/empty", 0o700),
    ] {
        std::fs::set_permissions(src.join(rel), std::fs::Permissions::from_mode(mode))
            .expect("chmod");
    }
    if is_root() {
        std::os::unix::fs::lchown(src.join("hello"), Some(1234), Some(5678)).expect("chown");
        std::os::unix::fs::lchown(src.join("link"), Some(4321), Some(8765)).expect("chown");
    }
    let old = FileTime::from_unix_time(981_173_106, 123_456_789);
    let older = FileTime::from_unix_time(949_000_000, 5);
    for rel in ["hello", "sub/big", "run.sh", "ro/inside"] {
        filetime::set_file_times(src.join(rel), older, old).expect("utimes");
    }
    filetime::set_symlink_file_times(src.join("link"), older, old).expect("lutimes");
    // Directories last: filling them changed their times.
    for rel in ["sub/empty", "sub", "ro", ""] {
        filetime::set_file_times(src.join(rel), older, old).expect("utimes");
    }
    std::fs::set_permissions(src.join("ro"), std::fs::Permissions::from_mode(0o555))
        .expect("chmod");

    s.on_ok(&["put", "-r"], &[path_str(&src), "/"]);
    let listing = s.on_ok(&["ls", "-l"], &["/src"]);
    assert!(listing.contains("-rw-r----- "), "{listing}");
    assert!(listing.contains("-rwxr-xr-x "), "{listing}");
    assert!(listing.contains("dr-xr-xr-x "), "{listing}");
    assert!(listing.contains("link -> hello"), "{listing}");
    assert!(listing.contains("2001-02-03 04:05:06 hello"), "{listing}");
    if is_root() {
        assert!(listing.contains(" 1234  5678 "), "{listing}");
    }
    assert_eq!(s.on_ok(&["cat"], &["/src/link"]), "hello\n");
    let sub = s.on_ok(&["ls", "-l"], &["/src/sub"]);
    assert!(sub.contains("-rw-r-Sr-- "), "{sub}");
    assert!(sub.contains("dangling -> /nowhere/at/all"), "{sub}");

    let out = s.host("out");
    s.on_ok(&["get", "-r"], &["/src", path_str(&out)]);
    // Times first: reading the contents may touch atimes.
    let atime = std::fs::metadata(out.join("sub/big"))
        .expect("stat")
        .atime();
    assert_eq!(atime, older.unix_seconds());
    assert_eq!(describe_tree(&src), describe_tree(&out));
    let sparse_meta = std::fs::metadata(out.join("sub/sparse")).expect("stat");
    assert_eq!(sparse_meta.len(), 5 << 20);
    assert!(
        sparse_meta.blocks() * 512 <= 2 << 20,
        "holes kept: {} blocks allocated",
        sparse_meta.blocks()
    );
    // Into an existing directory, each source lands under its own name.
    let again = s.host("again");
    std::fs::create_dir(&again).expect("mkdir");
    s.on_ok(
        &["get", "-r"],
        &["/src/sub", "/src/hello", path_str(&again)],
    );
    assert_eq!(
        std::fs::read(again.join("sub/big")).expect("read"),
        big,
        "big file round trip"
    );
    assert_eq!(
        std::fs::read_to_string(again.join("hello")).expect("read"),
        "hello\n"
    );
    s.on_ok(&["fsck"], &[]);
}

#[test]
fn put_and_get_single_files_by_name_and_into_directories() {
    let s = Scratch::with_volume("single");
    let a = s.host("a.txt");
    let b = s.host("b.txt");
    std::fs::write(&a, "alpha\n").expect("write");
    std::fs::write(&b, "beta\n").expect("write");
    // A file to a new name, then over it.
    s.on_ok(&["put"], &[path_str(&a), "/renamed"]);
    assert_eq!(s.on_ok(&["cat"], &["/renamed"]), "alpha\n");
    s.on_ok(&["put"], &[path_str(&b), "/renamed"]);
    assert_eq!(s.on_ok(&["cat"], &["/renamed"]), "beta\n");
    // Several files into a directory.
    s.on_ok(&["mkdir"], &["/d"]);
    s.on_ok(&["put"], &[path_str(&a), path_str(&b), "/d"]);
    assert_eq!(s.on_ok(&["ls"], &["/d"]), "a.txt\nb.txt\n");
    // Several files need a directory; a directory needs -r.
    s.on(&["put"], &[path_str(&a), path_str(&b), "/renamed"])
        .assert_refused(1, "not a directory");
    s.on(&["put"], &[path_str(&s.dir), "/x"])
        .assert_refused(1, "is a directory (use -r)");
    s.on(&["put"], &[path_str(&s.host("missing")), "/x"])
        .assert_refused(1, "No such file or directory");
    // Out again: to a new host name, and into a host directory.
    let got = s.host("got.txt");
    s.on_ok(&["get"], &["/d/a.txt", path_str(&got)]);
    assert_eq!(std::fs::read_to_string(&got).expect("read"), "alpha\n");
    let into = s.host("into");
    std::fs::create_dir(&into).expect("mkdir");
    s.on_ok(&["get"], &["/d/a.txt", "/d/b.txt", path_str(&into)]);
    assert_eq!(
        std::fs::read_to_string(into.join("b.txt")).expect("read"),
        "beta\n"
    );
    s.on(&["get"], &["/d/a.txt", "/d/b.txt", path_str(&got)])
        .assert_refused(1, "not a directory");
    s.on(&["get"], &["/d", path_str(&s.host("dcopy"))])
        .assert_refused(1, "is a directory (use -r)");
    // The volume is never overwritten by an export.
    s.on(&["get"], &["/d/a.txt", path_str(&s.vol)])
        .assert_refused(1, "is the volume itself");
}

#[test]
fn get_of_a_missing_path_fails_and_writes_nothing() {
    let s = Scratch::with_volume("getmissing");
    let target = s.host("never");
    s.on(&["get"], &["/no/such/file", path_str(&target)])
        .assert_refused(1, "/no/such/file: No such file or directory");
    assert!(!target.exists());
    // Checked before copying anything: a good source before a missing one is not copied either.
    std::fs::write(s.host("f"), "x").expect("write");
    s.on_ok(&["put"], &[path_str(&s.host("f")), "/f"]);
    let dir = s.host("dir");
    std::fs::create_dir(&dir).expect("mkdir");
    s.on(&["get"], &["/f", "/missing", path_str(&dir)])
        .assert_refused(1, "/missing: No such file or directory");
    assert!(!dir.join("f").exists());
}

#[test]
fn put_skips_special_files_and_exits_1() {
    let s = Scratch::with_volume("fifo");
    let src = s.host("src");
    std::fs::create_dir(&src).expect("mkdir");
    std::fs::write(src.join("plain"), "p").expect("write");
    let status = Command::new("mkfifo")
        .arg(src.join("pipe"))
        .status()
        .expect("mkfifo");
    assert!(status.success());
    let run = s.on(&["put", "-r"], &[path_str(&src), "/src"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stderr.contains("pipe: skipped"), "{run:?}");
    assert!(
        run.stderr.lines().all(|l| l.starts_with("iris: ")),
        "{run:?}"
    );
    // The rest was copied and committed.
    assert_eq!(s.on_ok(&["ls"], &["/src"]), "plain\n");
}

#[test]
fn progress_bar_stays_off_when_stderr_is_not_a_terminal() {
    let s = Scratch::with_volume("quiet");
    let src = s.host("many");
    std::fs::create_dir(&src).expect("mkdir");
    for i in 0..200 {
        std::fs::write(src.join(format!("f{i:03}")), format!("{i}\n")).expect("write");
    }
    let run = s.on(&["put", "-r"], &[path_str(&src), "/many"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stderr, "", "nothing on a non-terminal stderr");
    let out = s.host("back");
    let run = s.on(&["get", "-r"], &["/many", path_str(&out)]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stderr, "");
    assert_eq!(std::fs::read_dir(&out).expect("readdir").count(), 200);
    assert_eq!(
        std::fs::read_to_string(out.join("f123")).expect("read"),
        "123\n"
    );
}

#[test]
fn ls_lists_sorted_names_and_long_form() {
    let s = Scratch::with_volume("ls");
    s.on_ok(&["mkdir", "-p"], &["/dir/zeta", "/dir/alpha"]);
    std::fs::write(s.host("f"), "12345").expect("write");
    s.on_ok(&["put"], &[path_str(&s.host("f")), "/dir/mid"]);
    assert_eq!(s.on_ok(&["ls"], &[]), "dir\n");
    assert_eq!(s.on_ok(&["ls"], &["/dir"]), "alpha\nmid\nzeta\n");
    let long = s.on_ok(&["ls", "-l"], &["/dir/mid"]);
    assert!(long.starts_with("-rw-"), "{long}");
    assert!(long.contains("         5 "), "{long}");
    assert!(long.trim_end().ends_with(" /dir/mid"), "{long}");
    let both = s.on_ok(&["ls"], &["/", "/dir"]);
    assert_eq!(both, "/:\ndir\n\n/dir:\nalpha\nmid\nzeta\n");
    s.on(&["ls"], &["/nope"])
        .assert_refused(1, "/nope: No such file or directory");
    iris(["ls", "/dev/shm/iris-cli-no-such.vol"]).assert_refused(1, "No such file or directory");
}

#[test]
fn cat_prints_files_and_refuses_directories() {
    let s = Scratch::with_volume("cat");
    std::fs::write(s.host("one"), "first\n").expect("write");
    std::fs::write(s.host("two"), "second\n").expect("write");
    s.on_ok(
        &["put"],
        &[path_str(&s.host("one")), path_str(&s.host("two")), "/"],
    );
    assert_eq!(s.on_ok(&["cat"], &["/one", "/two"]), "first\nsecond\n");
    s.on(&["cat"], &["/"]).assert_refused(1, "Is a directory");
    s.on(&["cat"], &["/three"])
        .assert_refused(1, "No such file or directory");
}

#[test]
fn filefrag_counts_a_files_extents_and_lists_them() {
    let s = Scratch::with_volume("frag");
    // 64 blocks copied in order, and a file short enough to live in its leaf.
    std::fs::write(s.host("big"), vec![b'x'; 64 * 4096]).expect("write");
    std::fs::write(s.host("small"), "tiny").expect("write");
    s.on_ok(
        &["put"],
        &[path_str(&s.host("big")), path_str(&s.host("small")), "/"],
    );
    let summary = s.on_ok(&["filefrag"], &["/big"]);
    let n: u64 = summary
        .strip_prefix("/big: ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no extent count in {summary:?}"));
    assert!((1..=64).contains(&n), "{summary}");
    // The listing has one row per extent, whose lengths add up to the file's blocks, and
    // whose file blocks follow each other.
    let listing = s.on_ok(&["filefrag", "-v"], &["/big"]);
    let rows: Vec<Vec<&str>> = listing
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len() as u64, n, "{listing}");
    let mut next = 0u64;
    for row in &rows {
        let (first, last) = row[1].split_once("..").expect("a range of file blocks");
        assert_eq!(first.parse::<u64>().ok(), Some(next), "{listing}");
        let len: u64 = row[3].parse().expect("a length");
        assert_eq!(last.parse::<u64>().ok(), Some(next + len - 1), "{listing}");
        next += len;
    }
    assert_eq!(next, 64, "{listing}");
    assert_eq!(
        s.on_ok(&["filefrag"], &["/small"]),
        "/small: 0 extents found (and 1 block inline in the tree)\n"
    );
    s.on(&["filefrag"], &["/"])
        .assert_refused(1, "Is a directory");
    s.on(&["filefrag"], &["/none"])
        .assert_refused(1, "No such file or directory");
}

#[test]
fn cat_into_a_closed_pipe_stops_quietly() {
    let s = Scratch::with_volume("pipe");
    std::fs::write(s.host("big"), vec![b'x'; 4 << 20]).expect("write");
    s.on_ok(&["put"], &[path_str(&s.host("big")), "/big"]);
    let mut child = Command::new(IRIS)
        .arg("cat")
        .arg(&s.vol)
        .arg("/big")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).expect("read");
    drop(stdout);
    let out = child.wait_with_output().expect("wait");
    // As a shell reports a writer killed by SIGPIPE, with nothing on stderr.
    assert_eq!(out.status.code(), Some(141));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn rm_removes_files_and_trees_and_refuses_directories_without_r() {
    let s = Scratch::with_volume("rm");
    s.on_ok(&["mkdir", "-p"], &["/t/a/b", "/t/c"]);
    std::fs::write(s.host("f"), "data").expect("write");
    s.on_ok(&["put"], &[path_str(&s.host("f")), "/t/a/b/f"]);
    s.on_ok(&["put"], &[path_str(&s.host("f")), "/top"]);
    s.on_ok(&["rm"], &["/top"]);
    s.on(&["rm"], &["/t"])
        .assert_refused(1, "is a directory (use -r)");
    s.on(&["rm"], &["/top"])
        .assert_refused(1, "No such file or directory");
    s.on_ok(&["rm", "-f"], &["/top"]);
    s.on(&["rm", "-r"], &["/"])
        .assert_refused(1, "refusing to remove the root");
    s.on_ok(&["rm", "-r"], &["/t"]);
    assert_eq!(s.on_ok(&["ls"], &[]), "");
    s.on_ok(&["fsck"], &[]);
}

#[test]
fn mkdir_makes_directories_and_parents() {
    let s = Scratch::with_volume("mkdir");
    s.on_ok(&["mkdir"], &["/a"]);
    s.on(&["mkdir"], &["/a"]).assert_refused(1, "File exists");
    s.on(&["mkdir"], &["/x/y"])
        .assert_refused(1, "/x/y: No such file or directory");
    s.on_ok(&["mkdir", "-p"], &["/a/b/c", "/a"]);
    s.on_ok(&["mkdir", "-m", "700"], &["/private"]);
    let long = s.on_ok(&["ls", "-l"], &[]);
    assert!(long.contains("drwx------ "), "{long}");
    assert_eq!(s.on_ok(&["ls"], &["/a/b"]), "c\n");
    std::fs::write(s.host("f"), "").expect("write");
    s.on_ok(&["put"], &[path_str(&s.host("f")), "/file"]);
    s.on(&["mkdir", "-p"], &["/file/sub"])
        .assert_refused(1, "Not a directory");
}

#[test]
fn snapshots_create_list_delete_and_rollback_restores_old_contents() {
    let s = Scratch::with_volume("snap");
    let f = s.host("f");
    std::fs::write(&f, "old contents\n").expect("write");
    s.on_ok(&["put"], &[path_str(&f), "/f"]);
    let out = s.on_ok(&["snapshot", "create"], &["before"]);
    assert!(out.contains("before"), "{out}");
    s.on(&["snapshot", "create"], &["before"])
        .assert_refused(1, "exists already");
    s.on(&["snapshot", "create"], &["a-name-longer-than-24-bytes"])
        .assert_refused(1, "1 to 24 bytes");
    std::fs::write(&f, "new contents\n").expect("write");
    s.on_ok(&["put"], &[path_str(&f), "/f"]);
    s.on_ok(&["mkdir"], &["/later"]);
    assert_eq!(s.on_ok(&["cat"], &["/f"]), "new contents\n");

    let text = s.on_ok(&["snapshot", "list"], &[]);
    assert!(text.starts_with("before "), "{text}");
    let list = json(&s.on_ok(&["snapshot", "list", "--json"], &[]));
    assert_eq!(list[0]["name"], "before");
    assert!(list[0]["generation"].as_u64().expect("generation") > 0);

    s.on_ok(&["snapshot", "rollback"], &["before"]);
    assert_eq!(s.on_ok(&["cat"], &["/f"]), "old contents\n");
    assert_eq!(s.on_ok(&["ls"], &[]), "f\n");
    s.on_ok(&["fsck"], &[]);

    s.on_ok(&["snapshot", "delete"], &["before"]);
    s.on(&["snapshot", "delete"], &["before"])
        .assert_refused(1, "no snapshot named");
    s.on(&["snapshot", "rollback"], &["before"])
        .assert_refused(1, "no snapshot named");
    assert_eq!(s.on_ok(&["snapshot", "list"], &[]), "");
    assert_eq!(
        json(&s.on_ok(&["snapshot", "list", "--json"], &[])),
        json("[]")
    );
    s.on_ok(&["fsck"], &[]);
}

#[test]
fn stat_prints_text_and_json() {
    let s = Scratch::with_volume("stat");
    s.on_ok(&["snapshot", "create"], &["s1"]);
    let text = s.on_ok(&["stat"], &[]);
    for field in [
        "block size:      4096",
        "generation:",
        "commits:",
        "tree:",
        "snapshot:        s1",
    ] {
        assert!(text.contains(field), "{field:?} missing: {text}");
    }
    let st = json(&s.on_ok(&["stat", "--json"], &[]));
    assert_eq!(st["block_size"], 4096);
    assert_eq!(st["max_blocks"], (64 << 20) / BLOCK_BYTES);
    assert_eq!(st["snapshots"][0]["name"], "s1");
    assert!(st["tree"]["entries"].as_u64().expect("entries") > 0);
    assert_eq!(st["dirty"], false);
}

#[test]
fn df_reports_sizes_in_human_units_and_json() {
    let s = Scratch::with_volume("df");
    let text = s.on_ok(&["df"], &[]);
    let mut lines = text.lines();
    let header = lines.next().expect("header");
    for column in ["Size", "Used", "Free", "Snapshot-held"] {
        assert!(header.contains(column), "{header}");
    }
    let row: Vec<&str> = lines.next().expect("row").split_whitespace().collect();
    assert_eq!(row[1], "64M", "{text}");

    let before = json(&s.on_ok(&["df", "--json"], &[]));
    let size = before["size_bytes"].as_u64().expect("size");
    let used = before["used_bytes"].as_u64().expect("used");
    let free = before["free_bytes"].as_u64().expect("free");
    assert_eq!(size, 64 << 20);
    assert_eq!(used + free, size);
    assert_eq!(before["snapshot_held_bytes"], 0);

    // A file only a snapshot still holds shows as snapshot-held space.
    std::fs::write(s.host("big"), vec![7u8; 2 << 20]).expect("write");
    s.on_ok(&["put"], &[path_str(&s.host("big")), "/big"]);
    s.on_ok(&["snapshot", "create"], &["keep"]);
    s.on_ok(&["rm"], &["/big"]);
    let after = json(&s.on_ok(&["df", "--json"], &[]));
    let held = after["snapshot_held_bytes"].as_u64().expect("held");
    assert!(held >= 2 << 20, "snapshot holds the removed file: {after}");
    s.on_ok(&["snapshot", "delete"], &["keep"]);
    let freed = json(&s.on_ok(&["df", "--json"], &[]));
    assert_eq!(freed["snapshot_held_bytes"], 0);
    assert!(freed["used_bytes"].as_u64().expect("used") < used + (1 << 20));
}

/// Overwrite bytes in the middle of every tree node (magic "IRL2" leaf or "IRI2" internal at the
/// start of a block), where its slots are: some of them are the committed tree's.
fn corrupt_tree_nodes(vol: &Path) -> usize {
    let mut bytes = std::fs::read(vol).expect("read volume");
    let mut corrupted = 0;
    for block in bytes.chunks_mut(BLOCK_BYTES as usize) {
        if block.starts_with(b"IRL2") || block.starts_with(b"IRI2") {
            block[40..140].fill(0xa5);
            corrupted += 1;
        }
    }
    std::fs::write(vol, &bytes).expect("write volume");
    corrupted
}

/// A volume with some files in it.
fn populated(name: &str) -> Scratch {
    let s = Scratch::with_volume(name);
    let src = s.host("src");
    std::fs::create_dir(&src).expect("mkdir");
    for i in 0..50 {
        std::fs::write(src.join(format!("f{i}")), vec![i as u8; 10_000]).expect("write");
    }
    s.on_ok(&["put", "-r"], &[path_str(&src), "/src"]);
    s
}

#[test]
fn fsck_passes_a_clean_volume_and_fails_a_missing_one() {
    let s = populated("fsckclean");
    let out = s.on_ok(&["fsck"], &[]);
    assert!(out.contains("clean"), "{out}");
    s.on_ok(&["fsck", "--repair"], &[]);
    iris(["fsck", "/dev/shm/iris-cli-no-such.vol"]).assert_refused(8, "No such file or directory");
}

#[test]
fn fsck_on_a_corrupted_tree_node_exits_4() {
    let s = populated("fsckcorrupt");
    assert!(corrupt_tree_nodes(&s.vol) > 0, "no tree node found");
    s.on(&["fsck"], &[]).assert_refused(4, "corrupt volume");
    // Nothing to repair it from: --repair leaves it, and says so by exit 4.
    s.on(&["fsck", "--repair"], &[])
        .assert_refused(4, "corrupt volume");
}

#[test]
fn fsck_on_a_truncated_volume_exits_4() {
    let s = populated("fscktrunc");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&s.vol)
        .expect("open");
    file.set_len(16 << 10).expect("truncate");
    drop(file);
    s.on(&["fsck"], &[]).assert_refused(4, "truncated");
    // The other verbs refuse it on one line too.
    s.on(&["ls"], &[]).assert_refused(1, "corrupt volume");
}

#[test]
fn fsck_repair_frees_a_leaked_block_and_exits_1() {
    let s = populated("fsckleak");
    // Mark a free block used in the working allocation bitmap W, which follows the two
    // superblocks and the 60 KiB working header rounded up to a block (byte 69632 with 4 KiB
    // blocks; format 7). Block 16000 is backed (a 64 MiB volume backs 16384 blocks) and far past
    // the few hundred in use. The header is this boot's, so opening trusts W rather than
    // rebuilding it.
    let w_off = 2 * BLOCK_BYTES + 61440;
    let leaked_block = 16_000u64;
    let mut bytes = std::fs::read(&s.vol).expect("read");
    let at = (w_off + leaked_block / 8) as usize;
    assert_eq!(bytes[at] & 1 << (leaked_block % 8), 0, "block already used");
    bytes[at] |= 1 << (leaked_block % 8);
    std::fs::write(&s.vol, &bytes).expect("write");

    let run = s.on(&["fsck"], &[]);
    assert_eq!(run.code, Some(4), "{run:?}");
    assert!(run.stdout.contains("1 leaked blocks"), "{run:?}");
    assert!(
        run.stderr.contains("leaked blocks, the first 1: 16000"),
        "{run:?}"
    );
    let run = s.on(&["fsck", "--repair"], &[]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stdout.contains("freed 1 leaked blocks"), "{run:?}");
    s.on_ok(&["fsck"], &[]);
    assert_eq!(s.on_ok(&["ls"], &["/src"]).lines().count(), 50);
}

/// `iris ARGS...` as user and group 65534 (nobody), through setpriv; `None` when this test runs
/// unprivileged or without setpriv.
fn iris_as_nobody(args: &[&str]) -> Option<Run> {
    if !is_root() {
        return None;
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", IRIS])
        .args(args)
        .output()
        .ok()?;
    Some(Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

#[test]
fn a_user_who_makes_a_volume_owns_its_root_directory() {
    let s = Scratch::new("nobody");
    let vol = path_str(&s.vol);
    let Some(made) = iris_as_nobody(&["mkfs", "--size", "64M", vol]) else {
        return;
    };
    assert_eq!(made.code, Some(0), "{made:?}");
    let file = s.host("f");
    std::fs::write(&file, "theirs\n").expect("write");
    std::os::unix::fs::lchown(&s.dir, Some(65534), Some(65534)).expect("chown");
    std::os::unix::fs::lchown(&file, Some(65534), Some(65534)).expect("chown");
    for args in [
        vec!["mkdir", vol, "/mine"],
        vec!["put", vol, path_str(&file), "/mine/f"],
        vec!["get", vol, "/mine/f", path_str(&s.host("back"))],
    ] {
        let run = iris_as_nobody(&args).expect("setpriv ran before");
        assert_eq!(run.code, Some(0), "{args:?}: {run:?}");
    }
    let long = s.on_ok(&["ls", "-l"], &["/mine"]);
    assert!(long.contains(" 65534 65534 "), "{long}");
    assert_eq!(
        std::fs::read_to_string(s.host("back")).expect("read"),
        "theirs\n"
    );
}

#[test]
fn fsck_reports_file_system_damage() {
    let vol = std::path::PathBuf::from(format!(
        "/dev/shm/iris-cli-fsdamage-{}.vol",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&vol);
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_iris"))
            .args(args)
            .output()
            .expect("iris")
    };
    let v = vol.to_str().expect("utf8");
    assert!(run(&["mkfs", "--size", "64M", v]).status.success());
    assert!(run(&["mkdir", v, "/d"]).status.success());
    assert!(run(&["fsck", v]).status.success());
    // Bump the directory's link count behind the file system's back.
    {
        let fs = iris_fs::Fs::open_volume(&vol, &iris_store::OpenOptions::default()).expect("open");
        let ino = fs
            .resolve(&iris_fs::Cred::root(), iris_fs::ROOT_INO, b"/d", true)
            .expect("d");
        let key = iris_store::Key::new(ino, 0);
        let mut rec = fs
            .store()
            .get_with(key, |b| b.to_vec())
            .expect("get")
            .expect("inode");
        rec[12] = 7;
        fs.store().put(key, &rec).expect("put");
        fs.sync().expect("commit");
    }
    let out = run(&["fsck", v]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("link count 7 but 2 expected"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("--repair fixes them"));
    // --repair sets the count from the tree, says so, exits 1; the volume then checks clean.
    let out = run(&["fsck", "--repair", v]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fixed: directory") && err.contains("link count 7"),
        "{err}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("now clean"),
        "{out:?}"
    );
    let out = run(&["fsck", v]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    std::fs::remove_file(&vol).ok();
}

#[test]
fn run_refuses_a_volume_it_cannot_open_before_starting_the_command() {
    let s = Scratch::new("runbad");
    std::fs::write(&s.vol, vec![0x5au8; 1 << 20]).expect("write");
    let marker = s.host("ran");
    let script = format!("touch {}", path_str(&marker));
    let run = iris([
        OsStr::new("run"),
        OsStr::new("--volume"),
        s.vol.as_os_str(),
        OsStr::new("--"),
        OsStr::new("sh"),
        OsStr::new("-c"),
        OsStr::new(&script),
    ]);
    run.assert_refused(1, "not an Iris volume");
    assert!(
        !marker.exists(),
        "the command ran on a volume Iris cannot open"
    );
}

#[test]
fn mkfs_makes_a_bepsilon_tree_on_request_and_it_holds_a_tree_of_files() {
    let s = Scratch::new("bepsilon");
    let vol = path_str(&s.vol);
    iris(["mkfs", "--size", "64M", "--buffer-bytes", "100", vol])
        .assert_refused(1, "multiple of 8");
    assert!(!s.vol.exists(), "a refused mkfs left a file behind");
    let out = iris_ok(["mkfs", "--size", "64M", "--buffer-bytes", "1024", vol]);
    assert!(out.contains("Bε-tree with 1024-byte buffers"), "{out}");
    let src = s.host("src");
    for d in 0..8 {
        std::fs::create_dir_all(src.join(format!("d{d}"))).expect("mkdir");
        for f in 0..40 {
            let body = format!("{d}/{f}\n").repeat(f * 37 + 1);
            std::fs::write(src.join(format!("d{d}/f{f}")), body).expect("write");
        }
    }
    s.on_ok(&["put", "-r"], &[path_str(&src), "/"]);
    let st = json(&s.on_ok(&["stat", "--json"], &[]));
    assert_eq!(st["buffer_bytes"], 1024);
    assert!(
        st["tree"]["buffered_messages"].as_u64().unwrap_or(0) > 0,
        "no buffered message after 320 creates: {st}"
    );
    assert!(s
        .on_ok(&["stat"], &[])
        .contains("Bε-tree, 1024-byte buffers"));
    s.on_ok(&["fsck"], &[]);
    let out = s.host("out");
    s.on_ok(&["get", "-r"], &["/src", path_str(&out)]);
    assert_eq!(describe_tree(&src), describe_tree(&out));
}

/// A tmpfs of `mib` MiB mounted on a fresh directory, unmounted and removed on drop.
struct SmallRamDrive(PathBuf);

impl SmallRamDrive {
    fn mount(name: &str, mib: u64) -> SmallRamDrive {
        let dir = PathBuf::from(format!("/tmp/iris-ram-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mount point");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("mount")
            .success();
        assert!(ok, "mount a {mib} MiB tmpfs on {}", dir.display());
        SmallRamDrive(dir)
    }
}

impl Drop for SmallRamDrive {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_full_ram_drive_gives_enospc_and_the_volume_can_still_delete() {
    if !is_root() {
        eprintln!("skipped: needs root to mount a small tmpfs");
        return;
    }
    // The volume may grow to 256 MiB, but the RAM drive under it holds 96: growth runs into
    // the drive's end, which must be an error, not a SIGBUS on first touch of the new space.
    let drive = SmallRamDrive::mount("full", 96);
    let vol = drive.0.join("v.vol");
    let vol_s = path_str(&vol);
    iris_ok(["mkfs", "--size", "256M", vol_s]);
    // `iris put` of a host file of `len` bytes of `byte` (made beside the drive, not on it).
    let put = |name: &str, len: usize, byte: u8| {
        let host = drive
            .0
            .join("..")
            .join(format!("iris-ram-{name}-{}", std::process::id()));
        std::fs::write(&host, vec![byte; len]).expect("host file");
        let run = iris(["put", vol_s, path_str(&host), &format!("/{name}")]);
        let _ = std::fs::remove_file(&host);
        run
    };
    let run = put("big", 128 << 20, 7);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stderr.contains("No space left on device"), "{run:?}");
    iris_ok(["fsck", vol_s]);
    // A program under the interposer sees ENOSPC from write(), and lives on.
    let script = "import errno, os\n\
        fd = os.open('/iris/more', os.O_WRONLY | os.O_CREAT)\n\
        try:\n    \
            while True: os.write(fd, b'x' * 65536)\n\
        except OSError as e:\n    \
            print(errno.errorcode[e.errno])\n";
    let out = Command::new(IRIS)
        .args(["run", "--volume", vol_s, "--", "python3", "-c", script])
        .output()
        .expect("run python3");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ENOSPC\n");
    // Deleting on the full volume works and gives the space back.
    iris_ok(["rm", vol_s, "/big", "/more"]);
    let run = put("small", 8 << 20, 9);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(iris_ok(["cat", vol_s, "/small"]).len(), 8 << 20);
    iris_ok(["fsck", vol_s]);
}
