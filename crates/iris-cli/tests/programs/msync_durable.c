/* msync of a shared mapping of an Iris file puts the bytes into the volume (MS_SYNC commits):
 * maps /iris/m, writes and msyncs one page, writes another page without msync, grows the
 * mapping with mremap and msyncs a page at its new address, then dies of SIGKILL (no close, no
 * exit handlers). tests/e2e.rs then reads the volume with `iris cat`. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(void) {
    int fd = open("/iris/m", O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, 16384)) { perror("open"); return 1; }
    char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    memcpy(p, "synced page", 11);
    if (msync(p, 4096, MS_SYNC)) { perror("msync"); return 1; }
    memcpy(p + 4096, "unsynced", 8);
    char *q = mremap(p, 8192, 16384, MREMAP_MAYMOVE);
    if (q == MAP_FAILED) { perror("mremap"); return 1; }
    memcpy(q + 12288, "after mremap", 12);
    if (msync(q + 12288, 4096, MS_SYNC)) { perror("msync 2"); return 1; }
    kill(getpid(), SIGKILL);
    return 1;
}
