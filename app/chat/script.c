/* script: parsing a kimi-chat script file into turns, commands and /expect items, all of it
 * checked before anything runs. */
#include "app/chat/script.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/array.h"

static const char triple[] = "\"\"\"";

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* "NAME:LINE: message" as KIMI_ERR_INPUT. */
static int script_fail(kimi_err *err, const script *s, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int script_fail(kimi_err *err, const script *s, int line, const char *fmt, ...)
{
    char what[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return kimi_fail(err, KIMI_ERR_INPUT, "%s:%d: %s", s->name, line, what);
}

typedef struct {
    size_t cap;             /* of s->items */
} builder;

/* Append an item whose text is a copy of text[0..len). */
static script_item *add_item(script *s, builder *b, script_item_kind kind, int line, const char *text,
                             size_t len, kimi_err *err)
{
    if (s->n_items == INT_MAX ||
        array_reserve(&s->items, &b->cap, (size_t)s->n_items + 1, sizeof *s->items)) {
        kimi_fail(err, KIMI_ERR_NOMEM, "%s:%d: out of memory", s->name, line);
        return NULL;
    }
    char *copy = len < SIZE_MAX ? malloc(len + 1) : NULL;
    if (!copy) {
        kimi_fail(err, KIMI_ERR_NOMEM, "%s:%d: out of memory", s->name, line);
        return NULL;
    }
    memcpy(copy, text, len);
    copy[len] = 0;
    script_item *it = &s->items[s->n_items++];
    memset(it, 0, sizeof *it);
    it->kind = kind;
    it->line = line;
    it->text = copy;
    it->len = len;
    return it;
}

static int only_blanks(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_blank(s[i]) && s[i] != '\n' && s[i] != '\r')
            return 0;
    return 1;
}

/* Whether the ERE p has a back-reference (\1 to \9, outside a bracket expression): glibc
 * accepts them in EREs, and matches them by backtracking. */
static int has_back_reference(const char *p)
{
    for (; *p; p++) {
        if (*p == '[') {
            /* a bracket expression: "[]...]" and "[^]...]" keep their first ']' */
            p++;
            if (*p == '^')
                p++;
            if (*p == ']')
                p++;
            while (*p && *p != ']')
                p++;
            if (!*p)
                return 0;
        } else if (*p == '\\' && p[1]) {
            if (p[1] >= '1' && p[1] <= '9')
                return 1;
            p++;
        }
    }
    return 0;
}

/* An upper bound on the size of the tree regcomp builds for the ERE p, in atoms. glibc copies a
 * repeated subexpression for '+' (twice) and for {m,n} (max(m,n) times), so stacked or nested
 * repeats grow exponentially ("a++++++++++++++++++++++++" takes gigabytes); such a pattern is
 * refused before regcomp sees it. Brackets and escapes count as one atom; a malformed pattern
 * is left for regcomp to reject. */
static double regex_size(const char *p)
{
    enum { MAX_DEPTH = 64 };
    double saved[MAX_DEPTH];        /* the enclosing groups' totals */
    double total = 0, last = 0;     /* the current group's atoms; the last atom's share of them */
    int depth = 0;
    while (*p) {
        char c = *p++;
        double factor = 0;          /* > 0: c is a repeat of the last atom, that many copies */
        switch (c) {
        case '(':
            if (depth == MAX_DEPTH)
                return HUGE_VAL;
            saved[depth++] = total;
            total = last = 0;
            continue;
        case ')':
            if (depth > 0) {
                double group = total + 1;
                total = saved[--depth] + group;
                last = group;
                continue;
            }
            break;
        case '|': last = 0; continue;
        case '*': case '?': continue;
        case '+': factor = 2; break;
        case '{': {
            /* {m}, {m,n}, {m,} (m copies and a star) and glibc's {,n} */
            const char *q = p;
            char *end;
            unsigned long m = 0, n;
            if (isdigit((unsigned char)*q))
                m = strtoul(q, &end, 10), q = end;
            else if (*q != ',')
                break;
            n = m;
            if (*q == ',') {
                q++;
                if (isdigit((unsigned char)*q))
                    n = strtoul(q, &end, 10), q = end;
                else
                    n = m + 1;
            }
            if (*q != '}')
                break;
            p = q + 1;
            factor = m > n ? (double)m : (double)n;
            if (factor < 1)
                factor = 1;
            break;
        }
        case '\\':
            if (*p)
                p++;
            break;
        case '[':
            /* [^]...] and []...]: a leading ']' is a member; [:class:], [.x.] and [=x=] hold ']'. */
            if (*p == '^')
                p++;
            if (*p == ']')
                p++;
            while (*p && *p != ']') {
                if (*p == '[' && (p[1] == ':' || p[1] == '.' || p[1] == '=')) {
                    const char *close = strchr(p + 2, p[1]);
                    while (close && close[1] != ']')
                        close = strchr(close + 1, p[1]);
                    if (!close)
                        return total + 1;
                    p = close + 2;
                } else {
                    p++;
                }
            }
            if (*p)
                p++;
            break;
        default: break;
        }
        if (factor > 0) {
            total += last * (factor - 1);
            last *= factor;
        } else {
            total += 1;
            last = 1;
        }
    }
    while (depth > 0)
        total += saved[--depth];
    return total;
}

/* "/expect KIND TEXT", a..b without surrounding blanks and without NULs. */
static int parse_expect(script *s, builder *b, int line, const char *a, const char *e, kimi_err *err)
{
    const char *k = a + strlen("/expect");
    while (k < e && is_blank(*k))
        k++;
    const char *k_end = k;
    while (k_end < e && !is_blank(*k_end))
        k_end++;
    const char *t = k_end;
    while (t < e && is_blank(*t))
        t++;
    size_t kn = (size_t)(k_end - k);
    script_expect_kind kind;
    if (kn == 0)
        return script_fail(err, s, line, "/expect: needs contains TEXT, matches ERE or tool NAME");
    if (kn == 8 && !memcmp(k, "contains", 8))
        kind = SCRIPT_EXPECT_CONTAINS;
    else if (kn == 7 && !memcmp(k, "matches", 7))
        kind = SCRIPT_EXPECT_MATCHES;
    else if (kn == 4 && !memcmp(k, "tool", 4))
        kind = SCRIPT_EXPECT_TOOL;
    else
        return script_fail(err, s, line, "/expect %.*s: unknown kind (contains, matches or tool)",
                           kn > 40 ? 40 : (int)kn, k);
    if (t == e)
        return script_fail(err, s, line, "/expect %.*s: missing %s", (int)kn, k,
                           kind == SCRIPT_EXPECT_TOOL ? "tool name" : kind == SCRIPT_EXPECT_MATCHES ? "regular expression" : "text");
    if (kind == SCRIPT_EXPECT_TOOL)
        for (const char *c = t; c < e; c++)
            if (is_blank(*c))
                return script_fail(err, s, line, "/expect tool: '%.*s' is not one tool name",
                                   e - t > 80 ? 80 : (int)(e - t), t);
    script_item *it = add_item(s, b, SCRIPT_EXPECT, line, t, (size_t)(e - t), err);
    if (!it)
        return KIMI_ERR_NOMEM;
    it->expect = kind;
    if (kind == SCRIPT_EXPECT_MATCHES) {
        if (regex_size(it->text) > 10000)
            return script_fail(err, s, line, "/expect matches: regular expression too big once its "
                               "repeats are spelled out (over 10000 parts)");
        if (has_back_reference(it->text))
            return script_fail(err, s, line, "/expect matches: back-references (\\1 ...) are not "
                               "supported: they make matching take time without bound");
        if (!(it->regex = malloc(sizeof *it->regex)))
            return kimi_fail(err, KIMI_ERR_NOMEM, "%s:%d: out of memory", s->name, line);
        /* Anchored behind "any bytes" (NUL included: '.' is not), the pattern is found in one
           pass over the answer; unanchored, glibc tries it from every position, which takes
           quadratic time ("a.*q" in a 150 KB answer: 53 s). Without REG_NEWLINE '^' and '$'
           mean the ends of the answer, so TEXT means what it did. */
        char *anchored = malloc(it->len + 16);
        if (!anchored) {
            free(it->regex);
            it->regex = NULL;
            return kimi_fail(err, KIMI_ERR_NOMEM, "%s:%d: out of memory", s->name, line);
        }
        snprintf(anchored, it->len + 16, "^(.|[^.])*(%s)", it->text);
        int rc = regcomp(it->regex, anchored, REG_EXTENDED | REG_NOSUB);
        free(anchored);
        if (rc) {   /* the error as the pattern alone gives it, when it gives one */
            int alone = regcomp(it->regex, it->text, REG_EXTENDED | REG_NOSUB);
            if (alone)
                rc = alone;
            else
                regfree(it->regex);
        }
        if (rc) {
            char why[200];
            regerror(rc, it->regex, why, sizeof why);
            free(it->regex);
            it->regex = NULL;
            return script_fail(err, s, line, "/expect matches: bad regular expression: %s", why);
        }
    }
    return 0;
}

/* The multi-line turn opened at line `open_line`; *p is at the line after the opening one and
 * moves past the closing line, *line to the closing line's number. */
static int parse_block(script *s, builder *b, int open_line, const char **p, const char *end, int *line,
                       kimi_err *err)
{
    const char *body = *p;
    for (const char *q = *p; q < end;) {
        const char *nl = memchr(q, '\n', (size_t)(end - q));
        const char *le = nl ? nl : end, *next = nl ? nl + 1 : end;
        if (*line == INT_MAX)
            return script_fail(err, s, open_line, "too many lines");
        ++*line;
        const char *a = q, *e = le;
        if (e > a && e[-1] == '\r')
            e--;
        while (a < e && is_blank(*a))
            a++;
        while (e > a && is_blank(e[-1]))
            e--;
        if (e - a == 3 && !memcmp(a, triple, 3)) {
            /* The body ends before the '\n' that precedes the closing line. */
            size_t n = q > body ? (size_t)(q - body) - 1 : 0;
            if (only_blanks(body, n))
                return script_fail(err, s, open_line, "empty \"\"\" turn");
            script_item *it = add_item(s, b, SCRIPT_TURN, open_line, body, n, err);
            if (!it)
                return KIMI_ERR_NOMEM;
            /* CRLF: drop the \r that ends each line of the body. */
            size_t w = 0;
            for (size_t r = 0; r < n; r++)
                if (!(it->text[r] == '\r' && (r + 1 == n || it->text[r + 1] == '\n')))
                    it->text[w++] = it->text[r];
            it->text[w] = 0;
            it->len = w;
            *p = next;
            return 0;
        }
        q = next;
    }
    return script_fail(err, s, open_line, "unterminated \"\"\" turn (opened here)");
}

/* One line a..e, blanks around it removed, not empty, not a comment. */
static int parse_line(script *s, builder *b, int line, const char *a, const char *e, const char **p,
                      const char *end, int *line_no, kimi_err *err)
{
    size_t n = (size_t)(e - a);
    if (n == 3 && !memcmp(a, triple, 3))
        return parse_block(s, b, line, p, end, line_no, err);
    if (n >= 3 && !memcmp(a, triple, 3)) {
        if (n < 6 || memcmp(e - 3, triple, 3))
            return script_fail(err, s, line, "\"\"\" opens a multi-line turn only alone on its line "
                               "(or write \"\"\"TEXT\"\"\" on one line)");
        if (only_blanks(a + 3, n - 6))
            return script_fail(err, s, line, "empty \"\"\" turn");
        return add_item(s, b, SCRIPT_TURN, line, a + 3, n - 6, err) ? 0 : KIMI_ERR_NOMEM;
    }
    if (a[0] == '/' && n >= 2 && a[1] == '/')
        return add_item(s, b, SCRIPT_TURN, line, a + 1, n - 1, err) ? 0 : KIMI_ERR_NOMEM;
    if (a[0] == '/') {
        if (memchr(a, 0, n))
            return script_fail(err, s, line, "NUL byte in a command line");
        if (n >= 7 && !memcmp(a, "/expect", 7) && (n == 7 || is_blank(a[7])))
            return parse_expect(s, b, line, a, e, err);
        return add_item(s, b, SCRIPT_COMMAND, line, a, n, err) ? 0 : KIMI_ERR_NOMEM;
    }
    return add_item(s, b, SCRIPT_TURN, line, a, n, err) ? 0 : KIMI_ERR_NOMEM;
}

int script_parse_all(script *s, const char *name, const char *text, size_t len, strbuf *every_error,
                     kimi_err *err)
{
    memset(s, 0, sizeof *s);
    if (!(s->name = strdup(strcmp(name, "-") ? name : "<stdin>")))
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", name);
    builder b = {0};
    int line = 0, rc = 0, first_rc = 0;
    const char *p = text, *end = text + len;
    while (p < end && !rc) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *a = p, *e = nl ? nl : end;
        p = nl ? nl + 1 : end;
        if (line == INT_MAX) {
            if (!first_rc)
                first_rc = script_fail(err, s, line, "too many lines");
            break;
        }
        line++;
        if (e > a && e[-1] == '\r')
            e--;
        while (a < e && is_blank(*a))
            a++;
        while (e > a && is_blank(e[-1]))
            e--;
        if (a == e || *a == '#')
            continue;
        int opens_block = e - a == 3 && !memcmp(a, triple, 3);
        kimi_err line_err = {0};
        rc = parse_line(s, &b, line, a, e, &p, end, &line, &line_err);
        if (rc) {
            if (!first_rc)
                *err = line_err;
            if (every_error) {
                strbuf_str(every_error, line_err.msg);
                strbuf_add(every_error, "\n", 1);
            }
            first_rc = first_rc ? first_rc : rc;
            /* one bad line does not hide the next: go on, unless memory ran out or an
               unterminated """ took the rest of the file */
            if (rc == KIMI_ERR_INPUT && !opens_block)
                rc = 0;
        }
    }
    rc = first_rc;
    if (rc)
        script_free(s);
    return rc;
}

int script_parse(script *s, const char *name, const char *text, size_t len, kimi_err *err)
{
    return script_parse_all(s, name, text, len, NULL, err);
}

void script_free(script *s)
{
    for (int i = 0; i < s->n_items; i++) {
        if (s->items[i].regex) {
            regfree(s->items[i].regex);
            free(s->items[i].regex);
        }
        free(s->items[i].text);
    }
    free(s->items);
    free(s->name);
    memset(s, 0, sizeof *s);
}

int script_expect_holds(const script_item *item, const char *content, size_t content_len,
                        int (*was_called)(const void *user, const char *name), const void *user)
{
    if (!content)
        content = "", content_len = 0;
    switch (item->expect) {
    case SCRIPT_EXPECT_CONTAINS:
        return item->len <= content_len && memmem(content, content_len, item->text, item->len) != NULL;
    case SCRIPT_EXPECT_MATCHES: {
        if (!item->regex || content_len > (size_t)INT32_MAX)
            return 0;
        regmatch_t whole = {.rm_so = 0, .rm_eo = (regoff_t)content_len};
        return regexec(item->regex, content, 1, &whole, REG_STARTEND) == 0;
    }
    case SCRIPT_EXPECT_TOOL:
        return was_called && was_called(user, item->text);
    }
    return 0;
}
