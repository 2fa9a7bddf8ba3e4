/* array: growth of malloc'ed arrays and text (capacity doubling, overflow-checked), so every
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

#endif
