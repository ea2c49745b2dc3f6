/* Descriptions reused while other threads fork (see the interposer's desc_pool): four threads
 * open, read and close their own files in a loop, each checking it reads its own bytes, while
 * the main thread forks children that read a file it holds open and check it too. A reused
 * description that a child still holds, or a spare taken twice, shows as a wrong byte or a
 * wrong offset in a thread or a child. Prints "ok". */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;

static void put(const char *path, char c) {
    char buf[64];
    memset(buf, c, sizeof buf);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, buf, sizeof buf) != (ssize_t)sizeof buf || close(fd) != 0) {
        perror(path);
        exit(1);
    }
}

static int check(int fd, char c) {
    char buf[64];
    if (read(fd, buf, sizeof buf) != (ssize_t)sizeof buf) return 0;
    for (size_t i = 0; i < sizeof buf; i++)
        if (buf[i] != c) return 0;
    return 1;
}

static void *churn(void *arg) {
    long id = (long)arg;
    char path[32];
    snprintf(path, sizeof path, "/iris/t%ld", id);
    while (!stop) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) { perror("open"); exit(2); }
        if (!check(fd, 'a' + id)) { printf("thread %ld read another file\n", id); fflush(stdout); exit(3); }
        close(fd);
    }
    return NULL;
}

int main(void) {
    for (long i = 0; i < 4; i++) {
        char path[32];
        snprintf(path, sizeof path, "/iris/t%ld", i);
        put(path, 'a' + i);
    }
    put("/iris/held", 'z');
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn, (void *)i);
    for (int round = 0; round < 300; round++) {
        int fd = open("/iris/held", O_RDONLY | O_CLOEXEC);
        if (fd < 0) { perror("open held"); return 1; }
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); return 1; }
        if (pid == 0) {
            usleep(2000);
            _exit(check(fd, 'z') ? 0 : 4);
        }
        close(fd); /* the child still holds it: never to be reused */
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("child %d: status %d\n", round, status);
            return 1;
        }
    }
    stop = 1;
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("ok\n");
    return 0;
}
