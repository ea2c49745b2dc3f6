/* Children forked while other threads are inside Iris must not inherit a held lock: two threads
 * write and read Iris files without pause while the main thread forks children that open, write,
 * read back and close an Iris file of their own. Prints "children ok N" when every child exited 0. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;

static void *hammer(void *arg) {
    long id = (long)arg;
    char path[64], buf[3 * 4096];
    snprintf(path, sizeof path, "/iris/fork/t%ld", id);
    int fd = open(path, O_CREAT | O_RDWR, 0644);
    memset(buf, 'a' + (int)id, sizeof buf);
    for (long i = 0; !stop; i++) {
        pwrite(fd, buf, 4096 * (1 + i % 3), (i % 32) * 4096);
        pread(fd, buf, 4096, (i % 40) * 4096);
        if (i % 50 == 0) { int t = open("/iris/fork/meta", O_CREAT | O_RDWR, 0644); close(t); }
    }
    close(fd);
    return NULL;
}

int main(void) {
    mkdir("/iris/fork", 0755);
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, hammer, (void *)i);
    int ok = 0, n = 200;
    for (int c = 0; c < n; c++) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(20); /* a hung child dies of SIGALRM and counts as a failure */
            char path[64], got[6] = {0};
            snprintf(path, sizeof path, "/iris/fork/c%d", c);
            int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
            if (fd < 0 || write(fd, "child", 5) != 5 || pread(fd, got, 5, 0) != 5) _exit(1);
            close(fd);
            _exit(strcmp(got, "child") != 0);
        }
        int st;
        waitpid(pid, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ok++;
    }
    stop = 1;
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    printf("children ok %d/%d\n", ok, n);
    return 0;
}
