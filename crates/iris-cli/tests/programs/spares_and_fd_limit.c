/* Spare descriptions (see the interposer's desc_pool) hold fd numbers: a program that runs out
 * of numbers must get them back, not EMFILE early. With a limit of 64 open files, count how
 * many /dev/null opens succeed before EMFILE, first before any Iris file was opened (no
 * spares), then after eight Iris files were opened and closed (spares kept): the counts must
 * match. Prints "same N". */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static int fill(void) {
    int fds[128], n = 0;
    for (;;) {
        int fd = open("/dev/null", O_RDONLY);
        if (fd < 0) {
            if (errno != EMFILE) { perror("open /dev/null"); return -1; }
            break;
        }
        if (n == 128) { printf("limit not applied\n"); return -1; }
        fds[n++] = fd;
    }
    for (int i = 0; i < n; i++) close(fds[i]);
    return n;
}

int main(void) {
    struct rlimit lim = {64, 64};
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) { perror("setrlimit"); return 1; }
    struct stat st;
    if (stat("/iris", &st) != 0) { perror("stat /iris"); return 1; } /* Iris up, no fd of it */
    int before = fill();
    int fds[8];
    for (int i = 0; i < 8; i++) {
        char path[32];
        snprintf(path, sizeof path, "/iris/s%d", i);
        fds[i] = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
        if (fds[i] < 0) { perror(path); return 1; }
    }
    for (int i = 0; i < 8; i++) close(fds[i]);
    int after = fill();
    if (before < 0 || after < 0) return 1;
    if (before != after) { printf("before %d after %d\n", before, after); return 1; }
    printf("same %d\n", before);
    return 0;
}
