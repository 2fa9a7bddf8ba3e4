/* array: growable malloc'ed arrays and strings (capacity doubling, overflow-checked), so every
 * growable buffer in the engine grows the same way. */
#ifndef KIMI_ARRAY_H
#define KIMI_ARRAY_H

#include <stddef.h>

/* Make room for `need` items in *items_ptr (a `T **`, its array malloc'ed or NULL) whose
 * capacity is *cap items of item_size bytes. Returns 0, or -1 when memory ran out or the size
 * would overflow; the array is then left as it was. */
int array_reserve(void *items_ptr, size_t *cap, size_t need, size_t item_size);

/* Append n bytes of s to the text *data ([*len + 1] bytes, NUL-terminated; NULL when empty) of
 * capacity *cap. Returns 0, or -1 when memory ran out; the text is then as it was. */
int text_append(char **data, size_t *len, size_t *cap, const char *s, size_t n);

/* A string built piece by piece; once memory runs out it stays failed and ignores additions,
 * so the builder checks once at the end. Start from (strbuf){0}. */
typedef struct {
    char *data;     /* [len + 1], NUL-terminated when not failed; NULL while empty */
    size_t len, cap;
    int failed;     /* an allocation failed or a size overflowed */
} strbuf;

void strbuf_add(strbuf *b, const char *s, size_t n);
void strbuf_str(strbuf *b, const char *s);
/* printf into the string; output past 63 bytes is cut (for numbers and short fragments). */
void strbuf_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The finished string (malloc'ed; "" when nothing was added), or NULL when the builder failed
 * (its memory is then freed). */
char *strbuf_take(strbuf *b);

#endif
