/* The end of an fd racing reads and writes of it (an application bug, but one a kernel file
 * system survives: the call in flight finishes on its own reference). Two threads pread and
 * pwrite whatever fd number the main thread last published while the main thread opens the
 * file again, publishes the new fd, and ends the old one by dup2 of /dev/null over it, which
 * takes the Iris fd out of the table as close does (and no number is reused: a read racing the
 * open that reuses its number is a known gap, see README). Every call must return a whole
 * result, 0 (/dev/null) or EBADF, never crash, hang or see bytes that were never written.
 * Prints "ok reads" when some reads saw the file. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile int shared_fd = -1, stop;
static long seen[2];

static void *hammer(void *arg) {
    long id = (long)arg;
    char buf[4096];
    while (!stop) {
        int fd = shared_fd;
        if (fd < 0) continue;
        ssize_t n = pread(fd, buf, sizeof buf, 0);
        if (n == (ssize_t)sizeof buf) {
            for (size_t i = 0; i < sizeof buf; i++)
                if (buf[i] != 'x') { printf("bad byte %d at %zu\n", buf[i], i); fflush(stdout); _exit(2); }
            seen[id]++;
        } else if (n > 0 || (n < 0 && errno != EBADF)) {
            printf("pread: %zd %s\n", n, strerror(errno)); fflush(stdout); _exit(3);
        }
        memset(buf, 'x', sizeof buf);
        n = pwrite(fd, buf, sizeof buf, 0);
        if (n < 0 && errno != EBADF && errno != EINVAL) { printf("pwrite: %s\n", strerror(errno)); fflush(stdout); _exit(4); }
    }
    return NULL;
}

int main(void) {
    char buf[4096];
    memset(buf, 'x', sizeof buf);
    int fd = open("/iris/race", O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0 || pwrite(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf) { perror("setup"); return 1; }
    shared_fd = fd;
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, hammer, (void *)i);
    int null_fd = open("/dev/null", O_RDWR);
    if (null_fd < 0) { perror("/dev/null"); return 1; }
    for (int round = 0; round < 400; round++) {
        int next = open("/iris/race", O_RDWR);
        if (next < 0) { perror("reopen"); return 1; }
        shared_fd = next;
        if (dup2(null_fd, fd) != fd) { perror("dup2"); return 1; }
        fd = next;
    }
    stop = 1;
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    close(fd);
    printf("ok %s\n", seen[0] + seen[1] > 0 ? "reads" : "no reads");
    return 0;
}
