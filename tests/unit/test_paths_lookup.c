/* test_paths_lookup: the order in which the bundled resources are looked up (variable, next to
 * the executable, install prefix, source tree) and the error that lists every place. app/chat/paths.c
 * is compiled in here with an install prefix and a source tree under TEST_ROOT, and the test
 * runs a copy of itself from TEST_ROOT/bin so that "next to the executable" is under its control. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/chat/paths.h"
#include "tests/unit/check.h"

#ifndef TEST_ROOT
#error "TEST_ROOT comes from tests/unit/app.cmake"
#endif

static void run(const char *cmd)
{
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "%s", cmd);
}

static void make_dir(const char *sub)
{
    char cmd[PATH_MAX];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/%s'", TEST_ROOT, sub);
    run(cmd);
}

/* What the copy in TEST_ROOT/bin answers for which ("demo" or "themes"): the path, or
 * "error CODE: message". */
static void lookup(const char *which, char *out, size_t size)
{
    char cmd[PATH_MAX];
    snprintf(cmd, sizeof cmd, "'%s/bin/test_paths_lookup' %s", TEST_ROOT, which);
    FILE *p = popen(cmd, "r");
    out[0] = 0;
    if (!p || !fgets(out, (int)size, p))
        snprintf(out, size, "(no answer)");
    if (p)
        pclose(p);
    out[strcspn(out, "\n")] = 0;
}

static void expect_found(const char *which, const char *sub)
{
    char got[4096], want[PATH_MAX];
    snprintf(want, sizeof want, "%s/%s", TEST_ROOT, sub);
    lookup(which, got, sizeof got);
    CHECK_STR(got, want);
}

static void test_demo_order(void)
{
    char got[4096], want[4096];
    unsetenv("KIMI_DEMO_DIR");
    lookup("demo", got, sizeof got);
    snprintf(want, sizeof want,
             "error 3: the demo model not found (KIMI_DEMO_DIR unset; looked in "
             "%s/bin/../share/kimi-chat/kimi-demo; %s/install/kimi-demo; %s/source/app/demo/kimi-demo)",
             TEST_ROOT, TEST_ROOT, TEST_ROOT);
    CHECK_STR(got, want);
    /* An empty variable counts as unset. */
    setenv("KIMI_DEMO_DIR", "", 1);
    lookup("demo", got, sizeof got);
    CHECK_STR(got, want);
    unsetenv("KIMI_DEMO_DIR");

    make_dir("source/app/demo/kimi-demo");
    expect_found("demo", "source/app/demo/kimi-demo");
    make_dir("install/kimi-demo");
    expect_found("demo", "install/kimi-demo");
    /* A file where the directory would be is passed over. */
    run("touch '" TEST_ROOT "/share-file'");
    make_dir("share/kimi-chat");
    run("ln -s ../../share-file '" TEST_ROOT "/share/kimi-chat/kimi-demo'");
    expect_found("demo", "install/kimi-demo");
    run("rm '" TEST_ROOT "/share/kimi-chat/kimi-demo'");
    make_dir("share/kimi-chat/kimi-demo");
    expect_found("demo", "share/kimi-chat/kimi-demo");
    make_dir("env/demo");
    setenv("KIMI_DEMO_DIR", TEST_ROOT "/env/demo", 1);
    expect_found("demo", "env/demo");
    /* A variable pointing nowhere does not fall back to the others. */
    setenv("KIMI_DEMO_DIR", TEST_ROOT "/env/missing", 1);
    lookup("demo", got, sizeof got);
    CHECK_STR(got, "error 3: KIMI_DEMO_DIR=" TEST_ROOT "/env/missing: no such directory");
    unsetenv("KIMI_DEMO_DIR");
}

static void test_themes_order(void)
{
    char got[4096], want[4096];
    unsetenv("KIMI_THEMES_DIR");
    lookup("themes", got, sizeof got);
    snprintf(want, sizeof want,
             "error 4: the themes directory not found (KIMI_THEMES_DIR unset; looked in "
             "%s/bin/../share/kimi-chat/themes; %s/install/themes; %s/source/themes)",
             TEST_ROOT, TEST_ROOT, TEST_ROOT);
    CHECK_STR(got, want);
    make_dir("source/themes");
    expect_found("themes", "source/themes");
    make_dir("install/themes");
    expect_found("themes", "install/themes");
    make_dir("share/kimi-chat/themes");
    expect_found("themes", "share/kimi-chat/themes");
    make_dir("env/themes");
    setenv("KIMI_THEMES_DIR", TEST_ROOT "/env/themes", 1);
    expect_found("themes", "env/themes");
    unsetenv("KIMI_THEMES_DIR");
}

int main(int argc, char **argv)
{
    if (argc == 2) {
        /* The copy: answer one lookup. */
        kimi_err err = {0};
        char *dir = strcmp(argv[1], "demo") ? paths_themes_dir(&err) : paths_demo_model_dir(&err);
        if (dir)
            printf("%s\n", dir);
        else
            printf("error %d: %s\n", err.code, err.msg);
        free(dir);
        return 0;
    }
    run("rm -rf '" TEST_ROOT "' && mkdir -p '" TEST_ROOT "/bin'");
    char self[PATH_MAX], cmd[2 * PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n > 0 ? n : 0] = 0;
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/bin/test_paths_lookup'", self, TEST_ROOT);
    run(cmd);
    test_demo_order();
    test_themes_order();
    run("rm -rf '" TEST_ROOT "'");
    return check_finish();
}
