/* test_session_durability: session_save under SIGKILL. A writer process saves ever newer
 * sessions to one path in a loop; it is killed with SIGKILL at random moments, at least 50
 * times, and after each kill the file must load and be exactly one generation whole (never torn,
 * never mixed, never older than one seen before), with at most one leftover temp file (the
 * killed writer's; the next writer's first save removes it).
 *   test_session_durability WRITER   (SESSION_DURABILITY_SEED=N repeats a run's kill times) */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "tests/unit/session_durability.h"

enum { KILLS = 60, MAX_DELAY_US = 60000 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Files in dir other than the session: temp files, and anything else (which there must not be). */
static int count_others(const char *dir, const char *keep, int *temps)
{
    DIR *d = opendir(dir);
    int others = 0;
    struct dirent *e;
    *temps = 0;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, keep))
            continue;
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' && n > 4 && !strcmp(e->d_name + n - 4, ".tmp"))
            ++*temps;
        else
            others++;
    }
    if (d)
        closedir(d);
    return others;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_session_durability WRITER\n");
        return 2;
    }
    char dir[] = "/tmp/test_session_durability.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[sizeof dir + 32];
    snprintf(path, sizeof path, "%s/session.json", dir);
    const char *seed_env = getenv("SESSION_DURABILITY_SEED");
    unsigned seed = seed_env ? (unsigned)strtoul(seed_env, NULL, 10) : (unsigned)time(NULL) ^ (unsigned)getpid();
    srand(seed);

    double start = now_s();
    int kills = 0, loads = 0, progressed = 0, temp_seen = 0, max_temps = 0;
    uint64_t last = 0;
    for (int round = 0; round < KILLS && now_s() - start < 60; round++) {
        int saved_pipe[2];
        if (pipe(saved_pipe)) {
            perror("pipe");
            return 1;
        }
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            dup2(saved_pipe[1], 1);
            close(saved_pipe[0]);
            close(saved_pipe[1]);
            execl(argv[1], argv[1], path, (char *)NULL);
            _exit(127);
        }
        close(saved_pipe[1]);
        /* Early rounds kill soon after start (mid first save); the rest wait for the writer's
           first save (however slow a loaded machine starts it) and then kill anywhere in its
           loop, so every one of those rounds moves the generation on. */
        if (round >= 5) {
            struct pollfd pfd = {.fd = saved_pipe[0], .events = POLLIN};
            poll(&pfd, 1, 10000);
        }
        close(saved_pipe[0]);
        useconds_t delay = (useconds_t)(rand() % (round < 5 ? 3000 : MAX_DELAY_US));
        usleep(delay);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "round %d: the writer ended by itself (status %d)", round, status);
        kills += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;

        struct stat st;
        if (stat(path, &st) != 0) {
            CHECK_MSG(last == 0, "round %d: the session file vanished", round);
            continue;
        }
        session s;
        kimi_err err = {0};
        char why[160] = "";
        int rc = session_load(&s, path, &err);
        CHECK_MSG(rc == 0, "round %d (seed %u): %s", round, seed, err.msg);
        if (rc == 0) {
            loads++;
            CHECK_MSG(durability_check(&s, why, sizeof why), "round %d (seed %u): %s", round, seed, why);
            uint64_t g = s.settings.seed;
            CHECK_MSG(g >= last, "round %d: generation %llu after %llu", round, (unsigned long long)g,
                      (unsigned long long)last);
            progressed += g > last;
            last = g;
            CHECK((st.st_mode & 0777) == 0600);
        }
        session_free(&s);
        int temps, others = count_others(dir, "session.json", &temps);
        CHECK_MSG(others == 0, "round %d: %d unexpected files", round, others);
        CHECK_MSG(temps <= 1, "round %d: %d temp files", round, temps);
        temp_seen += temps > 0;
        if (temps > max_temps)
            max_temps = temps;
    }
    double took = now_s() - start;

    /* The next save clears the last killed writer's temp file. */
    session s;
    kimi_err err = {0};
    CHECK(session_load(&s, path, &err) == 0);
    CHECK(session_save(&s, path, &err) == 0);
    session_free(&s);
    int temps;
    CHECK_INT(count_others(dir, "session.json", &temps), 0);
    CHECK_INT(temps, 0);

    printf("seed %u: %d kills in %.1f s, %d loads all whole, generation reached %llu (%d rounds moved it on), "
           "a killed writer's temp file was left %d times (never more than %d)\n",
           seed, kills, took, loads, (unsigned long long)last, progressed, temp_seen, max_temps);
    CHECK(kills >= 50);
    CHECK(last > 50);          /* the writer really saved, many times */
    CHECK(progressed > kills / 2);
    unlink(path);
    rmdir(dir);
    return check_finish();
}
