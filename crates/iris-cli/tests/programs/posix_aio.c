/* POSIX AIO (glibc's aio_* and lio_listio) on a file in directory argv[1] and on a host file
 * argv[2]: writes and reads with each kind of notification (none, signal, thread), fsync,
 * aio_suspend, aio_error/aio_return, and a waiting lio_listio that mixes the two files.
 * Prints one line per step; the same output is expected on tmpfs and on Iris. */
#define _GNU_SOURCE
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t signalled;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int thread_value;

static void on_signal(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    (void)ctx;
    signalled = si->si_value.sival_int;
}

static void on_thread(union sigval v) {
    pthread_mutex_lock(&mu);
    thread_value = v.sival_int;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
}

static void wait_for(const struct aiocb *cb) {
    const struct aiocb *list[1] = {cb};
    while (aio_error(cb) == EINPROGRESS)
        aio_suspend(list, 1, NULL);
}

int main(int argc, char **argv) {
    char path[4096];
    snprintf(path, sizeof path, "%s/aio", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    int host = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || host < 0) {
        perror("open");
        return 1;
    }
    struct sigaction sa = {0};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &sa, NULL);

    struct aiocb w = {0};
    w.aio_fildes = fd;
    w.aio_buf = "hello, aio";
    w.aio_nbytes = 10;
    w.aio_sigevent.sigev_notify = SIGEV_SIGNAL;
    w.aio_sigevent.sigev_signo = SIGUSR1;
    w.aio_sigevent.sigev_value.sival_int = 7;
    aio_write(&w);
    wait_for(&w);
    while (!signalled)
        usleep(1000);
    printf("write: %d %zd, signal value %d\n", aio_error(&w), aio_return(&w), (int)signalled);

    char buf[32] = {0};
    struct aiocb r = {0};
    r.aio_fildes = fd;
    r.aio_buf = buf;
    r.aio_nbytes = sizeof buf - 1;
    r.aio_offset = 7;
    r.aio_sigevent.sigev_notify = SIGEV_THREAD;
    r.aio_sigevent.sigev_notify_function = on_thread;
    r.aio_sigevent.sigev_value.sival_int = 9;
    aio_read(&r);
    wait_for(&r);
    pthread_mutex_lock(&mu);
    while (!thread_value)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    printf("read: %zd [%s], thread value %d\n", aio_return(&r), buf, thread_value);

    struct aiocb s = {0};
    s.aio_fildes = fd;
    aio_fsync(O_DSYNC, &s);
    wait_for(&s);
    printf("fdatasync: %d %zd\n", aio_error(&s), aio_return(&s));

    struct aiocb a = {0}, b = {0};
    char ba[8] = {0};
    a.aio_fildes = host;
    a.aio_lio_opcode = LIO_WRITE;
    a.aio_buf = "host";
    a.aio_nbytes = 4;
    b.aio_fildes = fd;
    b.aio_lio_opcode = LIO_READ;
    b.aio_buf = ba;
    b.aio_nbytes = 5;
    struct aiocb *list[3] = {&a, NULL, &b};
    int rc = lio_listio(LIO_WAIT, list, 3, NULL);
    printf("lio_listio: %d, host %zd, iris %zd [%s]\n", rc, aio_return(&a), aio_return(&b), ba);

    struct aiocb bad = {0};
    int ro = open(path, O_RDONLY);
    bad.aio_fildes = ro;
    bad.aio_buf = "x";
    bad.aio_nbytes = 1;
    aio_write(&bad);
    wait_for(&bad);
    printf("write to a read-only fd: %s %zd\n", strerror(aio_error(&bad)), aio_return(&bad));
    printf("cancel: %d\n", aio_cancel(fd, NULL) == AIO_ALLDONE);
    return 0;
}
