/* completion: command names from the command table, argument words by command, file paths by
 * readdir of the word's folder. */
#include "app/chat/completion.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app/chat/commands.h"

static int add(completion *c, int *cap, const char *a, size_t a_len, const char *b, kimi_err *err)
{
    if (c->n == *cap) {
        int grown_cap = *cap ? 2 * *cap : 16;
        char **grown = realloc(c->items, (size_t)grown_cap * sizeof *grown);
        if (!grown)
            return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for completion");
        c->items = grown;
        *cap = grown_cap;
    }
    size_t b_len = b ? strlen(b) : 0;
    char *item = malloc(a_len + b_len + 1);
    if (!item)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for completion");
    memcpy(item, a, a_len);
    if (b_len)
        memcpy(item + a_len, b, b_len);
    item[a_len + b_len] = 0;
    c->items[c->n++] = item;
    return 0;
}

static int starts_with(const char *s, const char *prefix, size_t n) { return !strncmp(s, prefix, n); }

/* Each of words[0..n) that starts with word[0..len). */
static int add_words(completion *c, int *cap, const char *const *words, int n, const char *word, size_t len,
                     kimi_err *err)
{
    for (int i = 0; i < n; i++)
        if (words[i] && starts_with(words[i], word, len) && add(c, cap, words[i], strlen(words[i]), NULL, err))
            return err->code;
    return 0;
}

/* The entries of the folder word names (up to its last '/', else the current folder) whose
 * names start with the rest of word. */
static int add_files(completion *c, int *cap, const char *word, size_t len, kimi_err *err)
{
    const char *slash = memrchr(word, '/', len);
    size_t dir_len = slash ? (size_t)(slash - word) + 1 : 0;
    char *dir = strndup(dir_len ? word : ".", dir_len ? dir_len : 1);
    if (!dir)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for completion");
    const char *prefix = word + dir_len;
    size_t prefix_len = len - dir_len;
    DIR *d = opendir(dir);
    int rc = 0;
    for (struct dirent *e; !rc && d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || (e->d_name[0] == '.' && (!prefix_len || prefix[0] != '.')) ||
            !starts_with(e->d_name, prefix, prefix_len))
            continue;
        int is_dir = e->d_type == DT_DIR;
        if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
            char *path = NULL;
            struct stat st;
            if (asprintf(&path, "%s/%s", dir, e->d_name) >= 0 && stat(path, &st) == 0)
                is_dir = S_ISDIR(st.st_mode);
            free(path);
        }
        char *name = NULL;
        if (asprintf(&name, "%s%s", e->d_name, is_dir ? "/" : "") < 0)
            rc = kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for completion");
        else
            rc = add(c, cap, word, dir_len, name, err);
        free(name);
    }
    if (d)
        closedir(d);
    free(dir);
    return rc ? err->code : 0;
}

static int by_text(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* Sorted, each once. */
static void sort_unique(completion *c)
{
    if (c->n < 2)
        return;
    qsort(c->items, (size_t)c->n, sizeof *c->items, by_text);
    int n = 1;
    for (int i = 1; i < c->n; i++) {
        if (strcmp(c->items[i], c->items[n - 1]))
            c->items[n++] = c->items[i];
        else
            free(c->items[i]);
    }
    c->n = n;
}

/* Whether s[0..len) is word. */
static int is(const char *s, size_t len, const char *word) { return strlen(word) == len && !memcmp(s, word, len); }

/* Argument number arg (0 = the first) of command name, given the words before it. */
static int add_argument(completion *c, int *cap, const char *name, size_t name_len, int arg, const char *first,
                        size_t first_len, const char *word, size_t len, const completion_sources *src, kimi_err *err)
{
    static const char *const on_off[] = {"off", "on"};
    static const char *const set_keys[] = {"max_tokens", "seed", "temperature", "top_k", "top_p"};
    static const char *const tools_actions[] = {"ask", "disable", "enable", "expanded", "folded", "list"};
    static const char *const reasoning[] = {"collapsed", "expanded", "hidden"};
    static const char *const formats[] = {"json", "md"};
    static const char *const force[] = {"--force"};
#define WORDS(list) add_words(c, cap, list, (int)(sizeof list / sizeof *list), word, len, err)
    if (is(name, name_len, "think") && arg == 0)
        return WORDS(on_off);
    if (is(name, name_len, "set") && arg == 0)
        return WORDS(set_keys);
    if (is(name, name_len, "reasoning") && arg == 0)
        return WORDS(reasoning);
    if (is(name, name_len, "tools")) {
        if (arg == 0)
            return WORDS(tools_actions);
        int wants_name = arg == 1 && (is(first, first_len, "ask") || is(first, first_len, "enable") ||
                                      is(first, first_len, "disable"));
        return wants_name ? add_words(c, cap, src->tools, src->n_tools, word, len, err) : 0;
    }
    if (is(name, name_len, "permissions")) {
        static const char *const modes[] = {"always", "ask", "disabled"};
        if (arg == 0)
            return add_words(c, cap, src->tools, src->n_tools, word, len, err);
        return arg == 1 ? WORDS(modes) : 0;
    }
    if (is(name, name_len, "theme") && arg == 0)
        return add_words(c, cap, src->themes, src->n_themes, word, len, err);
    if (is(name, name_len, "save") && arg == 0)
        return add_words(c, cap, src->sessions, src->n_sessions, word, len, err);
    if (is(name, name_len, "load") && arg == 0) {
        if (!memchr(word, '/', len) && add_words(c, cap, src->sessions, src->n_sessions, word, len, err))
            return err->code;
        return add_files(c, cap, word, len, err);
    }
    if (is(name, name_len, "export")) {
        int after_format = arg > 0 && (is(first, first_len, "md") || is(first, first_len, "json") ||
                                       is(first, first_len, "markdown"));
        if (arg == 0 && (WORDS(formats) || add_files(c, cap, word, len, err)))
            return err->code;
        if (arg == 1 && after_format && add_files(c, cap, word, len, err))
            return err->code;
        if (arg == 1 + after_format && len && WORDS(force))
            return err->code;
        return 0;
    }
#undef WORDS
    return 0;
}

int completion_find(const char *input, size_t len, const completion_sources *src, completion *out, kimi_err *err)
{
    *out = (completion){0};
    int cap = 0;
    if (!len || input[0] != '/' || memchr(input, '\n', len))
        return 0;
    size_t name_end = 1;
    while (name_end < len && input[name_end] != ' ')
        name_end++;
    int rc = 0;
    if (name_end == len) {
        /* the command name itself */
        const char *name;
        for (int i = 0; !rc && (name = commands_name(i)); i++)
            if (starts_with(name, input + 1, len - 1))
                rc = add(out, &cap, "/", 1, name, err);
    } else {
        /* an argument: the words after the name, the last one being completed */
        int arg = 0;
        const char *first = "";
        size_t first_len = 0, start = len - 1;     /* the last space */
        while (input[start] != ' ')
            start--;
        /* the complete words between the name and that space */
        for (size_t p = name_end; p < start;) {
            while (p < start && input[p] == ' ')
                p++;
            size_t w = p;
            while (p < start && input[p] != ' ')
                p++;
            if (p > w) {
                if (!arg) {
                    first = input + w;
                    first_len = p - w;
                }
                arg++;
            }
        }
        out->start = start + 1;
        rc = add_argument(out, &cap, input + 1, name_end - 1, arg, first, first_len, input + out->start,
                          len - out->start, src, err);
    }
    if (rc) {
        completion_free(out);
        return err->code;
    }
    sort_unique(out);
    return 0;
}

void completion_free(completion *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->items[i]);
    free(c->items);
    *c = (completion){0};
}

size_t completion_common_prefix(const completion *c)
{
    if (!c->n)
        return 0;
    size_t n = strlen(c->items[0]);
    for (int i = 1; i < c->n; i++) {
        size_t k = 0;
        while (k < n && c->items[i][k] == c->items[0][k])
            k++;
        n = k;
    }
    return n;
}
