/* session_durability_writer: saves ever newer sessions to one path as fast as it can until it
 * is killed (test_session_durability kills it with SIGKILL at random moments). It resumes from
 * the generation the file holds; a file it cannot load is exit status 3. After its first save it
 * writes one byte to stdout, so the test can time most kills from there whatever the load. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "tests/unit/session_durability.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: session_durability_writer PATH\n");
        return 2;
    }
    session s;
    kimi_err err = {0};
    uint64_t g = 0;
    int told = 0;
    signal(SIGPIPE, SIG_IGN);
    FILE *f = fopen(argv[1], "r");
    if (f) {
        fclose(f);
        if (session_load(&s, argv[1], &err)) {
            fprintf(stderr, "session_durability_writer: %s\n", err.msg);
            return 3;
        }
        g = s.settings.seed;
        session_free(&s);
    }
    for (;;) {
        g++;
        if (durability_session(&s, g, &err) || session_save(&s, argv[1], &err)) {
            fprintf(stderr, "session_durability_writer: %s\n", err.msg);
            return 1;
        }
        session_free(&s);
        if (!told) {
            told = 1;
            ssize_t ignored = write(1, "s", 1);  /* the test may have stopped listening */
            (void)ignored;
        }
    }
}
