/* The interposer remembers the caller's identity and umask between requests (see its ident
 * module); every change of them must be seen at the next request, as the kernel sees it.
 * Run as root. Each case prints one line; a wrong answer exits non-zero.
 *   seteuid, setresuid, setreuid, setuid-in-child - a file of mode 0600 owned by root opens
 *             while the effective uid is 0 and fails with EACCES while it is 65534.
 *   setegid   - new files take the effective group at their creation.
 *   setgroups - a group-readable file opens for uid 65534 while it is in the group only.
 *   thread    - a raw setresuid system call changes one thread's ids only: that thread is
 *             refused, the main thread (still root) is not.
 *   umask     - new files' modes follow umask(), and a raw umask system call too. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void fail(const char *what) {
    printf("FAIL %s (errno %s)\n", what, strerror(errno));
    fflush(stdout);
    exit(1);
}

/* Open `path` for reading: 0 if it opened, else its errno. */
static int open_errno(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    close(fd);
    return 0;
}

static void opens(const char *path, const char *what) {
    int e = open_errno(path);
    if (e != 0) { errno = e; fail(what); }
}

static void refused(const char *path, const char *what) {
    int e = open_errno(path);
    if (e != EACCES) {
        printf("FAIL %s: open gave %s, want EACCES\n", what, e ? strerror(e) : "success");
        fflush(stdout);
        exit(1);
    }
}

static void create_with(const char *path, mode_t mode) {
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, mode);
    if (fd < 0) fail(path);
    close(fd);
}

static struct stat stat_of(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) fail(path);
    return st;
}

static pthread_barrier_t step;

/* Raw setresuid: this thread only becomes 65534 (glibc's setresuid would change every
 * thread). The main thread opens the file in between, while this thread is refused both
 * before and after it. */
static void *raw_setresuid_thread(void *arg) {
    (void)arg;
    if (syscall(SYS_setresuid, -1, 65534, -1) != 0) fail("raw setresuid");
    refused("/iris/id/secret", "thread: its own ids");
    pthread_barrier_wait(&step); /* the main thread opens */
    pthread_barrier_wait(&step);
    refused("/iris/id/secret", "thread: its own ids after the main thread's open");
    if (syscall(SYS_setresuid, -1, 0, -1) != 0) fail("raw setresuid back");
    opens("/iris/id/secret", "thread: root again");
    return NULL;
}

int main(void) {
    const char *secret = "/iris/id/secret";
    if (mkdir("/iris/id", 0755) != 0) fail("mkdir");
    create_with(secret, 0600);
    opens(secret, "root");

    if (seteuid(65534) != 0) fail("seteuid");
    refused(secret, "seteuid 65534");
    if (seteuid(0) != 0) fail("seteuid 0");
    opens(secret, "seteuid 0");
    printf("seteuid ok\n");

    if (setresuid(-1, 65534, -1) != 0) fail("setresuid");
    refused(secret, "setresuid 65534");
    if (setresuid(-1, 0, -1) != 0) fail("setresuid 0");
    opens(secret, "setresuid 0");
    printf("setresuid ok\n");

    if (setreuid(-1, 65534) != 0) fail("setreuid");
    refused(secret, "setreuid 65534");
    if (setreuid(-1, 0) != 0) fail("setreuid 0");
    opens(secret, "setreuid 0");
    printf("setreuid ok\n");

    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {
        /* The child learned root's identity from its parent's memory. */
        opens(secret, "child as root");
        if (setuid(65534) != 0) fail("setuid");
        refused(secret, "setuid 65534 in child");
        _exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL setuid-in-child: status %d\n", status);
        return 1;
    }
    opens(secret, "parent after the child's setuid");
    printf("setuid-in-child ok\n");

    if (setegid(4321) != 0) fail("setegid");
    create_with("/iris/id/g4321", 0644);
    if (setegid(0) != 0) fail("setegid 0");
    create_with("/iris/id/g0", 0644);
    if (stat_of("/iris/id/g4321").st_gid != 4321 || stat_of("/iris/id/g0").st_gid != 0) {
        printf("FAIL setegid: groups %u and %u, want 4321 and 0\n",
               stat_of("/iris/id/g4321").st_gid, stat_of("/iris/id/g0").st_gid);
        return 1;
    }
    printf("setegid ok\n");

    const char *shared = "/iris/id/shared";
    create_with(shared, 0640);
    if (chown(shared, 0, 4321) != 0) fail("chown");
    gid_t in[1] = {4321};
    if (setgroups(1, in) != 0) fail("setgroups");
    if (seteuid(65534) != 0) fail("seteuid");
    opens(shared, "setgroups: a member");
    if (seteuid(0) != 0) fail("seteuid 0");
    if (setgroups(0, NULL) != 0) fail("setgroups none");
    if (seteuid(65534) != 0) fail("seteuid");
    refused(shared, "setgroups: no longer a member");
    if (seteuid(0) != 0) fail("seteuid 0");
    printf("setgroups ok\n");

    pthread_t t;
    pthread_barrier_init(&step, NULL, 2);
    if (pthread_create(&t, NULL, raw_setresuid_thread, NULL) != 0) fail("pthread_create");
    pthread_barrier_wait(&step);
    opens(secret, "main thread while the other is 65534");
    pthread_barrier_wait(&step);
    pthread_join(t, NULL);
    opens(secret, "main thread after the other's raw setresuid");
    printf("thread ok\n");

    umask(077);
    create_with("/iris/id/m077", 0666);
    umask(022);
    create_with("/iris/id/m022", 0666);
    syscall(SYS_umask, 0);
    create_with("/iris/id/m000", 0666);
    mode_t a = stat_of("/iris/id/m077").st_mode & 0777, b = stat_of("/iris/id/m022").st_mode & 0777,
           c = stat_of("/iris/id/m000").st_mode & 0777;
    if (a != 0600 || b != 0644 || c != 0666) {
        printf("FAIL umask: modes %o %o %o, want 600 644 666\n", a, b, c);
        return 1;
    }
    printf("umask ok\n");
    return 0;
}
