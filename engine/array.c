/* array: growth of malloc'ed arrays. */
#include "engine/array.h"

#include <stdint.h>
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
