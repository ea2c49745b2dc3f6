/* Threads read an Iris fd while the main thread closes it, reopens the number on another file
 * and dup2()s descriptions over it: nothing crashes (a description is freed only after the reads
 * through it end), and every read returns EBADF or bytes of one file, never a mix. A read of a
 * number closed meanwhile may land on whatever file holds it then, as on any kernel: one of
 * the two files, or the placeholder memfd of a description being opened (its pages: zeros, the
 * shared description, or EOF) until the interposer takes the number over. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READERS 2
#define ROUNDS 3000
#define SIZE 65536

static atomic_int current = -1;
static atomic_int stop;

static void fill(const char *path, char c) {
    static char buf[SIZE];
    memset(buf, c, sizeof buf);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0 || write(fd, buf, sizeof buf) != sizeof buf || close(fd) != 0) {
        perror(path);
        exit(2);
    }
}

static void *reader(void *arg) {
    (void)arg;
    char buf[4096];
    long whole = 0;
    unsigned off = 0;
    while (!atomic_load(&stop)) {
        int fd = atomic_load(&current);
        off = (off + 4096) % SIZE;
        ssize_t n = pread(fd, buf, sizeof buf, off);
        if (n < 0) {
            if (errno != EBADF) {
                perror("pread");
                exit(3);
            }
            continue;
        }
        if (n == 0) continue; /* EOF: a placeholder (see above) */
        if (buf[0] != 'a' && buf[0] != 'b') continue; /* a placeholder's pages */
        if (n != (ssize_t)sizeof buf) {
            fprintf(stderr, "short read of a file: %zd bytes\n", n);
            exit(4);
        }
        for (size_t i = 1; i < sizeof buf; i++) {
            if (buf[i] != buf[0]) {
                fprintf(stderr, "mixed bytes at %zu\n", i);
                exit(5);
            }
        }
        whole++;
    }
    return (void *)whole;
}

int main(void) {
    fill("/iris/cwr_a", 'a');
    fill("/iris/cwr_b", 'b');
    pthread_t t[READERS];
    for (int i = 0; i < READERS; i++) pthread_create(&t[i], NULL, reader, NULL);
    for (int r = 0; r < ROUNDS; r++) {
        int fd = open(r % 2 ? "/iris/cwr_a" : "/iris/cwr_b", O_RDONLY);
        if (fd < 0) {
            perror("open");
            return 6;
        }
        atomic_store(&current, fd);
        for (int k = 0; k < 20; k++) sched_yield();
        if (r % 3 == 0) {
            int other = open(r % 2 ? "/iris/cwr_b" : "/iris/cwr_a", O_RDONLY);
            if (other < 0 || dup2(other, fd) != fd || close(other) != 0) {
                perror("dup2");
                return 7;
            }
            for (int k = 0; k < 20; k++) sched_yield();
        }
        if (close(fd) != 0) {
            perror("close");
            return 8;
        }
    }
    atomic_store(&stop, 1);
    long whole = 0;
    for (int i = 0; i < READERS; i++) {
        void *n;
        pthread_join(t[i], &n);
        whole += (long)n;
    }
    printf("ok %d rounds, reads %s\n", ROUNDS, whole > 0 ? "made" : "none");
    return 0;
}
