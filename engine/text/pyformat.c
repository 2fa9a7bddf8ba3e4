/* pyformat: JSON values printed as Python prints them. */
#include "engine/text/pyformat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

/* repr(float): the shortest digits that read back to x, fixed notation for decimal exponents
 * -4..15, otherwise d.ddde+XX. */
static void py_float_repr(strbuf *b, double x)
{
    char buf[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    const char *p = buf;
    if (*p == '-') {
        strbuf_add(b, "-", 1);
        p++;
    }
    char digits[40];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    if (nd == 1 && digits[0] == '0') {
        strbuf_str(b, "0.0");
        return;
    }
    int decpt = exp10 + 1;  /* value = 0.DIGITS x 10^decpt */
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            strbuf_str(b, "0.");
            for (int i = 0; i < -decpt; i++)
                strbuf_add(b, "0", 1);
            strbuf_add(b, digits, (size_t)nd);
        } else if (decpt >= nd) {
            strbuf_add(b, digits, (size_t)nd);
            for (int i = nd; i < decpt; i++)
                strbuf_add(b, "0", 1);
            strbuf_str(b, ".0");
        } else {
            strbuf_add(b, digits, (size_t)decpt);
            strbuf_add(b, ".", 1);
            strbuf_add(b, digits + decpt, (size_t)(nd - decpt));
        }
        return;
    }
    strbuf_add(b, digits, 1);
    if (nd > 1) {
        strbuf_add(b, ".", 1);
        strbuf_add(b, digits + 1, (size_t)(nd - 1));
    }
    strbuf_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
}

/* json.dumps(s, ensure_ascii=False) for one string. */
static void py_json_string(strbuf *b, const char *s, size_t n)
{
    strbuf_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': strbuf_str(b, "\\\""); break;
        case '\\': strbuf_str(b, "\\\\"); break;
        case '\n': strbuf_str(b, "\\n"); break;
        case '\r': strbuf_str(b, "\\r"); break;
        case '\t': strbuf_str(b, "\\t"); break;
        case '\b': strbuf_str(b, "\\b"); break;
        case '\f': strbuf_str(b, "\\f"); break;
        default:
            if (c < 0x20)
                strbuf_printf(b, "\\u%04x", c);
            else
                strbuf_add(b, s + i, 1);
        }
    }
    strbuf_add(b, "\"", 1);
}

static int compare_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* An object's keys, sorted by code point (strcmp on UTF-8) when sorted is set, else in the
 * order they were read. Returns a malloc'ed array of n keys (NULL with n = 0 for none). */
const char **pyformat_object_keys(const json_t *obj, int sorted, size_t *n, int *failed)
{
    size_t count = json_object_size(obj), i = 0;
    *n = 0;
    if (!count)
        return NULL;
    const char **keys = count <= SIZE_MAX / sizeof *keys ? malloc(count * sizeof *keys) : NULL;
    if (!keys) {
        *failed = 1;
        return NULL;
    }
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value) keys[i++] = key;
    if (sorted)
        qsort(keys, count, sizeof *keys, compare_keys);
    *n = count;
    return keys;
}

/* json.dumps(v, ensure_ascii=False, separators=(item_sep, key_sep), sort_keys=sort_keys). */
void pyformat_json_dump(strbuf *b, const json_t *v, const char *item_sep, const char *key_sep,
                         int sort_keys)
{
    switch (json_typeof(v)) {
    case JSON_NULL: strbuf_str(b, "null"); break;
    case JSON_TRUE: strbuf_str(b, "true"); break;
    case JSON_FALSE: strbuf_str(b, "false"); break;
    case JSON_INTEGER: strbuf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: py_float_repr(b, json_real_value(v)); break;
    case JSON_STRING: py_json_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_ARRAY:
        strbuf_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                strbuf_str(b, item_sep);
            pyformat_json_dump(b, json_array_get(v, i), item_sep, key_sep, sort_keys);
        }
        strbuf_add(b, "]", 1);
        break;
    case JSON_OBJECT: {
        size_t n;
        const char **keys = pyformat_object_keys(v, sort_keys, &n, &b->failed);
        strbuf_add(b, "{", 1);
        for (size_t i = 0; i < n; i++) {
            if (i)
                strbuf_str(b, item_sep);
            py_json_string(b, keys[i], strlen(keys[i]));
            strbuf_str(b, key_sep);
            pyformat_json_dump(b, json_object_get(v, keys[i]), item_sep, key_sep, sort_keys);
        }
        strbuf_add(b, "}", 1);
        free(keys);
        break;
    }
    }
}

/* Python's str.isprintable() for one code point, by general category. */
static int py_printable(utf8proc_int32_t cp)
{
    if (cp == ' ')
        return 1;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return 0;
    default:
        return 1;
    }
}

/* repr(s) for a str. */
static void py_str_repr(strbuf *b, const char *s, size_t n)
{
    char quote = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    strbuf_add(b, &quote, 1);
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t used = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (used <= 0) {
            strbuf_printf(b, "\\x%02x", (unsigned char)s[i]);
            i++;
            continue;
        }
        if (cp == quote || cp == '\\') {
            strbuf_add(b, "\\", 1);
            strbuf_add(b, s + i, 1);
        } else if (cp == '\t') {
            strbuf_str(b, "\\t");
        } else if (cp == '\n') {
            strbuf_str(b, "\\n");
        } else if (cp == '\r') {
            strbuf_str(b, "\\r");
        } else if (cp < 0x20 || cp == 0x7f) {
            strbuf_printf(b, "\\x%02x", (unsigned)cp);
        } else if (cp < 0x80 || py_printable(cp)) {
            strbuf_add(b, s + i, (size_t)used);
        } else if (cp <= 0xff) {
            strbuf_printf(b, "\\x%02x", (unsigned)cp);
        } else if (cp <= 0xffff) {
            strbuf_printf(b, "\\u%04x", (unsigned)cp);
        } else {
            strbuf_printf(b, "\\U%08x", (unsigned)cp);
        }
        i += (size_t)used;
    }
    strbuf_add(b, &quote, 1);
}

/* repr(v) of the Python value json.loads would give. */
void pyformat_repr(strbuf *b, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL: strbuf_str(b, "None"); break;
    case JSON_TRUE: strbuf_str(b, "True"); break;
    case JSON_FALSE: strbuf_str(b, "False"); break;
    case JSON_INTEGER: strbuf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: py_float_repr(b, json_real_value(v)); break;
    case JSON_STRING: py_str_repr(b, json_string_value(v), json_string_length(v)); break;
    case JSON_ARRAY:
        strbuf_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                strbuf_str(b, ", ");
            pyformat_repr(b, json_array_get(v, i));
        }
        strbuf_add(b, "]", 1);
        break;
    case JSON_OBJECT: {
        size_t n;
        const char **keys = pyformat_object_keys(v, 0, &n, &b->failed);
        strbuf_add(b, "{", 1);
        for (size_t i = 0; i < n; i++) {
            if (i)
                strbuf_str(b, ", ");
            py_str_repr(b, keys[i], strlen(keys[i]));
            strbuf_str(b, ": ");
            pyformat_repr(b, json_object_get(v, keys[i]));
        }
        strbuf_add(b, "}", 1);
        free(keys);
        break;
    }
    }
}

/* str(v): a str as it is, anything else as its repr. */
void pyformat_str(strbuf *b, const json_t *v)
{
    if (json_is_string(v))
        strbuf_add(b, json_string_value(v), json_string_length(v));
    else
        pyformat_repr(b, v);
}

/* Python truthiness of a JSON value. */
int pyformat_truthy(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL: case JSON_FALSE: return 0;
    case JSON_TRUE: return 1;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0.0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_OBJECT: return json_object_size(v) > 0;
    }
    return 0;
}
