//! End-to-end: unmodified Debian programs under `iris run`, results asserted.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{HostPath, Volume, IRIS};

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

/// fio random writes then random reads of a 16 MiB file under /iris with crc32c verify, on
/// the I/O engine `engine` (fio's own options for it).
fn fio_verifies(v: &Volume, engine: &str) {
    for rw in ["randwrite", "randread"] {
        let out = v.sh_ok(&format!(
            "fio --name=j --directory=/iris --size=16m --bs=4k --rw={rw} {engine} \
             --verify=crc32c --do_verify=1 --verify_state_save=0 --output-format=terse --terse-version=3"
        ));
        let fields: Vec<&str> = out.trim().split(';').collect();
        // terse v3: field 5 is the error code.
        assert_eq!(
            fields.get(4),
            Some(&"0"),
            "fio {rw} ({engine}) error: {out}"
        );
    }
}

#[test]
fn fio_random_write_then_read_verifies() {
    let v = Volume::new("fio");
    fio_verifies(&v, "--ioengine=psync");
    v.fsck_clean();
}

#[test]
fn fio_small_random_writes_into_a_new_file_verify_with_and_without_fallocate() {
    // fio's write jobs fallocate their file (zeroed blocks, see `Fs::allocate`); with
    // `--fallocate=none` it is only sized, and each first write lands in a hole (which then
    // fills its block as far as the file reaches). 512 B writes, each block written in parts.
    let v = Volume::new("fio-holes");
    for (i, fallocate) in ["native", "none"].iter().enumerate() {
        let out = v.sh_ok(&format!(
            "fio --name=h{i} --directory=/iris --size=4m --bs=512 --rw=randwrite \
             --fallocate={fallocate} --ioengine=psync --verify=crc32c --do_verify=1 \
             --verify_state_save=0 --output-format=terse --terse-version=3"
        ));
        let fields: Vec<&str> = out.trim().split(';').collect();
        assert_eq!(
            fields.get(4),
            Some(&"0"),
            "fio --fallocate={fallocate}: {out}"
        );
    }
    let sizes = v.sh_ok("stat -c %s /iris/h0.0.0 /iris/h1.0.0");
    assert_eq!(sizes, "4194304\n4194304\n");
    v.fsck_clean();
}

#[test]
fn fio_with_native_aio_writes_and_verifies_through_iris() {
    // libaio's io_submit is a system call wrapper: unseen, the kernel ran each request against
    // the Iris fd's placeholder memfd (a write overwrote the description there, a read
    // returned it) and fio's verify failed.
    let v = Volume::new("fio-aio");
    fio_verifies(
        &v,
        "--ioengine=libaio --iodepth=16 --iodepth_batch_submit=8",
    );
    // The bytes are in the file: a plain read sees fio's verify header (its magic, 0xacca).
    let out = v.sh_ok("od -A n -t x2 -N 2 /iris/j.0.0");
    assert_eq!(out.trim(), "acca");
    v.fsck_clean();
}

/// POSIX AIO: glibc runs the requests on its own threads through its internal pread and
/// pwrite, which met the Iris fd's placeholder (EBADF: fio's `posixaio` engine stopped).
#[test]
fn fio_with_posix_aio_writes_and_verifies_through_iris() {
    let v = Volume::new("fio-paio");
    fio_verifies(&v, "--ioengine=posixaio --iodepth=8");
    v.fsck_clean();
}

/// Each kind of POSIX AIO request and notification, and a lio_listio mixing an Iris file and a
/// host file: the same output on tmpfs and Iris.
#[test]
fn posix_aio_requests_and_notifications_behave_as_on_tmpfs() {
    let v = Volume::new("paio");
    let bin = Program::build("posix_aio", &["-pthread", "-lrt"]);
    let host = HostPath(format!(
        "/dev/shm/iris-paio-hostfile-{}",
        std::process::id()
    ));
    v.prints_as_on_tmpfs(
        "paio",
        |dir| format!("timeout 60 {} {dir} {}", bin.0, host.0),
        "write: 0 10, signal value 7\nread: 3 [aio], thread value 9\nfdatasync: 0 0\n\
         lio_listio: 0, host 4, iris 5 [hello]\nwrite to a read-only fd: Bad file descriptor -1\n\
         cancel: 1\n",
    );
    v.fsck_clean();
}

#[test]
fn native_aio_serves_iris_files_and_passes_host_files_to_the_kernel() {
    let v = Volume::new("aio");
    let bin = Program::build(
        "native_aio",
        &["-pthread", "/usr/lib/x86_64-linux-gnu/libaio.so.1"],
    );
    let host = HostPath(format!("/dev/shm/iris-aio-host-{}", std::process::id()));
    let out = v.sh_ok(&format!("timeout 60 {} /iris/aio {}", bin.0, host.0));
    assert_eq!(
        out,
        "writes ok\nreads ok\nfdatasync ok\npreadv ok\npgetevents ok\nreaper ok\nebadf ok\neinval ok\n"
    );
    v.fsck_clean();
}

/// io_uring through libc's `syscall()`: the kernel reads requests from the ring, so without
/// Iris a request on an Iris fd ran against its placeholder (writes EBADF, reads zeros). The
/// same program on tmpfs and on Iris must print the same completions and bytes.
#[test]
fn io_uring_requests_made_through_syscall_are_served_on_iris_files() {
    let v = Volume::new("uring");
    let bin = Program::build("uring_syscall", &[]);
    v.prints_as_on_tmpfs(
        "uring",
        |dir| format!("{} {dir}", bin.0),
        "1 6\n2 15\n3 8\n4 0\n5 21\n6 0\n7 3\n8 3\n9 8\n\
         read: [hello| brave new world] [] [hel] [lo ] [via pipe]\n\
         10 Bad file descriptor\n11 Operation canceled\n\
         14 0\n15 Operation canceled\n16 Bad file descriptor\n17 4\n18 5\n12 1\n13 0\n\
         ro after close: Bad file descriptor\nfile: 22 [hello brave new world!]\n",
    );
    v.fsck_clean();
}

/// poll, select, epoll and ioctl on an Iris fd answer as for a regular file (the kernel sees
/// an O_PATH placeholder, for which poll says POLLNVAL and epoll and ioctl EBADF).
#[test]
fn poll_epoll_and_ioctl_on_iris_fds_answer_as_for_a_file() {
    let v = Volume::new("poll");
    let script = |dir: &str| {
        format!(
            r#"python3 -c '
import fcntl, os, select, struct, termios
p = "{dir}/f"
open(p, "w").write("hello\n")
fd = os.open(p, os.O_RDWR)
r, w = os.pipe()
q = select.poll()
q.register(fd, select.POLLIN | select.POLLOUT)
q.register(r, select.POLLIN)
print("poll", sorted((f == fd, e) for f, e in q.poll(1000)))
q.unregister(fd)
q.register(fd, 0)
print("poll, no events", q.poll(0))
print("select", select.select([fd, r], [fd], [], 0)[:2] == ([fd], [fd]))
e = select.epoll()
for op in ("register", "unregister"):
    try:
        getattr(e, op)(fd) if op == "unregister" else e.register(fd, select.EPOLLIN)
        print("epoll", op, "ok")
    except OSError as x:
        print("epoll", op, os.strerror(x.errno))
os.lseek(fd, 2, os.SEEK_SET)
print("FIONREAD", struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"1234"))[0])
print("isatty", os.isatty(fd))
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("isatty errno", libc.isatty(fd), os.strerror(ctypes.get_errno()))
try:
    fcntl.ioctl(fd, termios.TCGETS, bytes(64))
except OSError as x:
    print("TCGETS", os.strerror(x.errno))
fcntl.ioctl(fd, termios.FIOCLEX)
print("FIOCLEX", fcntl.fcntl(fd, fcntl.F_GETFD))
fcntl.ioctl(fd, termios.FIONBIO, struct.pack("i", 1))
print("FIONBIO", fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK != 0)
print("FIOQSIZE", struct.unpack("q", fcntl.ioctl(fd, 0x5460, bytes(8)))[0])
for name, cmd, arg in [("GETOWN", 9, 0), ("GETSIG", 11, 0), ("GETLEASE", 1025, 0), ("GET_SEALS", 1034, 0), ("ADD_SEALS", 1033, 1)]:
    try:
        print(name, fcntl.fcntl(fd, cmd, arg))
    except OSError as x:
        print(name, os.strerror(x.errno))
import ctypes
print("readahead", ctypes.CDLL(None, use_errno=True).readahead(fd, ctypes.c_long(0), ctypes.c_size_t(4096)))
'"#
        )
    };
    v.prints_as_on_tmpfs(
        "poll",
        script,
        "poll [(True, 5)]\npoll, no events []\nselect True\n\
         epoll register Operation not permitted\nepoll unregister Operation not permitted\n\
         FIONREAD 4\nisatty False\nisatty errno 0 Inappropriate ioctl for device\nTCGETS Inappropriate ioctl for device\nFIOCLEX 1\n\
         FIONBIO True\nFIOQSIZE 4096\nGETOWN 0\nGETSIG 0\nGETLEASE 2\nGET_SEALS 1\n\
         ADD_SEALS Operation not permitted\nreadahead 0\n",
    );
}

/// An Iris fd passed over a Unix socket (SCM_RIGHTS) is the same open file in the receiver:
/// it reads and writes the file and shares the sender's offset, also when the sender closed
/// it and opened another file before the receiver took it (the description must not be
/// reused for that one). Before, the receiver's calls went to the placeholder (EBADF).
#[test]
fn an_iris_fd_passed_over_a_socket_is_the_same_open_file() {
    let v = Volume::new("scm");
    v.python_prints_as_on_tmpfs(
        "scm",
        &[
            r#"import os, socket, subprocess, sys
d = sys.argv[1]
a, b = socket.socketpair()
child = subprocess.Popen([sys.executable, "-c", """
import os, socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
msg, fds, _, _ = socket.recv_fds(s, 16, 4)
fd = fds[0]
print("received:", os.read(fd, 5).decode(), flush=True)
os.write(fd, b"+child")
print("child offset:", os.lseek(fd, 0, os.SEEK_CUR), flush=True)
s.send(b"done")
""", str(b.fileno())], pass_fds=[b.fileno()])
b.close()
fd = os.open(d + "/passed", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"hello world")
os.lseek(fd, 0, os.SEEK_SET)
socket.send_fds(a, [b"x"], [fd])
a.recv(4)
child.wait()
print("parent offset:", os.lseek(fd, 0, os.SEEK_CUR))
print("file:", open(d + "/passed").read())
"#,
            r#"import os, socket, subprocess, sys
d = sys.argv[1]
a, b = socket.socketpair()
gr, gw = os.pipe()
child = subprocess.Popen([sys.executable, "-c", """
import os, socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
os.read(int(sys.argv[2]), 1)
msg, fds, _, _ = socket.recv_fds(s, 16, 4)
print("received after the sender closed it:", os.read(fds[0], 5).decode(), flush=True)
""", str(b.fileno()), str(gr)], pass_fds=[b.fileno(), gr])
b.close()
fd = os.open(d + "/sent", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
os.write(fd, b"first file")
os.lseek(fd, 0, os.SEEK_SET)
socket.send_fds(a, [b"x"], [fd])
os.close(fd)
other = os.open(d + "/other", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
os.write(other, b"OTHER")
os.write(gw, b"g")
child.wait()
"#,
        ],
        "received: hello\nchild offset: 11\nparent offset: 11\nfile: hello+child\n\
         received after the sender closed it: first\n",
    );
    v.fsck_clean();
}

/// splice between an Iris file and a pipe, both ways, at the file offset and at a given one,
/// moving no more than the pipe takes (EAGAIN when full and non-blocking): the same output on
/// tmpfs and Iris (before, the kernel refused the Iris fd: EBADF).
#[test]
fn splice_moves_bytes_between_an_iris_file_and_a_pipe() {
    let v = Volume::new("splice");
    v.python_prints_as_on_tmpfs(
        "splice",
        &[
            r#"import os, sys
d = sys.argv[1]
p = d + "/spl"
open(p, "w").write("0123456789abcdef")
fd = os.open(p, os.O_RDWR)
r, w = os.pipe()
print("file->pipe", os.splice(fd, w, 6), os.read(r, 100), "offset", os.lseek(fd, 0, os.SEEK_CUR))
print("file@10->pipe", os.splice(fd, w, 4, offset_src=10), os.read(r, 100), "offset", os.lseek(fd, 0, os.SEEK_CUR))
os.write(w, b"XYZ")
print("pipe->file", os.splice(r, fd, 3), "offset", os.lseek(fd, 0, os.SEEK_CUR))
os.write(w, b"!!")
print("pipe->file@0", os.splice(r, fd, 2, offset_dst=0), "offset", os.lseek(fd, 0, os.SEEK_CUR))
print("file", open(p).read())
try:
    os.splice(fd, fd, 1)
except OSError as e:
    print("file->file", os.strerror(e.errno))
"#,
            r#"import os, sys
d = sys.argv[1]
p = d + "/big"
open(p, "wb").write(b"z" * (1 << 20))
fd = os.open(p, os.O_RDONLY)
r, w = os.pipe()
n = os.splice(fd, w, 1 << 20)          # the kernel moves what fits (64 KiB)
print("moved", n, "drained", len(os.read(r, 1 << 20)))
os.write(w, b"x")
print("moved after 1 byte queued", os.splice(fd, w, 1 << 20))
os.set_blocking(w, False)
try:
    os.splice(fd, w, 1 << 20)
    print("full pipe: moved")
except BlockingIOError:
    print("full pipe: EAGAIN")
"#,
        ],
        "file->pipe 6 b'012345' offset 6\nfile@10->pipe 4 b'abcd' offset 6\n\
         pipe->file 3 offset 9\npipe->file@0 2 offset 9\nfile !!2345XYZ9abcdef\n\
         file->file Invalid argument\n\
         moved 65536 drained 65536\nmoved after 1 byte queued 61440\nfull pipe: EAGAIN\n",
    );
    v.fsck_clean();
}

/// posix_spawn with file actions that open Iris paths (the child's glibc opens them with its
/// internal open, which Iris does not see: the spawn failed with ENOENT). The same output on
/// tmpfs and Iris, a missing file included.
#[test]
fn posix_spawn_file_actions_open_iris_paths() {
    let v = Volume::new("spawnopen");
    v.python_prints_as_on_tmpfs(
        "spawnopen",
        &[
            r#"import os, sys
d = sys.argv[1]
open(d + "/in", "w").write("from a file\n")
pid = os.posix_spawn("/bin/sh", ["sh", "-c", "cat; echo to a file"], os.environ,
    file_actions=[(os.POSIX_SPAWN_OPEN, 0, d + "/in", os.O_RDONLY, 0),
                  (os.POSIX_SPAWN_OPEN, 1, d + "/out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)])
print("status", os.waitpid(pid, 0)[1])
print(open(d + "/out").read(), end="")
try:
    os.posix_spawn("/bin/true", ["true"], os.environ,
        file_actions=[(os.POSIX_SPAWN_OPEN, 0, d + "/missing", os.O_RDONLY, 0)])
    print("spawned with a missing file")
except OSError as e:
    print("missing:", os.strerror(e.errno))
"#,
        ],
        "status 0\nfrom a file\nto a file\nmissing: No such file or directory\n",
    );
    v.fsck_clean();
}

#[test]
fn a_program_without_iris_can_neither_write_nor_read_through_an_inherited_iris_fd() {
    let v = Volume::new("stray");
    let bin = Program::build("stray_write", &["-static"]);
    let out = v.sh_ok(&format!(
        "exec 3<>/iris/out; echo one >&3; {}; echo two >&3; cat /iris/out",
        bin.0
    ));
    assert_eq!(
        out,
        "stray write: Bad file descriptor\nstray read: Bad file descriptor\n\
         stray pread: Bad file descriptor\none\ntwo\n"
    );
    v.fsck_clean();
}

#[test]
fn two_processes_appending_to_one_file_at_once_lose_and_tear_no_line() {
    // O_APPEND writes of two programs at once (each at the size it reads, kept only if no other
    // appender moved it meanwhile), started together: every line whole, each program's in its
    // order.
    let v = Volume::new("appenders");
    let out = v.sh_ok(
        "start=$(python3 -c 'import time; print(time.time() + 0.5)'); \
         for w in a b; do python3 -c '
import os, sys, time
w = sys.argv[1]
fd = os.open(\"/iris/log\", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
time.sleep(max(0, float(sys.argv[2]) - time.time()))
for n in range(20000):
    line = (\"%s %05d \" % (w, n)).encode() + w.encode() * (20 + n % 170) + b\"\\n\"
    assert os.write(fd, line) == len(line)
' $w $start & done; wait; \
         python3 -c '
seen = {\"a\": 0, \"b\": 0}
for line in open(\"/iris/log\"):
    w, n, body = line.split()
    assert int(n) == seen[w], (w, n, seen[w])
    assert body == w * (20 + int(n) % 170), (w, n)
    seen[w] += 1
print(seen[\"a\"], seen[\"b\"])
'",
    );
    assert_eq!(out, "20000 20000\n");
    v.fsck_clean();
}

#[test]
fn reopening_an_iris_fd_by_dev_stdout_or_proc_self_fd_opens_the_iris_file() {
    // Linux reopens an open file by /dev/stdout, /dev/fd/N and /proc/self/fd/N; for an Iris fd
    // the kernel would reopen its placeholder (the bytes lost, an O_TRUNC open refused).
    let v = Volume::new("reopen");
    let out = v.sh_ok(
        "python3 -c 'open(\"/dev/stdout\", \"w\").write(\"via stdout\\n\")' > /iris/f; \
         echo hello | tee /dev/stderr 2>/iris/g >/dev/null; \
         exec 5>>/iris/h; echo first >&5; \
         python3 -c 'import os; fd = os.open(\"/proc/self/fd/5\", os.O_WRONLY | os.O_APPEND); os.write(fd, b\"second\\n\")'; \
         dd if=/iris/f of=/dev/stdout status=none > /iris/k; \
         cat /iris/f /iris/g /iris/h /iris/k; cat /dev/stdin < /iris/g; \
         python3 -c 'import os; os.unlink(\"/iris/g\"); print(open(\"/dev/fd/0\").read().strip())' < /iris/g",
    );
    assert_eq!(
        out,
        "via stdout\nhello\nfirst\nsecond\nvia stdout\nhello\nhello\n"
    );
    v.fsck_clean();
}

#[test]
fn stat_access_and_readlink_of_an_iris_fds_path_describe_the_iris_file() {
    // `/dev/stdin`, `/dev/fd/N`, `/proc/self/fd/N` name an open file; for an Iris fd the kernel
    // would describe its placeholder (a memfd of 1 TiB, mode 0777, named "/memfd:...").
    let v = Volume::new("fdpath");
    let out = v.sh_ok(
        "seq 1 1000 > /iris/n; chmod 444 /iris/n; \
         stat -L -c '%s %a' /dev/stdin < /iris/n; \
         [ -x /dev/stdin ] < /iris/n || echo not executable; \
         readlink /proc/self/fd/0 < /iris/n; realpath /dev/stdin < /iris/n; \
         python3 -c '
import os
fd = os.open(\"/iris/n\", os.O_RDONLY)
ino = os.fstat(fd).st_ino
for p in (\"/dev/fd/%d\" % fd, \"/proc/self/fd/%d\" % fd, \"/proc/%d/fd/%d\" % (os.getpid(), fd)):
    st = os.stat(p)
    print(st.st_size, oct(st.st_mode & 0o777), st.st_ino == ino, os.access(p, os.X_OK), os.readlink(p))
print(os.path.realpath(\"/dev/fd/%d\" % fd))
os.chdir(\"/iris\")
rel = os.open(\"n\", os.O_RDONLY)
os.unlink(\"/iris/n\")
print(os.readlink(\"/proc/self/fd/%d\" % rel), os.stat(\"/dev/fd/%d\" % rel).st_nlink)
t = os.open(\"/iris\", os.O_TMPFILE | os.O_RDWR, 0o600)
print(os.readlink(\"/proc/self/fd/%d\" % t) == \"/iris/#%d (deleted)\" % os.fstat(t).st_ino)
os.makedirs(\"/iris/b/sub\")
open(\"/iris/b/sub/f\", \"w\").write(\"x\")
dd = os.open(\"/iris/b\", os.O_RDONLY | os.O_DIRECTORY)
sd = os.open(\"sub\", os.O_RDONLY | os.O_DIRECTORY, dir_fd=dd)
ff = os.open(\"f\", os.O_RDONLY, dir_fd=sd)
print(os.readlink(\"/proc/self/fd/%d\" % ff))
os.fchdir(sd)
print(os.getcwd())
'",
    );
    assert_eq!(
        out,
        "3893 444\nnot executable\n/iris/n\n/iris/n\n\
         3893 0o444 True False /iris/n\n\
         3893 0o444 True False /iris/n\n\
         3893 0o444 True False /iris/n\n\
         /iris/n\n/iris/n (deleted) 0\nTrue\n/iris/b/sub/f\n/iris/b/sub\n"
    );
    v.fsck_clean();
}

#[test]
fn shell_and_coreutils() {
    let v = Volume::new("shell");
    // Redirection and append (a subshell's two writes share one offset), dd with seek.
    let out = v.sh_ok(
        "echo hello > /iris/x; echo more >> /iris/x; (echo a; echo b) > /iris/y; cat /iris/x /iris/y; \
         printf 'abc\\n' | dd of=/iris/f bs=1 seek=5 2>/dev/null; stat -c %s /iris/f; od -c /iris/f | head -1",
    );
    assert!(out.starts_with("hello\nmore\na\nb\n9\n"), "{out}");
    assert!(
        out.contains("\\0  \\0  \\0  \\0  \\0   a   b   c  \\n"),
        "{out}"
    );
    // Directories: mkdir -p, touch, find, du, cp -r, mv, ls -l, rm -r.
    let out = v.sh_ok(
        "mkdir -p /iris/a/b/c && touch /iris/a/b/c/f1 /iris/a/f2 && find /iris/a | sort && \
         cp -r /iris/a /iris/acopy && mv /iris/acopy /iris/moved && ls -l /iris/moved/b/c | wc -l && \
         du -a /iris/moved | wc -l && rm -r /iris/moved /iris/a && ls /iris",
    );
    assert_eq!(
        out,
        "/iris/a\n/iris/a/b\n/iris/a/b/c\n/iris/a/b/c/f1\n/iris/a/f2\n2\n5\nf\nx\ny\n"
    );
    // truncate, sort -o, gzip/gunzip, cd into Iris and relative paths.
    let out = v.sh_ok(
        "seq 1 2000 > /iris/n && truncate -s 20 /iris/n && sort -r /iris/y -o /iris/z && cat /iris/z && \
         gzip /iris/n && ls /iris/n.gz && gunzip /iris/n.gz && wc -c < /iris/n && \
         dd if=/iris/n of=/iris/dd bs=4 skip=1 count=3 2>/dev/null && cat /iris/dd && echo && \
         cd /iris && mkdir q && cd q && echo inq > rel && pwd && cat /iris/q/rel",
    );
    assert_eq!(
        out,
        "b\na\n/iris/n.gz\n20\n3\n4\n5\n6\n7\n8\n\n/iris/q\ninq\n"
    );
}

/// A relative path from a host directory that leads into the mount prefix (`iris/f` from `/`,
/// `../iris/f` from its neighbour, one component at a time from an fd of `/`, as rsync walks
/// to its destination) names the Iris file, as it names the tmpfs file on Linux.
#[test]
fn relative_paths_from_host_directories_into_the_prefix_reach_iris() {
    let v = Volume::new("hostrel");
    let script = |dir: &str| {
        format!(
            r#"d={dir}; up=$(dirname $d); me=$(basename $d)
mkdir -p $d/src/sub && echo one > $d/src/sub/f && echo two > $d/g
(cd $up && cat $me/g && cat ./$me/src/../g)
(cd / && cat ${{d#/}}/g)
(mkdir -p $up/iris-hostrel-nb-$$ && cd $up/iris-hostrel-nb-$$ && cat ../$me/g; rmdir $up/iris-hostrel-nb-$$)
python3 -c '
import os, sys
up, me = sys.argv[1], sys.argv[2]
fd = os.open(up, os.O_PATH | os.O_DIRECTORY)
print(os.stat(me, dir_fd=fd, follow_symlinks=False).st_mode & 0o170000 == 0o040000)
sub = os.open(me + "/src", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
print(sorted(os.listdir(sub)))
os.mkdir(me + "/made", dir_fd=fd)
print(os.path.isdir(up + "/" + me + "/made"))
' $up $me
rsync -a $d/src/ $d/dst/ && cat $d/dst/sub/f
ln -s src/sub $d/l && echo three > $d/src/g2
(cd $up && cat $me/l/../g2)
cat /$d/g/ 2>/dev/null || echo "g/ is not a directory"
python3 -c '
import ctypes, os, sys
up, me = sys.argv[1], sys.argv[2]
os.chdir("/tmp")
os.path.exists("../no-such-dir-here")
ctypes.CDLL(None).syscall(80, up.encode())  # a raw chdir (SYS_chdir), unseen by libc
print(open(me + "/g").read().strip())
' $up $me
"#
        )
    };
    v.prints_as_on_tmpfs(
        "hostrel",
        script,
        "two\ntwo\ntwo\ntwo\nTrue\n['sub']\nTrue\none\nthree\ng/ is not a directory\ntwo\n",
    );
    v.fsck_clean();
}

#[test]
fn tar_round_trip() {
    let v = Volume::new("tar");
    let src = PathBuf::from(format!("/dev/shm/iris-e2e-tar-{}", std::process::id()));
    std::fs::create_dir_all(src.join("sub")).expect("mkdir");
    std::fs::write(src.join("a"), "one\n").expect("write");
    std::fs::write(
        src.join("sub/b"),
        (0..20000).map(|i| format!("{i}\n")).collect::<String>(),
    )
    .expect("write");
    std::os::unix::fs::symlink("a", src.join("link")).expect("symlink");
    let name = src.file_name().and_then(|n| n.to_str()).expect("name");
    let out = v.sh_ok(&format!(
        "cd /dev/shm && tar cf /iris/t.tar {name} && mkdir /iris/x && tar xf /iris/t.tar -C /iris/x && \
         diff -r /dev/shm/{name} /iris/x/{name} && tar cf - -C /iris/x {name} | tar tf - | sort | head -3"
    ));
    assert_eq!(out, format!("{name}/\n{name}/a\n{name}/link\n"));
    std::fs::remove_dir_all(&src).ok();
    v.fsck_clean();
}

#[test]
fn git_in_an_iris_directory() {
    let v = Volume::new("git");
    let out = v.sh_ok(
        "mkdir /iris/repo && cd /iris/repo && git init -q . && echo hi > f && git add f && \
         git -c user.email=a@b -c user.name=n commit -qm first && echo more >> f && \
         git status --short && git -c user.email=a@b -c user.name=n commit -qam second && \
         git log --oneline | wc -l && git gc -q && git fsck --no-progress && echo ok",
    );
    assert_eq!(out, " M f\n2\nok\n");
}

#[test]
fn python_file_io() {
    let v = Volume::new("python");
    let out = v.sh_ok(
        r#"python3 -c '
import os, shutil, tempfile
os.makedirs("/iris/py/d", exist_ok=True)
open("/iris/py/d/f", "w").write("x" * 10000)
os.rename("/iris/py/d/f", "/iris/py/d/g")
print(os.listdir("/iris/py/d"))
shutil.copytree("/iris/py/d", "/iris/py/e")
print(sorted(os.listdir("/iris/py/e")), len(open("/iris/py/e/g").read()))
with tempfile.NamedTemporaryFile(dir="/iris/py", delete=False) as t:
    t.write(b"tmp")
print(open(t.name, "rb").read(), os.path.dirname(t.name))
os.setxattr("/iris/py/e/g", "user.k", b"v")
print(os.getxattr("/iris/py/e/g", "user.k"), os.listxattr("/iris/py/e/g"))
'"#,
    );
    assert_eq!(
        out,
        "['g']\n['g'] 10000\nb'tmp' /iris/py\nb'v' ['user.k']\n"
    );
}

#[test]
fn scrubbed_environment_keeps_iris_and_report_counts_calls() {
    let v = Volume::new("exec");
    let out = v.sh_ok(
        "echo kept > /iris/k && env -i /bin/cat /iris/k && env -i /bin/sh -c 'echo child > /iris/c' && cat /iris/c",
    );
    assert_eq!(out, "kept\nchild\n");
    let out = Command::new(IRIS)
        .args(["run", "--volume"])
        .arg(&v.0)
        .args(["--", "cat", "/iris/k"])
        .env("IRIS_REPORT", "1")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("iris report (pid") && err.contains("open=1") && err.contains("read=2"),
        "{err}"
    );
}

#[test]
fn freopen_of_stdout_onto_an_iris_file() {
    let v = Volume::new("freopen");
    let src = format!("/dev/shm/iris-fr-{}.c", std::process::id());
    let bin = format!("/dev/shm/iris-fr-{}", std::process::id());
    std::fs::write(
        &src,
        r#"#include <stdio.h>
int main(void) {
    if (!freopen("/iris/out.txt", "w", stdout)) { perror("freopen"); return 1; }
    printf("line %d\n", 1);
    fclose(stdout);
    FILE *f = fopen("/iris/out.txt", "a");
    fprintf(f, "line %d\n", 2);
    fclose(f);
    return 0;
}
"#,
    )
    .expect("source");
    let cc = Command::new("cc")
        .args([&src, "-o", &bin])
        .status()
        .expect("cc");
    assert!(cc.success());
    let out = v.sh_ok(&format!("{bin} && cat /iris/out.txt"));
    std::fs::remove_file(&src).ok();
    std::fs::remove_file(&bin).ok();
    assert_eq!(out, "line 1\nline 2\n");
}

#[test]
fn vectored_io_and_its_64_bit_names() {
    let v = Volume::new("vectored");
    let out = v.sh_ok(
        r#"python3 -c '
import os
fd = os.open("/iris/v", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
os.pwritev(fd, [b"abc", b"def"], 0)
os.pwritev(fd, [b"XYZ"], 0, os.RWF_APPEND)
b1, b2 = bytearray(4), bytearray(5)
print(os.preadv(fd, [b1, b2], 0), bytes(b1 + b2), os.fstat(fd).st_size, os.statvfs("/iris").f_namemax)
'"#,
    );
    assert_eq!(out, "9 b'abcdefXYZ' 9 255\n");
}

#[test]
fn copies_through_a_reused_buffer_hand_out_only_their_own_bytes() {
    // readv, preadv, copy_file_range and sendfile copy through a buffer each thread keeps
    // between calls: a short copy after a long one must carry none of the long one's bytes.
    let v = Volume::new("bounce");
    let out = v.sh_ok(
        r#"python3 -c '
import os
def put(path, data):
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    os.write(fd, data)
    os.close(fd)
put("/iris/big", b"B" * 300000)
put("/iris/small", b"small")
for src, dst in (("/iris/big", "/iris/o1"), ("/iris/small", "/iris/o2")):
    i = os.open(src, os.O_RDONLY)
    o = os.open(dst, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    while os.copy_file_range(i, o, 1 << 30):
        pass
    os.close(i)
    os.close(o)
print(os.path.getsize("/iris/o1"), open("/iris/o2", "rb").read())
big = os.open("/iris/big", os.O_RDONLY)
b = [bytearray(100000) for _ in range(3)]
print(os.readv(big, b), os.preadv(big, b, 0))
small = os.open("/iris/small", os.O_RDONLY)
b1, b2 = bytearray(b"-" * 8), bytearray(b"-" * 8)
print(os.readv(small, [b1, b2]), bytes(b1), bytes(b2))
b1, b2 = bytearray(b"-" * 8), bytearray(b"-" * 8)
print(os.preadv(small, [b1, b2], 2), bytes(b1), bytes(b2))
o = os.open("/iris/o3", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.sendfile(o, big, 0, 300000)
os.lseek(small, 0, os.SEEK_SET)
o4 = os.open("/iris/o4", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
print(os.sendfile(o4, small, 0, 1 << 20), open("/iris/o4", "rb").read())
'"#,
    );
    assert_eq!(
        out,
        "300000 b'small'\n300000 300000\n5 b'small---' b'--------'\n3 b'all-----' b'--------'\n\
         5 b'small'\n"
    );
}

#[test]
fn several_mount_prefixes_share_one_volume() {
    let v = Volume::new("mounts");
    let out = Command::new(IRIS)
        .args(["run", "--volume"])
        .arg(&v.0)
        .args(["--mount", "/iris", "--mount", "/data/"])
        .args([
            "--",
            "sh",
            "-c",
            "echo one > /iris/x && cat /data/x && ls /data",
        ])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\nx\n");
}

#[test]
fn a_program_that_exits_leaves_its_writes_committed() {
    let v = Volume::new("exit-commit");
    v.sh_ok("python3 -c 'open(\"/iris/f\", \"w\").write(\"x\" * 10000)'");
    let out = Command::new(IRIS)
        .arg("stat")
        .arg(&v.0)
        .output()
        .expect("stat");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("uncommitted:     no"), "{text}");
    // A new volume has an intent log, and the last commit holds everything in it.
    assert!(text.contains("intent log:      0 of "), "{text}");
}

/// OFD locks belong to the open file description: two opens in one process conflict, an OFD
/// lock and a classic record lock conflict, and closing the description drops its locks. The
/// same script runs on tmpfs (through the kernel) and on Iris, and must print the same.
#[test]
fn ofd_locks_belong_to_the_description_as_on_linux() {
    let v = Volume::new("ofd");
    let script = |dir: &str| {
        format!(
            r#"python3 -c '
import errno, fcntl, os, struct
def lk(fd, cmd, kind, start, n):
    try:
        fcntl.fcntl(fd, cmd, struct.pack("hhxxxxqqixxxx", kind, 0, start, n, 0))
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
p = "{dir}/ofd"
open(p, "w").write("x" * 100)
a = os.open(p, os.O_RDWR)
b = os.open(p, os.O_RDWR)
print(lk(a, fcntl.F_OFD_SETLK, fcntl.F_WRLCK, 0, 10))
print(lk(b, fcntl.F_OFD_SETLK, fcntl.F_WRLCK, 5, 10))
print(lk(b, fcntl.F_OFD_SETLK, fcntl.F_WRLCK, 10, 10))
print(lk(b, fcntl.F_SETLK, fcntl.F_WRLCK, 0, 1))
print(lk(b, fcntl.F_SETLK, fcntl.F_WRLCK, 50, 1))
os.close(a)
print(lk(b, fcntl.F_OFD_SETLK, fcntl.F_WRLCK, 0, 10))
'"#
        )
    };
    v.prints_as_on_tmpfs("ofd", script, "ok\nEAGAIN\nok\nEAGAIN\nok\nok\n");
}

/// Lock files outlive their volumes (nothing tells a volume's deletion): the first locking call
/// of each process removes those nobody holds open, and keeps one another process holds open
/// (a shared flock) or holds a record lock in, and files not named as lock files.
#[test]
fn lock_files_nobody_holds_are_removed() {
    let v = Volume::new("lockgc");
    let pid = u64::from(std::process::id());
    let name = |kind: &str, tag: u64| format!("/dev/shm/iris-{kind}-{:016x}", tag << 32 | pid);
    let (stale, stale_flocks) = (name("locks", 0xdead), name("flocks", 0xdead));
    let (held, recorded) = (name("locks", 0xbeef), name("locks", 0xcafe));
    let other = format!("/dev/shm/iris-locks-{pid}-not-a-volume-id");
    for f in [&stale, &stale_flocks, &other] {
        std::fs::write(f, b"").expect("lock file");
    }
    // The holder makes its two files and locks them, again if a test running alongside
    // removed one before it was locked (as the interposer does).
    let mut holder = Command::new("python3")
        .args([
            "-c",
            "import fcntl, os, sys\n\
             def hold(path, lock):\n\
             \x20   while True:\n\
             \x20       fd = os.open(path, os.O_RDWR | os.O_CREAT)\n\
             \x20       lock(fd)\n\
             \x20       if os.path.exists(path) and os.stat(path).st_ino == os.fstat(fd).st_ino:\n\
             \x20           return fd\n\
             \x20       os.close(fd)\n\
             a = hold(sys.argv[1], lambda fd: fcntl.flock(fd, fcntl.LOCK_SH))\n\
             b = hold(sys.argv[2], lambda fd: fcntl.lockf(fd, fcntl.LOCK_EX, 1, 5))\n\
             print('ready', flush=True); sys.stdin.read()",
            &held,
            &recorded,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("holder");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("holder ready");
    assert_eq!(line, "ready\n");
    let lock =
        "python3 -c 'import fcntl; f = open(\"/iris/x\", \"w\"); fcntl.lockf(f, fcntl.LOCK_EX)'";
    v.sh_ok(lock);
    let exists = |f: &String| std::path::Path::new(f).exists();
    assert!(
        !exists(&stale) && !exists(&stale_flocks),
        "unused lock files stayed"
    );
    assert!(exists(&held), "a lock file held open was removed");
    assert!(
        exists(&recorded),
        "a lock file with a record lock in it was removed"
    );
    assert!(
        exists(&other),
        "a file not named as a lock file was removed"
    );
    drop(holder.stdin.take());
    holder.wait().expect("holder exits");
    v.sh_ok(lock);
    assert!(
        !exists(&held) && !exists(&recorded),
        "unused once their holder left"
    );
    let _ = std::fs::remove_file(&other);
}

/// tmpfile(3) makes its file in /tmp with calls glibc keeps to itself: with /tmp under an Iris
/// prefix, the interposer makes it in the volume, unnamed (same device as the volume's /tmp, no
/// link, no name in the directory), and the stream reads back what was written.
#[test]
fn tmpfile_lands_in_iris_when_tmp_is_an_iris_prefix() {
    let v = Volume::new("tmpfile");
    let script = r#"mkdir -p /tmp && python3 -c '
import ctypes, os
libc = ctypes.CDLL(None)
libc.tmpfile.restype = ctypes.c_void_p
for name in ("fputs", "fflush", "fileno", "rewind", "fgets", "fclose"):
    getattr(libc, name).argtypes = [ctypes.c_char_p, ctypes.c_void_p] if name == "fputs" else [ctypes.c_void_p] if name != "fgets" else [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p]
f = libc.tmpfile()
assert f, "tmpfile failed"
libc.fputs(b"hello tmpfile", f)
libc.fflush(f)
st = os.fstat(libc.fileno(f))
print(st.st_dev == os.stat("/tmp").st_dev, st.st_nlink, st.st_size)
libc.rewind(f)
buf = ctypes.create_string_buffer(64)
libc.fgets(buf, 64, f)
print(buf.value.decode())
libc.fclose(f)
print(sorted(os.listdir("/tmp")))
'"#;
    let out = Command::new(IRIS)
        .args(["run", "--volume"])
        .arg(&v.0)
        .args(["--mount", "/iris", "--mount", "/tmp"])
        .args(["--", "sh", "-c", script])
        // Outside /tmp: the checkout may live there, and /tmp is the volume's now.
        .current_dir("/")
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "True 0 13\nhello tmpfile\n[]\n"
    );
}

/// A test program of `tests/programs`, compiled into /dev/shm; removed when dropped.
struct Program(String);

impl Program {
    /// Compile `tests/programs/NAME.c` with `-O2` and `extra` flags.
    fn build(name: &str, extra: &[&str]) -> Program {
        let bin = Program(format!("/dev/shm/iris-{name}-{}", std::process::id()));
        let src = format!("{}/tests/programs/{name}.c", env!("CARGO_MANIFEST_DIR"));
        let cc = Command::new("cc")
            .args(["-O2", "-o", &bin.0, &src])
            .args(extra)
            .status()
            .expect("cc");
        assert!(cc.success(), "cc {src}");
        bin
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn lockf_on_iris_files_locks_as_it_does_on_tmpfs() {
    // glibc's lockf calls fcntl inside libc: without its own interposer the kernel locked the
    // placeholder (F_LOCK failed with EBADF).
    let v = Volume::new("lockf");
    let bin = Program::build("lockf", &[]);
    let host = HostPath(format!("/dev/shm/iris-lockf-host-{}", std::process::id()));
    let kernel = Command::new(&bin.0)
        .arg(&host.0)
        .output()
        .expect("on tmpfs");
    let kernel = String::from_utf8_lossy(&kernel.stdout).into_owned();
    assert_eq!(
        kernel,
        "lock all: ok\nown test: ok\n\
         whole file: test busy, tlock busy\n\
         far past the end: test busy, tlock busy\n\
         unlock 4..8: ok\n\
         bytes 4..8: test ok, tlock ok\n\
         bytes 0..2 (negative length): test busy, tlock busy\n\
         bad command: Invalid argument\n",
        "what Linux does"
    );
    assert_eq!(v.sh_ok(&format!("{} /iris/f", bin.0)), kernel);
}

#[test]
fn readlink_answers_an_empty_or_missing_buffer_as_linux_does() {
    let v = Volume::new("rledges");
    let bin = Program::build("readlink_edges", &[]);
    let host = HostPath(format!("/dev/shm/iris-rledges-{}", std::process::id()));
    std::fs::create_dir_all(&host.0).expect("host dir");
    let kernel = Command::new(&bin.0)
        .arg(&host.0)
        .output()
        .expect("on tmpfs");
    let kernel = String::from_utf8_lossy(&kernel.stdout).into_owned();
    assert_eq!(
        kernel,
        "fd link, empty buffer: -1 Invalid argument\n\
         fd link, no buffer: -1 Bad address\n\
         fd link, 4 bytes: 4 /dev....\n\
         symlink, empty buffer: -1 Invalid argument\n\
         symlink, no buffer: -1 Bad address\n\
         symlink, 4 bytes: 4 abcd....\n",
        "what Linux does"
    );
    assert_eq!(
        v.sh_ok(&format!("{} /iris", bin.0)),
        kernel.replace("/dev", "/iri")
    );
}

/// realpath(3) follows every symlink met, `..` after one included, and names an open file's
/// link by its real path: the same script on tmpfs and on Iris must print the same.
#[test]
fn realpath_and_fd_links_follow_symlinks_as_on_linux() {
    let v = Volume::new("realpath");
    let script = |dir: &str| {
        format!(
            r#"python3 -c '
import ctypes, os
d = "{dir}"
os.makedirs(d + "/a/b")
open(d + "/a/b/f", "w").write("x")
os.symlink(d + "/a/b", d + "/l")
os.symlink("f", d + "/a/b/lf")
os.symlink("../..", d + "/a/b/up")
os.symlink("loop2", d + "/loop1")
os.symlink("loop1", d + "/loop2")
libc = ctypes.CDLL(None, use_errno=True)
libc.realpath.restype = ctypes.c_char_p
def rp(p):
    buf = ctypes.create_string_buffer(4096)
    r = libc.realpath(p.encode(), buf)
    return r.decode().replace(d, "D") if r else "errno %d" % ctypes.get_errno()
for p in ("/l/f", "/a/b/lf", "/l/../b/f", "/a/b/up/a", "/a/b/up/l/lf", "/l/", "/a/./b//f",
          "/missing", "/a/b/f/x", "/loop1"):
    print(p, rp(d + p))
for p in ("/l/f", "/a/b/lf", "/l/../b/f"):
    fd = os.open(d + p, os.O_RDONLY)
    print(p, "->", os.readlink("/proc/self/fd/%d" % fd).replace(d, "D"))
'"#
        )
    };
    v.prints_as_on_tmpfs(
        "realpath",
        script,
        "/l/f D/a/b/f\n/a/b/lf D/a/b/f\n/l/../b/f D/a/b/f\n/a/b/up/a D/a\n\
         /a/b/up/l/lf D/a/b/f\n/l/ D/a/b\n/a/./b//f D/a/b/f\n/missing errno 2\n\
         /a/b/f/x errno 20\n/loop1 errno 40\n\
         /l/f -> D/a/b/f\n/a/b/lf -> D/a/b/f\n/l/../b/f -> D/a/b/f\n",
    );
}

#[test]
fn signal_handlers_that_call_into_iris_do_not_deadlock() {
    let v = Volume::new("signals");
    let bin = Program::build("signal_handlers", &[]);
    // A deadlock would hang: `timeout` turns it into a failure.
    let stdout = v.sh_ok(&format!("timeout 120 {}", bin.0));
    assert_eq!(
        stdout,
        "handlers ok, signal ok, ticks ok, siginfo ok, usr1 ok, torn 0, deferred ok\n"
    );
    v.fsck_clean();
}

#[test]
fn children_forked_while_other_threads_are_inside_iris_do_not_hang() {
    let v = Volume::new("forks");
    let bin = Program::build("fork_while_busy", &["-pthread"]);
    let stdout = v.sh_ok(&format!("timeout 120 {}", bin.0));
    assert_eq!(stdout, "children ok 200/200\n");
    v.fsck_clean();
}

#[test]
fn a_close_racing_reads_and_writes_of_its_fd_neither_crashes_nor_hangs() {
    let v = Volume::new("closerace");
    let bin = Program::build("close_while_reading", &["-pthread"]);
    let stdout = v.sh_ok(&format!("timeout 120 {}", bin.0));
    assert_eq!(stdout, "ok reads\n");
    v.fsck_clean();
}

#[test]
fn writes_over_several_blocks_are_seen_whole_by_another_process() {
    // 16 KiB rewrites (four blocks, or five at an unaligned offset) of blocks written since the
    // last commit go in place piece by piece (`Store::write_pieces_in_place`): a reader in
    // another process must still see each one whole.
    let v = Volume::new("multiblock");
    let bin = Program::build("multi_block_writes", &[]);
    let stdout = v.sh_ok(&format!("cd /iris && timeout 120 {}", bin.0));
    assert_eq!(stdout, "whole ranges read\n");
    v.fsck_clean();
}

#[test]
fn reused_descriptions_start_afresh_and_are_never_ones_a_child_holds() {
    let v = Volume::new("descreuse");
    let bin = Program::build("reuse_descriptions", &[]);
    let stdout = v.sh_ok(&format!("timeout 120 {}", bin.0));
    assert_eq!(
        stdout,
        "reopen ok\nfork ok\nspawn ok\ndup ok\nplain ok\npopen ok\nsystem ok\n_Fork ok\nclone ok\n\
         syscall ok\nchurn ok\nclosefrom ok\n"
    );
    v.fsck_clean();
}

#[test]
fn descriptions_reused_by_threads_while_the_main_thread_forks_stay_their_own() {
    let v = Volume::new("reusefork");
    let bin = Program::build("reuse_under_forks", &["-pthread"]);
    let stdout = v.sh_ok(&format!("timeout 120 {}", bin.0));
    assert_eq!(stdout, "ok\n");
    v.fsck_clean();
}

#[test]
fn a_change_of_ids_groups_or_umask_is_seen_at_the_next_request() {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: changing ids needs root");
        return;
    }
    let v = Volume::new("ident");
    let bin = Program::build("identity_changes", &["-pthread"]);
    let stdout = v.sh_ok(&format!("timeout 60 {}", bin.0));
    assert_eq!(
        stdout,
        "seteuid ok\nsetresuid ok\nsetreuid ok\nsetuid-in-child ok\nsetegid ok\nsetgroups ok\n\
         thread ok\numask ok\n"
    );
}

#[test]
fn children_start_in_the_iris_directory_a_program_changed_into_itself() {
    // `make -C /iris/dir` changes directory itself and leaves PWD behind: its compilers ran
    // in "/" and found no source file.
    let v = Volume::new("cwdspawn");
    let bin = Program::build("cwd_across_spawn", &[]);
    let stdout = v.sh_ok(&format!("cd / && timeout 60 {}", bin.0));
    assert_eq!(
        stdout,
        "relative\nrelative\nrelative\n/iris/sub\nrelative\npopen: relative\n/iris/it's\n\
         /iris/it's\nmissing: 2\n/tmp\n/iris/sub\n/tmp\n/tmp\n"
    );
}

#[test]
fn spare_descriptions_give_their_fd_numbers_back_when_the_program_runs_out() {
    let v = Volume::new("spares");
    let bin = Program::build("spares_and_fd_limit", &[]);
    let stdout = v.sh_ok(&format!("timeout 60 {}", bin.0));
    assert!(stdout.starts_with("same "), "{stdout}");
}

#[test]
fn a_child_forked_while_the_volume_is_being_opened_does_not_hang() {
    let v = Volume::new("forkstart");
    v.sh_ok("mkdir /iris/start");
    let bin = Program::build("fork_at_start", &["-pthread"]);
    let stdout = v.sh_ok(&format!("timeout 300 {}", bin.0));
    assert_eq!(stdout, "ok 30/30\n");
    v.fsck_clean();
}

#[test]
fn execl_execlp_and_execle_keep_iris_in_the_new_image() {
    let v = Volume::new("execlist");
    let bin = Program::build("exec_list", &[]);
    let out = v.sh_ok(&format!("{} && cat /iris/ex.txt", bin.0));
    assert_eq!(out, "stage 0\nstage 1\nstage 2\na b c d e f g h\n");
}

#[test]
fn msync_of_a_shared_mapping_reaches_the_volume() {
    let v = Volume::new("msync");
    let bin = Program::build("msync_durable", &[]);
    // The program kills itself: the shell reports it, the volume keeps what msync committed.
    let out = v.sh_ok(&format!("{}; echo status $?", bin.0));
    assert_eq!(out, "status 137\n");
    let bytes = v.cat_ok("/m");
    assert_eq!(bytes.len(), 16384);
    assert_eq!(&bytes[..11], b"synced page");
    assert_eq!(&bytes[12288..12300], b"after mremap");
    // Bytes written without msync (and never closed or fsync'd) may or may not be in the
    // volume; Linux makes no promise either. The synced ones must be.
}

/// O_SYNC and O_DSYNC writes, and writes followed by fsync or fdatasync, are durable when those
/// return: after a power loss (simulated by reopening as after a reboot, which keeps only the
/// last commit) their bytes are there, while a plain write made after them by the same process
/// (killed, so it never exits) is gone.
#[test]
fn synced_writes_survive_a_power_loss() {
    let v = Volume::new("osync");
    let script = "import os\n\
        for name, flag in (('s', os.O_SYNC), ('d', os.O_DSYNC), ('f', 0), ('g', 0)):\n\
        \x20   fd = os.open('/iris/' + name, os.O_WRONLY | os.O_CREAT | flag, 0o644)\n\
        \x20   os.write(fd, name.encode() * 5000)\n\
        \x20   if name == 'f': os.fsync(fd)\n\
        \x20   if name == 'g': os.fdatasync(fd)\n\
        \x20   os.close(fd)\n\
        open('/iris/plain', 'w').write('lost')\n\
        os.kill(os.getpid(), 9)\n";
    let out = Command::new(IRIS)
        .args(["run", "--commit-interval-ms", "3600000", "--volume"])
        .arg(&v.0)
        .args(["--", "python3", "-c", script])
        .output()
        .expect("run python3");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(9),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The power loss: a reopen in another boot rebuilds the working state from the newest
    // superblock.
    let reboot = iris_store::OpenOptions {
        boot_id: Some(0x5eed),
        commit_interval: None,
    };
    drop(iris_store::Store::open(&v.0, &reboot).expect("reopen after the power loss"));
    let cat = |path: &str| v.cat(path);
    for (path, byte) in [("/s", b's'), ("/d", b'd'), ("/f", b'f'), ("/g", b'g')] {
        let got = cat(path);
        assert!(got.status.success(), "{path} lost: {:?}", got);
        assert_eq!(got.stdout, vec![byte; 5000], "{path}");
    }
    assert!(
        !cat("/plain").status.success(),
        "the unsynced write survived: the test cannot tell O_SYNC from any write"
    );
    v.fsck_clean();
}

/// A file unlinked by another process while open here stays readable until its last close
/// (here, or in a child forked before the parent's close), as the kernel keeps it; then it is
/// freed. Before, each process counted only its own opens: `rm` freed the file at once
/// and the reads that followed failed with ENOENT.
#[test]
fn a_file_unlinked_by_another_process_stays_readable_until_its_last_close() {
    let (v, before) = Volume::made("unlinked-elsewhere");
    v.python_prints_as_on_tmpfs(
        "unlinked-elsewhere",
        &[
            r#"import os, subprocess, sys, time
p = sys.argv[1] + "/held"
with open(p, "wb") as f:
    f.write(b"x" * 100000)
fd = os.open(p, os.O_RDONLY)
subprocess.run(["rm", p], check=True)
print("read after rm elsewhere:", os.pread(fd, 100000, 0) == b"x" * 100000)
os.close(fd)
print("named after the last close:", os.path.exists(p))
"#,
            r#"import os, subprocess, sys, time
p = sys.argv[1] + "/forked"
with open(p, "wb") as f:
    f.write(b"y" * 50000)
fd = os.open(p, os.O_RDONLY)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    os.read(r, 1)
    print("child reads after the parent's close and rm:", os.pread(fd, 50000, 0) == b"y" * 50000, flush=True)
    os._exit(0)
os.close(r)
os.close(fd)
subprocess.run(["rm", p], check=True)
os.write(w, b"!")
os.waitpid(pid, 0)
"#,
        ],
        "read after rm elsewhere: True\nnamed after the last close: False\n\
         child reads after the parent's close and rm: True\n",
    );
    // (The child ended without closing its fd: the next process to open the volume frees
    // that file.)
    v.sh_ok("true");
    assert_eq!(v.used_blocks(), before, "both files' blocks are freed");
    v.fsck_clean();
}

/// A new volume (test `name`), and its used blocks before and after a Python process wrote
/// 4 MiB to /iris/t, unlinked it while open and ended by `ending` (a statement) without
/// closing it.
fn unlinked_and_left_open(name: &str, ending: &str) -> (Volume, u64, u64) {
    let (v, before) = Volume::made(name);
    v.sh_ok(&format!(
        "python3 -c 'import os, sys\n\
         fd = os.open(\"/iris/t\", os.O_CREAT | os.O_RDWR)\n\
         os.write(fd, b\"z\" * (4 << 20))\n\
         os.unlink(\"/iris/t\")\n\
         {ending}'; true"
    ));
    let after = v.used_blocks();
    (v, before, after)
}

/// A file unlinked while open by a process that ends without closing it (killed here) is
/// freed by the next process that opens the volume; before, its blocks stayed used until a
/// crash recovery.
#[test]
fn a_file_left_open_and_unlinked_by_a_killed_process_is_freed_by_the_next_one() {
    let (v, before, after) = unlinked_and_left_open("left-open", "os.kill(os.getpid(), 9)");
    assert!(
        after >= before + 1024,
        "the orphan's 4 MiB are still held after its process died"
    );
    v.sh_ok("true");
    assert_eq!(v.used_blocks(), before, "the next process freed the orphan");
    v.fsck_clean();
}

/// A file unlinked while open by a process that then exits without closing it is freed when
/// that process ends (its exit lets go of its files, as the kernel closes them), with no other
/// process opening the volume after it.
#[test]
fn a_file_left_open_and_unlinked_by_a_process_that_exits_is_freed_at_its_exit() {
    let (v, before, after) = unlinked_and_left_open("exit-open", "sys.exit(0)");
    assert_eq!(after, before, "freed at the exit of its only holder");
    v.fsck_clean();
}

/// Across an exec, the new image keeps the files it inherits open for everyone else (an `rm`
/// by another process leaves them readable), and lets go of those it did not inherit (an `rm`
/// of one of those frees it): every file's blocks are freed by the end.
#[test]
fn an_exec_keeps_the_files_it_inherits_open_and_lets_go_of_the_others() {
    let (v, before) = Volume::made("exec-opens");
    v.python_prints_as_on_tmpfs(
        "exec-opens",
        &[r#"import os, sys
d = sys.argv[1]
a = os.open(d + "/a", os.O_CREAT | os.O_RDWR)
os.write(a, b"a" * 1000000)
b = os.open(d + "/b", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC)
os.write(b, b"b" * 4000000)
os.set_inheritable(a, True)
after = """
import os, subprocess, sys
d, a = sys.argv[1], int(sys.argv[2])
subprocess.run(["rm", d + "/a", d + "/b"], check=True)
print("inherited file readable after rm:", os.pread(a, 1000000, 0) == b"a" * 1000000)
print("names left:", sorted(os.listdir(d)))
"""
os.execv(sys.executable, [sys.executable, "-c", after, d, str(a)])
"#],
        "inherited file readable after rm: True\nnames left: []\n",
    );
    assert_eq!(v.used_blocks(), before, "both files' blocks are freed");
    v.fsck_clean();
}

#[test]
fn programs_stored_in_iris_run_as_the_kernel_runs_them_from_tmpfs() {
    // Binaries (by relative and absolute path, through PATH past a directory of the same name,
    // through their fd), scripts (with
    // an interpreter argument, an interpreter that is itself a script in Iris), what is not
    // executable, and a Python venv whose bin/python is a symlink to the host's interpreter.
    let v = Volume::new("launch");
    v.prints_as_on_tmpfs(
        "launch",
        |d| {
            format!(
                r#"cd {d} && cp /bin/true t && ./t && echo elf-relative && {d}/t && echo elf-absolute
printf '#!/bin/sh\necho "script $(basename $0) [$1] [$2]"\n' > s.sh && chmod +x s.sh && ./s.sh a 'b c'
printf '#!/bin/sh -e\necho "with arg $0 $1"\n' > e.sh && chmod +x e.sh && ./e.sh z
printf '#!{d}/s.sh x\n' > s2 && chmod +x s2 && ./s2 y
chmod -x t; ./t 2>/dev/null; echo rc=$?
mkdir dd; ./dd 2>/dev/null; echo rc=$?
printf 'echo no-interpreter-line $1\n' > ns && chmod +x ns && env ./ns a
mkdir bin bin2 bin2/myecho && cp /bin/echo bin/myecho && PATH="{d}/bin2:{d}/bin:$PATH" env myecho via-env
python3 -m venv --without-pip venv && ./venv/bin/python -c 'import os, sys; print(os.path.basename(sys.prefix))'
cp /bin/echo t2 && python3 -c '
import os
pid = os.posix_spawn("./s.sh", ["s.sh", "spawned"], os.environ)
os.waitpid(pid, 0)
os.execve(os.open("t2", os.O_RDONLY), ["echo", "fexecve"], os.environ)
'
"#
            )
        },
        "elf-relative\nelf-absolute\nscript s.sh [a] [b c]\nwith arg ./e.sh z\nscript s.sh [x] [./s2]\nrc=126\nrc=126\nno-interpreter-line a\nvia-env\nvenv\nscript s.sh [spawned] []\nfexecve\n",
    );
}

#[test]
fn posix_fallocate_says_enospc_when_the_volume_has_no_room_for_the_holes() {
    let v = Volume::new("fallocate-room");
    let made = Command::new(IRIS)
        .args(["mkfs", "--size", "64M"])
        .arg(&v.0)
        .output()
        .expect("mkfs");
    assert!(made.status.success());
    let out = v.sh_ok(
        r#"python3 -c '
import os
fd = os.open("/iris/f", os.O_CREAT | os.O_RDWR, 0o644)
def room(off, n):
    try:
        os.posix_fallocate(fd, off, n)
        return "ok"
    except OSError as e:
        return os.strerror(e.errno)
print(room(0, 1 << 30), os.fstat(fd).st_size)
print(room(0, 8 << 20), os.fstat(fd).st_size)
os.pwrite(fd, b"x" * (40 << 20), 0)
print(room(0, 40 << 20), room(40 << 20, 40 << 20), os.fstat(fd).st_size)
'"#,
    );
    assert_eq!(
        out,
        "No space left on device 0\nok 8388608\nok No space left on device 41943040\n"
    );
}

#[test]
fn symlinks_out_of_iris_lead_to_the_host_files_they_name_as_on_tmpfs() {
    // A Python venv's bin/python is a symlink to the host's interpreter: `which`, `test -x`,
    // `ls -L` and the shell's PATH search must see it, or an activated venv runs another python.
    let v = Volume::new("escape");
    let host = format!("/tmp/iris-escape-{}", std::process::id());
    v.prints_as_on_tmpfs(
        "escape",
        |d| {
            format!(
                r#"cd {d} && ln -s /usr/include inc && head -c 2 inc/stdio.h && echo && ls inc/stdio.h
stat -L -c %F inc/stdio.h && test -r inc/stdio.h && echo readable
python3 -c 'import os; print("stdio.h" in os.listdir("inc"))'
cd inc && pwd -P && cd {d}
python3 -m venv --without-pip venv && . venv/bin/activate
[ "$(command -v python)" = "{d}/venv/bin/python" ] && echo venv-python-found
test -x venv/bin/python && ls -lL venv/bin/python | cut -c1-10
python -c 'import os, sys; print(os.path.basename(sys.prefix))'
ln -s {host} out && echo made > out && cat {host} && rm {host}
"#
            )
        },
        "/*\ninc/stdio.h\nregular file\nreadable\nTrue\n/usr/include\nvenv-python-found\n-rwxr-xr-x\nvenv\nmade\n",
    );
}

#[test]
fn mknod_makes_regular_files_in_iris_and_refuses_fifos_without_touching_the_host() {
    // mknod and mkfifo went to the kernel: a relative name from an Iris directory made the
    // FIFO in the kernel's working directory (the host's /).
    let v = Volume::new("mknod");
    let out = v.sh_ok(
        r#"mkdir /iris/d && cd /iris/d && python3 -c '
import errno, os, stat
def try_(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
os.umask(0o022)
print(try_(lambda: os.mknod("r", 0o666 | stat.S_IFREG)), oct(os.stat("r").st_mode))
print(try_(lambda: os.mknod("r0", 0o640)), stat.S_ISREG(os.stat("r0").st_mode))
print(try_(lambda: os.mkfifo("p")), try_(lambda: os.mkfifo("r")), try_(lambda: os.mkfifo("no/p")))
print(try_(lambda: os.mknod("/iris/d/c", 0o600 | stat.S_IFCHR, os.makedev(1, 3))))
print(os.path.exists("/proc/self/cwd/p"), sorted(os.listdir(".")))
'"#,
    );
    assert_eq!(
        out,
        "ok 0o100644\nok True\nEPERM EEXIST ENOENT\nEPERM\nFalse ['r', 'r0']\n"
    );
}

#[test]
fn libc_functions_built_on_internal_calls_answer_for_iris_paths_as_for_tmpfs() {
    // remove, canonicalize_file_name, pathconf, glob, nftw and ftw call glibc's internal
    // unlink, realpath, statfs, opendir and stat: the kernel answered for Iris paths (ENOENT).
    let v = Volume::new("libcpaths");
    let bin = Program::build("libc_paths", &[]);
    let kernel_dir = format!("/dev/shm/iris-libcpaths-host-{}", std::process::id());
    std::fs::create_dir_all(&kernel_dir).expect("host dir");
    let kernel = Command::new(&bin.0)
        .arg(&kernel_dir)
        .output()
        .expect("run on tmpfs");
    std::fs::remove_dir_all(&kernel_dir).ok();
    let kernel = String::from_utf8_lossy(&kernel.stdout).into_owned();
    assert!(kernel.contains("glob nested 0: /t/d/e.txt"), "{kernel}");
    let iris = v.sh_ok(&format!("mkdir /iris/d && {} /iris/d", bin.0));
    assert_eq!(iris, kernel);
}

#[test]
fn shared_libraries_stored_in_iris_load_and_a_rebuilt_one_loads_anew() {
    // The loader opens a library with the kernel: dlopen of an Iris path failed (a Python
    // extension module in a venv on Iris could not be imported).
    let v = Volume::new("dlopen");
    let bin = Program::build("dlopen_iris", &["-ldl"]);
    let lib = |text: &str| {
        let dir = format!("/dev/shm/iris-dlopen-{}", std::process::id());
        std::fs::create_dir_all(&dir).expect("dir");
        let src = format!("{dir}/hello.c");
        std::fs::write(
            &src,
            format!("const char *hello(void) {{ return \"{text}\"; }}\n"),
        )
        .expect("source");
        let out = format!("{dir}/{text}.so");
        let cc = Command::new("cc")
            .args(["-shared", "-fPIC", "-o", &out, &src])
            .status()
            .expect("cc");
        assert!(cc.success());
        out
    };
    let (one, two) = (lib("one"), lib("two"));
    let out = v.sh_ok(&format!(
        "mkdir /iris/lib && cp {one} /iris/lib/libhello.so && {b} /iris/lib/libhello.so && \
         cd /iris/lib && {b} ./libhello.so /iris/lib/missing.so && sleep 0.01 && \
         cp {two} /iris/lib/libhello.so && {b} /iris/lib/libhello.so",
        b = bin.0
    ));
    std::fs::remove_dir_all(format!("/dev/shm/iris-dlopen-{}", std::process::id())).ok();
    assert_eq!(
        out,
        "/iris/lib/libhello.so: one\n./libhello.so: one\n/iris/lib/missing.so: no such file\n\
         /iris/lib/libhello.so: two\n"
    );
    let copies = format!("/dev/shm/iris-lib-{:016x}", v.volume_id());
    assert!(std::path::Path::new(&copies)
        .join("iris/lib/libhello.so")
        .exists());
    // A library that needs another beside it ($ORIGIN), both in Iris.
    let dir = format!("/dev/shm/iris-dlopen2-{}", std::process::id());
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(
        format!("{dir}/inner.c"),
        "const char *inner(void) { return \"inner\"; }\n",
    )
    .expect("inner.c");
    std::fs::write(
        format!("{dir}/outer.c"),
        "const char *inner(void);\nconst char *hello(void) { return inner(); }\n",
    )
    .expect("outer.c");
    let cc = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd {dir} && cc -shared -fPIC -o libinner.so inner.c && \
             cc -shared -fPIC -o libouter.so outer.c -L. -linner -Wl,-rpath,'$ORIGIN'"
        ))
        .status()
        .expect("cc");
    assert!(cc.success());
    let out = v.sh_ok(&format!(
        "mkdir /iris/lib2 && cp {dir}/libinner.so {dir}/libouter.so /iris/lib2/ && {} /iris/lib2/libouter.so",
        bin.0
    ));
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(out, "/iris/lib2/libouter.so: inner\n");
    drop(v);
}

#[test]
fn programs_built_in_iris_find_their_own_libraries_as_on_tmpfs() {
    // A build's program names its libraries by an absolute search path in the build tree
    // (cmake's RUNPATH) or by $ORIGIN: the loader could look for neither in Iris.
    let v = Volume::new("elfdeps");
    v.prints_as_on_tmpfs(
        "elfdeps",
        |d| {
            format!(
                r#"cd {d} && mkdir lib bin && printf 'const char *baz(void) {{ return "baz"; }}\n' > baz.c && printf 'const char *baz(void);\nconst char *bar(void) {{ return baz(); }}\n' > bar.c && printf '#include <stdio.h>\nconst char *bar(void);\nint main(void) {{ puts(bar()); return 0; }}\n' > main.c
cc -shared -fPIC -o lib/libbaz.so baz.c && cc -shared -fPIC -o lib/libbar.so bar.c -Llib -lbaz -Wl,-rpath,'$ORIGIN'
cc -o bin/rel main.c -Llib -lbar -Wl,-rpath,'$ORIGIN/../lib' && cc -o bin/abs main.c -Llib -lbar -Wl,-rpath,{d}/lib,--enable-new-dtags
./bin/rel && {d}/bin/abs && cd bin && ./rel && env ./abs
cc -o plain main.c -L../lib -lbar 2>/dev/null && ./plain 2>/dev/null || echo no-search-path-fails
"#
            )
        },
        "baz\nbaz\nbaz\nbaz\nno-search-path-fails\n",
    );
}

#[test]
fn unix_sockets_named_by_iris_paths_connect_and_leave_the_host_alone() {
    // bind of a relative name from an Iris directory made the socket in the host's /, and an
    // absolute Iris name failed with ENOENT.
    let v = Volume::new("sockets");
    let host_root = std::path::Path::new("/iris-test-rel.sock");
    let _ = std::fs::remove_file(host_root);
    let out = v.sh_ok(
        r#"mkdir /iris/sk && cd /iris/sk && python3 -c '
import os, socket
srv = socket.socket(socket.AF_UNIX)
srv.bind("iris-test-rel.sock")
srv.listen(1)
cli = socket.socket(socket.AF_UNIX)
cli.connect("/iris/sk/iris-test-rel.sock")
conn, _ = srv.accept()
cli.sendall(b"ping")
print(conn.recv(4).decode())
for s in (cli, conn, srv):
    s.close()
os.unlink("iris-test-rel.sock")
again = socket.socket(socket.AF_UNIX)
again.bind("/iris/sk/iris-test-rel.sock")
print("bound again")
os.unlink("/iris/sk/iris-test-rel.sock")
try:
    os.unlink("/iris/sk/iris-test-rel.sock")
except FileNotFoundError:
    print("gone")
try:
    socket.socket(socket.AF_UNIX).bind("/iris/missing/x.sock")
except FileNotFoundError:
    print("no directory")
abstract = socket.socket(socket.AF_UNIX)
abstract.bind("\0iris-test-abstract-%d" % os.getpid())
print("abstract", abstract.getsockname()[:1] in (b"\0", "\0"))
'"#,
    );
    assert_eq!(
        out,
        "ping\nbound again\ngone\nno directory\nabstract True\n"
    );
    assert!(!host_root.exists(), "a socket was made in the host's /");
}
