/* search: smart-case substring search over code points, with utf8proc's simple lower-casing. */
#include "ui/search.h"

#include <stdlib.h>

#include <utf8proc.h>

#include "engine/text/utf8.h"

/* A text's ill-formed byte and a query's never match each other or anything (above Unicode). */
#define TEXT_BAD_UNIT 0x80000000u
#define QUERY_BAD_UNIT 0x80000001u

/* The code point at s[p] (of n bytes) and the byte after it. */
static uint32_t next_point(const uint8_t *s, size_t n, size_t p, size_t *next, uint32_t bad)
{
    if (s[p] < 0x80) { /* most text: no decoding */
        *next = p + 1;
        return s[p];
    }
    size_t len;
    if (utf8_sequence(s + p, n - p, &len) != UTF8_OK) {
        *next = p + (len ? len : 1);
        return bad;
    }
    return utf8_decode_valid(s, p, next);
}

static uint32_t lower(uint32_t c)
{
    return c < 0x80 ? (c >= 'A' && c <= 'Z' ? c + 32 : c)
                    : c > 0x10FFFF ? c : (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
}

int search_query_init(search_query *q, const char *query, size_t len, kimi_err *err)
{
    *q = (search_query){0};
    if (!len)
        return 0;
    if (!(q->points = malloc(len * sizeof *q->points)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the search");
    const uint8_t *s = (const uint8_t *)query;
    for (size_t p = 0; p < len;) {
        uint32_t c = next_point(s, len, p, &p, QUERY_BAD_UNIT);
        q->points[q->n_points++] = c;
        if (lower(c) != c)
            q->case_sensitive = 1;
    }
    if (!q->case_sensitive)
        for (int i = 0; i < q->n_points; i++)
            q->points[i] = lower(q->points[i]);
    return 0;
}

void search_query_free(search_query *q)
{
    free(q->points);
    *q = (search_query){0};
}

static int add_match(search_result *r, int text, size_t offset, size_t len, kimi_err *err)
{
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        search_match *grown = realloc(r->matches, (size_t)cap * sizeof *grown);
        if (!grown)
            return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the search");
        r->matches = grown;
        r->cap = cap;
    }
    r->matches[r->n++] = (search_match){.text = text, .offset = offset, .len = len};
    return 0;
}

int search_add_text(search_result *r, const search_query *q, int text_index, const char *text, size_t len,
                    kimi_err *err)
{
    if (!q->n_points)
        return 0;
    const uint8_t *s = (const uint8_t *)text;
    uint32_t first = q->points[0];
    for (size_t start = 0; start < len;) {
        size_t p;
        uint32_t c = next_point(s, len, start, &p, TEXT_BAD_UNIT);
        size_t after_first = p;
        if ((q->case_sensitive ? c : lower(c)) == first) {
            int k = 1;
            while (k < q->n_points && p < len) {
                uint32_t d = next_point(s, len, p, &p, TEXT_BAD_UNIT);
                if ((q->case_sensitive ? d : lower(d)) != q->points[k])
                    break;
                k++;
            }
            if (k == q->n_points) {
                if (add_match(r, text_index, start, p - start, err))
                    return err->code;
                start = p;     /* matches never overlap */
                continue;
            }
        }
        start = after_first;
    }
    return 0;
}

void search_result_clear(search_result *r) { r->n = 0; }

void search_result_free(search_result *r)
{
    free(r->matches);
    *r = (search_result){0};
}

int search_first_from(const search_result *r, int text, size_t offset)
{
    int lo = 0, hi = r->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const search_match *m = &r->matches[mid];
        if (m->text < text || (m->text == text && m->offset < offset))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int search_step(const search_result *r, int current, int direction)
{
    if (!r->n)
        return -1;
    if (current < 0 || current >= r->n)
        return direction < 0 ? r->n - 1 : 0;
    return direction < 0 ? (current + r->n - 1) % r->n : (current + 1) % r->n;
}
