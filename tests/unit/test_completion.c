/* test_completion: command names (aliases included), each command's argument words, tool,
 * theme and session names from the caller, file paths from a folder the test makes (folders
 * with '/', hidden files only when asked), the common prefix, and inputs that get nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/chat/completion.h"
#include "tests/unit/check.h"

static const char *const themes[] = {"default", "high-contrast", "light", "mono"};
static const char *const sessions[] = {"2026-12-01T11-40-03", "notes", "notebook"};
static const char *const tools[] = {"list_dir", "now", "word_count"};
static const completion_sources src = {themes, 4, sessions, 3, tools, 3};

/* The candidates for input, joined by spaces, and the start of the word. */
static const char *complete(const char *input, size_t *start)
{
    static char joined[2048];
    completion c;
    kimi_err err = {0};
    joined[0] = 0;
    CHECK_MSG(completion_find(input, strlen(input), &src, &c, &err) == 0, "%s: %s", input, err.msg);
    for (int i = 0; i < c.n; i++)
        snprintf(joined + strlen(joined), sizeof joined - strlen(joined), "%s%s", i ? " " : "", c.items[i]);
    if (start)
        *start = c.start;
    completion_free(&c);
    return joined;
}

int main(void)
{
    size_t start = 99;
    CHECK_STR(complete("/t", &start), "/theme /think /tools");
    CHECK_INT(start, 0);
    CHECK_STR(complete("/ex", NULL), "/exit /export");
    CHECK_STR(complete("/c", NULL), "/clear /compact");
    CHECK_STR(complete("/zz", NULL), "");
    CHECK(strstr(complete("/", NULL), "/help") && strstr(complete("/", NULL), "/reasoning"));
    /* arguments */
    CHECK_STR(complete("/think o", &start), "off on");
    CHECK_INT(start, 7);
    CHECK_STR(complete("/set t", NULL), "temperature top_k top_p");
    CHECK_STR(complete("/set temperature ", NULL), "");      /* a value: nothing to offer */
    CHECK_STR(complete("/reasoning ", NULL), "collapsed expanded hidden");
    CHECK_STR(complete("/theme l", NULL), "light");
    CHECK_STR(complete("/tools e", NULL), "enable expanded");
    CHECK_STR(complete("/tools enable ", &start), "list_dir now word_count");
    CHECK_INT(start, 14);
    CHECK_STR(complete("/tools  ask  w", NULL), "word_count");   /* extra spaces */
    CHECK_STR(complete("/tools folded ", NULL), "");
    CHECK_STR(complete("/save note", NULL), "notebook notes");
    CHECK_STR(complete("/permissions n", NULL), "now");
    CHECK_STR(complete("/permissions now a", NULL), "always ask");
    CHECK_STR(complete("/permissions now always ", NULL), "");
    CHECK_STR(complete("/quit ", NULL), "");
    CHECK_STR(complete("/help", NULL), "/help");
    CHECK_STR(complete("hello /t", NULL), "");                 /* not a command */
    CHECK_STR(complete("/think\nof", NULL), "");

    /* files, in a folder of the test's own */
    char dir[] = "/tmp/test_completion.XXXXXX";
    if (!mkdtemp(dir) || chdir(dir))
        return 1;
    mkdir("notes.d", 0700);
    mkdir("sub", 0700);
    fclose(fopen("notes.json", "w"));
    fclose(fopen("sub/chat one.json", "w"));
    fclose(fopen(".hidden.json", "w"));
    CHECK_STR(complete("/load note", NULL), "notebook notes notes.d/ notes.json");
    CHECK_STR(complete("/load sub/", &start), "sub/chat one.json");
    CHECK_INT(start, 6);
    CHECK_STR(complete("/load .h", NULL), ".hidden.json");
    CHECK_STR(complete("/load ./s", NULL), "./sub/");
    /* the word ends at the cursor: a '.' after it asks for no hidden file */
    completion c;
    kimi_err err = {0};
    const char *before_dot = "/load ./.h";
    CHECK(completion_find(before_dot, 8, &src, &c, &err) == 0);
    CHECK_INT(c.n, 3);
    for (int i = 0; i < c.n; i++)
        CHECK_MSG(c.items[i][2] != '.', "%s", c.items[i]);
    completion_free(&c);
    CHECK_STR(complete("/load nowhere/x", NULL), "");
    CHECK_STR(complete("/export ", NULL), "json md notes.d/ notes.json sub/");
    CHECK_STR(complete("/export json no", NULL), "notes.d/ notes.json");
    CHECK_STR(complete("/export json out.json -", NULL), "--force");
    CHECK_STR(complete("/export out.md --", NULL), "--force");
    CHECK_STR(complete("/export out.md --force ", NULL), "");

    /* the prefix all candidates share */
    CHECK(completion_find("/load no", 8, &src, &c, &err) == 0);
    CHECK_INT(completion_common_prefix(&c), 4);               /* "note" */
    completion_free(&c);
    CHECK(completion_find("/zz", 3, &src, &c, &err) == 0 && c.n == 0 && completion_common_prefix(&c) == 0);
    completion_free(&c);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd))
        return 1;
    return check_finish();
}
