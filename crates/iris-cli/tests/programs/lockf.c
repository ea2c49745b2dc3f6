/* lockf(3) on a file: glibc makes its fcntl call inside libc, which an interposer does not
 * see. argv[1]: the file. A child tests and tries the parent's lock (whole file, then a range
 * from the offset), then the parent unlocks part of it. One line per step. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *answer(int r) {
    if (r == 0) return "ok";
    return errno == EACCES || errno == EAGAIN ? "busy" : strerror(errno);
}

/* In a child (whose locks are its own): F_TEST and F_TLOCK of `len` bytes at `off`. */
static void probe(const char *path, const char *what, off_t off, off_t len) {
    pid_t c = fork();
    if (c == 0) {
        int g = open(path, O_RDWR);
        lseek(g, off, SEEK_SET);
        const char *t = answer(lockf(g, F_TEST, len));
        const char *l = answer(lockf(g, F_TLOCK, len));
        printf("%s: test %s, tlock %s\n", what, t, l);
        fflush(stdout);
        _exit(0);
    }
    waitpid(c, 0, 0);
}

int main(int argc, char **argv) {
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "0123456789", 10) != 10) return 1;
    lseek(fd, 0, SEEK_SET);
    printf("lock all: %s\n", answer(lockf(fd, F_LOCK, 0)));
    printf("own test: %s\n", answer(lockf(fd, F_TEST, 0)));
    fflush(stdout);
    probe(argv[1], "whole file", 0, 0);
    probe(argv[1], "far past the end", 1 << 20, 10);
    /* Unlock [4, 8): a child can lock there, not at 2. */
    lseek(fd, 4, SEEK_SET);
    printf("unlock 4..8: %s\n", answer(lockf(fd, F_ULOCK, 4)));
    fflush(stdout);
    probe(argv[1], "bytes 4..8", 4, 4);
    probe(argv[1], "bytes 0..2 (negative length)", 2, -2);
    errno = 0;
    printf("bad command: %s\n", answer(lockf(fd, 99, 0)));
    return 0;
}
