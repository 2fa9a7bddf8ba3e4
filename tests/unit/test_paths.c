/* test_paths: the XDG directories from HOME and the XDG variables (set, unset, relative),
 * "~" expansion, paths_mkdir_p (modes, existing parts, a file in the way) and the bundled
 * resources as this build finds them (test_paths_lookup checks the order of the lookup). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/chat/paths.h"
#include "tests/unit/check.h"

static char tmp[PATH_MAX];

static void clear_env(void)
{
    unsetenv("HOME");
    unsetenv("XDG_CONFIG_HOME");
    unsetenv("XDG_DATA_HOME");
    unsetenv("XDG_STATE_HOME");
}

/* f's answer equals want (NULL: f must fail with KIMI_ERR_USAGE naming var). */
static void expect_path(char *(*f)(kimi_err *), const char *want, const char *var)
{
    kimi_err err = {0};
    char *got = f(&err);
    if (want) {
        CHECK_STR(got, want);
    } else {
        CHECK(got == NULL);
        CHECK_INT(err.code, KIMI_ERR_USAGE);
        CHECK_MSG(strstr(err.msg, var) && strstr(err.msg, "HOME"), "%s", err.msg);
    }
    free(got);
}

static void test_xdg_defaults(void)
{
    clear_env();
    setenv("HOME", "/home/ada", 1);
    expect_path(paths_config_dir, "/home/ada/.config/kimi-chat", NULL);
    expect_path(paths_config_file, "/home/ada/.config/kimi-chat/config", NULL);
    expect_path(paths_data_dir, "/home/ada/.local/share/kimi-chat", NULL);
    expect_path(paths_state_dir, "/home/ada/.local/state/kimi-chat", NULL);
    expect_path(paths_sessions_dir, "/home/ada/.local/share/kimi-chat/sessions", NULL);
    expect_path(paths_history_file, "/home/ada/.local/state/kimi-chat/history", NULL);
}

static void test_xdg_set(void)
{
    clear_env();
    setenv("HOME", "/home/ada", 1);
    setenv("XDG_CONFIG_HOME", "/etc/xdg-c", 1);
    setenv("XDG_DATA_HOME", "/srv/data", 1);
    setenv("XDG_STATE_HOME", "/var/st", 1);
    expect_path(paths_config_dir, "/etc/xdg-c/kimi-chat", NULL);
    expect_path(paths_config_file, "/etc/xdg-c/kimi-chat/config", NULL);
    expect_path(paths_data_dir, "/srv/data/kimi-chat", NULL);
    expect_path(paths_sessions_dir, "/srv/data/kimi-chat/sessions", NULL);
    expect_path(paths_state_dir, "/var/st/kimi-chat", NULL);
    expect_path(paths_history_file, "/var/st/kimi-chat/history", NULL);
    /* The XDG spec: relative values are invalid and ignored; so are empty ones. */
    setenv("XDG_DATA_HOME", "rel/data", 1);
    setenv("XDG_STATE_HOME", "", 1);
    expect_path(paths_data_dir, "/home/ada/.local/share/kimi-chat", NULL);
    expect_path(paths_history_file, "/home/ada/.local/state/kimi-chat/history", NULL);
    /* Without HOME the XDG variables alone are enough. */
    unsetenv("HOME");
    expect_path(paths_config_dir, "/etc/xdg-c/kimi-chat", NULL);
}

static void test_no_home(void)
{
    clear_env();
    expect_path(paths_config_dir, NULL, "XDG_CONFIG_HOME");
    expect_path(paths_config_file, NULL, "XDG_CONFIG_HOME");
    expect_path(paths_data_dir, NULL, "XDG_DATA_HOME");
    expect_path(paths_sessions_dir, NULL, "XDG_DATA_HOME");
    expect_path(paths_state_dir, NULL, "XDG_STATE_HOME");
    expect_path(paths_history_file, NULL, "XDG_STATE_HOME");
    setenv("HOME", "", 1);
    setenv("XDG_DATA_HOME", "relative", 1);
    expect_path(paths_data_dir, NULL, "XDG_DATA_HOME");
}

static void test_expand_home(void)
{
    clear_env();
    setenv("HOME", "/home/ada", 1);
    kimi_err err = {0};
    char *s;
    CHECK_STR(s = paths_expand_home("~/models/k2", &err), "/home/ada/models/k2");
    free(s);
    CHECK_STR(s = paths_expand_home("~", &err), "/home/ada");
    free(s);
    CHECK_STR(s = paths_expand_home("~bob/x", &err), "~bob/x");
    free(s);
    CHECK_STR(s = paths_expand_home("a/~/b", &err), "a/~/b");
    free(s);
    CHECK_STR(s = paths_expand_home("", &err), "");
    free(s);
    unsetenv("HOME");
    CHECK(paths_expand_home("~/x", &err) == NULL);
    CHECK_INT(err.code, KIMI_ERR_USAGE);
    CHECK_STR(err.msg, "~/x: HOME is not set");
    CHECK_STR(s = paths_expand_home("/abs", &err), "/abs");
    free(s);
}

static int mode_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? (int)(st.st_mode & 0777) : -1;
}

static void test_mkdir_p(void)
{
    char path[PATH_MAX + 64];
    kimi_err err = {0};
    umask(022);
    snprintf(path, sizeof path, "%s/a/b//c/", tmp);
    CHECK_MSG(paths_mkdir_p(path, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/a", tmp);
    CHECK_INT(mode_of(path), 0700);
    snprintf(path, sizeof path, "%s/a/b/c", tmp);
    CHECK_INT(mode_of(path), 0700);
    /* Existing directories are fine and keep their mode. */
    snprintf(path, sizeof path, "%s/a", tmp);
    CHECK(chmod(path, 0755) == 0);
    snprintf(path, sizeof path, "%s/a/b/c", tmp);
    CHECK_MSG(paths_mkdir_p(path, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/a", tmp);
    CHECK_INT(mode_of(path), 0755);
    /* A relative path works from the current directory. */
    char cwd[PATH_MAX];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(tmp) == 0);
    CHECK_MSG(paths_mkdir_p("rel/x", &err) == 0, "%s", err.msg);
    CHECK_INT(mode_of("rel/x"), 0700);
    CHECK(chdir(cwd) == 0);
    /* A file in the way is named. */
    snprintf(path, sizeof path, "%s/a/file", tmp);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    char want[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/a/file/sub", tmp);
    CHECK_INT(paths_mkdir_p(path, &err), KIMI_ERR_IO);
    snprintf(want, sizeof want, "cannot create directory %s/a/file: Not a directory", tmp);
    CHECK_STR(err.msg, want);
    snprintf(path, sizeof path, "%s/a/file", tmp);
    CHECK_INT(paths_mkdir_p(path, &err), KIMI_ERR_IO);
    CHECK_STR(err.msg, want);
    CHECK_INT(paths_mkdir_p("", &err), KIMI_ERR_USAGE);
    CHECK_INT(paths_mkdir_p("/", &err), 0);
}

static int has_file(const char *dir, const char *name)
{
    char path[PATH_MAX + 64];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static void test_resources(void)
{
    kimi_err err = {0};
    char dir[PATH_MAX + 64], *real, *got;
    unsetenv("KIMI_DEMO_DIR");
    unsetenv("KIMI_THEMES_DIR");
    /* Built here, the lookup reaches the vendored model (or an installed copy of it). */
    got = paths_demo_model_dir(&err);
    CHECK_MSG(got && has_file(got, "config.json") && has_file(got, "tools.json"), "%s", got ? got : err.msg);
    free(got);
    got = paths_themes_dir(&err);
    CHECK_MSG(got && mode_of(got) >= 0, "%s", got ? got : err.msg);
    free(got);
    /* The variables win and come back canonical. */
    snprintf(dir, sizeof dir, "%s/a/b/../b", tmp);
    setenv("KIMI_DEMO_DIR", dir, 1);
    setenv("KIMI_THEMES_DIR", dir, 1);
    real = realpath(dir, NULL);
    CHECK_STR(got = paths_demo_model_dir(&err), real);
    free(got);
    CHECK_STR(got = paths_themes_dir(&err), real);
    free(got);
    free(real);
    /* Pointing nowhere (or at a file) is an error, not a reason to look elsewhere. */
    snprintf(dir, sizeof dir, "%s/nowhere", tmp);
    setenv("KIMI_DEMO_DIR", dir, 1);
    CHECK(paths_demo_model_dir(&err) == NULL);
    CHECK_INT(err.code, KIMI_ERR_MODEL);
    char want[PATH_MAX + 128];
    snprintf(want, sizeof want, "KIMI_DEMO_DIR=%s: no such directory", dir);
    CHECK_STR(err.msg, want);
    snprintf(dir, sizeof dir, "%s/a/file", tmp);
    setenv("KIMI_THEMES_DIR", dir, 1);
    CHECK(paths_themes_dir(&err) == NULL);
    CHECK_INT(err.code, KIMI_ERR_IO);
    snprintf(want, sizeof want, "KIMI_THEMES_DIR=%s: no such directory", dir);
    CHECK_STR(err.msg, want);
    unsetenv("KIMI_DEMO_DIR");
    unsetenv("KIMI_THEMES_DIR");
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "%s/kimi-test-paths-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_xdg_defaults();
    test_xdg_set();
    test_no_home();
    test_expand_home();
    test_mkdir_p();
    test_resources();
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    return check_finish();
}
