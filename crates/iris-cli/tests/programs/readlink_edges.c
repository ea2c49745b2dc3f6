/* readlink(2)'s edges on the link of an open file (/proc/self/fd/N) and on a symlink:
 * an empty buffer (EINVAL), no buffer (EFAULT), a short buffer (cut, not terminated).
 * argv[1]: a directory. One line per case. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void cases(const char *what, const char *path) {
    char b[8];
    errno = 0;
    long r = readlink(path, b, 0);
    printf("%s, empty buffer: %ld %s\n", what, r, strerror(errno));
    errno = 0;
    r = readlink(path, NULL, 8);
    printf("%s, no buffer: %ld %s\n", what, r, strerror(errno));
    memset(b, '.', sizeof b);
    r = readlinkat(AT_FDCWD, path, b, 4);
    printf("%s, 4 bytes: %ld %.8s\n", what, r, b);
}

int main(int argc, char **argv) {
    char file[256], link[256], fdlink[64];
    snprintf(file, sizeof file, "%s/f", argv[1]);
    snprintf(link, sizeof link, "%s/l", argv[1]);
    int fd = open(file, O_RDWR | O_CREAT, 0644);
    if (fd < 0 || symlink("abcdefgh", link) != 0) return 1;
    snprintf(fdlink, sizeof fdlink, "/proc/self/fd/%d", fd);
    cases("fd link", fdlink);
    cases("symlink", link);
    return 0;
}
