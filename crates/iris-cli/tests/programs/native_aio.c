/* Linux native AIO through libaio on an Iris file and a host file in the same batches:
 * writes, reads, vectored requests, fdatasync and an eventfd told of each completion.
 * Declares libaio's ABI itself (libaio-dev need not be installed); linked against
 * libaio.so.1. argv[1]: a file under the Iris mount; argv[2]: a host file.
 * Prints one line per step; exits non-zero at the first wrong answer. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

typedef struct io_context *io_context_t;
struct iocb {
    void *data;
    unsigned key;
    int aio_rw_flags;
    short aio_lio_opcode;
    short aio_reqprio;
    int aio_fildes;
    void *buf;
    unsigned long nbytes;
    long long offset;
    long long pad;
    unsigned flags;
    unsigned resfd;
};
struct io_event {
    void *data;
    struct iocb *obj;
    long res;
    long res2;
};
int io_setup(int maxevents, io_context_t *ctxp);
int io_destroy(io_context_t ctx);
int io_submit(io_context_t ctx, long nr, struct iocb *ios[]);
int io_getevents(io_context_t ctx, long min_nr, long nr, struct io_event *events,
                 struct timespec *timeout);
int io_pgetevents(io_context_t ctx, long min_nr, long nr, struct io_event *events,
                  struct timespec *timeout, sigset_t *sigmask);

enum { PREAD = 0, PWRITE = 1, FDSYNC = 3, PREADV = 7 };
#define N 8
#define BS 4096

static void prep(struct iocb *cb, int op, int fd, void *buf, unsigned long n, long long off,
                 void *tag) {
    memset(cb, 0, sizeof *cb);
    cb->aio_lio_opcode = op;
    cb->aio_fildes = fd;
    cb->buf = buf;
    cb->nbytes = n;
    cb->offset = off;
    cb->data = tag;
}

static io_context_t shared_ctx;
static struct io_event reaped;
static int reaper_got;

/* A reaper thread, waiting in io_getevents before the request it gets is even submitted. */
static void *reaper(void *arg) {
    (void)arg;
    reaper_got = io_getevents(shared_ctx, 1, 1, &reaped, NULL);
    return NULL;
}

static void die(const char *what, long got) {
    printf("FAIL %s: %ld\n", what, got);
    exit(1);
}

/* Wait for exactly `want` completions; each must have `res` == its expected length. */
static void reap(io_context_t ctx, int want, long expect) {
    struct io_event ev[2 * N];
    int have = 0;
    while (have < want) {
        int r = io_getevents(ctx, 1, want - have, ev + have, NULL);
        if (r <= 0) die("io_getevents", r);
        have += r;
    }
    for (int i = 0; i < want; i++)
        if (ev[i].res != expect || ev[i].obj->data != ev[i].data) die("event res", ev[i].res);
}

int main(int argc, char **argv) {
    int iris = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
    int host = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (iris < 0 || host < 0) die("open", -1);
    io_context_t ctx = 0;
    int r = io_setup(64, &ctx);
    if (r != 0) die("io_setup", r);
    static char out[2 * N][BS], in[2 * N][BS];
    struct iocb cbs[2 * N], *ptrs[2 * N];
    /* Writes: Iris and host requests interleaved in one submission. */
    for (int i = 0; i < 2 * N; i++) {
        memset(out[i], 'a' + i, BS);
        prep(&cbs[i], PWRITE, i % 2 ? host : iris, out[i], BS, (long long)(i / 2) * BS, &cbs[i]);
        ptrs[i] = &cbs[i];
    }
    r = io_submit(ctx, 2 * N, ptrs);
    if (r != 2 * N) die("io_submit writes", r);
    reap(ctx, 2 * N, BS);
    printf("writes ok\n");
    /* The bytes reached the files: plain reads agree. */
    for (int i = 0; i < 2 * N; i++) {
        char b[BS];
        if (pread(i % 2 ? host : iris, b, BS, (long long)(i / 2) * BS) != BS ||
            memcmp(b, out[i], BS) != 0)
            die("pread after aio write", i);
    }
    /* Reads back through AIO, and an fdatasync of each file. */
    for (int i = 0; i < 2 * N; i++) {
        prep(&cbs[i], PREAD, i % 2 ? host : iris, in[i], BS, (long long)(i / 2) * BS, &cbs[i]);
        ptrs[i] = &cbs[i];
    }
    r = io_submit(ctx, 2 * N, ptrs);
    if (r != 2 * N) die("io_submit reads", r);
    reap(ctx, 2 * N, BS);
    for (int i = 0; i < 2 * N; i++)
        if (memcmp(in[i], out[i], BS) != 0) die("read back", i);
    printf("reads ok\n");
    struct iocb sync[2], *sp[2] = {&sync[0], &sync[1]};
    prep(&sync[0], FDSYNC, iris, NULL, 0, 0, &sync[0]);
    prep(&sync[1], FDSYNC, host, NULL, 0, 0, &sync[1]);
    if ((r = io_submit(ctx, 2, sp)) != 2) die("io_submit fdatasync", r);
    reap(ctx, 2, 0);
    printf("fdatasync ok\n");
    /* A vectored read of two blocks of the Iris file, told through an eventfd. */
    int efd = eventfd(0, 0);
    char v0[BS], v1[BS];
    struct iovec iov[2] = {{v0, BS}, {v1, BS}};
    struct iocb vcb, *vp = &vcb;
    prep(&vcb, PREADV, iris, iov, 2, BS, &vcb);
    vcb.flags = 1; /* IOCB_FLAG_RESFD */
    vcb.resfd = efd;
    if ((r = io_submit(ctx, 1, &vp)) != 1) die("io_submit preadv", r);
    uint64_t ticks = 0;
    if (read(efd, &ticks, 8) != 8 || ticks != 1) die("eventfd", (long)ticks);
    reap(ctx, 1, 2 * BS);
    if (memcmp(v0, out[2], BS) != 0 || memcmp(v1, out[4], BS) != 0) die("preadv bytes", 0);
    printf("preadv ok\n");
    /* One read of each file, reaped through io_pgetevents. */
    struct iocb two[2], *tp[2] = {&two[0], &two[1]};
    prep(&two[0], PREAD, iris, in[0], BS, 0, &two[0]);
    prep(&two[1], PREAD, host, in[1], BS, 0, &two[1]);
    if ((r = io_submit(ctx, 2, tp)) != 2) die("io_submit for pgetevents", r);
    sigset_t mask;
    sigemptyset(&mask);
    struct io_event pev[2];
    int have = 0;
    while (have < 2) {
        r = io_pgetevents(ctx, 1, 2 - have, pev + have, NULL, &mask);
        if (r <= 0) die("io_pgetevents", r);
        have += r;
    }
    if (pev[0].res != BS || pev[1].res != BS || memcmp(in[0], out[0], BS) != 0 ||
        memcmp(in[1], out[1], BS) != 0)
        die("pgetevents bytes", 0);
    printf("pgetevents ok\n");
    /* A completion reaches a thread that was already waiting for it in the kernel. */
    shared_ctx = ctx;
    pthread_t t;
    pthread_create(&t, NULL, reaper, NULL);
    usleep(100000);
    /* (Vectored, longer than its first buffer: the kernel is told it as a vectored write.) */
    struct iocb late, *lp = &late;
    char l0[BS], l1[BS];
    struct iovec liov[2] = {{l0, BS}, {l1, BS}};
    prep(&late, PREADV, iris, liov, 2, BS, &late);
    if ((r = io_submit(ctx, 1, &lp)) != 1) die("io_submit for the reaper", r);
    pthread_join(t, NULL);
    if (reaper_got != 1 || reaped.res != 2 * BS || reaped.obj != &late) die("reaper", reaper_got);
    if (late.aio_lio_opcode != PREADV || late.aio_fildes != iris || late.buf != liov)
        die("request put back", late.aio_lio_opcode);
    if (memcmp(l0, out[2], BS) != 0 || memcmp(l1, out[4], BS) != 0) die("reaper bytes", 0);
    printf("reaper ok\n");
    /* A request on a closed fd fails at submission, as the kernel's do. */
    struct iocb bad, *bp = &bad;
    prep(&bad, PREAD, 1000, in[0], BS, 0, &bad);
    r = io_submit(ctx, 1, &bp);
    if (r != -9) die("io_submit on a closed fd", r);
    /* As the kernel: a read of a write-only Iris fd is refused at submission (EBADF), and a
     * batch stops before it. */
    int wo = open(argv[1], O_WRONLY);
    struct iocb rd, ok, *rp = &rd, *batch[2] = {&ok, &rd};
    prep(&rd, PREAD, wo, in[0], BS, 0, &rd);
    if ((r = io_submit(ctx, 1, &rp)) != -9) die("read of a write-only fd", r);
    prep(&ok, PWRITE, iris, out[0], BS, 0, &ok);
    if ((r = io_submit(ctx, 2, batch)) != 1) die("batch stopping at the refused request", r);
    reap(ctx, 1, BS);
    printf("ebadf ok\n");
    /* As the kernel: a request on an Iris fd to a context that does not exist, or no longer
     * does, is refused (EINVAL) and not carried out. */
    memset(out[0], 'z', BS);
    prep(&ok, PWRITE, iris, out[0], BS, 0, &ok);
    struct iocb *op = &ok;
    if ((r = io_submit((io_context_t)0x1000, 1, &op)) != -22) die("submit to no context", r);
    io_destroy(ctx);
    if ((r = io_submit(ctx, 1, &op)) != -22) die("submit to a destroyed context", r);
    char first;
    if (pread(iris, &first, 1, 0) != 1 || first == 'z') die("refused write carried out", first);
    printf("einval ok\n");
    return 0;
}
