/* Open file descriptions are reused after their last close (see the interposer's desc_pool):
 * a reused one must start afresh (its file, flags and offset) and must never be one that another
 * process still holds. Each case prints one line; a wrong byte, offset or errno exits non-zero.
 *   reopen  - open, read (offset 3), close, open another file: the lowest free fd number, the
 *             new file's bytes from offset 0; a write-only open refuses reads (EBADF).
 *   fork    - a child forked while the file is open reads it after the parent closed it and
 *             opened, read and moved another.
 *   spawn   - a child spawned with a posix_spawn dup2 action holds it as fd 7 and reads it late.
 *   dup     - a plain dup (inheritable) of it is held by a popen child that reads it late.
 *   plain   - an fd opened without O_CLOEXEC is reused too after its last close (the same
 *             memfd, by its inode number in /proc/self/fdinfo), and starts afresh.
 *   popen, system, _Fork, clone, syscall - an fd opened without O_CLOEXEC is held by a child
 *             made that way (system's a background job outliving the call), which reads it
 *             late: glibc spawns popen's and system's shells with its internal posix_spawn,
 *             _Fork runs no fork handlers, clone and syscall(SYS_fork) go around fork.
 *   churn   - 300 opens and closes of ten files, each read whole.
 *   closefrom - closefrom ends the Iris fds above a number: a read of one fails with EBADF,
 *             and the next open takes its number with the right file (a new description's
 *             memfd once took a stale Iris fd's number, and sizing it truncated the Iris file:
 *             SIGBUS). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void die(const char *what) {
    printf("FAIL %s: %s\n", what, strerror(errno));
    fflush(stdout);
    exit(1);
}

static void put(const char *path, const char *text) {
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || close(fd) != 0) die(path);
}

/* Read `fd` to its end from its offset and compare with `want`. */
static void expect(int fd, const char *want, const char *what) {
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n < 0) die(what);
    buf[n] = 0;
    if (strcmp(buf, want) != 0) {
        printf("FAIL %s: read \"%s\", want \"%s\"\n", what, buf, want);
        fflush(stdout);
        exit(1);
    }
}

/* Close `fd`, then open, read and move the other file, as a reuse of fd's description would. */
static void reuse_after(int fd) {
    if (close(fd) != 0) die("close");
    int b = open("/iris/b", O_RDWR | O_CLOEXEC);
    if (b < 0) die("open b");
    expect(b, "bbbbbbbbbb", "b after close");
    if (lseek(b, 4, SEEK_SET) != 4) die("lseek b");
    usleep(600 * 1000); /* the child reads meanwhile */
    if (close(b) != 0) die("close b");
}

static void file_of(const char *path, const char *want, const char *what) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die(path);
    expect(fd, want, what);
    close(fd);
}

/* The inode number /proc/self/fdinfo gives for `fd` (its description's memfd). */
static long fd_inode(int fd) {
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    FILE *f = fopen(path, "re");
    if (!f) die(path);
    long ino = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "ino: %ld", &ino) == 1) break;
    fclose(f);
    return ino;
}

/* Wait (up to 5 s) for `path` to hold `want`, then check it. */
static void file_eventually(const char *path, const char *want, const char *what) {
    for (int i = 0; i < 50; i++) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            char buf[64];
            ssize_t n = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (n == (ssize_t)strlen(want)) break;
        }
        usleep(100 * 1000);
    }
    file_of(path, want, what);
}

/* A child's body for `clone` and the raw forks: read `a` late, exit 0 if it is a's. */
static int late_reader(void *arg) {
    int fd = *(int *)arg;
    usleep(300 * 1000);
    char buf[32];
    ssize_t n = read(fd, buf, sizeof buf);
    return n == 10 && memcmp(buf, "aaaaaaaaaa", 10) == 0 ? 0 : 3;
}

static void reaped(pid_t pid, const char *what) {
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL %s: child status %d\n", what, status);
        fflush(stdout);
        exit(1);
    }
}

static char clone_stack[256 * 1024];

int main(void) {
    put("/iris/a", "aaaaaaaaaa");
    put("/iris/b", "bbbbbbbbbb");

    /* reopen */
    int a = open("/iris/a", O_RDONLY | O_CLOEXEC);
    if (a < 0) die("open a");
    char three[3];
    if (read(a, three, 3) != 3) die("read a");
    close(a);
    int b = open("/iris/b", O_RDONLY | O_CLOEXEC);
    if (b != a) { printf("FAIL reopen: fd %d after %d was closed\n", b, a); return 1; }
    expect(b, "bbbbbbbbbb", "reopen");
    close(b);
    int w = open("/iris/b", O_WRONLY | O_CLOEXEC);
    char c;
    if (w < 0) die("open b write-only");
    if (read(w, &c, 1) != -1 || errno != EBADF) { printf("FAIL reopen: read of a write-only fd\n"); return 1; }
    close(w);
    printf("reopen ok\n");

    /* fork */
    a = open("/iris/a", O_RDONLY | O_CLOEXEC);
    if (a < 0) die("open a");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        usleep(300 * 1000);
        expect(a, "aaaaaaaaaa", "fork child");
        _exit(0);
    }
    reuse_after(a);
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL fork: child status %d\n", status);
        return 1;
    }
    printf("fork ok\n");

    /* spawn */
    a = open("/iris/a", O_RDONLY | O_CLOEXEC);
    if (a < 0) die("open a");
    posix_spawn_file_actions_t acts;
    posix_spawn_file_actions_init(&acts);
    posix_spawn_file_actions_adddup2(&acts, a, 7);
    char *argv[] = {"sh", "-c", "sleep 0.3; cat <&7 > /iris/spawned", NULL};
    if (posix_spawnp(&pid, "sh", &acts, NULL, argv, environ) != 0) die("posix_spawnp");
    reuse_after(a);
    if (waitpid(pid, &status, 0) != pid) die("waitpid");
    file_of("/iris/spawned", "aaaaaaaaaa", "spawn child");
    printf("spawn ok\n");

    /* dup */
    a = open("/iris/a", O_RDONLY | O_CLOEXEC);
    if (a < 0) die("open a");
    int d = dup(a);
    if (d < 0) die("dup");
    close(a);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "sleep 0.3; cat <&%d > /iris/popened", d);
    FILE *p = popen(cmd, "r");
    if (!p) die("popen");
    reuse_after(d);
    pclose(p);
    file_of("/iris/popened", "aaaaaaaaaa", "dup child");
    printf("dup ok\n");

    /* plain */
    a = open("/iris/a", O_RDONLY);
    if (a < 0) die("open a");
    long ino = fd_inode(a);
    expect(a, "aaaaaaaaaa", "plain a");
    close(a);
    b = open("/iris/b", O_RDONLY);
    if (b < 0) die("open b");
    if (b != a || fd_inode(b) != ino) {
        printf("FAIL plain: fd %d inode %ld after fd %d inode %ld: not reused\n", b, fd_inode(b), a, ino);
        return 1;
    }
    expect(b, "bbbbbbbbbb", "plain b");
    close(b);
    printf("plain ok\n");

    /* popen */
    a = open("/iris/a", O_RDONLY);
    if (a < 0) die("open a");
    snprintf(cmd, sizeof cmd, "sleep 0.3; cat <&%d > /iris/popen2", a);
    p = popen(cmd, "r");
    if (!p) die("popen");
    reuse_after(a);
    pclose(p);
    file_of("/iris/popen2", "aaaaaaaaaa", "popen child");
    printf("popen ok\n");

    /* system: a background job of its shell outlives the call */
    a = open("/iris/a", O_RDONLY);
    if (a < 0) die("open a");
    snprintf(cmd, sizeof cmd, "(sleep 0.3; cat <&%d > /iris/system.tmp; mv /iris/system.tmp /iris/system) &", a);
    if (system(cmd) != 0) die("system");
    reuse_after(a);
    file_eventually("/iris/system", "aaaaaaaaaa", "system child");
    printf("system ok\n");

    /* _Fork */
    a = open("/iris/a", O_RDONLY);
    if (a < 0) die("open a");
    pid = _Fork();
    if (pid < 0) die("_Fork");
    if (pid == 0) _exit(late_reader(&a));
    reuse_after(a);
    reaped(pid, "_Fork");
    printf("_Fork ok\n");

    /* clone */
    a = open("/iris/a", O_RDONLY);
    if (a < 0) die("open a");
    pid = clone(late_reader, clone_stack + sizeof clone_stack, SIGCHLD, &a);
    if (pid < 0) die("clone");
    reuse_after(a);
    reaped(pid, "clone");
    printf("clone ok\n");

    /* syscall */
    a = open("/iris/a", O_RDONLY);
    if (a < 0) die("open a");
    pid = syscall(SYS_fork);
    if (pid < 0) die("syscall(SYS_fork)");
    if (pid == 0) _exit(late_reader(&a));
    reuse_after(a);
    reaped(pid, "syscall");
    printf("syscall ok\n");

    /* churn */
    for (int i = 0; i < 10; i++) {
        char path[32], text[32];
        snprintf(path, sizeof path, "/iris/f%d", i);
        snprintf(text, sizeof text, "file %d", i);
        put(path, text);
    }
    for (int i = 0; i < 300; i++) {
        char path[32], text[32];
        snprintf(path, sizeof path, "/iris/f%d", i % 10);
        snprintf(text, sizeof text, "file %d", i % 10);
        file_of(path, text, "churn");
    }
    printf("churn ok\n");

    /* closefrom */
    a = open("/iris/a", O_RDONLY | O_CLOEXEC);
    if (a < 0) die("open a");
    closefrom(a);
    char byte;
    if (pread(a, &byte, 1, 0) != -1 || errno != EBADF) { printf("FAIL closefrom: read of a closed fd\n"); return 1; }
    b = open("/iris/b", O_RDONLY | O_CLOEXEC);
    if (b != a) { printf("FAIL closefrom: fd %d after %d was closed\n", b, a); return 1; }
    expect(b, "bbbbbbbbbb", "closefrom");
    close(b);
    file_of("/iris/a", "aaaaaaaaaa", "closefrom a intact");
    printf("closefrom ok\n");
    return 0;
}
