/* paths: the XDG directories kimi-chat writes to and the lookup of the files it ships. */
#include "app/chat/paths.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef KIMI_INSTALL_DATADIR
#error "KIMI_INSTALL_DATADIR (<prefix>/share/kimi-chat) comes from app/CMakeLists.txt"
#endif
#ifndef KIMI_SOURCE_DIR
#error "KIMI_SOURCE_DIR comes from app/CMakeLists.txt"
#endif

/* A malloc'ed printf; NULL and KIMI_ERR_NOMEM when it fails. */
static char *path_format(kimi_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *path_format(kimi_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) {
        kimi_fail(err, KIMI_ERR_NOMEM, "out of memory building a path");
        return NULL;
    }
    return s;
}

static const char *home_dir(void)
{
    const char *home = getenv("HOME");
    return home && *home ? home : NULL;
}

/* $var/kimi-chat/tail, else $HOME/fallback/kimi-chat/tail. Relative XDG values are ignored, as
 * the XDG Base Directory spec says. */
static char *xdg_path(const char *var, const char *fallback, const char *tail, kimi_err *err)
{
    const char *base = getenv(var);
    if (base && base[0] == '/')
        return path_format(err, "%s/kimi-chat%s", base, tail);
    const char *home = home_dir();
    if (!home) {
        kimi_fail(err, KIMI_ERR_USAGE, "cannot place the kimi-chat files: neither %s (absolute) "
                  "nor HOME is set", var);
        return NULL;
    }
    return path_format(err, "%s/%s/kimi-chat%s", home, fallback, tail);
}

char *paths_config_dir(kimi_err *err) { return xdg_path("XDG_CONFIG_HOME", ".config", "", err); }
char *paths_config_file(kimi_err *err) { return xdg_path("XDG_CONFIG_HOME", ".config", "/config", err); }
char *paths_data_dir(kimi_err *err) { return xdg_path("XDG_DATA_HOME", ".local/share", "", err); }
char *paths_state_dir(kimi_err *err) { return xdg_path("XDG_STATE_HOME", ".local/state", "", err); }
char *paths_sessions_dir(kimi_err *err) { return xdg_path("XDG_DATA_HOME", ".local/share", "/sessions", err); }
char *paths_history_file(kimi_err *err) { return xdg_path("XDG_STATE_HOME", ".local/state", "/history", err); }

char *paths_expand_home(const char *path, kimi_err *err)
{
    if (path[0] == '~' && (path[1] == '/' || path[1] == 0)) {
        const char *home = home_dir();
        if (!home) {
            kimi_fail(err, KIMI_ERR_USAGE, "%s: HOME is not set", path);
            return NULL;
        }
        return path_format(err, "%s%s", home, path + 1);
    }
    return path_format(err, "%s", path);
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int paths_mkdir_p(const char *dir, kimi_err *err)
{
    if (!dir || !*dir)
        return kimi_fail(err, KIMI_ERR_USAGE, "cannot create a directory with an empty name");
    char *p = path_format(err, "%s", dir);
    if (!p)
        return KIMI_ERR_NOMEM;
    /* Each prefix ending at a '/' (and the whole path), parents first. */
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != 0)
            continue;
        char saved = *s;
        *s = 0;
        /* An existing directory is fine whatever mkdir says (EEXIST, or EROFS on a read-only
           parent); an existing non-directory is not. */
        int e = mkdir(p, 0700) == 0 ? 0 : errno;
        if (e && !is_dir(p)) {
            if (e == EEXIST)
                e = ENOTDIR;
            kimi_fail(err, KIMI_ERR_IO, "cannot create directory %s: %s", p, strerror(e));
            free(p);
            return KIMI_ERR_IO;
        }
        *s = saved;
        if (!saved)
            break;
        while (s[1] == '/')
            s++;
        if (!s[1])
            break;
    }
    free(p);
    return 0;
}

/* The directory of the running executable, malloc'ed; NULL when /proc cannot say. */
static char *exe_dir(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return NULL;
    buf[n] = 0;
    char *slash = strrchr(buf, '/');
    if (!slash)
        return NULL;
    *slash = 0;
    return strdup(buf);
}

/* Appends "; what" to the list of places looked at (cut short when it fills up). */
static void note_place(char *looked, size_t size, const char *what)
{
    size_t used = strlen(looked);
    if (used + 1 < size)
        snprintf(looked + used, size - used, "%s%s", used ? "; " : "", what);
}

static char *resource_dir(const char *what, const char *env, const char *installed,
                          const char *in_source, int code, kimi_err *err)
{
    const char *from_env = getenv(env);
    if (from_env && *from_env) {
        char *real = realpath(from_env, NULL);
        if (real && is_dir(real))
            return real;
        free(real);
        kimi_fail(err, code, "%s=%s: no such directory", env, from_env);
        return NULL;
    }
    char *exe = exe_dir();
    char *candidates[3] = {
        exe ? path_format(err, "%s/../share/kimi-chat/%s", exe, installed) : NULL,
        path_format(err, "%s/%s", KIMI_INSTALL_DATADIR, installed),
        path_format(err, "%s/%s", KIMI_SOURCE_DIR, in_source),
    };
    free(exe);
    char looked[sizeof err->msg];
    looked[0] = 0;
    if (!candidates[0])
        note_place(looked, sizeof looked, "(not next to the executable: /proc/self/exe unreadable)");
    char *found = NULL;
    for (int i = 0; i < 3; i++) {
        if (!candidates[i])
            continue;
        if (!found) {
            char *real = realpath(candidates[i], NULL);
            if (real && is_dir(real))
                found = real;
            else
                free(real);
        }
        note_place(looked, sizeof looked, candidates[i]);
        free(candidates[i]);
    }
    if (!found)
        kimi_fail(err, code, "%s not found (%s unset; looked in %s)", what, env, looked);
    return found;
}

char *paths_demo_model_dir(kimi_err *err)
{
    return resource_dir("the demo model", "KIMI_DEMO_DIR", "kimi-demo", "app/demo/kimi-demo",
                        KIMI_ERR_MODEL, err);
}

char *paths_themes_dir(kimi_err *err)
{
    return resource_dir("the themes directory", "KIMI_THEMES_DIR", "themes", "themes", KIMI_ERR_IO, err);
}

/* The folders themes are looked up in, the user's first: fills dirs, returns how many. */
static int theme_dirs(char *dirs[2])
{
    int n = 0;
    kimi_err ignored = {0};
    char *config = paths_config_dir(&ignored);
    if (config) {
        dirs[n] = path_format(&ignored, "%s/themes", config);
        n += dirs[n] != NULL;
        free(config);
    }
    dirs[n] = paths_themes_dir(&ignored);
    n += dirs[n] != NULL;
    return n;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char *paths_theme_names(void)
{
    char *dirs[2];
    int n_dirs = theme_dirs(dirs);
    char *names[256];
    int n = 0, failed = 0;
    static const char ext[] = ".theme";
    for (int i = 0; i < n_dirs; i++) {
        DIR *d = opendir(dirs[i]);
        struct dirent *e;
        while (d && (e = readdir(d)) && n < (int)(sizeof names / sizeof *names)) {
            size_t len = strlen(e->d_name);
            if (len <= sizeof ext - 1 || e->d_name[0] == '.' || strcmp(e->d_name + len - (sizeof ext - 1), ext))
                continue;
            if (!(names[n] = strndup(e->d_name, len - (sizeof ext - 1))))
                failed = 1;
            else
                n++;
        }
        if (d)
            closedir(d);
        free(dirs[i]);
    }
    qsort(names, (size_t)n, sizeof *names, compare_names);
    size_t total = 1;
    for (int i = 0; i < n; i++)
        total += strlen(names[i]) + 2;
    char *out = failed ? NULL : malloc(total);
    if (out) {
        out[0] = 0;
        for (int i = 0; i < n; i++)
            if (!i || strcmp(names[i], names[i - 1])) {
                if (out[0])
                    strcat(out, ", ");
                strcat(out, names[i]);
            }
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    return out;
}

char *paths_theme_file(const char *name, kimi_err *err)
{
    if (!*name || strchr(name, '/')) {
        kimi_fail(err, KIMI_ERR_USAGE, "theme '%s': a name, not a path", name);
        return NULL;
    }
    char *dirs[2];
    int n_dirs = theme_dirs(dirs);
    char *found = NULL;
    for (int i = 0; i < n_dirs; i++) {
        char *path = found ? NULL : path_format(err, "%s/%s.theme", dirs[i], name);
        if (path && access(path, R_OK) == 0)
            found = path;
        else
            free(path);
        free(dirs[i]);
    }
    if (!found) {
        char *names = paths_theme_names();
        kimi_fail(err, KIMI_ERR_USAGE, "theme '%s' not found (themes: %s)", name,
                  names && *names ? names : "none installed");
        free(names);
    }
    return found;
}
