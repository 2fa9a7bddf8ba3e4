/* pyformat: JSON values printed as Python prints them (json.dumps, repr, str, truthiness), the
 * way the checkpoint's chat template and K2.5's tool encoder print values. */
#ifndef KIMI_PYFORMAT_H
#define KIMI_PYFORMAT_H

#include <stddef.h>

#include <jansson.h>

#include "engine/base/array.h"

/* json.dumps(v, ensure_ascii=False, separators=(item_sep, key_sep), sort_keys=sort_keys). */
void pyformat_json_dump(strbuf *b, const json_t *v, const char *item_sep, const char *key_sep,
                        int sort_keys);
/* repr(v) of the Python value json.loads would give. */
void pyformat_repr(strbuf *b, const json_t *v);
/* str(v): a str as it is, anything else as its repr. */
void pyformat_str(strbuf *b, const json_t *v);
/* Python truthiness of a JSON value. */
int pyformat_truthy(const json_t *v);

/* An object's keys, sorted by code point (strcmp on UTF-8) when sorted is set, else in the
 * order they were read. Returns a malloc'ed array of n keys (NULL with n = 0 for none); sets
 * *failed when memory ran out. */
const char **pyformat_object_keys(const json_t *obj, int sorted, size_t *n, int *failed);

#endif
