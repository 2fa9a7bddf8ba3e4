/* array: growable arrays and strings. */
#include "engine/base/array.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ARRAY_MIN_CAPACITY = 64 };

int array_reserve(void *items_ptr, size_t *cap, size_t need, size_t item_size)
{
    if (need <= *cap)
        return 0;
    size_t new_cap = *cap ? *cap : ARRAY_MIN_CAPACITY;
    while (new_cap < need) {
        if (new_cap > SIZE_MAX / 2)
            return -1;
        new_cap *= 2;
    }
    if (new_cap > SIZE_MAX / item_size)
        return -1;
    void *items;
    memcpy(&items, items_ptr, sizeof items);
    void *grown = realloc(items, new_cap * item_size);
    if (!grown)
        return -1;
    memcpy(items_ptr, &grown, sizeof grown);
    *cap = new_cap;
    return 0;
}

int text_append(char **data, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (n > SIZE_MAX - 1 - *len || array_reserve(data, cap, *len + n + 1, 1))
        return -1;
    if (n)
        memcpy(*data + *len, s, n);
    *len += n;
    (*data)[*len] = 0;
    return 0;
}

void strbuf_add(strbuf *b, const char *s, size_t n)
{
    if (!b->failed && text_append(&b->data, &b->len, &b->cap, s, n))
        b->failed = 1;
}

void strbuf_str(strbuf *b, const char *s)
{
    strbuf_add(b, s, strlen(s));
}

void strbuf_printf(strbuf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        strbuf_add(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    strbuf_add(b, big, (size_t)n);
    free(big);
}

char *strbuf_take(strbuf *b)
{
    if (!b->failed && !b->data)
        strbuf_add(b, "", 0);
    if (b->failed) {
        free(b->data);
        return NULL;
    }
    return b->data;
}
