/* test_session_property: whatever kimi-chat writes, it reads (issue 18). Sessions are made
 * through the chat core from random conversations: answers shaped as the local generator
 * reports them (a token count with every event, ids, every stat) and as the remote one does
 * (no token counts while streaming, no ids, stats a server may leave out), each optional stat
 * absent, zero, huge or not finite, text with NUL bytes, ill-formed UTF-8 and control
 * characters, tool rounds (run, denied, unknown tool, bad arguments), system prompt edits and
 * /undo. Each autosaved file must load (session_load never refuses it), and saving what was
 * loaded must give the same bytes. The seed of a failing case is printed. And a save whose
 * folder cannot be synced after the rename leaves no second copy of the session. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "app/chat/app.h"
#include "engine/base/file_io.h"
#include "tests/unit/check.h"

static uint64_t rng_state;

static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static int chance(int percent) { return (int)(rnd() % 100) < percent; }

/* Random text: printable words, NUL bytes, control characters, quotes, valid multi-byte
 * characters and ill-formed UTF-8. [*len] bytes, NUL-terminated. */
static char *random_text(size_t max, size_t *len)
{
    static const char *const pieces[] = {
        "hello ", "wörld ", "日本語 ", "\"quoted\" ", "back\\slash ", "\n", "\t", "\r\n", "\x1b[2K",
        "\x01", "\x7f", "\xff\xfe", "\xc3", "\xed\xa0\x80", "\xf0\x9f\x98\x80", "{\"a\": 1}", "<b>&amp;</b> ",
        "```", "\xe2\x80\xa8",
    };
    size_t n = max ? rnd() % (max + 1) : 0, used = 0;
    char *s = malloc(n * 16 + 1);
    for (size_t i = 0; i < n; i++) {
        if (chance(10)) {
            s[used++] = 0;
            continue;
        }
        const char *p = pieces[rnd() % (sizeof pieces / sizeof *pieces)];
        memcpy(s + used, p, strlen(p));
        used += strlen(p);
    }
    s[used] = 0;
    *len = used;
    return s;
}

/* One stat: absent (0), zero, small, huge, or not finite / negative as a broken clock or a
 * server might report it. */
static double random_seconds(void)
{
    static const double shapes[] = {0, 0, 0.25, 12.5, 1e-300, 1e300, DBL_MAX, -1, INFINITY, NAN};
    return shapes[rnd() % (sizeof shapes / sizeof *shapes)];
}

static int random_count(void)
{
    static const int shapes[] = {0, 0, 1, 17, 4096, INT_MAX, -1};
    return shapes[rnd() % (sizeof shapes / sizeof *shapes)];
}

/* ---- a generator that answers at random, shaped as the local or the remote one ---- */

typedef struct {
    generator base;
    int remote;                 /* the remote generator's shape */
    int fd[2];
    int running;
    generator_result result;
    int32_t ids[64];
} random_generator;

static int rg_start(generator *g, const generator_request *req, kimi_err *err)
{
    random_generator *f = (random_generator *)g;
    (void)req;
    (void)err;
    f->running = 1;
    char byte = 1;
    return write(f->fd[1], &byte, 1) == 1 ? 0 : -1;
}

static int rg_event_fd(const generator *g) { return ((const random_generator *)g)->fd[0]; }

static void emit(random_generator *f, generator_event_fn fn, void *user, parse_event pe, int *tokens)
{
    if (!pe.text)
        pe.text = "";
    if (!f->remote)
        (*tokens)++;
    generator_event ev = {.kind = GENERATOR_EVENT_PARSE, .parse = pe, .tokens = *tokens};
    fn(user, &ev);
}

static int rg_pump(generator *g, generator_event_fn fn, void *user, kimi_err *err)
{
    random_generator *f = (random_generator *)g;
    (void)err;
    if (!f->running)
        return 0;
    char byte;
    while (read(f->fd[0], &byte, 1) == 1)
        ;
    int tokens = 0;
    size_t len;
    if (chance(60)) {
        char *t = random_text(6, &len);
        emit(f, fn, user, (parse_event){.kind = PARSE_REASONING_TEXT, .text = t, .len = len}, &tokens);
        free(t);
    }
    if (chance(80)) {
        char *t = random_text(10, &len);
        emit(f, fn, user, (parse_event){.kind = PARSE_CONTENT_TEXT, .text = t, .len = len}, &tokens);
        free(t);
    }
    int calls = chance(35) ? 1 + (int)(rnd() % 2) : 0;
    for (int i = 0; i < calls; i++) {
        static const char *const names[] = {"echo", "echo", "nosuch", "secret"};
        const char *name = names[rnd() % 4];
        char id[64];
        snprintf(id, sizeof id, "functions.%s:%d", name, i);
        int valid = chance(80);
        char *text = random_text(3, &len);
        json_t *args = json_pack("{s:s%}", "text", text, len);
        char *json = valid && args ? json_dumps(args, JSON_COMPACT) : NULL;
        json_decref(args);
        if (!json)      /* text JSON cannot hold (ill-formed UTF-8), or arguments cut short */
            json = strdup(valid ? "{\"text\": \"\\u0000\"}" : "{\"text\": ");
        free(text);
        emit(f, fn, user, (parse_event){.kind = PARSE_TOOL_CALL_BEGIN, .call = i}, &tokens);
        emit(f, fn, user, (parse_event){.kind = PARSE_TOOL_CALL_ID, .call = i, .text = id, .len = strlen(id), .name = name}, &tokens);
        emit(f, fn, user, (parse_event){.kind = PARSE_TOOL_CALL_ARGS, .call = i, .text = json, .len = strlen(json)}, &tokens);
        emit(f, fn, user, (parse_event){.kind = PARSE_TOOL_CALL_END, .call = i, .valid = valid,
                                        .text = valid ? "" : "invalid JSON arguments", .len = valid ? 0 : 22}, &tokens);
        free(json);
    }
    static const parse_stop_reason stops[] = {PARSE_STOP_END_OF_TURN, PARSE_STOP_MAX_TOKENS, PARSE_STOP_CANCELLED};
    emit(f, fn, user, (parse_event){.kind = PARSE_STOP, .stop = stops[rnd() % 3]}, &tokens);
    f->result = (generator_result){
        .prompt_tokens = random_count(), .reused_tokens = random_count(),
        .generated_tokens = f->remote ? random_count() : tokens,
        .ttft_seconds = random_seconds(), .prefill_tok_s = random_seconds(), .decode_tok_s = random_seconds(),
    };
    if (!f->remote) {
        size_t n = rnd() % 64;
        for (size_t i = 0; i < n; i++)
            f->ids[i] = chance(5) ? INT32_MAX : (int32_t)(rnd() % 163840);
        f->result.ids = n ? f->ids : NULL;
        f->result.n_ids = n;
    }
    f->running = 0;
    return 1;
}

static void rg_cancel(generator *g) { (void)g; }
static const generator_result *rg_result(const generator *g) { return &((const random_generator *)g)->result; }

static void rg_close(generator *g)
{
    random_generator *f = (random_generator *)g;
    close(f->fd[0]);
    close(f->fd[1]);
}

static const generator_ops rg_ops = {rg_start, rg_event_fd, rg_pump, rg_cancel, rg_result, rg_close};

static random_generator gen_state;

static generator *rg_open(int remote)
{
    gen_state = (random_generator){.base = {.ops = &rg_ops, .context_limit = 1000}, .remote = remote};
    snprintf(gen_state.base.model, sizeof gen_state.base.model, "%s", remote ? "kimi-k2.5 \"served\"" : "Kimi-K2.5-NVFP4");
    snprintf(gen_state.base.backend, sizeof gen_state.base.backend, "%s",
             remote ? "server http://127.0.0.1:1" : "cpu TP=1");
    if (pipe2(gen_state.fd, O_NONBLOCK))
        abort();
    return &gen_state.base;
}

static void run_until_idle(app *a)
{
    for (int spins = 0; app_busy(a) && spins < 2000; spins++) {
        struct pollfd fds[APP_MAX_POLL_FDS];
        int n = app_poll_fds(a, fds);
        if (n == 0)
            break;
        poll(fds, (nfds_t)n, 100);
        kimi_err err = {0};
        CHECK(app_dispatch(a, &err) == 0);
    }
    CHECK(!app_busy(a));
}

/* The file at path loads, and saving what loaded gives the same bytes. */
static void check_round_trip(const char *path, uint64_t seed)
{
    char *written;
    size_t size;
    kimi_err err = {0};
    CHECK_MSG(file_read_all(path, &written, &size, &err) == 0, "seed %llu: %s", (unsigned long long)seed, err.msg);
    session s;
    int rc = session_load(&s, path, &err);
    CHECK_MSG(rc == 0, "seed %llu: kimi-chat refused a file it wrote: %s", (unsigned long long)seed, err.msg);
    if (rc == 0) {
        char *again;
        size_t len;
        CHECK(session_to_text(&s, &again, &len, &err) == 0);
        CHECK_MSG(len == size && !memcmp(again, written, size), "seed %llu: %s saved again differs",
                  (unsigned long long)seed, path);
        free(again);
        session_free(&s);
    }
    free(written);
}

static app_options opt;

/* fsync of a folder fails while fail_folder_sync is set: the last step of a save, after the
 * rename (a network filesystem, a full disk). Every other fsync is the system's. */
static int fail_folder_sync;

int fsync(int fd)
{
    struct stat st;
    if (fail_folder_sync && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        errno = EIO;
        return -1;
    }
    return (int)syscall(SYS_fsync, fd);
}

static int count_sessions(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.' && strstr(e->d_name, ".json") != NULL;
    if (d)
        closedir(d);
    return n;
}

/* The first save of a session fails to sync its folder: the error is said, and the file that
 * was written stays the session's (before issue 18 the next save started a second file). */
static void test_folder_sync_failure(const char *root)
{
    char data[400], sessions[500];
    snprintf(data, sizeof data, "%s/sync-data", root);
    snprintf(sessions, sizeof sessions, "%s/kimi-chat/sessions", data);
    setenv("XDG_DATA_HOME", data, 1);
    rng_state = 7;
    app *a = NULL;
    app_frontend fe = {0};
    kimi_err err = {0};
    CHECK_MSG(app_open(&a, &opt, &fe, rg_open(1), &err) == 0, "%s", err.msg);
    if (!a)
        return;
    fail_folder_sync = 1;
    CHECK(app_send(a, "hello", 5, &err) == 0);
    run_until_idle(a);
    CHECK(app_save(a, &err) != 0 && strstr(err.msg, "syncing the folder"));
    fail_folder_sync = 0;
    CHECK(app_send(a, "again", 5, &err) == 0);
    run_until_idle(a);
    CHECK_MSG(app_save(a, &err) == 0, "%s", err.msg);
    CHECK_INT(count_sessions(sessions), 1);
    app_close(a);
}

/* The sessions kimi-chat wrote from --server chats replaying tests/remote's recordings (and
 * one as kimi-chat wrote it before issue 18: reasoning_tokens -1, unknown) all load. */
static void test_remote_recordings(void)
{
    const char *dir = "tests/fuzz/corpus/session";
    DIR *d = opendir(dir);
    CHECK_MSG(d, "%s: run from the source tree", dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "remote_", 7))
            continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        session s;
        kimi_err err = {0};
        CHECK_MSG(session_load(&s, path, &err) == 0, "%s", err.msg);
        session_free(&s);
        n++;
    }
    if (d)
        closedir(d);
    CHECK_MSG(n >= 10, "%d remote recordings in %s", n, dir);
}

static void one_session(uint64_t seed)
{
    rng_state = seed;
    app *a = NULL;
    app_frontend fe = {0};
    kimi_err err = {0};
    CHECK_MSG(app_open(&a, &opt, &fe, rg_open((int)(rnd() % 2)), &err) == 0, "%s", err.msg);
    if (!a)
        return;
    int turns = 1 + (int)(rnd() % 4);
    for (int t = 0; t < turns; t++) {
        size_t len;
        if (chance(25)) {
            char *text = random_text(4, &len);
            for (size_t i = 0; i < len; i++)    /* a command line is one line of text */
                if (!text[i] || text[i] == '\n' || text[i] == '\r')
                    text[i] = ' ';
            char line[256];
            snprintf(line, sizeof line, "/system %.200s", text);
            free(text);
            err = (kimi_err){0};
            app_command(a, line, &err);
        }
        if (chance(10) && t) {
            err = (kimi_err){0};
            app_command(a, "/undo", &err);
        }
        char *text = random_text(8, &len);
        err = (kimi_err){0};
        if (len && app_send(a, text, len, &err) == 0)
            run_until_idle(a);
        free(text);
        err = (kimi_err){0};
        CHECK_MSG(app_save(a, &err) == 0, "seed %llu: %s", (unsigned long long)seed, err.msg);
        if (app_session(a)->path)
            check_round_trip(app_session(a)->path, seed);
    }
    app_close(a);
}

int main(void)
{
    char dir[] = "/tmp/test_session_property.XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char data[300], tools[300];
    snprintf(data, sizeof data, "%s/data", dir);
    setenv("XDG_DATA_HOME", data, 1);
    snprintf(tools, sizeof tools, "%s/tools.json", dir);
    FILE *f = fopen(tools, "w");
    fputs("[{\"type\": \"function\", \"function\": {\"name\": \"echo\", \"parameters\": {\"type\": \"object\","
          " \"properties\": {\"text\": {\"type\": \"string\"}}}}, \"exec\": {\"argv\": [\"echo\", \"{text}\"]}},"
          " {\"type\": \"function\", \"function\": {\"name\": \"secret\", \"parameters\": {\"type\": \"object\"}},"
          " \"exec\": {\"argv\": [\"true\"]}}]", f);
    fclose(f);
    opt = (app_options){.thinking = 1, .tools_path = tools, .allow_tools = "echo"};
    test_remote_recordings();
    test_folder_sync_failure(dir);
    setenv("XDG_DATA_HOME", data, 1);
    for (uint64_t seed = 1; seed <= 150; seed++)
        one_session(seed);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd))
        return 1;
    return check_finish();
}
