/* tool_declaration: K2.5's TypeScript declaration of the tools, as the checkpoint's template
 * and tokenizer print it. */
#include "engine/text/tool_declaration.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/pyformat.h"

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
    if (defs && pyformat_truthy(defs)) {
        if (!json_is_object(defs))
            return ts_fail(t, "$defs is not an object");
        size_t n;
        const char **names = pyformat_object_keys(defs, 1, &n, &t->oom);
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
    const char **names = pyformat_object_keys(props, 1, &n, &t->oom);
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
            return items && pyformat_truthy(items) ? ts_check(t, items) : 0;
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
            strbuf_str(b, indent);
            strbuf_str(b, "// ");
            strbuf_add(b, line, len);
        }
        if (!nl)
            break;
        strbuf_add(b, "\n", 1);
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
    if (desc && pyformat_truthy(desc)) {
        if (!json_is_string(desc)) {
            ts_fail(t, "a description is not a string");
            return;
        }
        ts_description(b, json_string_value(desc), indent);
        strbuf_add(b, "\n", 1);
    }
    int first = 1;
    for (const char *const *key = ts_constraint_keys(s); *key; key++) {
        const json_t *v = json_object_get(s, *key);
        if (!v)
            continue;
        strbuf_str(b, first ? indent : ", ");
        if (first)
            strbuf_str(b, "// ");
        first = 0;
        strbuf_str(b, *key);
        strbuf_str(b, ": ");
        pyformat_str(b, v);
    }
    if (!first)
        strbuf_add(b, "\n", 1);
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
        strbuf_str(b, indent);
        strbuf_str(b, "// Default: ");
        if (json_is_number(def) || json_is_boolean(def))
            pyformat_repr(b, def);
        else
            pyformat_json_dump(b, def, ", ", ": ", 1);
        strbuf_add(b, "\n", 1);
    }
    strbuf_str(b, indent);
    strbuf_str(b, name);
    if (optional)
        strbuf_add(b, "?", 1);
    strbuf_str(b, ": ");
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
    const char **names = pyformat_object_keys(props, 1, &n, &t->oom);
    int fields = 0;
    for (int optional = 0; optional <= 1; optional++)
        for (size_t i = 0; i < n; i++) {
            if (is_required(required, names[i]) == optional)
                continue;
            strbuf_str(b, fields++ ? ",\n" : "{\n");
            ts_field(t, b, names[i], json_object_get(props, names[i]), optional, inner);
        }
    free(names);
    const json_t *extra = json_object_size(s) ? json_object_get(s, "additionalProperties") : NULL;
    if (extra && !json_is_null(extra)) {
        strbuf_str(b, fields++ ? ",\n" : "{\n");
        strbuf_str(b, inner);
        strbuf_str(b, "[k: string]: ");
        if (json_is_true(extra))
            strbuf_str(b, "any");
        else if (json_is_false(extra))
            strbuf_str(b, "never");
        else if (json_is_object(extra))
            ts_type(t, b, extra, inner);
        else
            ts_fail(t, "additionalProperties is not a schema or a boolean");
    }
    if (!fields) {
        strbuf_str(b, "{}");
        return;
    }
    strbuf_add(b, "\n", 1);
    strbuf_str(b, indent);
    strbuf_add(b, "}", 1);
}

static void ts_join_types(ts_ctx *t, strbuf *b, const json_t *list, const char *indent)
{
    for (size_t i = 0; i < json_array_size(list); i++) {
        if (i)
            strbuf_str(b, " | ");
        ts_type(t, b, json_array_get(list, i), indent);
    }
}

static void ts_array(ts_ctx *t, strbuf *b, const json_t *s, const char *indent)
{
    const json_t *items = json_object_get(s, "items");
    json_t *any_schema = NULL;  /* missing or empty items: any */
    if (!items || !pyformat_truthy(items))
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
        strbuf_str(b, "Array<\n");
        strbuf_add(b, doc.data, doc.len);
        strbuf_str(b, inner);
        ts_type(t, b, items, inner);
        strbuf_add(b, "\n", 1);
        strbuf_str(b, indent);
        strbuf_add(b, ">", 1);
    } else {
        strbuf_str(b, "Array<");
        ts_type(t, b, items, indent);
        strbuf_add(b, ">", 1);
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
        strbuf_str(b, json_is_true(s) ? "any" : "null");
        return;
    }
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        const char *r = json_string_value(ref);
        strbuf_str(b, r && strcmp(r, "#") ? last_segment(r) : "parameters");
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
                strbuf_str(b, " | ");
            if (json_is_string(v)) {
                strbuf_add(b, "\"", 1);
                strbuf_add(b, json_string_value(v), json_string_length(v));
                strbuf_add(b, "\"", 1);
            } else {
                pyformat_str(b, v);
            }
        }
        return;
    }
    const json_t *type = json_object_get(s, "type");
    if (json_is_array(type)) {
        for (size_t i = 0; i < json_array_size(type); i++) {
            const char *name = union_type_name(json_string_value(json_array_get(type, i)));
            if (i)
                strbuf_str(b, " | ");
            strbuf_str(b, name);
        }
        return;
    }
    const char *typ = json_string_value(type);
    if (!typ)
        strbuf_str(b, "any");
    else if (!strcmp(typ, "object"))
        ts_object(t, b, s, indent);
    else if (!strcmp(typ, "array"))
        ts_array(t, b, s, indent);
    else
        strbuf_str(b, strcmp(typ, "integer") ? typ : "number");
}

/* One function: its $defs interfaces, its description, "type NAME = (_: {...}) => any;". */
static void ts_function(ts_ctx *t, strbuf *b, const json_t *function)
{
    t->n_defs = 0;
    t->has_self_ref = 0;
    const json_t *params = json_object_get(function, "parameters");
    json_t *empty = NULL;
    if (!params || !pyformat_truthy(params))
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
        const char **names = pyformat_object_keys(json_object_get(params, "properties"), 1, &n, &t->oom);
        const json_t *required = json_object_get(params, "required");
        strbuf_str(b, "interface parameters {");
        for (size_t i = 0; i < n; i++) {
            strbuf_str(b, i ? ",\n" : "\n");
            ts_field(t, b, names[i], json_object_get(json_object_get(params, "properties"), names[i]),
                     !is_required(required, names[i]), TS_INDENT);
        }
        strbuf_str(b, n ? "\n}" : "}");
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
            strbuf_add(b, "\n", 1);
        const json_t *desc = json_object_get(def, "description");
        if (desc && pyformat_truthy(desc)) {
            if (!json_is_string(desc)) {
                ts_fail(t, "a description is not a string");
                break;
            }
            ts_description(b, json_string_value(desc), "");
            strbuf_add(b, "\n", 1);
        }
        strbuf_str(b, "interface ");
        strbuf_str(b, def_name);
        strbuf_add(b, " ", 1);
        ts_type(t, b, def, "");
    }
    const json_t *desc = json_object_get(function, "description");
    if (desc && pyformat_truthy(desc)) {
        if (!json_is_string(desc))
            ts_fail(t, "a function description is not a string");
        else {
            if (parts++)
                strbuf_add(b, "\n", 1);
            ts_description(b, json_string_value(desc), "");
        }
    }
    if (parts)
        strbuf_add(b, "\n", 1);
    strbuf_str(b, "type ");
    strbuf_str(b, name);
    strbuf_str(b, " = (_: ");
    if (t->has_self_ref)
        strbuf_str(b, "parameters");
    else
        ts_object(t, b, params, "");
    strbuf_str(b, ") => any;");
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
        if (!type || strcmp(type, "function") || !function || !pyformat_truthy(function))
            continue;
        if (!json_is_object(function)) {
            ts_fail(t, "tools[%zu].function is not an object", i);
            return;
        }
        strbuf_str(b, functions++ ? "\n" : "# Tools\n\n## functions\nnamespace functions {\n");
        ts_function(t, b, function);
    }
    if (functions)
        strbuf_str(b, "\n}\n");
}

int tool_declaration_render(const json_t *tools, char **text, char *note, size_t note_cap,
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
        pyformat_json_dump(&b, tools, ",", ":", 1);
    }
    *text = strbuf_take(&b);
    if (!*text)
        return kimi_fail(err, KIMI_ERR_NOMEM, "tools: out of memory rendering the declaration");
    return 0;
}
