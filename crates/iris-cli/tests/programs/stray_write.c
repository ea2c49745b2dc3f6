/* Built static, so Iris is not in it: it writes and reads fd 3 through the kernel alone, as a
 * program without the interposer (or a call the interposer does not see: io_uring, a raw
 * system call) would. fd 3 is an Iris fd its parent opened: the kernel sees only the
 * placeholder, which must refuse the write (EBADF) rather than take the bytes, which the
 * file would never get, and which once overwrote the description's shared state; and must
 * refuse the reads too (EBADF), which once returned zeros where the file has bytes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void) {
    static char zeros[8192];
    char buf[16];
    ssize_t w = write(3, zeros, sizeof zeros);
    printf("stray write: %s\n", w < 0 ? strerror(errno) : "taken");
    ssize_t r = read(3, buf, sizeof buf);
    printf("stray read: %s\n", r < 0 ? strerror(errno) : "answered");
    r = pread(3, buf, sizeof buf, 0);
    printf("stray pread: %s\n", r < 0 ? strerror(errno) : "answered");
    return 0;
}
