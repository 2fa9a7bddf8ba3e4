/* chat: the conversation model, its OpenAI-style JSON form, and the renderer that reproduces the
 * checkpoint's chat_template.jinja (with K2.5's TypeScript tool declaration) as token ids. */
#include "engine/chat.h"
#include "engine/array.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

/* ---- growable byte buffer with a sticky out-of-memory flag ---- */

typedef struct {
    char *data;     /* [len + 1], NUL-terminated when not failed */
    size_t len, cap;
    int failed;     /* an allocation failed or a size overflowed */
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n)
{
    if (!b->failed && text_append(&b->data, &b->len, &b->cap, s, n))
        b->failed = 1;
}

static void sb_str(strbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...)
{
    char small[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    sb_add(b, small, (size_t)n < sizeof small ? (size_t)n : sizeof small - 1);
}

/* Take the buffer's string (an empty string for an empty buffer); NULL when it failed. */
static char *sb_take(strbuf *b)
{
    if (!b->failed && !b->data)
        sb_add(b, "", 0);
    if (b->failed) {
        free(b->data);
        return NULL;
    }
    return b->data;
}

static char *dup_text(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---- Python's json.dumps / repr / str, as the template and the tool encoder print values ---- */

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
        sb_add(b, "-", 1);
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
        sb_str(b, "0.0");
        return;
    }
    int decpt = exp10 + 1;  /* value = 0.DIGITS x 10^decpt */
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            sb_str(b, "0.");
            for (int i = 0; i < -decpt; i++)
                sb_add(b, "0", 1);
            sb_add(b, digits, (size_t)nd);
        } else if (decpt >= nd) {
            sb_add(b, digits, (size_t)nd);
            for (int i = nd; i < decpt; i++)
                sb_add(b, "0", 1);
            sb_str(b, ".0");
        } else {
            sb_add(b, digits, (size_t)decpt);
            sb_add(b, ".", 1);
            sb_add(b, digits + decpt, (size_t)(nd - decpt));
        }
        return;
    }
    sb_add(b, digits, 1);
    if (nd > 1) {
        sb_add(b, ".", 1);
        sb_add(b, digits + 1, (size_t)(nd - 1));
    }
    sb_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
}

/* json.dumps(s, ensure_ascii=False) for one string. */
static void py_json_string(strbuf *b, const char *s, size_t n)
{
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': sb_str(b, "\\\""); break;
        case '\\': sb_str(b, "\\\\"); break;
        case '\n': sb_str(b, "\\n"); break;
        case '\r': sb_str(b, "\\r"); break;
        case '\t': sb_str(b, "\\t"); break;
        case '\b': sb_str(b, "\\b"); break;
        case '\f': sb_str(b, "\\f"); break;
        default:
            if (c < 0x20)
                sb_printf(b, "\\u%04x", c);
            else
                sb_add(b, s + i, 1);
        }
    }
    sb_add(b, "\"", 1);
}

static int compare_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* An object's keys, sorted by code point (strcmp on UTF-8) when sorted is set, else in the
 * order they were read. Returns a malloc'ed array of n keys (NULL with n = 0 for none). */
static const char **object_keys(const json_t *obj, int sorted, size_t *n, int *failed)
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
static void py_json_dump(strbuf *b, const json_t *v, const char *item_sep, const char *key_sep,
                         int sort_keys)
{
    switch (json_typeof(v)) {
    case JSON_NULL: sb_str(b, "null"); break;
    case JSON_TRUE: sb_str(b, "true"); break;
    case JSON_FALSE: sb_str(b, "false"); break;
    case JSON_INTEGER: sb_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: py_float_repr(b, json_real_value(v)); break;
    case JSON_STRING: py_json_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_ARRAY:
        sb_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                sb_str(b, item_sep);
            py_json_dump(b, json_array_get(v, i), item_sep, key_sep, sort_keys);
        }
        sb_add(b, "]", 1);
        break;
    case JSON_OBJECT: {
        size_t n;
        const char **keys = object_keys(v, sort_keys, &n, &b->failed);
        sb_add(b, "{", 1);
        for (size_t i = 0; i < n; i++) {
            if (i)
                sb_str(b, item_sep);
            py_json_string(b, keys[i], strlen(keys[i]));
            sb_str(b, key_sep);
            py_json_dump(b, json_object_get(v, keys[i]), item_sep, key_sep, sort_keys);
        }
        sb_add(b, "}", 1);
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
    sb_add(b, &quote, 1);
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t used = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (used <= 0) {
            sb_printf(b, "\\x%02x", (unsigned char)s[i]);
            i++;
            continue;
        }
        if (cp == quote || cp == '\\') {
            sb_add(b, "\\", 1);
            sb_add(b, s + i, 1);
        } else if (cp == '\t') {
            sb_str(b, "\\t");
        } else if (cp == '\n') {
            sb_str(b, "\\n");
        } else if (cp == '\r') {
            sb_str(b, "\\r");
        } else if (cp < 0x20 || cp == 0x7f) {
            sb_printf(b, "\\x%02x", (unsigned)cp);
        } else if (cp < 0x80 || py_printable(cp)) {
            sb_add(b, s + i, (size_t)used);
        } else if (cp <= 0xff) {
            sb_printf(b, "\\x%02x", (unsigned)cp);
        } else if (cp <= 0xffff) {
            sb_printf(b, "\\u%04x", (unsigned)cp);
        } else {
            sb_printf(b, "\\U%08x", (unsigned)cp);
        }
        i += (size_t)used;
    }
    sb_add(b, &quote, 1);
}

/* repr(v) of the Python value json.loads would give. */
static void py_repr(strbuf *b, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL: sb_str(b, "None"); break;
    case JSON_TRUE: sb_str(b, "True"); break;
    case JSON_FALSE: sb_str(b, "False"); break;
    case JSON_INTEGER: sb_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: py_float_repr(b, json_real_value(v)); break;
    case JSON_STRING: py_str_repr(b, json_string_value(v), json_string_length(v)); break;
    case JSON_ARRAY:
        sb_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                sb_str(b, ", ");
            py_repr(b, json_array_get(v, i));
        }
        sb_add(b, "]", 1);
        break;
    case JSON_OBJECT: {
        size_t n;
        const char **keys = object_keys(v, 0, &n, &b->failed);
        sb_add(b, "{", 1);
        for (size_t i = 0; i < n; i++) {
            if (i)
                sb_str(b, ", ");
            py_str_repr(b, keys[i], strlen(keys[i]));
            sb_str(b, ": ");
            py_repr(b, json_object_get(v, keys[i]));
        }
        sb_add(b, "}", 1);
        free(keys);
        break;
    }
    }
}

/* str(v): a str as it is, anything else as its repr. */
static void py_str(strbuf *b, const json_t *v)
{
    if (json_is_string(v))
        sb_add(b, json_string_value(v), json_string_length(v));
    else
        py_repr(b, v);
}

/* Python truthiness of a JSON value. */
static int py_truthy(const json_t *v)
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

/* ---- K2.5's TypeScript tool declaration ----
 * Follows the encoder shipped with the K2.5 tokenizer (tool_declaration_ts.py) applied to the
 * tools after deep_sort_dict, i.e. every object's keys in sorted order. It works in two passes
 * like the original: ts_check walks the schemas in the encoder's parse order (registering $defs,
 * resolving $ref, rejecting what it rejects), then the ts_* emitters print. Anything the encoder
 * would raise on makes the whole declaration fall back to JSON, as the template does. */

#define TS_INDENT "  "

typedef struct {
    const char **def_names;       /* [n_defs] registered $defs, in first-registration order */
    const json_t **def_schemas;   /* [n_defs] */
    int n_defs, cap_defs;
    int has_self_ref;             /* some $ref is "#" */
    char why[200];                /* the first reason the schema cannot be encoded */
    int failed;
    int oom;
} ts_ctx;

static int ts_fail(ts_ctx *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ts_fail(ts_ctx *t, const char *fmt, ...)
{
    if (!t->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->why, sizeof t->why, fmt, ap);
        va_end(ap);
    }
    t->failed = 1;
    return -1;
}

static int ts_register(ts_ctx *t, const char *name, const json_t *schema)
{
    for (int i = 0; i < t->n_defs; i++)
        if (!strcmp(t->def_names[i], name)) {
            t->def_schemas[i] = schema;
            return 0;
        }
    if (t->n_defs == t->cap_defs) {
        int cap = t->cap_defs ? t->cap_defs * 2 : 8;
        const char **names = realloc(t->def_names, (size_t)cap * sizeof *names);
        if (names)
            t->def_names = names;
        const json_t **schemas = realloc(t->def_schemas, (size_t)cap * sizeof *schemas);
        if (schemas)
            t->def_schemas = schemas;
        if (!names || !schemas) {
            t->oom = 1;
            return ts_fail(t, "out of memory");
        }
        t->cap_defs = cap;
    }
    t->def_names[t->n_defs] = name;
    t->def_schemas[t->n_defs++] = schema;
    return 0;
}

static const char *last_segment(const char *ref)
{
    const char *slash = strrchr(ref, '/');
    return slash ? slash + 1 : ref;
}

static const char *union_type_name(const char *json_type)
{
    static const char *const map[][2] = {
        {"string", "string"}, {"number", "number"}, {"integer", "number"}, {"boolean", "boolean"},
        {"null", "null"},     {"object", "{}"},     {"array", "Array<any>"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i][0], json_type))
            return map[i][1];
    return NULL;
}

static int ts_check(ts_ctx *t, const json_t *s);

/* Enum values against a declared type, as the encoder validates them. */
static int ts_check_enum(ts_ctx *t, const json_t *s)
{
    const json_t *values = json_object_get(s, "enum"), *type = json_object_get(s, "type");
    if (!json_is_array(values))
        return ts_fail(t, "enum is not a list");
    if (!type)
        return 0;
    const char *typ = NULL;
    if (json_is_array(type)) {
        const json_t *a = json_array_get(type, 0), *b = json_array_get(type, 1);
        if (json_array_size(type) == 1)
            typ = json_string_value(a);
        else if (json_array_size(type) == 2 && json_is_string(a) && json_is_string(b) &&
                 (!strcmp(json_string_value(a), "null") || !strcmp(json_string_value(b), "null")))
            typ = json_string_value(strcmp(json_string_value(a), "null") ? a : b);
        else
            return ts_fail(t, "enum type list is not supported");
    } else {
        typ = json_string_value(type);
    }
    if (!typ)
        return 0;
    for (size_t i = 0; i < json_array_size(values); i++) {
        const json_t *v = json_array_get(values, i);
        int ok = 1;
        if (json_is_null(v))
            continue;
        if (!strcmp(typ, "string"))
            ok = json_is_string(v);
        else if (!strcmp(typ, "number"))
            ok = json_is_number(v) || json_is_boolean(v);
        else if (!strcmp(typ, "integer"))
            ok = json_is_integer(v) || json_is_boolean(v);
        else if (!strcmp(typ, "boolean"))
            ok = json_is_boolean(v);
        if (!ok)
            return ts_fail(t, "enum value %zu does not match type %s", i, typ);
    }
    return 0;
}

static int ts_check_object(ts_ctx *t, const json_t *s)
{
    if (!json_object_size(s))
        return 0;
    const json_t *defs = json_object_get(s, "$defs");
    if (defs && py_truthy(defs)) {
        if (!json_is_object(defs))
            return ts_fail(t, "$defs is not an object");
        size_t n;
        const char **names = object_keys(defs, 1, &n, &t->oom);
        if (t->oom)
            return ts_fail(t, "out of memory");
        for (size_t i = 0; i < n; i++)
            if (ts_register(t, names[i], json_object_get(defs, names[i]))) {
                free(names);
                return -1;
            }
        free(names);
    }
    const json_t *extra = json_object_get(s, "additionalProperties");
    if (json_is_object(extra) && ts_check(t, extra))
        return -1;
    const json_t *props = json_object_get(s, "properties");
    if (!props)
        return 0;
    if (!json_is_object(props))
        return ts_fail(t, "properties is not an object");
    const json_t *required = json_object_get(s, "required");
    if (required && !json_is_array(required))
        return ts_fail(t, "required is not a list");
    for (size_t i = 0; i < json_array_size(required); i++) {
        const json_t *r = json_array_get(required, i);
        if (json_is_array(r) || json_is_object(r))
            return ts_fail(t, "required holds a list or an object");
    }
    size_t n;
    const char **names = object_keys(props, 1, &n, &t->oom);
    if (t->oom)
        return ts_fail(t, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (ts_check(t, json_object_get(props, names[i]))) {
            free(names);
            return -1;
        }
    free(names);
    return 0;
}

static int ts_check(ts_ctx *t, const json_t *s)
{
    if (json_is_boolean(s))
        return 0;
    if (!json_is_object(s))
        return ts_fail(t, "a schema is not an object");
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        const char *r = json_string_value(ref);
        if (!r)
            return ts_fail(t, "$ref is not a string");
        if (!strcmp(r, "#")) {
            t->has_self_ref = 1;
            return 0;
        }
        if (strncmp(r, "#/$defs/", 8))
            return ts_fail(t, "unsupported $ref %.80s", r);
        for (int i = 0; i < t->n_defs; i++)
            if (!strcmp(t->def_names[i], last_segment(r)))
                return 0;
        return ts_fail(t, "$ref %.80s not found", r);
    }
    const json_t *any_of = json_object_get(s, "anyOf");
    if (any_of) {
        if (!json_is_array(any_of))
            return ts_fail(t, "anyOf is not a list");
        for (size_t i = 0; i < json_array_size(any_of); i++)
            if (ts_check(t, json_array_get(any_of, i)))
                return -1;
        return 0;
    }
    if (json_object_get(s, "enum"))
        return ts_check_enum(t, s);
    const json_t *type = json_object_get(s, "type");
    if (type) {
        if (json_is_array(type)) {
            for (size_t i = 0; i < json_array_size(type); i++) {
                const char *name = json_string_value(json_array_get(type, i));
                if (!name || !union_type_name(name))
                    return ts_fail(t, "unsupported type in a type list");
            }
            return 0;
        }
        const char *typ = json_string_value(type);
        if (!typ)
            return ts_fail(t, "type is not a string or a list");
        if (!strcmp(typ, "object"))
            return ts_check_object(t, s);
        if (!strcmp(typ, "array")) {
            const json_t *items = json_object_get(s, "items");
            return items && py_truthy(items) ? ts_check(t, items) : 0;
        }
        return 0;
    }
    if (json_object_size(s) == 0)
        return 0;
    return ts_fail(t, "a schema has no type, enum, anyOf or $ref");
}

/* "// line" for every non-empty line of a description; empty lines stay empty. */
static void ts_description(strbuf *b, const char *text, const char *indent)
{
    for (const char *line = text;;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len) {
            sb_str(b, indent);
            sb_str(b, "// ");
            sb_add(b, line, len);
        }
        if (!nl)
            break;
        sb_add(b, "\n", 1);
        line = nl + 1;
    }
}

/* The constraint keys a schema's comment shows, by its kind. */
static const char *const *ts_constraint_keys(const json_t *s)
{
    static const char *const none[] = {NULL};
    static const char *const string_keys[] = {"maxLength", "minLength", "pattern", NULL};
    static const char *const number_keys[] = {"maximum", "minimum", NULL};
    static const char *const array_keys[] = {"maxItems", "minItems", NULL};
    if (json_object_get(s, "$ref") || json_object_get(s, "anyOf") || json_object_get(s, "enum"))
        return none;
    const char *typ = json_string_value(json_object_get(s, "type"));
    if (!typ)
        return none;
    if (!strcmp(typ, "string"))
        return string_keys;
    if (!strcmp(typ, "number") || !strcmp(typ, "integer"))
        return number_keys;
    if (!strcmp(typ, "array"))
        return array_keys;
    return none;
}

/* The comment lines above a field: description, then "// key: value, ..." constraints. */
static void ts_docstring(ts_ctx *t, strbuf *b, const json_t *s, const char *indent)
{
    if (!json_is_object(s) || json_object_size(s) == 0)
        return;
    const json_t *desc = json_object_get(s, "description");
    if (desc && py_truthy(desc)) {
        if (!json_is_string(desc)) {
            ts_fail(t, "a description is not a string");
            return;
        }
        ts_description(b, json_string_value(desc), indent);
        sb_add(b, "\n", 1);
    }
    int first = 1;
    for (const char *const *key = ts_constraint_keys(s); *key; key++) {
        const json_t *v = json_object_get(s, *key);
        if (!v)
            continue;
        sb_str(b, first ? indent : ", ");
        if (first)
            sb_str(b, "// ");
        first = 0;
        sb_str(b, *key);
        sb_str(b, ": ");
        py_str(b, v);
    }
    if (!first)
        sb_add(b, "\n", 1);
}

static void ts_type(ts_ctx *t, strbuf *b, const json_t *s, const char *indent);

static void indent_more(char *out, size_t cap, const char *indent)
{
    snprintf(out, cap, "%s" TS_INDENT, indent);
}

/* One field: its comments, its default, then "name?: type". */
static void ts_field(ts_ctx *t, strbuf *b, const char *name, const json_t *s, int optional,
                     const char *indent)
{
    ts_docstring(t, b, s, indent);
    const json_t *def = json_is_object(s) ? json_object_get(s, "default") : NULL;
    if (def && !json_is_null(def)) {
        sb_str(b, indent);
        sb_str(b, "// Default: ");
        if (json_is_number(def) || json_is_boolean(def))
            py_repr(b, def);
        else
            py_json_dump(b, def, ", ", ": ", 1);
        sb_add(b, "\n", 1);
    }
    sb_str(b, indent);
    sb_str(b, name);
    if (optional)
        sb_add(b, "?", 1);
    sb_str(b, ": ");
    ts_type(t, b, s, indent);
}

static int is_required(const json_t *required, const char *name)
{
    for (size_t i = 0; i < json_array_size(required); i++) {
        const char *r = json_string_value(json_array_get(required, i));
        if (r && !strcmp(r, name))
            return 1;
    }
    return 0;
}

/* "{\n  a: T,\n  b?: U\n}" (required fields first, each group by name) or "{}". */
static void ts_object(ts_ctx *t, strbuf *b, const json_t *s, const char *indent)
{
    char inner[256];
    indent_more(inner, sizeof inner, indent);
    const json_t *props = json_object_size(s) ? json_object_get(s, "properties") : NULL;
    const json_t *required = json_object_get(s, "required");
    size_t n = 0;
    const char **names = object_keys(props, 1, &n, &t->oom);
    int fields = 0;
    for (int optional = 0; optional <= 1; optional++)
        for (size_t i = 0; i < n; i++) {
            if (is_required(required, names[i]) == optional)
                continue;
            sb_str(b, fields++ ? ",\n" : "{\n");
            ts_field(t, b, names[i], json_object_get(props, names[i]), optional, inner);
        }
    free(names);
    const json_t *extra = json_object_size(s) ? json_object_get(s, "additionalProperties") : NULL;
    if (extra && !json_is_null(extra)) {
        sb_str(b, fields++ ? ",\n" : "{\n");
        sb_str(b, inner);
        sb_str(b, "[k: string]: ");
        if (json_is_true(extra))
            sb_str(b, "any");
        else if (json_is_false(extra))
            sb_str(b, "never");
        else if (json_is_object(extra))
            ts_type(t, b, extra, inner);
        else
            ts_fail(t, "additionalProperties is not a schema or a boolean");
    }
    if (!fields) {
        sb_str(b, "{}");
        return;
    }
    sb_add(b, "\n", 1);
    sb_str(b, indent);
    sb_add(b, "}", 1);
}

static void ts_join_types(ts_ctx *t, strbuf *b, const json_t *list, const char *indent)
{
    for (size_t i = 0; i < json_array_size(list); i++) {
        if (i)
            sb_str(b, " | ");
        ts_type(t, b, json_array_get(list, i), indent);
    }
}

static void ts_array(ts_ctx *t, strbuf *b, const json_t *s, const char *indent)
{
    const json_t *items = json_object_get(s, "items");
    json_t *any_schema = NULL;  /* missing or empty items: any */
    if (!items || !py_truthy(items))
        items = any_schema = json_object();
    if (!items) {
        t->oom = 1;
        ts_fail(t, "out of memory");
        return;
    }
    char inner[256];
    indent_more(inner, sizeof inner, indent);
    strbuf doc = {0};
    ts_docstring(t, &doc, items, inner);
    if (doc.len) {
        sb_str(b, "Array<\n");
        sb_add(b, doc.data, doc.len);
        sb_str(b, inner);
        ts_type(t, b, items, inner);
        sb_add(b, "\n", 1);
        sb_str(b, indent);
        sb_add(b, ">", 1);
    } else {
        sb_str(b, "Array<");
        ts_type(t, b, items, indent);
        sb_add(b, ">", 1);
    }
    if (doc.failed)
        b->failed = 1;
    free(doc.data);
    json_decref(any_schema);
}

static void ts_type(ts_ctx *t, strbuf *b, const json_t *s, const char *indent)
{
    if (strlen(indent) > 200) {
        ts_fail(t, "schema nested too deeply");
        return;
    }
    if (json_is_boolean(s)) {
        sb_str(b, json_is_true(s) ? "any" : "null");
        return;
    }
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        const char *r = json_string_value(ref);
        sb_str(b, r && strcmp(r, "#") ? last_segment(r) : "parameters");
        return;
    }
    const json_t *any_of = json_object_get(s, "anyOf");
    if (any_of) {
        ts_join_types(t, b, any_of, indent);
        return;
    }
    const json_t *values = json_object_get(s, "enum");
    if (values) {
        for (size_t i = 0; i < json_array_size(values); i++) {
            const json_t *v = json_array_get(values, i);
            if (i)
                sb_str(b, " | ");
            if (json_is_string(v)) {
                sb_add(b, "\"", 1);
                sb_add(b, json_string_value(v), json_string_length(v));
                sb_add(b, "\"", 1);
            } else {
                py_str(b, v);
            }
        }
        return;
    }
    const json_t *type = json_object_get(s, "type");
    if (json_is_array(type)) {
        for (size_t i = 0; i < json_array_size(type); i++) {
            const char *name = union_type_name(json_string_value(json_array_get(type, i)));
            if (i)
                sb_str(b, " | ");
            sb_str(b, name);
        }
        return;
    }
    const char *typ = json_string_value(type);
    if (!typ)
        sb_str(b, "any");
    else if (!strcmp(typ, "object"))
        ts_object(t, b, s, indent);
    else if (!strcmp(typ, "array"))
        ts_array(t, b, s, indent);
    else
        sb_str(b, strcmp(typ, "integer") ? typ : "number");
}

/* One function: its $defs interfaces, its description, "type NAME = (_: {...}) => any;". */
static void ts_function(ts_ctx *t, strbuf *b, const json_t *function)
{
    t->n_defs = 0;
    t->has_self_ref = 0;
    const json_t *params = json_object_get(function, "parameters");
    json_t *empty = NULL;
    if (!params || !py_truthy(params))
        params = empty = json_object();
    if (!params) {
        t->oom = 1;
        ts_fail(t, "out of memory");
        return;
    }
    if (!json_is_object(params)) {
        ts_fail(t, "parameters is not an object");
        return;
    }
    const json_t *name_value = json_object_get(function, "name");
    const char *name = name_value ? json_string_value(name_value) : "function";
    if (!name) {
        ts_fail(t, "a function name is not a string");
        json_decref(empty);
        return;
    }
    if (ts_check_object(t, params)) {
        json_decref(empty);
        return;
    }
    int parts = 0;
    if (t->has_self_ref) {
        size_t n;
        const char **names = object_keys(json_object_get(params, "properties"), 1, &n, &t->oom);
        const json_t *required = json_object_get(params, "required");
        sb_str(b, "interface parameters {");
        for (size_t i = 0; i < n; i++) {
            sb_str(b, i ? ",\n" : "\n");
            ts_field(t, b, names[i], json_object_get(json_object_get(params, "properties"), names[i]),
                     !is_required(required, names[i]), TS_INDENT);
        }
        sb_str(b, n ? "\n}" : "}");
        free(names);
        parts++;
    }
    int n_defs = t->n_defs;
    for (int i = 0; i < n_defs && !t->failed; i++) {
        const char *def_name = t->def_names[i];
        const json_t *def = t->def_schemas[i];
        if (ts_check(t, def))
            break;
        if (!json_is_object(def)) {
            ts_fail(t, "$defs %.80s is not an object", def_name);
            break;
        }
        if (parts++)
            sb_add(b, "\n", 1);
        const json_t *desc = json_object_get(def, "description");
        if (desc && py_truthy(desc)) {
            if (!json_is_string(desc)) {
                ts_fail(t, "a description is not a string");
                break;
            }
            ts_description(b, json_string_value(desc), "");
            sb_add(b, "\n", 1);
        }
        sb_str(b, "interface ");
        sb_str(b, def_name);
        sb_add(b, " ", 1);
        ts_type(t, b, def, "");
    }
    const json_t *desc = json_object_get(function, "description");
    if (desc && py_truthy(desc)) {
        if (!json_is_string(desc))
            ts_fail(t, "a function description is not a string");
        else {
            if (parts++)
                sb_add(b, "\n", 1);
            ts_description(b, json_string_value(desc), "");
        }
    }
    if (parts)
        sb_add(b, "\n", 1);
    sb_str(b, "type ");
    sb_str(b, name);
    sb_str(b, " = (_: ");
    if (t->has_self_ref)
        sb_str(b, "parameters");
    else
        ts_object(t, b, params, "");
    sb_str(b, ") => any;");
    json_decref(empty);
}

/* The TypeScript declaration; "" when no tool is a function (the template then uses JSON). */
static void ts_declaration(ts_ctx *t, strbuf *b, const json_t *tools)
{
    int functions = 0;
    for (size_t i = 0; i < json_array_size(tools) && !t->failed; i++) {
        const json_t *tool = json_array_get(tools, i);
        if (!json_is_object(tool)) {
            ts_fail(t, "tools[%zu] is not an object", i);
            return;
        }
        const char *type = json_string_value(json_object_get(tool, "type"));
        const json_t *function = json_object_get(tool, "function");
        if (!type || strcmp(type, "function") || !function || !py_truthy(function))
            continue;
        if (!json_is_object(function)) {
            ts_fail(t, "tools[%zu].function is not an object", i);
            return;
        }
        sb_str(b, functions++ ? "\n" : "# Tools\n\n## functions\nnamespace functions {\n");
        ts_function(t, b, function);
    }
    if (functions)
        sb_str(b, "\n}\n");
}

int chat_tools_declaration(const json_t *tools, char **text, char *note, size_t note_cap,
                           kimi_err *err)
{
    if (note && note_cap)
        note[0] = 0;
    if (!json_is_array(tools))
        return kimi_fail(err, KIMI_ERR_INPUT, "tools: not a list");
    ts_ctx t = {0};
    strbuf b = {0};
    ts_declaration(&t, &b, tools);
    free(t.def_names);
    free(t.def_schemas);
    if (t.oom || b.failed) {
        free(b.data);
        return kimi_fail(err, KIMI_ERR_NOMEM, "tools: out of memory rendering the declaration");
    }
    if (t.failed || b.len == 0) {
        if (note && note_cap)
            snprintf(note, note_cap, "tools declared as JSON: %s",
                     t.failed ? t.why : "no tool is a function");
        free(b.data);
        b = (strbuf){0};
        py_json_dump(&b, tools, ",", ":", 1);
    }
    *text = sb_take(&b);
    if (!*text)
        return kimi_fail(err, KIMI_ERR_NOMEM, "tools: out of memory rendering the declaration");
    return 0;
}

/* ---- conversation model ---- */

void chat_conversation_init(chat_conversation *c) { *c = (chat_conversation){0}; }

void chat_message_free(chat_message *m)
{
    free(m->other_role);
    free(m->name);
    free(m->content);
    free(m->reasoning);
    for (int i = 0; i < m->n_tool_calls; i++) {
        free(m->tool_calls[i].id);
        free(m->tool_calls[i].name);
        free(m->tool_calls[i].arguments);
    }
    free(m->tool_calls);
    free(m->tool_call_id);
    *m = (chat_message){0};
}

void chat_conversation_truncate(chat_conversation *c, int n)
{
    if (n < 0)
        n = 0;
    while (c->n_messages > n)
        chat_message_free(&c->messages[--c->n_messages]);
}

void chat_conversation_free(chat_conversation *c)
{
    chat_conversation_truncate(c, 0);
    free(c->messages);
    *c = (chat_conversation){0};
}

static chat_message *append_slot(chat_conversation *c, kimi_err *err)
{
    if (c->n_messages == c->cap_messages) {
        if (c->cap_messages > (1 << 24)) {
            kimi_fail(err, KIMI_ERR_NOMEM, "conversation: too many messages");
            return NULL;
        }
        int cap = c->cap_messages ? c->cap_messages * 2 : 16;
        chat_message *grown = realloc(c->messages, (size_t)cap * sizeof *grown);
        if (!grown) {
            kimi_fail(err, KIMI_ERR_NOMEM, "conversation: out of memory");
            return NULL;
        }
        c->messages = grown;
        c->cap_messages = cap;
    }
    chat_message *m = &c->messages[c->n_messages++];
    *m = (chat_message){0};
    return m;
}

int chat_set_text(char **field, const char *text, kimi_err *err)
{
    char *copy = NULL;
    if (text && !(copy = dup_text(text)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "conversation: out of memory");
    free(*field);
    *field = copy;
    return 0;
}

chat_message *chat_append(chat_conversation *c, chat_role role, const char *content, kimi_err *err)
{
    chat_message *m = append_slot(c, err);
    if (!m)
        return NULL;
    m->role = role;
    if (chat_set_text(&m->content, content, err)) {
        c->n_messages--;
        return NULL;
    }
    return m;
}

int chat_add_tool_call(chat_message *m, const char *id, const char *name, const char *arguments,
                       kimi_err *err)
{
    if (m->n_tool_calls >= (1 << 20))
        return kimi_fail(err, KIMI_ERR_INPUT, "conversation: too many tool calls in one message");
    chat_tool_call *grown = realloc(m->tool_calls, (size_t)(m->n_tool_calls + 1) * sizeof *grown);
    if (!grown)
        return kimi_fail(err, KIMI_ERR_NOMEM, "conversation: out of memory");
    m->tool_calls = grown;
    chat_tool_call *call = &m->tool_calls[m->n_tool_calls];
    *call = (chat_tool_call){0};
    if (chat_set_text(&call->id, id, err) || chat_set_text(&call->name, name, err) ||
        chat_set_text(&call->arguments, arguments, err)) {
        free(call->id);
        free(call->name);
        return err ? err->code : KIMI_ERR_NOMEM;
    }
    m->n_tool_calls++;
    return 0;
}

int chat_append_copy(chat_conversation *c, const chat_message *src, kimi_err *err)
{
    chat_message *m = chat_append(c, src->role, src->content, err);
    if (!m)
        return err ? err->code : KIMI_ERR_NOMEM;
    int rc = chat_set_text(&m->other_role, src->other_role, err) ||
             chat_set_text(&m->name, src->name, err) ||
             chat_set_text(&m->reasoning, src->reasoning, err) ||
             chat_set_text(&m->tool_call_id, src->tool_call_id, err);
    for (int i = 0; !rc && i < src->n_tool_calls; i++)
        rc = chat_add_tool_call(m, src->tool_calls[i].id, src->tool_calls[i].name,
                                src->tool_calls[i].arguments, err);
    if (rc) {
        chat_message_free(m);
        c->n_messages--;
        return err ? err->code : KIMI_ERR_NOMEM;
    }
    return 0;
}

const char *chat_role_text(const chat_message *m)
{
    switch (m->role) {
    case CHAT_ROLE_SYSTEM: return "system";
    case CHAT_ROLE_USER: return "user";
    case CHAT_ROLE_ASSISTANT: return "assistant";
    case CHAT_ROLE_TOOL: return "tool";
    case CHAT_ROLE_OTHER: return m->other_role ? m->other_role : "";
    }
    return "";
}

char *chat_tool_name_from_id(const char *id)
{
    if (!id)
        return dup_text("");
    size_t start = 0, end = strlen(id);
    while (start < end && strchr(" \t\r\n", id[start]))
        start++;
    while (end > start && strchr(" \t\r\n", id[end - 1]))
        end--;
    const char *first_colon = memchr(id + start, ':', end - start);
    size_t colon = first_colon ? (size_t)(first_colon - id) : end;
    if (colon == end && strspn(id + start, "0123456789") >= end - start)
        return dup_text("");  /* a bare counter names no function */
    size_t dot = start;
    for (size_t i = colon; i > start; i--)
        if (id[i - 1] == '.') {
            dot = i;
            break;
        }
    char *name = malloc(colon - dot + 1);
    if (name) {
        memcpy(name, id + dot, colon - dot);
        name[colon - dot] = 0;
    }
    return name;
}

/* ---- JSON form ---- */

/* An optional string field: absent or null leaves *out NULL. */
static int json_text_field(const json_t *obj, const char *key, char **out, const char *where,
                           kimi_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s.%s: not a string", where, key);
    return chat_set_text(out, json_string_value(v), err);
}

/* content: a string, null, or a list of text parts (concatenated, as the template prints them). */
static int json_content(const json_t *obj, char **out, const char *where, kimi_err *err)
{
    const json_t *v = json_object_get(obj, "content");
    if (!json_is_array(v))
        return json_text_field(obj, "content", out, where, err);
    strbuf b = {0};
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *part = json_array_get(v, i);
        const char *type = json_string_value(json_object_get(part, "type"));
        const json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !type || (text && !json_is_string(text))) {
            free(b.data);
            return kimi_fail(err, KIMI_ERR_INPUT, "%s.content[%zu]: not a {\"type\", \"text\"} part", where, i);
        }
        if (!strcmp(type, "image") || !strcmp(type, "image_url") || !strcmp(type, "video") ||
            !strcmp(type, "video_url")) {
            free(b.data);
            return kimi_fail(err, KIMI_ERR_INPUT, "%s.content[%zu]: %s parts are not supported (text only)", where, i, type);
        }
        if (text)
            sb_add(&b, json_string_value(text), json_string_length(text));
    }
    char *joined = sb_take(&b);
    if (!joined)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s.content: out of memory", where);
    free(*out);
    *out = joined;
    return 0;
}

static int json_tool_calls(chat_message *m, const json_t *calls, const char *where, kimi_err *err)
{
    if (!calls || json_is_null(calls))
        return 0;
    if (!json_is_array(calls))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s.tool_calls: not a list", where);
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *call = json_array_get(calls, i);
        const json_t *function = json_object_get(call, "function");
        const json_t *id = json_object_get(call, "id"), *name = json_object_get(function, "name");
        const json_t *args = json_object_get(function, "arguments");
        if (!json_is_object(call) || !json_is_object(function))
            return kimi_fail(err, KIMI_ERR_INPUT, "%s.tool_calls[%zu]: not {id, type, function {name, arguments}}", where, i);
        if ((id && !json_is_string(id) && !json_is_null(id)) || (name && !json_is_string(name) && !json_is_null(name)))
            return kimi_fail(err, KIMI_ERR_INPUT, "%s.tool_calls[%zu]: id and function.name must be strings", where, i);
        if (!args)
            return kimi_fail(err, KIMI_ERR_INPUT, "%s.tool_calls[%zu].function.arguments: missing", where, i);
        strbuf b = {0};
        if (json_is_string(args))
            sb_add(&b, json_string_value(args), json_string_length(args));
        else
            py_json_dump(&b, args, ", ", ": ", 0);
        char *text = sb_take(&b);
        if (!text)
            return kimi_fail(err, KIMI_ERR_NOMEM, "%s.tool_calls[%zu]: out of memory", where, i);
        char *derived = json_string_value(name) ? NULL : chat_tool_name_from_id(json_string_value(id));
        int rc = chat_add_tool_call(m, json_string_value(id),
                                    derived ? derived : json_string_value(name), text, err);
        free(derived);
        free(text);
        if (rc)
            return rc;
    }
    return 0;
}

static chat_role role_from_text(const char *role)
{
    static const struct { const char *text; chat_role role; } roles[] = {
        {"system", CHAT_ROLE_SYSTEM}, {"user", CHAT_ROLE_USER},
        {"assistant", CHAT_ROLE_ASSISTANT}, {"tool", CHAT_ROLE_TOOL},
    };
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (!strcmp(roles[i].text, role))
            return roles[i].role;
    return CHAT_ROLE_OTHER;
}

int chat_message_from_json(chat_message *m, const json_t *obj, const char *where, kimi_err *err)
{
    *m = (chat_message){0};
    if (!json_is_object(obj))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: not an object", where);
    const char *role = json_string_value(json_object_get(obj, "role"));
    if (!role || !*role)
        return kimi_fail(err, KIMI_ERR_INPUT, "%s.role: missing or not a string", where);
    m->role = role_from_text(role);
    int rc = (m->role == CHAT_ROLE_OTHER && chat_set_text(&m->other_role, role, err)) ||
             json_text_field(obj, "name", &m->name, where, err) ||
             json_content(obj, &m->content, where, err) ||
             json_text_field(obj, "reasoning_content", &m->reasoning, where, err) ||
             json_text_field(obj, "tool_call_id", &m->tool_call_id, where, err) ||
             json_tool_calls(m, json_object_get(obj, "tool_calls"), where, err);
    if (rc) {
        chat_message_free(m);
        return err ? err->code : KIMI_ERR_INPUT;
    }
    return 0;
}

int chat_conversation_from_json(chat_conversation *c, const json_t *messages, kimi_err *err)
{
    if (!json_is_array(messages))
        return kimi_fail(err, KIMI_ERR_INPUT, "messages: not a list");
    for (size_t i = 0; i < json_array_size(messages); i++) {
        char where[32];
        snprintf(where, sizeof where, "messages[%zu]", i);
        chat_message *m = append_slot(c, err);
        if (!m)
            return err ? err->code : KIMI_ERR_NOMEM;
        if (chat_message_from_json(m, json_array_get(messages, i), where, err)) {
            c->n_messages--;
            return err ? err->code : KIMI_ERR_INPUT;
        }
    }
    return 0;
}

static int json_flag(const json_t *req, const char *key, int *out, kimi_err *err)
{
    const json_t *v = json_object_get(req, key);
    *out = 1;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: not true or false", key);
    *out = json_is_true(v);
    return 0;
}

int chat_request_from_json(const json_t *req, chat_conversation *c, chat_render_options *opt,
                           kimi_err *err)
{
    *opt = (chat_render_options){0};
    if (!json_is_object(req))
        return kimi_fail(err, KIMI_ERR_INPUT, "request: not a JSON object");
    const json_t *messages = json_object_get(req, "messages"), *tools = json_object_get(req, "tools");
    if (!messages)
        return kimi_fail(err, KIMI_ERR_INPUT, "messages: missing");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return kimi_fail(err, KIMI_ERR_INPUT, "tools: not a list");
    opt->tools = json_is_array(tools) ? tools : NULL;
    if (json_flag(req, "thinking", &opt->thinking, err) ||
        json_flag(req, "add_generation_prompt", &opt->add_generation_prompt, err))
        return err ? err->code : KIMI_ERR_INPUT;
    return chat_conversation_from_json(c, messages, err);
}

/* Set key to a string (or null when text is NULL and keep_null); returns -1 on failure. */
static int set_text(json_t *obj, const char *key, const char *text, int keep_null)
{
    if (!text && !keep_null)
        return 0;
    return json_object_set_new(obj, key, text ? json_string(text) : json_null());
}

json_t *chat_message_to_json(const chat_message *m)
{
    json_t *obj = json_object();
    if (!obj)
        return NULL;
    int bad = set_text(obj, "role", chat_role_text(m), 0) || set_text(obj, "content", m->content, 1) ||
              set_text(obj, "name", m->name, 0) ||
              set_text(obj, "reasoning_content", m->reasoning, 0) ||
              set_text(obj, "tool_call_id", m->tool_call_id, 0);
    if (!bad && m->n_tool_calls) {
        json_t *calls = json_array();
        bad = !calls || json_object_set_new(obj, "tool_calls", calls);
        for (int i = 0; !bad && i < m->n_tool_calls; i++) {
            const chat_tool_call *tc = &m->tool_calls[i];
            json_t *call = json_object(), *function = json_object();
            bad = !call || !function || set_text(call, "id", tc->id ? tc->id : "", 0) ||
                  set_text(call, "type", "function", 0) ||
                  set_text(function, "name", tc->name ? tc->name : "", 0) ||
                  set_text(function, "arguments", tc->arguments ? tc->arguments : "", 0);
            if (bad) {
                json_decref(call);
                json_decref(function);
                break;
            }
            bad = json_object_set_new(call, "function", function) || json_array_append_new(calls, call);
        }
    }
    if (bad) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

json_t *chat_conversation_to_json(const chat_conversation *c)
{
    json_t *list = json_array();
    for (int i = 0; list && i < c->n_messages; i++) {
        json_t *m = chat_message_to_json(&c->messages[i]);
        if (!m || json_array_append_new(list, m)) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

/* ---- rendering ---- */

enum {
    SP_IM_END, SP_IM_USER, SP_IM_ASSISTANT, SP_IM_SYSTEM, SP_IM_MIDDLE, SP_THINK, SP_THINK_END,
    SP_SECTION_BEGIN, SP_SECTION_END, SP_CALL_BEGIN, SP_CALL_ARGUMENT_BEGIN, SP_CALL_END, N_SP
};

static const char *const special_names[N_SP] = {
    "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>", "<think>",
    "</think>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
    "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
};

typedef struct {
    const tokenizer *tok;        /* NULL: text only */
    int32_t special_ids[N_SP];
    strbuf text;                 /* the whole rendering, specials spelled out */
    size_t run_start;            /* offset in text of the plain-text run since the last special */
    int32_t *ids;                /* [n_ids] */
    size_t n_ids, cap_ids;
    kimi_err *err;
    int rc;
} renderer;

static int push_ids(renderer *r, const int32_t *ids, size_t n)
{
    if (n > SIZE_MAX / sizeof *r->ids - r->n_ids)
        return r->rc = kimi_fail(r->err, KIMI_ERR_NOMEM, "render: too many tokens");
    if (array_reserve(&r->ids, &r->cap_ids, r->n_ids + n, sizeof *r->ids))
        return r->rc = kimi_fail(r->err, KIMI_ERR_NOMEM, "render: out of memory");
    memcpy(r->ids + r->n_ids, ids, n * sizeof *ids);
    r->n_ids += n;
    return 0;
}

/* Encode the run of plain text since the last special as one piece, specials not allowed. */
static void flush_run(renderer *r)
{
    size_t len = r->text.len - r->run_start;
    if (r->rc || !r->tok || r->text.failed || !len)
        return;
    int32_t *ids = NULL;
    size_t n = 0;
    r->rc = tokenizer_encode(r->tok, r->text.data + r->run_start, len, 0, &ids, &n, r->err);
    if (!r->rc)
        push_ids(r, ids, n);
    free(ids);
}

static void emit_special(renderer *r, int which)
{
    flush_run(r);
    if (r->rc)
        return;
    sb_str(&r->text, special_names[which]);
    r->run_start = r->text.len;
    if (r->tok)
        push_ids(r, &r->special_ids[which], 1);
}

static void emit_text(renderer *r, const char *text)
{
    if (text)
        sb_str(&r->text, text);
}

static void render_tool_calls(renderer *r, const chat_message *m)
{
    emit_special(r, SP_SECTION_BEGIN);
    for (int i = 0; i < m->n_tool_calls; i++) {
        emit_special(r, SP_CALL_BEGIN);
        emit_text(r, m->tool_calls[i].id);
        emit_special(r, SP_CALL_ARGUMENT_BEGIN);
        emit_text(r, m->tool_calls[i].arguments);
        emit_special(r, SP_CALL_END);
    }
    emit_special(r, SP_SECTION_END);
}

/* keep_reasoning: the message is after the last assistant answer without tool calls and
 * thinking is on. */
static void render_message(renderer *r, const chat_message *m, int keep_reasoning)
{
    int header = m->role == CHAT_ROLE_USER ? SP_IM_USER
               : m->role == CHAT_ROLE_ASSISTANT ? SP_IM_ASSISTANT : SP_IM_SYSTEM;
    emit_special(r, header);
    emit_text(r, m->name && *m->name ? m->name : chat_role_text(m));
    emit_special(r, SP_IM_MIDDLE);
    if (m->role == CHAT_ROLE_ASSISTANT) {
        emit_special(r, SP_THINK);
        if (keep_reasoning)
            emit_text(r, m->reasoning);
        emit_special(r, SP_THINK_END);
        emit_text(r, m->content);
        if (m->n_tool_calls)
            render_tool_calls(r, m);
    } else if (m->role == CHAT_ROLE_TOOL) {
        emit_text(r, "## Return of ");
        emit_text(r, m->tool_call_id);
        emit_text(r, "\n");
        emit_text(r, m->content);
    } else {
        emit_text(r, m->content);
    }
    emit_special(r, SP_IM_END);
}

int chat_render(const tokenizer *tok, const chat_conversation *c, const chat_render_options *opt,
                chat_rendering *out, kimi_err *err)
{
    *out = (chat_rendering){0};
    renderer r = {.tok = tok, .err = err};
    for (int i = 0; tok && i < N_SP; i++)
        if ((r.special_ids[i] = tokenizer_special_id(tok, special_names[i])) < 0)
            return kimi_fail(err, KIMI_ERR_MODEL, "tokenizer: no special token %s", special_names[i]);
    if (opt->tools && !json_is_array(opt->tools) && !json_is_null(opt->tools))
        return kimi_fail(err, KIMI_ERR_INPUT, "tools: not a list");
    if (json_array_size(opt->tools)) {
        char *declaration;
        if (chat_tools_declaration(opt->tools, &declaration, out->tools_note,
                                   sizeof out->tools_note, err))
            return err ? err->code : KIMI_ERR_INPUT;
        emit_special(&r, SP_IM_SYSTEM);
        emit_text(&r, "tool_declare");
        emit_special(&r, SP_IM_MIDDLE);
        emit_text(&r, declaration);
        emit_special(&r, SP_IM_END);
        free(declaration);
    }
    int last_answer = -1;  /* the last assistant message without tool calls */
    for (int i = c->n_messages - 1; i >= 0 && last_answer < 0; i--)
        if (c->messages[i].role == CHAT_ROLE_ASSISTANT && c->messages[i].n_tool_calls == 0)
            last_answer = i;
    for (int i = 0; i < c->n_messages && !r.rc; i++)
        render_message(&r, &c->messages[i], i > last_answer && opt->thinking);
    if (opt->add_generation_prompt) {
        emit_special(&r, SP_IM_ASSISTANT);
        emit_text(&r, "assistant");
        emit_special(&r, SP_IM_MIDDLE);
        emit_special(&r, SP_THINK);
        if (!opt->thinking)
            emit_special(&r, SP_THINK_END);
    }
    flush_run(&r);
    if (!r.rc && r.text.failed)
        r.rc = kimi_fail(err, KIMI_ERR_NOMEM, "render: out of memory");
    if (r.rc) {
        free(r.text.data);
        free(r.ids);
        return r.rc;
    }
    out->text = sb_take(&r.text);
    out->text_len = r.text.len;
    out->ids = r.ids;
    out->n_ids = r.n_ids;
    if (!out->text) {
        free(r.ids);
        *out = (chat_rendering){0};
        return kimi_fail(err, KIMI_ERR_NOMEM, "render: out of memory");
    }
    return 0;
}

void chat_rendering_free(chat_rendering *r)
{
    free(r->text);
    free(r->ids);
    *r = (chat_rendering){0};
}
