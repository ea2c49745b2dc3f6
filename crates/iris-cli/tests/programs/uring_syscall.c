/* io_uring through libc's syscall() (as Rust's io-uring crate makes its calls) on a file in
 * directory argv[1]: reads and writes (plain, vectored, at the file offset), fdatasync, a
 * failed request cancelling its chain, a pipe (a kernel fd) in the same submission, a ring
 * entered by its registered index, and a close. Prints each completion as "user_data res"
 * and the file's bytes; the same output is expected on tmpfs and on Iris. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static int ring_fd;
static unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
static unsigned *cq_head, *cq_tail, *cq_mask;
static struct io_uring_sqe *sqes;
static struct io_uring_cqe *cqes;
static unsigned queued;
static int enter_fd;
static unsigned enter_flags;

static void die(const char *what) {
    printf("%s: %s\n", what, strerror(errno));
    exit(1);
}

static struct io_uring_sqe *next_sqe(void) {
    unsigned tail = *sq_tail + queued;
    unsigned slot = tail & *sq_mask;
    struct io_uring_sqe *sqe = &sqes[slot];
    memset(sqe, 0, sizeof *sqe);
    sq_array[slot] = slot;
    queued++;
    return sqe;
}

/* Submit what is queued and wait for as many completions; print them in user_data order. */
static void submit_and_print(void) {
    unsigned n = queued;
    __atomic_store_n(sq_tail, *sq_tail + n, __ATOMIC_RELEASE);
    queued = 0;
    long r = syscall(SYS_io_uring_enter, enter_fd, n, n, IORING_ENTER_GETEVENTS | enter_flags,
                     NULL, 0);
    if (r < 0)
        die("io_uring_enter");
    unsigned long long data[16];
    int res[16];
    unsigned got = 0;
    while (got < n) {
        unsigned head = *cq_head;
        if (head == __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE)) {
            if (syscall(SYS_io_uring_enter, enter_fd, 0, 1,
                        IORING_ENTER_GETEVENTS | enter_flags, NULL, 0) < 0)
                die("io_uring_enter (wait)");
            continue;
        }
        struct io_uring_cqe *c = &cqes[head & *cq_mask];
        data[got] = c->user_data;
        res[got] = c->res;
        got++;
        __atomic_store_n(cq_head, head + 1, __ATOMIC_RELEASE);
    }
    for (unsigned i = 0; i < got; i++)
        for (unsigned j = i + 1; j < got; j++)
            if (data[j] < data[i]) {
                unsigned long long d = data[i];
                data[i] = data[j];
                data[j] = d;
                int t = res[i];
                res[i] = res[j];
                res[j] = t;
            }
    for (unsigned i = 0; i < got; i++) {
        if (res[i] < 0)
            printf("%llu %s\n", data[i], strerror(-res[i]));
        else
            printf("%llu %d\n", data[i], res[i]);
    }
}

static struct io_uring_sqe *prep_rw(int op, int fd, const void *addr, unsigned len,
                                    long long off, unsigned long long data) {
    struct io_uring_sqe *s = next_sqe();
    s->opcode = op;
    s->fd = fd;
    s->addr = (unsigned long long)(uintptr_t)addr;
    s->len = len;
    s->off = (unsigned long long)off;
    s->user_data = data;
    return s;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: uring_syscall DIR\n");
        return 2;
    }
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    ring_fd = (int)syscall(SYS_io_uring_setup, 8, &p);
    if (ring_fd < 0)
        die("io_uring_setup");
    enter_fd = ring_fd;
    size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring_fd,
                    IORING_OFF_SQ_RING);
    char *cq = mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring_fd,
                    IORING_OFF_CQ_RING);
    sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_POPULATE, ring_fd, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED)
        die("mmap");
    sq_head = (unsigned *)(sq + p.sq_off.head);
    sq_tail = (unsigned *)(sq + p.sq_off.tail);
    sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    sq_array = (unsigned *)(sq + p.sq_off.array);
    cq_head = (unsigned *)(cq + p.cq_off.head);
    cq_tail = (unsigned *)(cq + p.cq_off.tail);
    cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);

    char path[4096];
    snprintf(path, sizeof path, "%s/ring", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    int pipefd[2];
    if (fd < 0 || pipe(pipefd) != 0)
        die("open");

    /* Writes: plain at 0, vectored at 6, and a pipe write in the same submission. */
    struct iovec wv[2] = {{"brave ", 6}, {"new world", 9}};
    prep_rw(IORING_OP_WRITE, fd, "hello ", 6, 0, 1);
    prep_rw(IORING_OP_WRITEV, fd, wv, 2, 6, 2);
    prep_rw(IORING_OP_WRITE, pipefd[1], "via pipe", 8, 0, 3);
    submit_and_print();

    /* fdatasync, then reads: plain, vectored, past the end, and two at the file offset. */
    struct io_uring_sqe *s = next_sqe();
    s->opcode = IORING_OP_FSYNC;
    s->fd = fd;
    s->fsync_flags = IORING_FSYNC_DATASYNC;
    s->user_data = 4;
    char a[8] = {0}, b[17] = {0}, c[8] = {0}, d[4] = {0}, e[4] = {0}, pb[16] = {0};
    struct iovec rv[2] = {{a, 5}, {b, 16}};
    prep_rw(IORING_OP_READV, fd, rv, 2, 0, 5);
    prep_rw(IORING_OP_READ, fd, c, sizeof c, 100, 6);
    submit_and_print();
    prep_rw(IORING_OP_READ, fd, d, 3, -1, 7);
    submit_and_print();
    prep_rw(IORING_OP_READ, fd, e, 3, -1, 8);
    prep_rw(IORING_OP_READ, pipefd[0], pb, sizeof pb, 0, 9);
    submit_and_print();
    printf("read: [%s|%s] [%s] [%s] [%s] [%s]\n", a, b, c, d, e, pb);

    /* A chain: a write on a read-only fd fails and cancels the read linked after it. */
    int ro = open(path, O_RDONLY);
    if (ro < 0)
        die("open ro");
    prep_rw(IORING_OP_WRITE, ro, "x", 1, 0, 10)->flags |= IOSQE_IO_LINK;
    prep_rw(IORING_OP_READ, fd, c, 4, 0, 11);
    submit_and_print();

    /* A short read fails its link too; a hard link goes on after a failure. */
    prep_rw(IORING_OP_READ, fd, c, 4, 100, 14)->flags |= IOSQE_IO_LINK;
    prep_rw(IORING_OP_READ, fd, c, 4, 0, 15);
    submit_and_print();
    prep_rw(IORING_OP_WRITE, ro, "x", 1, 0, 16)->flags |= IOSQE_IO_HARDLINK;
    prep_rw(IORING_OP_READ, fd, c, 4, 0, 17);
    submit_and_print();

    /* A poll of the file: ready to read and write. */
    s = next_sqe();
    s->opcode = IORING_OP_POLL_ADD;
    s->fd = fd;
    s->poll32_events = POLLIN | POLLOUT;
    s->user_data = 18;
    submit_and_print();

    /* The ring entered by its registered index. */
    struct io_uring_rsrc_update up = {.offset = (unsigned)-1, .data = (unsigned long long)ring_fd};
    if (syscall(SYS_io_uring_register, ring_fd, IORING_REGISTER_RING_FDS, &up, 1) != 1)
        die("register ring fd");
    enter_fd = (int)up.offset;
    enter_flags = IORING_ENTER_REGISTERED_RING;
    prep_rw(IORING_OP_WRITE, fd, "!", 1, 21, 12);
    submit_and_print();

    /* Close through the ring: the fd is gone afterwards. */
    s = next_sqe();
    s->opcode = IORING_OP_CLOSE;
    s->fd = ro;
    s->user_data = 13;
    submit_and_print();
    printf("ro after close: %s\n", fcntl(ro, F_GETFD) < 0 ? strerror(errno) : "open");

    char all[64] = {0};
    ssize_t n = pread(fd, all, sizeof all - 1, 0);
    printf("file: %zd [%s]\n", n, all);
    return 0;
}
