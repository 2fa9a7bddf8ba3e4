/* test_tools: loading the tools file (the demo model's, and every kind of bad entry), running
 * calls for real (placeholders as single literal arguments, stdin and KIMI_TOOL_ARGS, exit
 * status, exec failure, the output cap, timeout and cancel killing the whole process group,
 * what the child inherits) and the texts the model reads. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app/chat/tools.h"
#include "tests/unit/check.h"

#define DEMO_TOOLS "app/demo/kimi-demo/tools.json"

static char tmp_dir[] = "/tmp/kimi-test-tools-XXXXXX";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static char *tmp_path(const char *name)
{
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 512, "%s/%s", tmp_dir, name);
    return p;
}

/* Load text as <tmp>/tools.json; 0 or the error code (message in err). */
static int load_text(const char *text, tool_set *ts, kimi_err *err)
{
    const char *path = tmp_path("tools.json");
    write_file(path, text);
    memset(err, 0, sizeof *err);
    return tools_load(ts, path, err);
}

/* A tool set with one tool "t": argv (JSON array text), the properties (JSON object text) and
 * timeout_s. */
static tool_set one_tool(const char *argv, const char *props, double timeout_s)
{
    char text[8192];
    snprintf(text, sizeof text,
             "[{\"type\": \"function\", \"function\": {\"name\": \"t\", \"description\": \"test\",\n"
             "  \"parameters\": {\"type\": \"object\", \"properties\": %s}},\n"
             "  \"exec\": {\"argv\": %s, \"timeout_s\": %g}}]",
             props, argv, timeout_s);
    tool_set ts;
    kimi_err err;
    int rc = load_text(text, &ts, &err);
    CHECK_MSG(rc == 0 && ts.n_tools == 1, "%s", err.msg);
    return ts;
}

static tool_result run_args(const tool_def *t, const char *args, const atomic_int *cancel)
{
    tool_result r;
    kimi_err err = {0};
    int rc = tools_run(t, args, strlen(args), cancel, &r, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return r;
}

/* Run tool t of a one-tool set made from argv/props with args; the set is freed. */
static tool_result run_one(const char *argv, const char *props, double timeout_s, const char *args)
{
    tool_set ts = one_tool(argv, props, timeout_s);
    tool_result r = ts.n_tools ? run_args(&ts.tools[0], args, NULL) : (tool_result){0};
    tools_free(&ts);
    return r;
}

static char *message(const tool_result *r)
{
    size_t len;
    char *m = tool_result_message(r, &len);
    CHECK(m != NULL && strlen(m) == len);
    return m;
}

/* The process is gone or a zombie that only its new parent still has to reap. Waits up to 2 s. */
static int process_gone(long pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(path, "r");
        if (!f)
            return 1;
        char state = 0;
        int n = fscanf(f, "%*d (%*[^)]) %c", &state);
        fclose(f);
        if (n == 1 && (state == 'Z' || state == 'X'))
            return 1;
        usleep(10000);
    }
    return 0;
}

/* ---- loading ---------------------------------------------------------------------------- */

static void test_load_demo(void)
{
    tool_set ts;
    kimi_err err = {0};
    int rc = tools_load(&ts, DEMO_TOOLS, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc)
        return;
    CHECK_INT(ts.n_tools, 3);
    CHECK_STR(ts.path, DEMO_TOOLS);
    CHECK_STR(ts.tools[0].name, "now");
    CHECK_STR(ts.tools[1].name, "word_count");
    CHECK_STR(ts.tools[2].name, "list_dir");
    CHECK_INT(ts.tools[0].argc, 2);
    CHECK_STR(ts.tools[0].argv[0], "date");
    CHECK_STR(ts.tools[0].argv[1], "+%Y-%m-%d %H:%M:%S");
    CHECK_INT(ts.tools[1].argc, 4);
    CHECK_STR(ts.tools[1].argv[0], "wc");
    CHECK_STR(ts.tools[1].argv[1], "-w");
    CHECK_STR(ts.tools[1].argv[2], "--");   /* a path is never an option (issue 18) */
    CHECK_STR(ts.tools[1].argv[3], "{path}");
    CHECK(ts.tools[1].argv[4] == NULL);
    CHECK_STR(ts.tools[2].argv[0], "ls");
    CHECK_STR(ts.tools[2].argv[1], "-1");
    CHECK_STR(ts.tools[2].argv[2], "--");
    CHECK(ts.notes == NULL);                 /* every substitution guarded */
    for (int i = 0; i < 3; i++) {
        CHECK_NEAR(ts.tools[i].timeout_s, 30, 0);
        CHECK_INT(ts.tools[i].enabled, 1);
        const json_t *d = ts.tools[i].definition;
        CHECK_STR(json_string_value(json_object_get(d, "type")), "function");
        CHECK(json_object_get(d, "exec") == NULL);
        CHECK_INT(json_object_size(d), 2);
        CHECK_STR(json_string_value(json_object_get(json_object_get(d, "function"), "name")), ts.tools[i].name);
    }
    CHECK(tools_find(&ts, "word_count") == &ts.tools[1]);
    CHECK(tools_find(&ts, "wc") == NULL);
    CHECK(tools_find(&ts, NULL) == NULL);

    /* The declaration: the file's definitions without exec, in file order, enabled ones only. */
    json_t *decl = tools_declaration(&ts);
    CHECK_INT(json_array_size(decl), 3);
    json_t *file = json_load_file(DEMO_TOOLS, 0, NULL);
    for (size_t i = 0; i < 3 && file; i++) {
        json_t *want = json_deep_copy(json_array_get(file, i));
        json_object_del(want, "exec");
        CHECK_MSG(json_equal(want, json_array_get(decl, i)), "declaration[%zu] differs from the file", i);
        json_decref(want);
    }
    json_decref(file);
    json_decref(decl);
    ts.tools[0].enabled = 0;
    decl = tools_declaration(&ts);
    CHECK_INT(json_array_size(decl), 2);
    CHECK_STR(json_string_value(json_object_get(json_object_get(json_array_get(decl, 0), "function"), "name")),
              "word_count");
    json_decref(decl);
    ts.tools[1].enabled = ts.tools[2].enabled = 0;
    CHECK(tools_declaration(&ts) == NULL);
    CHECK(tools_find(&ts, "now") == &ts.tools[0]);   /* disabled tools are found too */
    tools_free(&ts);
    CHECK_INT(ts.n_tools, 0);
    CHECK(ts.tools == NULL);
}

#define GOOD_FN(name) "\"function\": {\"name\": \"" name "\", \"parameters\": {\"type\": \"object\", " \
                      "\"properties\": {\"path\": {\"type\": \"string\"}}}}"
#define GOOD_EXEC "\"exec\": {\"argv\": [\"wc\", \"-w\", \"{path}\"]}"
#define GOOD_ENTRY(name) "{\"type\": \"function\", " GOOD_FN(name) ", " GOOD_EXEC "}"

static void test_load_bad(void)
{
    static const struct {
        const char *text, *message;   /* message: what follows "<tmp>/tools.json" */
    } cases[] = {
        {"{\"type\": \"function\"}", ": must be a JSON array of tools, not an object"},
        {"\"tools\"", ":1:7: not valid JSON: '[' or '{' expected near '\"tools\"'"},
        {"[" GOOD_ENTRY("a") ", 7]", ": tools[1]: must be an object, not a number"},
        {"[{\"type\": \"fn\", " GOOD_FN("a") ", " GOOD_EXEC "}]", ": tools[0] (a): type must be \"function\""},
        {"[{" GOOD_FN("a") ", " GOOD_EXEC "}]", ": tools[0] (a): type must be \"function\""},
        {"[{\"type\": \"function\", " GOOD_EXEC "}]", ": tools[0]: function is missing"},
        {"[{\"type\": \"function\", \"function\": [], " GOOD_EXEC "}]", ": tools[0]: function must be an object"},
        {"[{\"type\": \"function\", \"function\": {\"description\": \"x\"}, " GOOD_EXEC "}]",
         ": tools[0]: function.name is missing"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"\"}, " GOOD_EXEC "}]",
         ": tools[0]: function.name must be a non-empty string"},
        {"[{\"type\": \"function\", \"function\": {\"name\": 5}, " GOOD_EXEC "}]",
         ": tools[0]: function.name must be a non-empty string"},
        {"[" GOOD_ENTRY("a") ", " GOOD_ENTRY("word count") "]",
         ": tools[1] (word count): function.name must be 1 to 64 letters, digits, '_' or '-'"},
        {"[" GOOD_ENTRY("a;rm") "]", ": tools[0] (a;rm): function.name must be 1 to 64 letters"},
        {"[" GOOD_ENTRY("a\\nb") "]", ": tools[0] (a b): function.name must be 1 to 64 letters"},
        {"[" GOOD_ENTRY("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") "]",
         ": tools[0] (aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa): function.name must be 1 to 64"},
        {"[" GOOD_ENTRY("a") ", " GOOD_ENTRY("b") ", " GOOD_ENTRY("a") "]",
         ": tools[2] (a): duplicate name (also tools[0])"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"a\", \"description\": 1}, " GOOD_EXEC "}]",
         ": tools[0] (a): function.description must be a string"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"a\", \"parameters\": []}, " GOOD_EXEC "}]",
         ": tools[0] (a): function.parameters must be an object"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"a\", \"parameters\": {\"properties\": 3}}, "
         GOOD_EXEC "}]",
         ": tools[0] (a): function.parameters.properties must be an object"},
        {"[" GOOD_ENTRY("a") ", {\"type\": \"function\", " GOOD_FN("b") "}]", ": tools[1] (b): exec is missing"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": [\"wc\"]}]", ": tools[0] (a): exec must be an object"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {}}]",
         ": tools[0] (a): exec.argv must be a non-empty array of strings"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {\"argv\": []}}]",
         ": tools[0] (a): exec.argv must be a non-empty array of strings"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {\"argv\": \"wc -w\"}}]",
         ": tools[0] (a): exec.argv must be a non-empty array of strings"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {\"argv\": [\"wc\", 1]}}]",
         ": tools[0] (a): exec.argv[1] must be a string"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {\"argv\": [\"\", \"x\"]}}]",
         ": tools[0] (a): exec.argv[0] must name a program"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {\"argv\": [\"wc\", \"-w\", \"{pth}\"]}}]",
         ": tools[0] (a): exec.argv[2] \"{pth}\" names no property in function.parameters.properties"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"a\"}, \"exec\": {\"argv\": [\"{prog}\"]}}]",
         ": tools[0] (a): exec.argv[0] \"{prog}\" names no property in function.parameters.properties"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {\"argv\": [\"true\"], \"timeout_s\": 0}}]",
         ": tools[0] (a): exec.timeout_s must be a number of seconds in (0, 3600]"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {\"argv\": [\"true\"], \"timeout_s\": -1}}]",
         ": tools[0] (a): exec.timeout_s must be a number of seconds in (0, 3600]"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {\"argv\": [\"true\"], \"timeout_s\": 3600.5}}]",
         ": tools[0] (a): exec.timeout_s must be a number of seconds in (0, 3600]"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {\"argv\": [\"true\"], \"timeout_s\": \"30\"}}]",
         ": tools[0] (a): exec.timeout_s must be a number of seconds in (0, 3600]"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {\"argv\": [\"true\"], \"env\": \"HOME\"}}]",
         ": tools[0] (a): exec.env must be an array of variable names"},
        {"[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {\"argv\": [\"true\"], \"env\": [\"A=b\"]}}]",
         ": tools[0] (a): exec.env[0] must be a variable name (no '=')"},
        /* Syntax errors name line:column (jansson's: where the offending token ends). */
        {"[\n  {\"type\": \"function\",\n   \"function\": {\"name\" \"a\"}}\n]", ":3:26: not valid JSON: ':' expected near '\"a\"'"},
        {"[\n  {\"type\": \"function\", \"type\": \"function\"}\n]", ":2:29: not valid JSON: duplicate object key near '\"type\"'"},
        {"[\n" GOOD_ENTRY("a") ",\n", ":3:0: not valid JSON: "},
        {"", ":1:0: not valid JSON: "},
    };
    const char *path = tmp_path("tools.json");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tool_set ts;
        kimi_err err;
        int rc = load_text(cases[i].text, &ts, &err);
        CHECK_MSG(rc == KIMI_ERR_INPUT, "case %zu: rc %d", i, rc);
        size_t plen = strlen(path);
        CHECK_MSG(!strncmp(err.msg, path, plen) && !strncmp(err.msg + plen, cases[i].message, strlen(cases[i].message)),
                  "case %zu: got \"%s\", want \"%s%s\"", i, err.msg, path, cases[i].message);
        CHECK_MSG(ts.n_tools == 0 && ts.tools == NULL && ts.path == NULL, "case %zu: the set is not empty", i);
        CHECK_MSG(strchr(err.msg, '\n') == NULL, "case %zu: the message is not one line", i);
    }

    tool_set ts;
    kimi_err err = {0};
    CHECK_INT(tools_load(&ts, tmp_path("no-such-tools.json"), &err), KIMI_ERR_INPUT);
    CHECK_MSG(strstr(err.msg, "no-such-tools.json: cannot open: No such file or directory") != NULL, "%s",
              err.msg);
}

static void test_load_lenient(void)
{
    /* Unknown keys anywhere, no description, no timeout (30), non-placeholder braces, embedded
     * placeholders, an empty array. */
    tool_set ts;
    kimi_err err;
    int rc = load_text("[{\"type\": \"function\", \"strict\": true,\n"
                       "  \"function\": {\"name\": \"Find-files_2\", \"parameters\": {\"type\": \"object\",\n"
                       "     \"properties\": {\"dir\": {\"type\": \"string\"}}}, \"x-extra\": 1},\n"
                       "  \"exec\": {\"argv\": [\"find\", \"{dir}\", \"-exec\", \"echo\", \"{}\", \";\",\n"
                       "             \"--x={dir}\", \"{ dir }\", \"{nope}x\"], \"cwd\": \"/\"}},\n"
                       " {\"type\": \"function\", \"function\": {\"name\": \"b\"},\n"
                       "  \"exec\": {\"argv\": [\"true\"], \"timeout_s\": 0.25}}]",
                       &ts, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK_INT(ts.n_tools, 2);
        CHECK_INT(ts.tools[0].argc, 9);
        CHECK_NEAR(ts.tools[0].timeout_s, 30, 0);
        CHECK_NEAR(ts.tools[1].timeout_s, 0.25, 0);
        /* {dir} after argv[0] with no "--" before it: loaded, with a note naming it. */
        CHECK_MSG(ts.notes && strstr(ts.notes, ": tools[0] (Find-files_2): exec.argv[1] \"{dir}\" substitutes an "
                                                "argument with no \"--\" before it") && !strchr(ts.notes, '\n'),
                  "notes: %s", ts.notes ? ts.notes : "(none)");
        /* The definition keeps the function's unknown keys but not the entry's. */
        const json_t *d = ts.tools[0].definition;
        CHECK(json_object_get(d, "strict") == NULL);
        CHECK(json_object_get(json_object_get(d, "function"), "x-extra") != NULL);
        tools_free(&ts);
    }
    /* "--" before every substitution: no note; an embedded one is noted too. */
    rc = load_text("[{\"type\": \"function\", " GOOD_FN("a") ", \"exec\": {\"argv\": [\"wc\", \"--\", \"{path}\"]}},\n"
                   " {\"type\": \"function\", " GOOD_FN("b") ", \"exec\": {\"argv\": [\"grep\", \"--file={path}\"]}}]",
                   &ts, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK_MSG(ts.notes && strstr(ts.notes, "tools[1] (b): exec.argv[1] \"--file={path}\"") &&
                  !strstr(ts.notes, "tools[0]"),
              "notes: %s", ts.notes ? ts.notes : "(none)");
    tools_free(&ts);
    rc = load_text("[]", &ts, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK_INT(ts.n_tools, 0);
    CHECK(tools_declaration(&ts) == NULL);
    tools_free(&ts);
    rc = load_text("[{\"type\": \"function\", \"function\": {\"name\": \"b\"}, \"exec\": {\"argv\": [\"true\"], "
                   "\"timeout_s\": 3600}}]", &ts, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    tools_free(&ts);
}

/* ---- running ------------------------------------------------------------------------------ */

static void test_run_demo(void)
{
    tool_set ts;
    kimi_err err = {0};
    if (tools_load(&ts, DEMO_TOOLS, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    /* now: "YYYY-MM-DD HH:MM:SS\n" of today. */
    time_t before = time(NULL);
    tool_result r = run_args(tools_find(&ts, "now"), "{}", NULL);
    time_t after = time(NULL);
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_INT(r.exit_status, 0);
    CHECK_INT(r.output_len, 20);
    char want1[32], want2[32];
    strftime(want1, sizeof want1, "%Y-%m-%d %H:%M:%S\n", localtime(&before));
    strftime(want2, sizeof want2, "%Y-%m-%d %H:%M:%S\n", localtime(&after));
    CHECK_MSG(!strcmp(r.output, want1) || !strcmp(r.output, want2), "now printed \"%s\", want \"%s\"", r.output,
              want1);
    CHECK(r.seconds > 0 && r.seconds < 5);
    char *m = message(&r);
    CHECK_STR(m, r.output);   /* exit 0: the raw output, nothing added */
    free(m);
    tool_result_free(&r);
    /* "" and whitespace mean no arguments. */
    r = run_args(tools_find(&ts, "now"), " \n", NULL);
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_INT(r.output_len, 20);
    tool_result_free(&r);

    /* word_count: wc -w's exact output. */
    const char *words = tmp_path("words file.txt");
    write_file(words, "one two  three\nfour\tfive\n\nsix\n");
    char args[1024], want[1100];
    snprintf(args, sizeof args, "{\"path\": \"%s\"}", words);
    r = run_args(tools_find(&ts, "word_count"), args, NULL);
    snprintf(want, sizeof want, "6 %s\n", words);
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_STR(r.output, want);
    m = message(&r);
    CHECK_STR(m, want);
    free(m);
    tool_result_free(&r);

    /* A missing file: wc's own message and its exit status, each as the model sees it. */
    snprintf(args, sizeof args, "{\"path\": \"%s\"}", tmp_path("absent.txt"));
    r = run_args(tools_find(&ts, "word_count"), args, NULL);
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_INT(r.exit_status, 1);
    snprintf(want, sizeof want, "wc: %s: No such file or directory\n[exit status 1]", tmp_path("absent.txt"));
    m = message(&r);
    CHECK_STR(m, want);
    free(m);
    tool_result_free(&r);

    /* A path that looks like an option is a path: wc --files0-from would print the lines of
     * the file it names into the conversation (issue 18). */
    const char *secret = tmp_path("private.txt");
    write_file(secret, "private-line");
    snprintf(args, sizeof args, "{\"path\": \"--files0-from=%s\"}", secret);
    r = run_args(tools_find(&ts, "word_count"), args, NULL);
    CHECK_INT(r.exit_status, 1);
    CHECK_MSG(r.output && !strstr(r.output, "private-line") && strstr(r.output, "No such file"),
              "word_count took its argument as an option: %s", r.output);
    tool_result_free(&r);

    /* list_dir: ls -1. */
    const char *dir = tmp_path("listing");
    mkdir(dir, 0700);
    char file[600];
    snprintf(file, sizeof file, "%s/b.txt", dir);
    write_file(file, "");
    snprintf(file, sizeof file, "%s/a b.md", dir);
    write_file(file, "");
    snprintf(args, sizeof args, "{\"path\": \"%s\"}", dir);
    r = run_args(tools_find(&ts, "list_dir"), args, NULL);
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_STR(r.output, "a b.md\nb.txt\n");
    tool_result_free(&r);
    tools_free(&ts);
}

/* Arguments reach the program as one argv element each, byte for byte. */
static void test_run_literal_arguments(void)
{
    static const struct {
        const char *json, *value;
    } cases[] = {
        {"\"; rm -rf /\"", "; rm -rf /"},
        {"\"a file with spaces.txt\"", "a file with spaces.txt"},
        {"\"it's \\\"quoted\\\"\"", "it's \"quoted\""},
        {"\"$(touch /tmp/kimi-test-tools-pwned) `id` $HOME ${PATH}\"",
         "$(touch /tmp/kimi-test-tools-pwned) `id` $HOME ${PATH}"},
        {"\"two\\nlines\"", "two\nlines"},
        {"\"*\"", "*"},
        {"\"-n\"", "-n"},
        {"\"\"", ""},
        {"\"{path}\"", "{path}"},   /* substituted text is not scanned again */
        {"\"caf\\u00e9 \\ud83d\\ude00\"", "caf\xc3\xa9 \xf0\x9f\x98\x80"},
        {"\"|&;<>()\\t\"", "|&;<>()\t"},
    };
    tool_set ts = one_tool("[\"printf\", \"<%s>\\n\", \"{path}\"]", "{\"path\": {\"type\": \"string\"}}", 10);
    if (!ts.n_tools)
        return;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[512], want[512];
        snprintf(args, sizeof args, "{\"path\": %s}", cases[i].json);
        snprintf(want, sizeof want, "<%s>\n", cases[i].value);
        tool_result r = run_args(&ts.tools[0], args, NULL);
        CHECK_MSG(r.status == TOOL_RUN_DONE && r.exit_status == 0, "case %zu: status %d exit %d", i, r.status,
                  r.exit_status);
        CHECK_MSG(r.output && !strcmp(r.output, want), "case %zu: got \"%s\", want \"%s\"", i, r.output, want);
        tool_result_free(&r);
    }
    CHECK(access("/tmp/kimi-test-tools-pwned", F_OK) != 0);
    tools_free(&ts);

    /* Embedded placeholders, every occurrence; braces that name no property stay. */
    tool_result r = run_one("[\"printf\", \"%s|\", \"--path={path}\", \"{a}-{a}-{b}\", \"{}\", \"x{nope}\", "
                            "\"{a\", \"a}\", \"{{a}}\", \"{ a }\"]",
                            "{\"path\": {}, \"a\": {}, \"b\": {}}", 10,
                            "{\"path\": \"x y\", \"a\": \"{b}\", \"b\": 7}");
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_STR(r.output, "--path=x y|{b}-{b}-7|{}|x{nope}|{a|a}|{{b}}|{ a }|");
    tool_result_free(&r);
}

static void test_run_numbers(void)
{
    static const struct {
        const char *json, *text;
    } cases[] = {
        {"42", "42"}, {"-7", "-7"}, {"0", "0"}, {"9007199254740993", "9007199254740993"},
        {"2.5", "2.5"}, {"5.0", "5"}, {"0.1", "0.1"}, {"-1e-7", "-1e-07"}, {"1e21", "1e+21"},
        {"0.30000000000000004", "0.30000000000000004"},
    };
    tool_set ts = one_tool("[\"printf\", \"%s\", \"{n}\"]", "{\"n\": {\"type\": \"number\"}}", 10);
    if (!ts.n_tools)
        return;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[128];
        snprintf(args, sizeof args, "{\"n\": %s}", cases[i].json);
        tool_result r = run_args(&ts.tools[0], args, NULL);
        CHECK_MSG(r.output && !strcmp(r.output, cases[i].text), "%s: got \"%s\", want \"%s\"", cases[i].json,
                  r.output, cases[i].text);
        tool_result_free(&r);
    }
    /* head -n {n}: a number argument used as a number. */
    tool_result r = run_one("[\"head\", \"-n\", \"{n}\", \"/etc/passwd\"]", "{\"n\": {}}", 10, "{\"n\": 1.0}");
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_INT(r.exit_status, 0);
    CHECK(r.output_len > 0 && memchr(r.output, '\n', r.output_len) == r.output + r.output_len - 1);
    tool_result_free(&r);
    tools_free(&ts);
}

static void test_run_bad_arguments(void)
{
    static const struct {
        const char *args, *error;
    } cases[] = {
        {"{}", "argument path missing"},
        {"{\"path\": \"a\"}", "argument n missing"},
        {"{\"path\": \"a\", \"n\": [1]}", "argument n must be a string or number, not an array"},
        {"{\"path\": {\"x\": 1}, \"n\": 1}", "argument path must be a string or number, not an object"},
        {"{\"path\": null, \"n\": 1}", "argument path must be a string or number, not null"},
        {"{\"path\": true, \"n\": 1}", "argument path must be a string or number, not a boolean"},
        {"[\"a\", 1]", "arguments must be a JSON object, not an array"},
        {"{\"path\": \"a\", \"n\": 1", "arguments are not valid JSON: "},
        {"path=a", "arguments are not valid JSON: "},
        {"\"a\"", "arguments are not valid JSON: "},
        {"{\"path\": \"a\", \"n\": 1, \"path\": \"b\"}", "arguments are not valid JSON: duplicate object key"},
        {"{\"path\": \"a\\u0000b\", \"n\": 1}", "arguments are not valid JSON: "},
        {"{\"path\": \"a\", \"n\": 1} x", "arguments are not valid JSON: end of file expected"},
        {"{\"path\": \"a\nb\", \"n\": 1}", "arguments are not valid JSON: unexpected newline near '\"a'"},
        {"{\"path\": \"a\tb\x01\", \"n\": 1}", "arguments are not valid JSON: control character 0x9 near '\"a'"},
    };
    const char *marker = tmp_path("ran");
    char argv[700];
    snprintf(argv, sizeof argv, "[\"touch\", \"%s\", \"{path}\", \"--n={n}\"]", marker);
    tool_set ts = one_tool(argv, "{\"path\": {}, \"n\": {}}", 10);
    if (!ts.n_tools)
        return;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tool_result r = run_args(&ts.tools[0], cases[i].args, NULL);
        CHECK_MSG(r.status == TOOL_RUN_BAD_ARGUMENTS, "case %zu: status %d", i, r.status);
        CHECK_MSG(!strncmp(r.error, cases[i].error, strlen(cases[i].error)), "case %zu: got \"%s\", want \"%s\"",
                  i, r.error, cases[i].error);
        char *m = message(&r);
        char want[400];
        snprintf(want, sizeof want, "[not run: %s]", r.error);
        CHECK_STR(m, want);
        free(m);
        CHECK_INT(r.output_len, 0);
        tool_result_free(&r);
    }
    /* A raw NUL byte inside the arguments. */
    tool_result r;
    kimi_err err = {0};
    CHECK_INT(tools_run(&ts.tools[0], "{\"path\": \"a\0b\", \"n\": 1}", 23, NULL, &r, &err), 0);
    CHECK_INT(r.status, TOOL_RUN_BAD_ARGUMENTS);
    tool_result_free(&r);
    CHECK_MSG(access(marker, F_OK) != 0, "a call with bad arguments ran");
    tools_free(&ts);
}

/* The arguments, byte for byte, on stdin and in KIMI_TOOL_ARGS (which replaces an inherited one). */
static void test_run_stdin_and_env(void)
{
    const char *args = "{\"path\": \"a b\", \"x\": [1, {\"y\": \"$(id)\"}], \"u\": \"\\u00e9\"}";
    tool_result r = run_one("[\"cat\"]", "{}", 10, args);
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_STR(r.output, args);
    tool_result_free(&r);

    setenv("KIMI_TOOL_ARGS", "inherited", 1);
    r = run_one("[\"sh\", \"-c\", \"printf %s \\\"$KIMI_TOOL_ARGS\\\"\"]", "{}", 10, args);
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_STR(r.output, args);
    tool_result_free(&r);
    r = run_one("[\"sh\", \"-c\", \"env | grep -c ^KIMI_TOOL_ARGS=\"]", "{}", 10, args);
    CHECK_STR(r.output, "1\n");
    tool_result_free(&r);
    unsetenv("KIMI_TOOL_ARGS");
    /* The environment is the minimal one plus what exec.env names; the API key's variable
     * never, even when named (issue 18: a printenv tool sent the key to the server). */
    setenv("KIMI_TEST_TOOLS_VAR", "named", 1);
    setenv("KIMI_TEST_TOOLS_OTHER", "unnamed", 1);
    setenv("LC_PAPER", "C", 1);
    setenv("TZ", "UTC", 1);
    setenv("OPENAI_API_KEY", "sk-test-secret", 1);
    r = run_one("[\"env\"]", "{}", 10, "{}");
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_MSG(r.output && strstr(r.output, "PATH=") && strstr(r.output, "LC_PAPER=C\n") &&
                  strstr(r.output, "TZ=UTC\n"),
              "the default variables are missing: %s", r.output);
    CHECK_MSG(r.output && !strstr(r.output, "KIMI_TEST_TOOLS_") && !strstr(r.output, "sk-test-secret"),
              "a tool got variables it does not name: %s", r.output);
    tool_result_free(&r);
    kimi_err lerr;
    tool_set named;
    int lrc = load_text("[{\"type\": \"function\", \"function\": {\"name\": \"t\"},\n"
                        "  \"exec\": {\"argv\": [\"env\"], \"env\": [\"KIMI_TEST_TOOLS_VAR\", \"OPENAI_API_KEY\"]}}]",
                        &named, &lerr);
    CHECK_MSG(lrc == 0, "%s", lerr.msg);
    if (!lrc) {
        CHECK_INT(named.tools[0].n_env, 2);
        r = run_args(&named.tools[0], "{}", NULL);
        CHECK_MSG(r.output && strstr(r.output, "KIMI_TEST_TOOLS_VAR=named\n") && strstr(r.output, "sk-test-secret") &&
                      !strstr(r.output, "KIMI_TEST_TOOLS_OTHER"),
                  "exec.env: %s", r.output);
        tool_result_free(&r);
        CHECK_INT(tools_withhold_env(&named, "OPENAI_API_KEY", &lerr), 0);
        r = run_args(&named.tools[0], "{}", NULL);
        CHECK_MSG(r.output && strstr(r.output, "KIMI_TEST_TOOLS_VAR=named\n") && !strstr(r.output, "sk-test-secret"),
                  "the withheld key was passed: %s", r.output);
        tool_result_free(&r);
        tools_free(&named);
    }
    unsetenv("KIMI_TEST_TOOLS_VAR");
    unsetenv("KIMI_TEST_TOOLS_OTHER");
    unsetenv("LC_PAPER");
    unsetenv("OPENAI_API_KEY");

    /* Arguments larger than the pipe buffer: cat echoes all of them (writer and reader in one
     * loop, no deadlock); a tool that never reads stdin finishes normally (EPIPE, no SIGPIPE
     * for the app, none left pending). */
    size_t n = 100000;
    char *big = malloc(n + 16);
    memcpy(big, "{\"s\": \"", 7);
    memset(big + 7, 'x', n - 9);
    memcpy(big + n - 2, "\"}", 3);
    tool_set ts = one_tool("[\"cat\"]", "{}", 10);
    tool_result c;
    kimi_err err = {0};
    CHECK_INT(tools_run(&ts.tools[0], big, n, NULL, &c, &err), 0);
    CHECK_INT(c.status, TOOL_RUN_DONE);
    CHECK_INT(c.output_total, n);
    CHECK_INT(c.output_len, TOOL_OUTPUT_CAP);
    CHECK(c.output && !memcmp(c.output, big, TOOL_OUTPUT_CAP));
    tool_result_free(&c);
    tools_free(&ts);
    ts = one_tool("[\"true\"]", "{}", 10);
    CHECK_INT(tools_run(&ts.tools[0], big, n, NULL, &c, &err), 0);
    CHECK_INT(c.status, TOOL_RUN_DONE);
    CHECK_INT(c.exit_status, 0);
    tool_result_free(&c);
    tools_free(&ts);
    /* Never reads stdin and never exits: the full pipe does not block the runner. */
    ts = one_tool("[\"sleep\", \"100\"]", "{}", 0.5);
    CHECK_INT(tools_run(&ts.tools[0], big, n, NULL, &c, &err), 0);
    CHECK_INT(c.status, TOOL_RUN_TIMEOUT);
    CHECK(c.seconds < 2);
    tool_result_free(&c);
    tools_free(&ts);
    sigset_t pending;
    sigpending(&pending);
    CHECK(!sigismember(&pending, SIGPIPE));
    free(big);
}

/* Arguments over the kernel's 128 KiB limit for one environment string (issue 18): they go on
 * stdin only, the note says so, and every size up to TOOL_ARGS_CAP runs; over it the call is
 * refused for its size (before: "could not start: Argument list too long" from 128 KiB on). */
static void test_run_large_arguments(void)
{
    static const size_t sizes[] = {TOOL_ARGS_ENV_MAX, TOOL_ARGS_ENV_MAX + 1, 200000, TOOL_ARGS_CAP, TOOL_ARGS_CAP + 1};
    tool_set ts = one_tool("[\"sh\", \"-c\", \"wc -c; printf '%s' \\\"$KIMI_TOOL_ARGS\\\" | wc -c\"]", "{}", 30);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes && ts.n_tools; k++) {
        size_t n = sizes[k];
        char *h = malloc(n + 1);
        memcpy(h, "{\"s\": \"", 7);
        memset(h + 7, 'x', n - 9);
        memcpy(h + n - 2, "\"}", 3);
        tool_result c;
        kimi_err err = {0};
        CHECK_INT(tools_run(&ts.tools[0], h, n, NULL, &c, &err), 0);
        char want[64];
        if (n > TOOL_ARGS_CAP) {
            CHECK_INT(c.status, TOOL_RUN_BAD_ARGUMENTS);
            snprintf(want, sizeof want, "the arguments are %zu bytes, over the", n);
            CHECK_MSG(strstr(c.error, want) == c.error, "%s", c.error);
        } else {
            CHECK_MSG(c.status == TOOL_RUN_DONE && c.exit_status == 0, "%zu bytes: %s", n, c.error);
            snprintf(want, sizeof want, "%zu\n%zu\n", n, n > TOOL_ARGS_ENV_MAX ? 0 : n);
            CHECK_MSG(c.output && !strcmp(c.output, want), "%zu bytes: %s", n, c.output);
            char *m = message(&c);
            CHECK_MSG((strstr(m, "were on stdin only") != NULL) == (n > TOOL_ARGS_ENV_MAX), "%s", m);
            free(m);
        }
        tool_result_free(&c);
        free(h);
    }
    tools_free(&ts);
}

static void test_run_exit_status(void)
{
    tool_result r = run_one("[\"sh\", \"-c\", \"echo oops; exit 3\"]", "{}", 10, "{}");
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_INT(r.exit_status, 3);
    CHECK_INT(r.term_signal, 0);
    CHECK_STR(r.error, "");
    char *m = message(&r);
    CHECK_STR(m, "oops\n[exit status 3]");
    free(m);
    tool_result_free(&r);

    r = run_one("[\"sh\", \"-c\", \"printf 'no newline'; exit 2\"]", "{}", 10, "{}");
    m = message(&r);
    CHECK_STR(m, "no newline\n[exit status 2]");
    free(m);
    tool_result_free(&r);

    r = run_one("[\"false\"]", "{}", 10, "{}");
    m = message(&r);
    CHECK_STR(m, "[exit status 1]");
    free(m);
    tool_result_free(&r);

    /* A program that exits 127 ran: it is not an exec failure. */
    r = run_one("[\"sh\", \"-c\", \"exit 127\"]", "{}", 10, "{}");
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_INT(r.exit_status, 127);
    tool_result_free(&r);

    r = run_one("[\"sh\", \"-c\", \"echo before; kill -SEGV $$\"]", "{}", 10, "{}");
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_INT(r.term_signal, SIGSEGV);
    CHECK_INT(r.exit_status, 128 + SIGSEGV);
    m = message(&r);
    CHECK_STR(m, "before\n[killed by signal 11 (Segmentation fault)]");
    free(m);
    tool_result_free(&r);

    /* Empty output, exit 0: an empty message. */
    r = run_one("[\"true\"]", "{}", 10, "{}");
    m = message(&r);
    CHECK_STR(m, "");
    free(m);
    tool_result_free(&r);
}

static void test_run_failed_start(void)
{
    tool_result r = run_one("[\"kimi-no-such-program\", \"x\"]", "{}", 10, "{}");
    CHECK_INT(r.status, TOOL_RUN_FAILED_START);
    CHECK_STR(r.error, "could not start kimi-no-such-program: No such file or directory");
    char *m = message(&r);
    CHECK_STR(m, "[could not start kimi-no-such-program: No such file or directory]");
    free(m);
    CHECK_INT(r.output_len, 0);
    tool_result_free(&r);

    r = run_one("[\"/nonexistent/dir/prog\"]", "{}", 10, "{}");
    CHECK_INT(r.status, TOOL_RUN_FAILED_START);
    CHECK_STR(r.error, "could not start /nonexistent/dir/prog: No such file or directory");
    tool_result_free(&r);
    /* The program named by the model, with a newline: still a one-line error. */
    r = run_one("[\"{prog}\"]", "{\"prog\": {}}", 10, "{\"prog\": \"no\\nsuch\"}");
    CHECK_INT(r.status, TOOL_RUN_FAILED_START);
    CHECK_STR(r.error, "could not start no such: No such file or directory");
    tool_result_free(&r);

    const char *plain = tmp_path("not-executable");
    write_file(plain, "#!/bin/sh\necho hi\n");
    chmod(plain, 0600);
    char argv[600], want[700];
    snprintf(argv, sizeof argv, "[\"%s\"]", plain);
    r = run_one(argv, "{}", 10, "{}");
    CHECK_INT(r.status, TOOL_RUN_FAILED_START);
    snprintf(want, sizeof want, "could not start %s: Permission denied", plain);
    CHECK_STR(r.error, want);
    tool_result_free(&r);
    /* The same script made executable runs (a placeholder as the program, too). */
    chmod(plain, 0700);
    char args[600];
    snprintf(args, sizeof args, "{\"prog\": \"%s\"}", plain);
    r = run_one("[\"{prog}\"]", "{\"prog\": {}}", 10, args);
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_STR(r.output, "hi\n");
    tool_result_free(&r);
}

static void test_run_output(void)
{
    /* 1 MB: the first 64 KiB kept, all counted, promptly. */
    tool_result r = run_one("[\"head\", \"-c\", \"1048576\", \"/dev/zero\"]", "{}", 10, "{}");
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_INT(r.exit_status, 0);
    CHECK_INT(r.output_len, TOOL_OUTPUT_CAP);
    CHECK_INT(r.output_total, 1048576);
    CHECK(r.seconds < 2);
    printf("timing: 1 MB through the 64 KiB cap: %.3f s\n", r.seconds);
    size_t zeros = 0;
    for (size_t i = 0; r.output && i < r.output_len; i++)
        zeros += r.output[i] == 0;
    CHECK_INT(zeros, TOOL_OUTPUT_CAP);
    size_t len;
    char *m = tool_result_message(&r, &len);
    const char *note = "\n[output cut: 1048576 bytes, first 65536 shown]";
    CHECK_INT(len, TOOL_OUTPUT_CAP + strlen(note));
    CHECK(m && !memcmp(m + TOOL_OUTPUT_CAP, note, strlen(note) + 1));
    free(m);
    tool_result_free(&r);

    /* Exactly the cap: nothing cut; one byte more: cut. A nonzero exit adds its own line. */
    r = run_one("[\"head\", \"-c\", \"65536\", \"/dev/zero\"]", "{}", 10, "{}");
    CHECK_INT(r.output_len, 65536);
    CHECK_INT(r.output_total, 65536);
    m = tool_result_message(&r, &len);
    CHECK_INT(len, 65536);
    free(m);
    tool_result_free(&r);
    r = run_one("[\"sh\", \"-c\", \"head -c 65537 /dev/zero | tr '\\\\0' a; exit 4\"]", "{}", 10, "{}");
    CHECK_INT(r.output_len, 65536);
    CHECK_INT(r.output_total, 65537);
    m = tool_result_message(&r, &len);
    const char *notes = "\n[output cut: 65537 bytes, first 65536 shown]\n[exit status 4]";
    CHECK_INT(len, 65536 + strlen(notes));
    CHECK(m && m[0] == 'a' && !strcmp(m + 65536, notes));
    free(m);
    tool_result_free(&r);

    /* NUL bytes are output like any other. */
    r = run_one("[\"printf\", \"a\\\\0b\\\\0\\\\0c\"]", "{}", 10, "{}");
    CHECK_INT(r.output_len, 6);
    CHECK(r.output && !memcmp(r.output, "a\0b\0\0c", 7));
    m = tool_result_message(&r, &len);
    CHECK_INT(len, 6);
    CHECK(m && !memcmp(m, "a\0b\0\0c", 7));
    free(m);
    tool_result_free(&r);

    /* stdout and stderr in one stream, in the order written. */
    r = run_one("[\"sh\", \"-c\", \"echo 1; echo 2 >&2; echo 3; echo 4 >&2; printf 5\"]", "{}", 10, "{}");
    CHECK_STR(r.output, "1\n2\n3\n4\n5");
    tool_result_free(&r);

    /* A writer that never stops: cut, and stopped by its timeout. */
    r = run_one("[\"yes\"]", "{}", 0.5, "{}");
    CHECK_INT(r.status, TOOL_RUN_TIMEOUT);
    CHECK_INT(r.output_len, TOOL_OUTPUT_CAP);
    CHECK(r.output_total > 10 * TOOL_OUTPUT_CAP);
    CHECK(r.seconds < 2);
    tool_result_free(&r);
}

static long first_number(const char *s)
{
    return s ? strtol(s, NULL, 10) : 0;
}

static void test_run_timeout(void)
{
    /* The shell and its background sleep, both killed after 1 s. */
    tool_result r = run_one("[\"sh\", \"-c\", \"sleep 100 & echo $!; sleep 100\"]", "{}", 1, "{}");
    CHECK_INT(r.status, TOOL_RUN_TIMEOUT);
    CHECK(r.seconds >= 0.99 && r.seconds < 2.5);
    printf("timing: timeout 1 s, returned after %.3f s\n", r.seconds);
    CHECK_STR(r.error, "killed after 1 s timeout");
    long bg = first_number(r.output);
    CHECK(bg > 1);
    CHECK_MSG(bg > 1 && process_gone(bg), "background sleep %ld survived", bg);
    char *m = message(&r);
    char want[64];
    snprintf(want, sizeof want, "%ld\n[killed after 1 s timeout]", bg);
    CHECK_STR(m, want);
    free(m);
    tool_result_free(&r);

    /* SIGTERM goes to the whole group: a background subshell's trap runs and its output is read. */
    r = run_one("[\"sh\", \"-c\", \"(trap 'echo sub got TERM; exit' TERM; while :; do sleep 0.05; done) & "
                "exec sleep 100\"]", "{}", 0.5, "{}");
    CHECK_INT(r.status, TOOL_RUN_TIMEOUT);
    CHECK(r.output && strstr(r.output, "sub got TERM\n"));
    CHECK(r.seconds < 2);
    tool_result_free(&r);

    /* Closes stdout and stderr but keeps running: still the timeout. */
    r = run_one("[\"sh\", \"-c\", \"exec >&- 2>&-; sleep 100\"]", "{}", 0.5, "{}");
    CHECK_INT(r.status, TOOL_RUN_TIMEOUT);
    CHECK(r.seconds >= 0.49 && r.seconds < 2);
    CHECK_STR(r.error, "killed after 0.5 s timeout");
    tool_result_free(&r);

    /* Ignores SIGTERM: SIGKILL one second later. */
    r = run_one("[\"sh\", \"-c\", \"trap '' TERM; echo $$; sleep 100; echo survived\"]", "{}", 0.3, "{}");
    CHECK_INT(r.status, TOOL_RUN_TIMEOUT);
    CHECK(r.seconds >= 1.29 && r.seconds < 3);
    printf("timing: timeout 0.3 s, SIGTERM ignored, returned after %.3f s\n", r.seconds);
    CHECK(r.output && !strstr(r.output, "survived"));
    CHECK(process_gone(first_number(r.output)));
    tool_result_free(&r);
}

/* The tool exits but leaves something behind: it returns promptly and what was left is killed,
 * whether it still holds the output pipe or not. */
static void test_run_leftovers(void)
{
    tool_result r = run_one("[\"sh\", \"-c\", \"sleep 100 & echo $!\"]", "{}", 30, "{}");
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_INT(r.exit_status, 0);
    CHECK(r.seconds < 1.5);
    printf("timing: exited leaving a pipe holder behind: %.3f s\n", r.seconds);
    long bg = first_number(r.output);
    CHECK_MSG(bg > 1 && process_gone(bg), "background sleep %ld survived", bg);
    tool_result_free(&r);

    r = run_one("[\"sh\", \"-c\", \"sleep 100 >/dev/null 2>&1 & echo $!\"]", "{}", 30, "{}");
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK(r.seconds < 1);
    bg = first_number(r.output);
    CHECK_MSG(bg > 1 && process_gone(bg), "background sleep %ld survived", bg);
    tool_result_free(&r);

    /* Output a background child writes shortly after the tool exited is still read. */
    r = run_one("[\"sh\", \"-c\", \"(sleep 0.02; echo late) & echo early\"]", "{}", 30, "{}");
    CHECK_STR(r.output, "early\nlate\n");
    tool_result_free(&r);

    /* seconds measures the run. */
    r = run_one("[\"sleep\", \"0.3\"]", "{}", 30, "{}");
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK(r.seconds >= 0.29 && r.seconds < 1.5);
    tool_result_free(&r);
}

typedef struct {
    atomic_int *flag;
    double delay_s;
    double set_at;
} canceller;

static void *cancel_later(void *p)
{
    canceller *c = p;
    usleep((useconds_t)(c->delay_s * 1e6));
    c->set_at = now_s();
    atomic_store(c->flag, 1);
    return NULL;
}

static void test_run_cancel(void)
{
    atomic_int flag = 0;
    tool_set ts = one_tool("[\"sh\", \"-c\", \"sleep 100 & echo $!; sleep 100\"]", "{}", 30);
    if (!ts.n_tools)
        return;
    canceller c = {&flag, 0.3, 0};
    pthread_t th;
    pthread_create(&th, NULL, cancel_later, &c);
    tool_result r = run_args(&ts.tools[0], "{}", &flag);
    double returned = now_s();
    pthread_join(th, NULL);
    CHECK_INT(r.status, TOOL_RUN_CANCELLED);
    double latency = returned - c.set_at;
    CHECK_MSG(latency >= 0 && latency < 0.15, "returned %.3f s after the flag", latency);
    printf("timing: cancel returned %.3f s after the flag\n", latency);
    CHECK(r.seconds > 0.29 && r.seconds < 1);
    long bg = first_number(r.output);
    CHECK_MSG(bg > 1 && process_gone(bg), "background sleep %ld survived", bg);
    char *m = message(&r);
    char want[64];
    snprintf(want, sizeof want, "%ld\n[cancelled by the user]", bg);
    CHECK_STR(m, want);
    free(m);
    CHECK_STR(r.error, "");
    tool_result_free(&r);

    /* Already cancelled: not started. */
    const char *marker = tmp_path("cancelled-ran");
    char argv[600];
    snprintf(argv, sizeof argv, "[\"touch\", \"%s\"]", marker);
    tool_set t2 = one_tool(argv, "{}", 30);
    r = run_args(&t2.tools[0], "{}", &flag);
    CHECK_INT(r.status, TOOL_RUN_CANCELLED);
    tool_result_free(&r);
    CHECK(access(marker, F_OK) != 0);
    /* Not cancelled: it runs. */
    atomic_store(&flag, 0);
    r = run_args(&t2.tools[0], "{}", &flag);
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK(access(marker, F_OK) == 0);
    tool_result_free(&r);
    tools_free(&t2);
    tools_free(&ts);
}

/* The child starts clean: default signal dispositions, an empty mask, no inherited fds, its own
 * process group, whatever the app did to itself. */
static void test_run_child_state(void)
{
    int leak = open("/dev/null", O_RDONLY);   /* not close-on-exec */
    int p[2];
    CHECK(pipe(p) == 0);
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_int, old_pipe, old_term;
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGPIPE, &ign, &old_pipe);
    sigaction(SIGTERM, &ign, &old_term);
    sigset_t block, old_mask;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigaddset(&block, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &block, &old_mask);

    tool_result r = run_one("[\"grep\", \"-E\", \"^Sig(Blk|Ign)\", \"/proc/self/status\"]", "{}", 10, "{}");
    CHECK_STR(r.output, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
    tool_result_free(&r);
    r = run_one("[\"ls\", \"/proc/self/fd\"]", "{}", 10, "{}");
    CHECK_STR(r.output, "0\n1\n2\n3\n");   /* 3 is ls's own directory */
    tool_result_free(&r);
    /* Its own process group, in which it is the leader. */
    r = run_one("[\"cat\", \"/proc/self/stat\"]", "{}", 10, "{}");
    long pid = 0, pgid = -1;
    CHECK(r.output && sscanf(r.output, "%ld (cat) %*c %*d %ld", &pid, &pgid) == 2);
    CHECK(pid == pgid && pgid != (long)getpgrp());
    tool_result_free(&r);

    /* SIGCHLD ignored by the app (children reaped by the kernel): no wait for the timeout. */
    struct sigaction old_chld;
    sigaction(SIGCHLD, &ign, &old_chld);
    r = run_one("[\"echo\", \"hi\"]", "{}", 10, "{}");
    CHECK_INT(r.status, TOOL_RUN_DONE);
    CHECK_STR(r.output, "hi\n");
    CHECK(r.seconds < 1);
    tool_result_free(&r);
    sigaction(SIGCHLD, &old_chld, NULL);

    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    close(leak);
    close(p[0]);
    close(p[1]);
}

static void test_messages(void)
{
    char *m = tool_message_unknown("foo");
    CHECK_STR(m, "unknown tool 'foo'");
    free(m);
    m = tool_message_denied("word_count");
    CHECK_STR(m, "The user denied this call to word_count.");
    free(m);
    m = tool_message_not_asked("word_count");
    CHECK_STR(m, "Not run: nobody could be asked to approve this call to word_count (no terminal to ask on); "
                 "--allow-tools word_count would allow it.");
    free(m);
    /* Names from the model are made one safe line (utf8_one_line: controls as spaces). */
    m = tool_message_unknown("a\nb\x1b[31m");
    CHECK_STR(m, "unknown tool 'a b [31m'");
    free(m);
    char longname[200];
    memset(longname, 'x', 62);
    strcpy(longname + 62, "\xc3\xa9\xc3\xa9yyyy");   /* byte 64 falls inside the second é */
    m = tool_message_unknown(longname);
    char want[200];
    snprintf(want, sizeof want, "unknown tool '%.62s\xc3\xa9\xe2\x80\xa6'", longname);
    CHECK_STR(m, want);
    free(m);

    tool_set ts;
    kimi_err err = {0};
    if (tools_load(&ts, DEMO_TOOLS, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    m = tools_message_unknown(&ts, "search");
    CHECK_STR(m, "unknown tool 'search'; available: now, word_count, list_dir");
    free(m);
    ts.tools[0].enabled = 0;
    m = tools_message_unknown(&ts, "now");
    CHECK_STR(m, "unknown tool 'now'; available: word_count, list_dir");
    free(m);
    ts.tools[1].enabled = ts.tools[2].enabled = 0;
    m = tools_message_unknown(&ts, "now");
    CHECK_STR(m, "unknown tool 'now'; no tools are available");
    free(m);
    tools_free(&ts);

    /* Each kind of result, as built by hand. */
    tool_result r = {.status = TOOL_RUN_TIMEOUT, .output = "partial\n", .output_len = 8, .output_total = 8};
    strcpy(r.error, "killed after 30 s timeout");
    m = tool_result_message(&r, NULL);
    CHECK_STR(m, "partial\n[killed after 30 s timeout]");
    free(m);
    r = (tool_result){.status = TOOL_RUN_BAD_ARGUMENTS};
    strcpy(r.error, "argument path missing");
    m = tool_result_message(&r, NULL);
    CHECK_STR(m, "[not run: argument path missing]");
    free(m);
    r = (tool_result){.status = TOOL_RUN_CANCELLED};
    m = tool_result_message(&r, NULL);
    CHECK_STR(m, "[cancelled by the user]");
    free(m);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_load_demo();
    test_load_bad();
    test_load_lenient();
    test_run_demo();
    test_run_literal_arguments();
    test_run_numbers();
    test_run_bad_arguments();
    test_run_stdin_and_env();
    test_run_large_arguments();
    test_run_exit_status();
    test_run_failed_start();
    test_run_output();
    test_run_timeout();
    test_run_leftovers();
    test_run_cancel();
    test_run_child_state();
    test_messages();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp_dir);
    return check_finish();
}
