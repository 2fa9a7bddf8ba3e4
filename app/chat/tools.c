/* tools: reading and checking the tools file, and running one tool call as a child process
 * (never through a shell) whose output, exit status, timeout and cancellation are reported. */
#include "app/chat/tools.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/array.h"
#include "engine/base/file_io.h"
#include "engine/base/monotonic.h"
#include "engine/text/utf8.h"

#define TOOL_TIMEOUT_DEFAULT_S 30.0
#define TOOL_TIMEOUT_MAX_S 3600.0
#define TOOL_NAME_MAX 64        /* OpenAI's limit on function names */
#define TOOL_POLL_MS 50         /* the longest wait between two looks at *cancel */
#define TOOL_KILL_GRACE_S 1.0   /* SIGTERM, then SIGKILL this much later */
#define TOOL_DRAIN_S 0.2        /* output still read after the tool exited (from what it left) */

/* ---- loading ---------------------------------------------------------------------------- */

static int is_name_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

static int is_name(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_name_char(s[i]))
            return 0;
    return 1;
}

/* Messages are one line even when they quote text from a file or from the model: the message
 * s (of cap bytes) through utf8_one_line, by way of a copy since that cannot work in place. */
static void one_line(char *s, size_t cap)
{
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", s);
    utf8_one_line(copy, strlen(copy), s, cap);
}

/* The placeholder name when the whole of s is "{name}", else NULL (length in *n). */
static const char *whole_placeholder(const char *s, size_t *n)
{
    size_t len = strlen(s);
    if (len < 3 || s[0] != '{' || s[len - 1] != '}' || !is_name(s + 1, len - 2))
        return NULL;
    *n = len - 2;
    return s + 1;
}

static const json_t *tool_properties(const json_t *function)
{
    const json_t *params = json_object_get(function, "parameters");
    return params ? json_object_get(params, "properties") : NULL;
}

static int has_property(const json_t *props, const char *name, size_t n)
{
    return props && json_object_getn(props, name, n) != NULL;
}

static void tool_def_free(tool_def *t)
{
    free(t->name);
    for (int i = 0; t->argv && i < t->argc; i++)
        free(t->argv[i]);
    free(t->argv);
    for (int i = 0; t->env && i < t->n_env; i++)
        free(t->env[i]);
    free(t->env);
    free(t->withheld_env);
    json_decref(t->definition);
    memset(t, 0, sizeof *t);
}

void tools_free(tool_set *ts)
{
    if (!ts)
        return;
    for (int i = 0; i < ts->n_tools; i++)
        tool_def_free(&ts->tools[i]);
    free(ts->tools);
    free(ts->path);
    free(ts->notes);
    memset(ts, 0, sizeof *ts);
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Whether argv element a substitutes a declared property somewhere in it. */
static int substitutes(const char *a, const json_t *props)
{
    for (const char *open = strchr(a, '{'); open; open = strchr(open + 1, '{')) {
        const char *close = strchr(open + 1, '}');
        if (close && is_name(open + 1, (size_t)(close - open - 1)) &&
            has_property(props, open + 1, (size_t)(close - open - 1)))
            return 1;
    }
    return 0;
}

/* A note in ts->notes for the first argv element of t that substitutes an argument with no "--"
 * before it: the model's "--files0-from=/private/file" would be read as an option. */
static int note_options_unguarded(tool_set *ts, const char *where, const tool_def *t, kimi_err *err)
{
    const json_t *props = tool_properties(json_object_get(t->definition, "function"));
    for (int k = 1; k < t->argc; k++) {
        if (!strcmp(t->argv[k], "--"))
            return 0;
        if (!substitutes(t->argv[k], props))
            continue;
        char note[1024];
        snprintf(note, sizeof note,
                 "%s: exec.argv[%d] \"%.64s\" substitutes an argument with no \"--\" before it: the model "
                 "can pass options to %.64s (put \"--\" before it if the program takes one)",
                 where, k, t->argv[k], t->argv[0]);
        one_line(note, sizeof note);
        size_t old = ts->notes ? strlen(ts->notes) : 0;
        char *grown = realloc(ts->notes, old + strlen(note) + 2);
        if (!grown)
            return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", where);
        snprintf(grown + old, strlen(note) + 2, "%s%s", old ? "\n" : "", note);
        ts->notes = grown;
        return 0;
    }
    return 0;
}

/* Check entry i and fill *t. where = "tools.json: tools[1] (word_count)" for messages. */
static int load_entry(tool_set *ts, int i, const json_t *entry, tool_def *t, kimi_err *err)
{
    char where[400];
    int n = snprintf(where, sizeof where, "%.300s: tools[%d]", ts->path, i);
    if (!json_is_object(entry))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: must be an object, not %s", where, json_kind(entry));
    const json_t *function = json_object_get(entry, "function");
    const json_t *name_v = json_is_object(function) ? json_object_get(function, "name") : NULL;
    const char *name = json_string_value(name_v);
    if (name && *name && n > 0 && (size_t)n < sizeof where)
        snprintf(where + n, sizeof where - (size_t)n, " (%.64s)", name);

    const json_t *type = json_object_get(entry, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: type must be \"function\"", where);
    if (!function)
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: function is missing", where);
    if (!json_is_object(function))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: function must be an object", where);
    if (!name_v)
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: function.name is missing", where);
    if (!name || !*name)
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: function.name must be a non-empty string", where);
    size_t name_len = json_string_length(name_v);
    if (!is_name(name, name_len) || name_len > TOOL_NAME_MAX)
        return kimi_fail(err, KIMI_ERR_INPUT,
                         "%s: function.name must be 1 to %d letters, digits, '_' or '-'", where, TOOL_NAME_MAX);
    for (int j = 0; j < i; j++)
        if (!strcmp(ts->tools[j].name, name))
            return kimi_fail(err, KIMI_ERR_INPUT, "%s: duplicate name (also tools[%d])", where, j);
    const json_t *desc = json_object_get(function, "description");
    if (desc && !json_is_string(desc))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: function.description must be a string", where);
    const json_t *params = json_object_get(function, "parameters");
    if (params && !json_is_object(params))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: function.parameters must be an object", where);
    const json_t *props = tool_properties(function);
    if (props && !json_is_object(props))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: function.parameters.properties must be an object", where);

    const json_t *exec = json_object_get(entry, "exec");
    if (!exec)
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: exec is missing", where);
    if (!json_is_object(exec))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: exec must be an object", where);
    const json_t *argv = json_object_get(exec, "argv");
    size_t argc = json_array_size(argv);
    if (!json_is_array(argv) || argc == 0 || argc > 4096)
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: exec.argv must be a non-empty array of strings", where);
    for (size_t k = 0; k < argc; k++) {
        const char *a = json_string_value(json_array_get(argv, k));
        if (!a)
            return kimi_fail(err, KIMI_ERR_INPUT, "%s: exec.argv[%zu] must be a string", where, k);
        size_t pn;
        const char *p = whole_placeholder(a, &pn);
        if (p && !has_property(props, p, pn))
            return kimi_fail(err, KIMI_ERR_INPUT,
                             "%s: exec.argv[%zu] \"%.64s\" names no property in function.parameters.properties",
                             where, k, a);
    }
    if (!*json_string_value(json_array_get(argv, 0)))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: exec.argv[0] must name a program", where);
    const json_t *env = json_object_get(exec, "env");
    size_t n_env = json_array_size(env);
    if (env && (!json_is_array(env) || n_env > 4096))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: exec.env must be an array of variable names", where);
    for (size_t k = 0; k < n_env; k++) {
        const char *e = json_string_value(json_array_get(env, k));
        if (!e || !*e || strchr(e, '='))
            return kimi_fail(err, KIMI_ERR_INPUT, "%s: exec.env[%zu] must be a variable name (no '=')", where, k);
    }
    double timeout = TOOL_TIMEOUT_DEFAULT_S;
    const json_t *tv = json_object_get(exec, "timeout_s");
    if (tv) {
        timeout = json_is_number(tv) ? json_number_value(tv) : NAN;
        if (!(timeout > 0 && timeout <= TOOL_TIMEOUT_MAX_S))
            return kimi_fail(err, KIMI_ERR_INPUT, "%s: exec.timeout_s must be a number of seconds in (0, %g]",
                             where, TOOL_TIMEOUT_MAX_S);
    }

    t->name = strdup(name);
    t->argv = calloc(argc + 1, sizeof *t->argv);
    t->definition = json_pack("{s:s, s:o}", "type", "function", "function", json_deep_copy(function));
    if (!t->name || !t->argv || !t->definition)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", where);
    for (size_t k = 0; k < argc; k++) {
        t->argv[k] = strdup(json_string_value(json_array_get(argv, k)));
        if (!t->argv[k])
            return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", where);
        t->argc = (int)k + 1;
    }
    if (n_env && !(t->env = calloc(n_env, sizeof *t->env)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", where);
    for (size_t k = 0; k < n_env; k++) {
        if (!(t->env[k] = strdup(json_string_value(json_array_get(env, k)))))
            return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", where);
        t->n_env = (int)k + 1;
    }
    t->timeout_s = timeout;
    t->enabled = 1;
    return note_options_unguarded(ts, where, t, err);
}

int tools_load(tool_set *ts, const char *path, kimi_err *err)
{
    memset(ts, 0, sizeof *ts);
    char *text;
    size_t len;
    int rc = file_read_all(path, &text, &len, err);
    if (rc) {
        /* A tools file that is missing or unreadable (a folder, no permission) is the user's
           input at fault, not a model file nor the system. */
        if (rc != KIMI_ERR_NOMEM)
            rc = KIMI_ERR_INPUT;
        if (err)
            err->code = rc;
        return rc;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root) {
        rc = kimi_fail(err, KIMI_ERR_INPUT, "%s:%d:%d: not valid JSON: %s", path, jerr.line, jerr.column, jerr.text);
        if (err)
            one_line(err->msg, sizeof err->msg);
        return rc;
    }
    if (!json_is_array(root)) {
        rc = kimi_fail(err, KIMI_ERR_INPUT, "%s: must be a JSON array of tools, not %s", path, json_kind(root));
        json_decref(root);
        return rc;
    }
    size_t n = json_array_size(root);
    ts->path = strdup(path);
    ts->tools = calloc(n ? n : 1, sizeof *ts->tools);
    if (!ts->path || !ts->tools || n > INT32_MAX) {
        json_decref(root);
        tools_free(ts);
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", path);
    }
    for (size_t i = 0; i < n; i++) {
        rc = load_entry(ts, (int)i, json_array_get(root, i), &ts->tools[i], err);
        ts->n_tools = (int)i + 1;   /* so that tools_free frees a half-filled entry */
        if (rc) {
            if (err)
                one_line(err->msg, sizeof err->msg);
            json_decref(root);
            tools_free(ts);
            return rc;
        }
    }
    json_decref(root);
    return 0;
}

int tools_withhold_env(tool_set *ts, const char *name, kimi_err *err)
{
    for (int i = 0; i < ts->n_tools; i++) {
        free(ts->tools[i].withheld_env);
        if (!(ts->tools[i].withheld_env = strdup(name)))
            return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    }
    return 0;
}

tool_def *tools_find(const tool_set *ts, const char *name)
{
    for (int i = 0; name && i < ts->n_tools; i++)
        if (!strcmp(ts->tools[i].name, name))
            return &ts->tools[i];
    return NULL;
}

json_t *tools_declaration(const tool_set *ts)
{
    json_t *list = NULL;
    for (int i = 0; i < ts->n_tools; i++) {
        if (!ts->tools[i].enabled)
            continue;
        if (!list && !(list = json_array()))
            return NULL;
        if (json_array_append(list, ts->tools[i].definition)) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

/* ---- arguments into argv -------------------------------------------------------------------- */

/* A number as the shortest decimal text that reads back as the same double (5.0 → "5"). */
static void number_text(const json_t *v, char *out, size_t cap)
{
    if (json_is_integer(v)) {
        snprintf(out, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return;
    }
    double x = json_real_value(v);
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, x);
        if (strtod(out, NULL) == x)
            return;
    }
}

/* Append the value of argument name[0..n) to b; 0, or nonzero with out->error set. */
static int add_argument(strbuf *b, const json_t *args, const char *name, size_t n, tool_result *out)
{
    const json_t *v = json_object_getn(args, name, n);
    if (!v) {
        snprintf(out->error, sizeof out->error, "argument %.*s missing", (int)n, name);
        return -1;
    }
    if (json_is_string(v)) {
        strbuf_str(b, json_string_value(v));
    } else if (json_is_number(v)) {
        char num[64];
        number_text(v, num, sizeof num);
        strbuf_str(b, num);
    } else {
        snprintf(out->error, sizeof out->error, "argument %.*s must be a string or number, not %s", (int)n, name,
                 json_kind(v));
        return -1;
    }
    return 0;
}

/* One argv element with every "{name}" whose name is a declared property replaced by that
 * argument; other braces stay as written. Values are not scanned again. */
static int expand_element(const char *elem, const json_t *props, const json_t *args, char **result,
                          tool_result *out)
{
    strbuf b = {0};
    const char *s = elem;
    while (*s) {
        const char *open = strchr(s, '{');
        const char *close = open ? strchr(open + 1, '}') : NULL;
        if (!close) {
            strbuf_str(&b, s);
            break;
        }
        size_t n = (size_t)(close - open - 1);
        if (is_name(open + 1, n) && has_property(props, open + 1, n)) {
            strbuf_add(&b, s, (size_t)(open - s));
            if (add_argument(&b, args, open + 1, n, out)) {
                free(b.data);
                return -1;
            }
            s = close + 1;
        } else {
            strbuf_add(&b, s, (size_t)(open - s) + 1);
            s = open + 1;
        }
    }
    *result = strbuf_take(&b);
    return *result ? 0 : 1;
}

static void free_strings(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* The argv to run: 0 ok; -1 the call's arguments are at fault (out->error says why); 1 out of
 * memory. */
static int build_argv(const tool_def *t, const json_t *args, char ***argv_out, tool_result *out)
{
    const json_t *props = tool_properties(json_object_get(t->definition, "function"));
    char **argv = calloc((size_t)t->argc + 1, sizeof *argv);
    if (!argv)
        return 1;
    for (int i = 0; i < t->argc; i++) {
        int rc = expand_element(t->argv[i], props, args, &argv[i], out);
        if (rc) {
            free_strings(argv);
            return rc;
        }
    }
    *argv_out = argv;
    return 0;
}

/* Whether the variable of entry e ("NAME=value") is one t gets: a default one or one its
 * exec.env names, never the withheld one nor an inherited KIMI_TOOL_ARGS. */
static int env_passed(const tool_def *t, const char *e)
{
    const char *eq = strchr(e, '=');
    size_t n = eq ? (size_t)(eq - e) : strlen(e);
    if (t->withheld_env && strlen(t->withheld_env) == n && !memcmp(e, t->withheld_env, n))
        return 0;
    if (n == 14 && !memcmp(e, "KIMI_TOOL_ARGS", 14))
        return 0;
    static const char *const defaults[] = {"PATH", "HOME", "USER", "LANG", "TZ", "TMPDIR"};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        if (strlen(defaults[i]) == n && !memcmp(e, defaults[i], n))
            return 1;
    if (n > 3 && !memcmp(e, "LC_", 3))
        return 1;
    for (int i = 0; i < t->n_env; i++)
        if (strlen(t->env[i]) == n && !memcmp(e, t->env[i], n))
            return 1;
    return 0;
}

/* The tool's environment (the default variables, its exec.env, KIMI_TOOL_ARGS=<args>). The other
 * entries are borrowed from environ; only *var is owned. */
static char **build_env(const tool_def *t, const char *args, size_t len, char **var)
{
    static const char key[] = "KIMI_TOOL_ARGS=";
    size_t n = 0;
    for (char **e = environ; e && *e; e++)
        n++;
    char **env = calloc(n + 2, sizeof *env);
    *var = len < SIZE_MAX - sizeof key ? malloc(sizeof key + len) : NULL;
    if (!env || !*var) {
        free(env);
        free(*var);
        return NULL;
    }
    memcpy(*var, key, sizeof key - 1);
    memcpy(*var + sizeof key - 1, args, len);
    (*var)[sizeof key - 1 + len] = 0;
    size_t k = 0;
    for (char **e = environ; e && *e; e++)
        if (env_passed(t, *e))
            env[k++] = *e;
    env[k++] = *var;
    env[k] = NULL;
    return env;
}

/* ---- running ------------------------------------------------------------------------------ */

/* Mark every fd above 2 close-on-exec (the status pipe must stay open until exec). Only
 * async-signal-safe calls: this runs between fork and exec in a threaded program. */
static void child_cloexec_fds(void)
{
    if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
        return;
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return;
    char buf[4096] __attribute__((aligned(8)));
    ssize_t n;
    while ((n = getdents64(dir, buf, sizeof buf)) > 0) {
        for (ssize_t off = 0; off < n;) {
            const struct dirent64 *d = (const struct dirent64 *)(buf + off);
            int fd = 0;
            for (const char *p = d->d_name; *p >= '0' && *p <= '9'; p++)
                fd = fd * 10 + (*p - '0');
            if (fd > 2 && fd != dir)
                fcntl(fd, F_SETFD, FD_CLOEXEC);
            off += d->d_reclen;
        }
    }
    close(dir);
}

/* The child: own process group, stdin/stdout/stderr on the pipes, default signal dispositions
 * and an empty mask (the app ignores or blocks some), no other fds, then exec. An exec failure
 * goes back as errno through the close-on-exec status pipe. */
static void child_exec(char **argv, char **envp, int in_r, int out_w, int status_w)
{
    setpgid(0, 0);
    int in = fcntl(in_r, F_DUPFD, 3), o = fcntl(out_w, F_DUPFD, 3);
    if (in >= 0 && o >= 0 && dup2(in, 0) == 0 && dup2(o, 1) == 1 && dup2(o, 2) == 2) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        for (int sig = 1; sig < NSIG; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                sigaction(sig, &dfl, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        child_cloexec_fds();
        execvpe(argv[0], argv, envp);
    }
    int e = errno;
    if (write(status_w, &e, sizeof e) < 0) {
        /* nothing left to tell it with: the exit status 127 stays */
    }
    _exit(127);
}

typedef struct {
    pid_t pid;
    int out_fd, in_fd, status_fd, pid_fd;   /* -1 once closed */
    const char *in_data;                    /* [in_len] the arguments, for stdin */
    size_t in_len, in_off;
    int exec_errno;                         /* from the status pipe; 0: exec worked */
    int epipe;                              /* a write to stdin raised SIGPIPE (blocked) */
    tool_result *out;
} child_run;

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Read what is there (at most 1 MiB per call, so that a fast writer cannot keep the loop from
 * looking at the clock): the first TOOL_OUTPUT_CAP bytes kept, the rest counted. */
static void read_output(child_run *c)
{
    char discard[16384];
    tool_result *r = c->out;
    for (size_t got = 0; got < (1u << 20);) {
        int keep = r->output_len < TOOL_OUTPUT_CAP;
        char *dst = keep ? r->output + r->output_len : discard;
        size_t room = keep ? TOOL_OUTPUT_CAP - r->output_len : sizeof discard;
        ssize_t n = read(c->out_fd, dst, room);
        if (n > 0) {
            if (keep)
                r->output_len += (size_t)n;
            r->output_total += (size_t)n;
            got += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            if (n == 0 || errno != EAGAIN)
                close_fd(&c->out_fd);
            break;
        }
    }
    r->output[r->output_len] = 0;
}

/* Write more of the arguments to the child's stdin; close it when all is written or the child
 * stopped reading. */
static void write_input(child_run *c)
{
    while (c->in_off < c->in_len) {
        ssize_t n = write(c->in_fd, c->in_data + c->in_off, c->in_len - c->in_off);
        if (n > 0) {
            c->in_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && errno == EAGAIN) {
            return;
        } else {
            c->epipe |= errno == EPIPE;
            break;
        }
    }
    close_fd(&c->in_fd);
}

static void read_status(child_run *c)
{
    int e;
    ssize_t n;
    do
        n = read(c->status_fd, &e, sizeof e);
    while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN)
        return;
    if (n == (ssize_t)sizeof e)
        c->exec_errno = e;
    close_fd(&c->status_fd);
}

/* Whether the direct child has exited, without reaping it: while it is an unreaped zombie its
 * pid (= the group id) cannot be reused, so killing the group afterwards cannot hit a stranger.
 * ECHILD (SIGCHLD ignored, or reaped elsewhere) counts as exited rather than waiting for the
 * timeout. */
static int child_exited(pid_t pid)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
        return errno == ECHILD;
    return si.si_pid == pid;
}

static int set_nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Supervise the started child until it exited and its output is read; kill the group on
 * timeout or cancel (SIGTERM, SIGKILL after a grace), and after it exited (what it left). */
static void supervise(child_run *c, double t0, double timeout_s, const atomic_int *cancel)
{
    tool_result *out = c->out;
    double deadline = t0 + timeout_s, kill_at = INFINITY, drain_until = INFINITY;
    int exited = 0, stopping = 0;
    for (;;) {
        double now = monotonic_seconds();
        if (!exited && child_exited(c->pid)) {
            exited = 1;
            drain_until = now + TOOL_DRAIN_S;
        }
        int cancelled = cancel && atomic_load(cancel);
        if (exited && (c->out_fd < 0 || now >= drain_until || cancelled))
            break;
        if (!exited && !stopping && (cancelled || now >= deadline)) {
            out->status = cancelled ? TOOL_RUN_CANCELLED : TOOL_RUN_TIMEOUT;
            stopping = 1;
            kill(-c->pid, SIGTERM);
            kill_at = now + TOOL_KILL_GRACE_S;
        }
        if (!exited && now >= kill_at) {
            kill(-c->pid, SIGKILL);
            kill_at = INFINITY;
        }

        double wake = now + TOOL_POLL_MS * 1e-3;
        if (!stopping)
            wake = fmin(wake, deadline);
        wake = fmin(wake, exited ? drain_until : kill_at);
        if (!exited && c->pid_fd < 0 && c->out_fd < 0)
            wake = fmin(wake, now + 0.005);   /* no pidfd to wake us when it exits */
        struct pollfd fds[4];
        int nfds = 0, i_out = -1, i_in = -1, i_st = -1;
        if (c->out_fd >= 0)
            fds[i_out = nfds++] = (struct pollfd){.fd = c->out_fd, .events = POLLIN};
        if (c->in_fd >= 0)
            fds[i_in = nfds++] = (struct pollfd){.fd = c->in_fd, .events = POLLOUT};
        if (c->status_fd >= 0)
            fds[i_st = nfds++] = (struct pollfd){.fd = c->status_fd, .events = POLLIN};
        if (c->pid_fd >= 0 && !exited)
            fds[nfds++] = (struct pollfd){.fd = c->pid_fd, .events = POLLIN};
        double ms = ceil((wake - now) * 1e3);
        if (poll(fds, (nfds_t)nfds, ms > 0 ? (int)ms : 0) <= 0)
            continue;
        if (i_out >= 0 && fds[i_out].revents)
            read_output(c);
        if (i_in >= 0 && fds[i_in].revents)
            write_input(c);
        if (i_st >= 0 && fds[i_st].revents)
            read_status(c);
    }
}

/* Fork, exec and supervise argv; fills out. Nonzero only when the system refused. */
static int run_child(const tool_def *t, char **argv, char **envp, const char *args, size_t args_len,
                     const atomic_int *cancel, tool_result *out, kimi_err *err)
{
    int in_p[2] = {-1, -1}, out_p[2] = {-1, -1}, st_p[2] = {-1, -1};
    if (pipe2(in_p, O_CLOEXEC) || pipe2(out_p, O_CLOEXEC) || pipe2(st_p, O_CLOEXEC) ||
        set_nonblocking(in_p[1]) || set_nonblocking(out_p[0]) || set_nonblocking(st_p[0])) {
        int e = errno;
        for (int i = 0; i < 2; i++) {
            close_fd(&in_p[i]);
            close_fd(&out_p[i]);
            close_fd(&st_p[i]);
        }
        return kimi_fail(err, KIMI_ERR_IO, "tool %s: pipe: %s", t->name, strerror(e));
    }

    /* SIGPIPE stays blocked in this thread during the run: a child that never reads its stdin
     * must give EPIPE on our write, not kill the app. A SIGPIPE that was not pending before is
     * ours and is taken back at the end. */
    sigset_t all, old, pipe_set, pending;
    sigfillset(&all);
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    int sigpipe_was_pending = sigismember(&pending, SIGPIPE) == 1;
    /* All signals blocked across fork, so that no handler of the app runs in the child before it
     * resets them. */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    double t0 = monotonic_seconds();
    pid_t pid = fork();
    if (pid == 0)
        child_exec(argv, envp, in_p[0], out_p[1], st_p[1]);
    int fork_errno = errno;
    sigset_t run_mask = old;
    sigaddset(&run_mask, SIGPIPE);
    pthread_sigmask(SIG_SETMASK, &run_mask, NULL);
    close_fd(&in_p[0]);
    close_fd(&out_p[1]);
    close_fd(&st_p[1]);
    if (pid < 0) {
        close_fd(&in_p[1]);
        close_fd(&out_p[0]);
        close_fd(&st_p[0]);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return kimi_fail(err, KIMI_ERR_IO, "tool %s: fork: %s", t->name, strerror(fork_errno));
    }
    setpgid(pid, pid);   /* also here, so that the group exists before the child runs */

    child_run c = {
        .pid = pid, .out_fd = out_p[0], .in_fd = in_p[1], .status_fd = st_p[0],
        .pid_fd = (int)syscall(SYS_pidfd_open, pid, 0),
        .in_data = args, .in_len = args_len, .out = out,
    };
    out->status = TOOL_RUN_DONE;
    supervise(&c, t0, t->timeout_s, cancel);

    kill(-pid, SIGKILL);   /* whatever the tool left running in its group */
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    out->seconds = monotonic_seconds() - t0;
    if (c.out_fd >= 0)
        read_output(&c);
    if (c.status_fd >= 0)
        read_status(&c);
    close_fd(&c.out_fd);
    close_fd(&c.in_fd);
    close_fd(&c.status_fd);
    close_fd(&c.pid_fd);

    if (WIFEXITED(ws)) {
        out->exit_status = WEXITSTATUS(ws);
    } else if (WIFSIGNALED(ws)) {
        out->term_signal = WTERMSIG(ws);
        out->exit_status = 128 + out->term_signal;
    }
    if (c.exec_errno) {
        out->status = TOOL_RUN_FAILED_START;
        snprintf(out->error, sizeof out->error, "could not start %.100s: %s", argv[0], strerror(c.exec_errno));
    } else if (out->status == TOOL_RUN_TIMEOUT) {
        snprintf(out->error, sizeof out->error, "killed after %g s timeout", t->timeout_s);
    }

    if (c.epipe && !sigpipe_was_pending) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return 0;
}

static int all_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
            return 0;
    return 1;
}

int tools_run(const tool_def *t, const char *args, size_t args_len, const atomic_int *cancel,
              tool_result *out, kimi_err *err)
{
    memset(out, 0, sizeof *out);
    out->output = malloc(TOOL_OUTPUT_CAP + 1);
    if (!out->output)
        return kimi_fail(err, KIMI_ERR_NOMEM, "tool %s: out of memory", t->name);
    out->output[0] = 0;
    /* No arguments at all means an empty object (what a call of a tool without parameters
     * sometimes carries). */
    if (!args || all_space(args, args_len)) {
        args = "{}";
        args_len = 2;
    }
    out->status = TOOL_RUN_BAD_ARGUMENTS;
    if (args_len > TOOL_ARGS_CAP) {
        snprintf(out->error, sizeof out->error, "the arguments are %zu bytes, over the %d-byte cap",
                 args_len, TOOL_ARGS_CAP);
        return 0;
    }
    json_error_t jerr;
    json_t *root = json_loadb(args, args_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        snprintf(out->error, sizeof out->error, "arguments are not valid JSON: %.200s", jerr.text);
        one_line(out->error, sizeof out->error);
        return 0;
    }
    if (!json_is_object(root)) {
        snprintf(out->error, sizeof out->error, "arguments must be a JSON object, not %s", json_kind(root));
        json_decref(root);
        return 0;
    }
    char **argv = NULL;
    int rc = build_argv(t, root, &argv, out);
    json_decref(root);
    if (rc < 0)
        return 0;
    if (rc > 0)
        return kimi_fail(err, KIMI_ERR_NOMEM, "tool %s: out of memory", t->name);
    if (cancel && atomic_load(cancel)) {
        out->status = TOOL_RUN_CANCELLED;
        free_strings(argv);
        return 0;
    }
    /* large arguments on stdin only: in the environment too they would make the exec fail */
    out->stdin_only = args_len > TOOL_ARGS_ENV_MAX ? args_len : 0;
    char *var;
    char **envp = build_env(t, args, out->stdin_only ? 0 : args_len, &var);
    if (!envp) {
        free_strings(argv);
        return kimi_fail(err, KIMI_ERR_NOMEM, "tool %s: out of memory", t->name);
    }
    rc = run_child(t, argv, envp, args, args_len, cancel, out, err);
    one_line(out->error, sizeof out->error);
    free(envp);
    free(var);
    free_strings(argv);
    return rc;
}

void tool_result_free(tool_result *r)
{
    if (!r)
        return;
    free(r->output);
    memset(r, 0, sizeof *r);
}

/* ---- what the model reads ------------------------------------------------------------------ */

/* Append "[note]" on a line of its own. */
static void add_note(strbuf *b, const char *note)
{
    if (b->len && b->data[b->len - 1] != '\n')
        strbuf_str(b, "\n");
    strbuf_str(b, "[");
    strbuf_str(b, note);
    strbuf_str(b, "]");
}

/* The finished text (malloc'ed, *len bytes when len), or NULL when memory ran out. */
static char *buf_finish(strbuf *b, size_t *len)
{
    if (len)
        *len = b->len;
    return strbuf_take(b);
}

char *tool_result_message(const tool_result *r, size_t *len)
{
    strbuf b = {0};
    char note[400];
    if (r->status == TOOL_RUN_DONE || r->status == TOOL_RUN_TIMEOUT || r->status == TOOL_RUN_CANCELLED) {
        if (r->output_len)
            strbuf_add(&b, r->output, r->output_len);
        if (r->output_total > r->output_len) {
            snprintf(note, sizeof note, "output cut: %zu bytes, first %zu shown", r->output_total, r->output_len);
            add_note(&b, note);
        }
    }
    if (r->stdin_only && r->status != TOOL_RUN_BAD_ARGUMENTS) {
        snprintf(note, sizeof note, "the arguments (%zu bytes) were on stdin only: KIMI_TOOL_ARGS is empty over %d bytes",
                 r->stdin_only, TOOL_ARGS_ENV_MAX);
        add_note(&b, note);
    }
    switch (r->status) {
    case TOOL_RUN_DONE:
        if (r->term_signal) {
            const char *what = sigdescr_np(r->term_signal);
            snprintf(note, sizeof note, "killed by signal %d (%s)", r->term_signal, what ? what : "unknown");
            add_note(&b, note);
        } else if (r->exit_status) {
            snprintf(note, sizeof note, "exit status %d", r->exit_status);
            add_note(&b, note);
        }
        break;
    case TOOL_RUN_CANCELLED:
        add_note(&b, "cancelled by the user");
        break;
    case TOOL_RUN_BAD_ARGUMENTS:
        snprintf(note, sizeof note, "not run: %s", r->error);
        add_note(&b, note);
        break;
    case TOOL_RUN_TIMEOUT:
    case TOOL_RUN_FAILED_START:
        add_note(&b, r->error);
        break;
    }
    return buf_finish(&b, len);
}

/* A name from the model, made safe for a one-line message (utf8_one_line): at most
 * TOOL_NAME_MAX bytes and an ellipsis. */
static void add_name(strbuf *b, const char *name)
{
    char shown[TOOL_NAME_MAX + 4];
    utf8_one_line(name, strlen(name), shown, sizeof shown);
    strbuf_str(b, shown);
}

char *tools_message_unknown(const tool_set *ts, const char *name)
{
    strbuf b = {0};
    strbuf_str(&b, "unknown tool '");
    add_name(&b, name ? name : "");
    strbuf_str(&b, "'");
    if (ts) {
        int listed = 0;
        for (int i = 0; i < ts->n_tools; i++) {
            if (!ts->tools[i].enabled)
                continue;
            strbuf_str(&b, listed++ ? ", " : "; available: ");
            strbuf_str(&b, ts->tools[i].name);
        }
        if (!listed)
            strbuf_str(&b, "; no tools are available");
    }
    return buf_finish(&b, NULL);
}

char *tool_message_unknown(const char *name)
{
    return tools_message_unknown(NULL, name);
}

char *tool_message_denied(const char *name)
{
    strbuf b = {0};
    strbuf_str(&b, "The user denied this call to ");
    add_name(&b, name ? name : "");
    strbuf_str(&b, ".");
    return buf_finish(&b, NULL);
}

char *tool_message_not_asked(const char *name)
{
    strbuf b = {0};
    strbuf_str(&b, "Not run: nobody could be asked to approve this call to ");
    add_name(&b, name ? name : "");
    strbuf_str(&b, " (no terminal to ask on); --allow-tools ");
    add_name(&b, name ? name : "");
    strbuf_str(&b, " would allow it.");
    return buf_finish(&b, NULL);
}
