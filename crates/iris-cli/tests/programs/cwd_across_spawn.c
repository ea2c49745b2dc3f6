/* A program that changes into an Iris directory itself (as `make -C` does) leaves PWD behind:
 * its children must start in that directory all the same, however they are made. Started from
 * "/" (PWD=/). Each child runs `cat rel.txt` (a path relative to the Iris directory) and a
 * shell the child runs does it once more, and so do system and popen; prints what they print. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void wait_for(pid_t pid, const char *what) {
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAIL %s: status %d\n", what, status);
        exit(1);
    }
}

int main(void) {
    if (mkdir("/iris/sub", 0755) != 0) { perror("mkdir"); return 1; }
    int fd = open("/iris/sub/rel.txt", O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, "relative\n", 9) != 9 || close(fd) != 0) { perror("rel.txt"); return 1; }
    if (chdir("/iris/sub") != 0) { perror("chdir"); return 1; }
    fflush(stdout);

    pid_t pid;
    char *cat[] = {"cat", "rel.txt", NULL};
    if (posix_spawnp(&pid, "cat", NULL, NULL, cat, environ) != 0) { perror("posix_spawnp"); return 1; }
    wait_for(pid, "posix_spawnp");

    pid = fork();
    if (pid == 0) {
        execlp("cat", "cat", "rel.txt", (char *)NULL);
        _exit(127);
    }
    wait_for(pid, "fork and execlp");

    char *sh[] = {"sh", "-c", "cat rel.txt && pwd", NULL};
    if (posix_spawnp(&pid, "sh", NULL, NULL, sh, environ) != 0) { perror("posix_spawnp sh"); return 1; }
    wait_for(pid, "a shell's child");

    /* glibc's system and popen start their shells past posix_spawn and execve; a directory
     * whose name has a quote in it must survive the way there. */
    if (system("cat rel.txt") != 0) { printf("FAIL system\n"); return 1; }
    FILE *p = popen("cat rel.txt", "r");
    char line[64] = "";
    if (p == NULL || fgets(line, sizeof line, p) == NULL || pclose(p) != 0) {
        printf("FAIL popen\n");
        return 1;
    }
    printf("popen: %s", line);
    if (mkdir("/iris/it's", 0755) != 0 || chdir("/iris/it's") != 0) { perror("it's"); return 1; }
    fflush(stdout);
    if (system("pwd") != 0) { printf("FAIL system pwd\n"); return 1; }

    /* A child told to start elsewhere by its spawn's file actions (Rust's Command::current_dir
     * does this): an Iris directory (relative, from here), a missing one, and an Iris one
     * followed by a host one. */
    chdir("/iris/sub");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addchdir_np(&fa, "../it's");
    char *where[] = {"sh", "-c", "pwd", NULL};
    if (posix_spawnp(&pid, "sh", &fa, NULL, where, environ) != 0) { printf("FAIL addchdir\n"); return 1; }
    wait_for(pid, "addchdir");
    posix_spawn_file_actions_destroy(&fa);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addchdir_np(&fa, "/iris/missing");
    printf("missing: %d\n", posix_spawnp(&pid, "sh", &fa, NULL, where, environ));
    posix_spawn_file_actions_destroy(&fa);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addchdir_np(&fa, "/iris/sub");
    posix_spawn_file_actions_addchdir_np(&fa, "/tmp");
    fflush(stdout);
    if (posix_spawn(&pid, "/bin/sh", &fa, NULL, where, environ) != 0) { printf("FAIL host after\n"); return 1; }
    wait_for(pid, "host after Iris");
    posix_spawn_file_actions_destroy(&fa);
    /* The same by an fd of the directory. */
    int dfd = open("/iris/sub", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addfchdir_np(&fa, dfd);
    fflush(stdout);
    if (dfd < 0 || posix_spawn(&pid, "/bin/sh", &fa, NULL, where, environ) != 0) { printf("FAIL addfchdir\n"); return 1; }
    wait_for(pid, "addfchdir");
    posix_spawn_file_actions_destroy(&fa);
    close(dfd);
    chdir("/iris/it's");

    /* Back out to a host directory: children start there, not in the Iris one. */
    if (chdir("/tmp") != 0) { perror("chdir /tmp"); return 1; }
    fflush(stdout);
    char *pwd[] = {"sh", "-c", "pwd", NULL};
    if (posix_spawnp(&pid, "sh", NULL, NULL, pwd, environ) != 0) { perror("posix_spawnp pwd"); return 1; }
    wait_for(pid, "host directory");
    if (system("pwd") != 0) { printf("FAIL system in /tmp\n"); return 1; }
    return 0;
}
