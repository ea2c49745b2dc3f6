/* A child forked while another thread of its parent makes the parent's first Iris call (which
 * opens the volume) must not hang on the opening it never sees finish. Each round is a fresh
 * process (this program's main process never calls Iris): a thread opens an Iris file while the
 * main thread forks after a varying delay; the grandchild opens another Iris file. Prints
 * "ok N/N" when every round's grandchild exited 0 within its alarm. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static void *first_call(void *arg) {
    (void)arg;
    int fd = open("/iris/start/a", O_CREAT | O_RDWR, 0644);
    if (fd >= 0) {
        write(fd, "a", 1);
        close(fd);
    }
    return NULL;
}

int main(void) {
    int ok = 0, n = 30;
    for (int i = 0; i < n; i++) {
        pid_t round = fork();
        if (round == 0) {
            pthread_t t;
            pthread_create(&t, NULL, first_call, NULL);
            usleep(i * 150);
            pid_t c = fork();
            if (c == 0) {
                alarm(10); /* a hung grandchild dies of SIGALRM and counts as a failure */
                int fd = open("/iris/start/b", O_CREAT | O_RDWR, 0644);
                _exit(fd < 0);
            }
            int st;
            waitpid(c, &st, 0);
            pthread_join(t, NULL);
            _exit(!(WIFEXITED(st) && WEXITSTATUS(st) == 0));
        }
        int st;
        waitpid(round, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ok++;
    }
    printf("ok %d/%d\n", ok, n);
    return 0;
}
