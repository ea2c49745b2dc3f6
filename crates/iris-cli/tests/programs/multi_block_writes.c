/* Writes over several blocks seen whole from another process. Two writer processes rewrite
 * 16 KiB ranges of one file (four blocks at block-aligned offsets, five at 100 bytes past
 * one) with bytes of one value per write, while a third process reads the same ranges: every
 * range it reads must hold one write's bytes (on tmpfs a read can see two writes, page by
 * page; Iris's readers see all of a write or none of it). Prints "whole ranges read", or the
 * first torn range. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define RANGE 16384
#define RANGES 64
#define WRITES 20000

static long off_of(int r) { return (long)r * (RANGE + 4096) + (r % 2 ? 100 : 0); }

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "atom.dat";
    static char buf[RANGE];
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) { perror("open"); return 1; }
    memset(buf, 'a', sizeof buf);
    for (int r = 0; r < RANGES; r++)
        if (pwrite(fd, buf, RANGE, off_of(r)) != RANGE) { perror("pwrite"); return 1; }
    close(fd);
    /* How many writers are still writing, shared with the reader. */
    volatile int *running = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (running == MAP_FAILED) { perror("mmap"); return 1; }
    *running = 2;
    pid_t kids[3];
    for (int k = 0; k < 3; k++) {
        kids[k] = fork();
        if (kids[k] < 0) { perror("fork"); return 1; }
        if (kids[k] > 0) continue;
        int f = open(path, O_RDWR);
        if (f < 0) { perror("open"); _exit(1); }
        srand(k * 7919 + 1);
        if (k < 2) {
            for (int n = 0; n < WRITES; n++) {
                memset(buf, 'A' + k * 13 + n % 13, RANGE);
                if (pwrite(f, buf, RANGE, off_of(rand() % RANGES)) != RANGE) { perror("pwrite"); _exit(1); }
            }
            __sync_fetch_and_sub(running, 1);
            _exit(0);
        }
        long reads = 0;
        while (*running > 0) {
            int r = rand() % RANGES;
            if (pread(f, buf, RANGE, off_of(r)) != RANGE) { perror("pread"); _exit(1); }
            for (int i = 1; i < RANGE; i++)
                if (buf[i] != buf[0]) {
                    printf("range %d torn at byte %d: %c then %c\n", r, i, buf[0], buf[i]);
                    fflush(stdout);
                    _exit(1);
                }
            reads++;
        }
        printf("whole %s\n", reads > 0 ? "ranges read" : "nothing read");
        fflush(stdout);
        _exit(0);
    }
    int failed = 0;
    for (int k = 0; k < 3; k++) {
        int st;
        if (waitpid(kids[k], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
    }
    return failed;
}
