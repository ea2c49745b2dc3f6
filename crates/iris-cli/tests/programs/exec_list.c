/* execle (with a scrubbed environment), execl and execlp (with more arguments than registers)
 * from a program on Iris: each new image must still be served by Iris and keep the Iris fd it
 * inherits. Stage 0 opens /iris/ex.txt as fd 5; every stage appends a line; the last runs sh
 * with eight extra arguments, which it appends too. Run by tests/e2e.rs. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int say(const char *m) { return write(5, m, strlen(m)) == (ssize_t)strlen(m) ? 0 : 1; }

int main(int argc, char **argv) {
    const char *stage = argc > 1 ? argv[1] : "0";
    if (!strcmp(stage, "0")) {
        int fd = open("/iris/ex.txt", O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 5) != 5 || say("stage 0\n")) { perror("stage 0"); return 1; }
        char *env[] = {"PATH=/usr/bin:/bin", NULL};
        execle(argv[0], argv[0], "1", (char *)NULL, env);
    } else if (!strcmp(stage, "1")) {
        if (say("stage 1\n")) { perror("stage 1"); return 1; }
        execl(argv[0], argv[0], "2", (char *)NULL);
    } else {
        if (say("stage 2\n")) { perror("stage 2"); return 1; }
        execlp("sh", "sh", "-c", "echo \"$@\" >&5", "sh", "a", "b", "c", "d", "e", "f", "g", "h",
               (char *)NULL);
    }
    perror("exec");
    return 1;
}
