/* libc functions that glibc builds on its internal calls (past any interposer): remove,
 * canonicalize_file_name, pathconf, glob and glob64, nftw and ftw. Run on a directory D (on
 * tmpfs and in Iris); prints what they answer, paths relative to D, walks sorted. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *root;
static char seen[64][300];
static int nseen;

static int visit(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st;
    if (nseen < 64)
        snprintf(seen[nseen++], 300, "%s type=%d level=%d base=%s", p + strlen(root), flag,
                 f->level, p + f->base);
    return 0;
}

static int visit_stop(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st;
    (void)flag;
    (void)f;
    return strcmp(p + f->base, "stop") == 0 ? 7 : 0;
}

static int visit_old(const char *p, const struct stat *st, int flag) {
    (void)st;
    if (nseen < 64) snprintf(seen[nseen++], 300, "%s type=%d", p + strlen(root), flag);
    return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(a, b); }

static void dump(const char *what, int r) {
    qsort(seen, nseen, sizeof seen[0], cmp);
    printf("%s -> %d\n", what, r);
    for (int i = 0; i < nseen; i++) printf("  %s\n", seen[i]);
    nseen = 0;
}

static void touch(const char *rel) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    int fd = open(p, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) close(fd);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    root = argv[1];
    char p[512];
    touch("rm.txt");
    snprintf(p, sizeof p, "%s/rm.txt", root);
    int first = remove(p);
    int again = remove(p);
    printf("remove file %d, again %d errno %d\n", first, again, errno);
    snprintf(p, sizeof p, "%s/sub", root);
    mkdir(p, 0755);
    printf("remove dir %d, exists %d\n", remove(p), access(p, F_OK) == 0);
    char *c = canonicalize_file_name(root);
    printf("canonical %d\n", c != NULL && strcmp(c, root) == 0);
    snprintf(p, sizeof p, "%s/nothing/../x", root);
    errno = 0;
    int missing = canonicalize_file_name(p) == NULL;
    printf("canonical missing %d errno %d\n", missing, errno);
    printf("pathconf name %ld path %ld\n", pathconf(root, _PC_NAME_MAX), pathconf(root, _PC_PATH_MAX));
    snprintf(p, sizeof p, "%s/missing", root);
    errno = 0;
    long pc = pathconf(p, _PC_NAME_MAX);
    printf("pathconf missing %ld errno %d\n", pc, errno);

    snprintf(p, sizeof p, "%s/t", root);
    mkdir(p, 0755);
    touch("t/a.txt");
    touch("t/b.txt");
    touch("t/c.dat");
    snprintf(p, sizeof p, "%s/t/d", root);
    mkdir(p, 0755);
    touch("t/d/stop");
    touch("t/d/e.txt");
    snprintf(p, sizeof p, "%s/t/link", root);
    symlink("a.txt", p);
    snprintf(p, sizeof p, "%s/t/dangling", root);
    symlink("nowhere", p);

    glob_t g;
    snprintf(p, sizeof p, "%s/t/*.txt", root);
    int r = glob(p, 0, NULL, &g);
    printf("glob %d:", r);
    for (size_t i = 0; r == 0 && i < g.gl_pathc; i++) printf(" %s", g.gl_pathv[i] + strlen(root));
    printf("\n");
    globfree(&g);
    snprintf(p, sizeof p, "%s/t/*", root);
    r = glob(p, GLOB_MARK, NULL, &g);
    printf("glob mark %d:", r);
    for (size_t i = 0; r == 0 && i < g.gl_pathc; i++) printf(" %s", g.gl_pathv[i] + strlen(root));
    printf("\n");
    globfree(&g);
    snprintf(p, sizeof p, "%s/t/*/*.txt", root);
    r = glob(p, 0, NULL, &g);
    printf("glob nested %d: %s\n", r, r == 0 ? g.gl_pathv[0] + strlen(root) : "");
    globfree(&g);
    snprintf(p, sizeof p, "%s/none/*", root);
    int none = glob(p, 0, NULL, &g);
    globfree(&g);
    int nocheck = glob(p, GLOB_NOCHECK, NULL, &g);
    printf("glob none %d, nocheck %d\n", none, nocheck);
    globfree(&g);

    snprintf(p, sizeof p, "%s/t", root);
    dump("nftw phys", nftw(p, visit, 8, FTW_PHYS));
    dump("nftw follow", nftw(p, visit, 8, 0));
    dump("nftw depth", nftw(p, visit, 8, FTW_PHYS | FTW_DEPTH));
    dump("ftw", ftw(p, visit_old, 8));
    snprintf(p, sizeof p, "%s/t/d", root);
    printf("nftw stopped by its function %d\n", nftw(p, visit_stop, 8, FTW_PHYS));
    snprintf(p, sizeof p, "%s/t/dangling", root);
    dump("nftw from a dangling link", nftw(p, visit, 8, 0));
    snprintf(p, sizeof p, "%s/missing", root);
    errno = 0;
    r = nftw(p, visit, 8, 0);
    printf("nftw missing %d errno %d\n", r, errno);
    return 0;
}
