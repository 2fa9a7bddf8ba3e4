/* test_session_atomic: the durability protocol of every file kimi-chat writes atomically
 * (session_save for sessions and JSON exports, session_export_markdown for Markdown exports).
 * A SIGKILL test cannot see a missing fsync (the page cache outlives the process), so this one
 * watches the calls themselves: linked with -Wl,--wrap=fsync,--wrap=rename, it records each
 * fsync (of a file: its inode and size; of a folder: its inode) and each rename, and checks that
 * a save is exactly: fsync of the whole temp file, rename of that file over the path, fsync of
 * the path's folder. Failures injected at each step must leave the old file and no temp file. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/chat/session.h"
#include "tests/unit/check.h"

int __real_fsync(int fd);
int __real_rename(const char *from, const char *to);
int __wrap_fsync(int fd);
int __wrap_rename(const char *from, const char *to);

enum { MAX_CALLS = 16 };

typedef struct {
    char kind;           /* 'f': fsync of a file, 'd': fsync of a folder, 'r': rename */
    ino_t ino;           /* fsync: the synced inode */
    off_t size;          /* fsync of a file: its size then */
    char from[512], to[512];
} call;

static call calls[MAX_CALLS];
static int n_calls;
static int fail_file_fsync, fail_dir_fsync, fail_rename;  /* errno to inject, 0: none */

int __wrap_fsync(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return __real_fsync(fd);
    if (n_calls < MAX_CALLS)
        calls[n_calls] = (call){.kind = S_ISDIR(st.st_mode) ? 'd' : 'f', .ino = st.st_ino, .size = st.st_size};
    n_calls++;
    int inject = S_ISDIR(st.st_mode) ? fail_dir_fsync : fail_file_fsync;
    if (inject) {
        errno = inject;
        return -1;
    }
    return __real_fsync(fd);
}

int __wrap_rename(const char *from, const char *to)
{
    if (n_calls < MAX_CALLS) {
        call *c = &calls[n_calls];
        c->kind = 'r';
        snprintf(c->from, sizeof c->from, "%s", from);
        snprintf(c->to, sizeof c->to, "%s", to);
    }
    n_calls++;
    if (fail_rename) {
        errno = fail_rename;
        return -1;
    }
    return __real_rename(from, to);
}

static char dir[] = "/tmp/kimi-atomic-XXXXXX";

static void sample(session *s, const char *text)
{
    kimi_err err = {0};
    session_init(s);
    s->model = strdup("atomic");
    chat_message u = {.role = CHAT_ROLE_USER, .content = {(char *)text, strlen(text)}};
    chat_message a = {.role = CHAT_ROLE_ASSISTANT, .content = {"Sure.", 5}};
    session_message_meta meta = {0};
    CHECK(session_append(s, &u, &meta, &err) == 0);
    CHECK(session_append(s, &a, &meta, &err) == 0);
}

/* Entries of dir other than . and .. */
static int entries(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 16);
    *len = fread(buf, 1, (1 << 16) - 1, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

typedef int (*save_fn)(const session *s, const char *path, kimi_err *err);

/* A successful save: exactly fsync(temp file, whole) -> rename(temp, path) -> fsync(folder). */
static void check_protocol(const char *what, save_fn save, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    session s;
    sample(&s, "first");
    kimi_err err = {0};
    n_calls = 0;
    CHECK_MSG(save(&s, path, &err) == 0, "%s: %s", what, err.msg);
    session_free(&s);

    struct stat file, folder;
    CHECK(stat(path, &file) == 0 && stat(dir, &folder) == 0);
    CHECK_MSG(n_calls == 3, "%s: %d fsync/rename calls, expected 3", what, n_calls);
    if (n_calls != 3)
        return;
    CHECK_MSG(calls[0].kind == 'f' && calls[1].kind == 'r' && calls[2].kind == 'd',
              "%s: calls in the order %c %c %c, expected f r d", what, calls[0].kind, calls[1].kind, calls[2].kind);
    /* the synced file is the one renamed into place, synced with all its bytes */
    CHECK_MSG(calls[0].ino == file.st_ino, "%s: the fsynced file is not the saved one", what);
    CHECK_MSG(calls[0].size == file.st_size, "%s: fsync saw %lld bytes of %lld", what, (long long)calls[0].size,
              (long long)file.st_size);
    CHECK_STR(calls[1].to, path);
    const char *tmp_base = strrchr(calls[1].from, '/');
    CHECK_MSG(tmp_base && !strncmp(calls[1].from, dir, strlen(dir)) && tmp_base == calls[1].from + strlen(dir),
              "%s: temp file %s is not beside %s", what, calls[1].from, path);
    CHECK_MSG(calls[2].ino == folder.st_ino, "%s: the fsynced folder is not %s", what, dir);
    CHECK_MSG(entries() == 1, "%s: %d files in the folder after the save", what, entries());

    /* A save over an existing file follows the same protocol. */
    sample(&s, "second");
    n_calls = 0;
    CHECK_MSG(save(&s, path, &err) == 0, "%s again: %s", what, err.msg);
    session_free(&s);
    CHECK_MSG(n_calls == 3 && calls[0].kind == 'f' && calls[1].kind == 'r' && calls[2].kind == 'd',
              "%s over an existing file: %d calls", what, n_calls);
    CHECK(unlink(path) == 0);
}

/* A failure injected at one step: the save fails naming the path, the old file is untouched
 * (or, for the folder's fsync, the new file is in place) and no temp file is left. */
static void check_failure(const char *what, save_fn save, const char *name, int *inject, int code)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    session s;
    kimi_err err = {0};
    sample(&s, "old");
    CHECK(save(&s, path, &err) == 0);
    session_free(&s);
    size_t old_len, now_len;
    char *old = slurp(path, &old_len);

    sample(&s, "new text that must not replace the old");
    *inject = code;
    int rc = save(&s, path, &err);
    *inject = 0;
    session_free(&s);
    CHECK_MSG(rc == KIMI_ERR_IO, "%s: save returned %d", what, rc);
    CHECK_MSG(strstr(err.msg, path) != NULL, "%s: message '%s' does not name the file", what, err.msg);
    char *now = slurp(path, &now_len);
    int dir_step = inject == &fail_dir_fsync;
    if (dir_step)
        CHECK_MSG(now && strstr(now, "new text") && strstr(err.msg, "syncing the folder"), "%s: %s", what, err.msg);
    else
        CHECK_MSG(now && old && now_len == old_len && !memcmp(now, old, old_len), "%s: the old file changed", what);
    CHECK_MSG(entries() == 1, "%s: %d files in the folder (a temp file left?)", what, entries());
    free(old);
    free(now);
    CHECK(unlink(path) == 0);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    /* sessions (the sessions folder's files, /save and /export json) and Markdown exports */
    check_protocol("session_save", session_save, "session.json");
    check_protocol("session_export_markdown", session_export_markdown, "export.md");

    static const struct {
        const char *name;
        save_fn save;
    } savers[] = {{"session_save", session_save}, {"session_export_markdown", session_export_markdown}};
    for (size_t k = 0; k < sizeof savers / sizeof savers[0]; k++) {
        char what[96];
        snprintf(what, sizeof what, "%s, file fsync fails", savers[k].name);
        check_failure(what, savers[k].save, "f", &fail_file_fsync, EIO);
        snprintf(what, sizeof what, "%s, rename fails", savers[k].name);
        check_failure(what, savers[k].save, "f", &fail_rename, EXDEV);
        snprintf(what, sizeof what, "%s, folder fsync fails", savers[k].name);
        check_failure(what, savers[k].save, "f", &fail_dir_fsync, EIO);
    }

    /* A filesystem that cannot sync folders (EINVAL) still saves. */
    char path[512];
    snprintf(path, sizeof path, "%s/einval.json", dir);
    session s;
    kimi_err err = {0};
    sample(&s, "einval");
    fail_dir_fsync = EINVAL;
    CHECK_MSG(session_save(&s, path, &err) == 0, "folder fsync EINVAL: %s", err.msg);
    fail_dir_fsync = 0;
    session_free(&s);
    CHECK(unlink(path) == 0);

    CHECK(rmdir(dir) == 0);
    return check_finish();
}
