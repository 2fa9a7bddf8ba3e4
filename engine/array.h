/* array: growth of malloc'ed arrays (capacity doubling, overflow-checked), so every growable
 * buffer in the engine grows the same way. */
#ifndef KIMI_ARRAY_H
#define KIMI_ARRAY_H

#include <stddef.h>

/* Make room for `need` items in *items_ptr (a `T **`, its array malloc'ed or NULL) whose
 * capacity is *cap items of item_size bytes. Returns 0, or -1 when memory ran out or the size
 * would overflow; the array is then left as it was. */
int array_reserve(void *items_ptr, size_t *cap, size_t need, size_t item_size);

#endif
