/* dlopen each library named on the command line, call its `hello`, print what it says (or
 * what dlerror says, with the path left out). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            const char *e = dlerror();
            printf("%s: %s\n", argv[i], e && strstr(e, "No such file") ? "no such file" : "error");
            continue;
        }
        const char *(*hello)(void) = (const char *(*)(void))dlsym(h, "hello");
        printf("%s: %s\n", argv[i], hello ? hello() : "no hello");
        dlclose(h);
    }
    return 0;
}
