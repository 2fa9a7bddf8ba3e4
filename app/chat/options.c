/* options: the command line and the config file, read into app_options through one table of
 * flags that also writes --help, so the two cannot drift apart. */
#include "app/chat/options.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/chat/paths.h"
#include "app/chat/sampling_range.h"
#include "engine/backend/backend.h"
#include "engine/backend/device_plan.h"
#include "engine/backend/backend.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/speculate.h"
#include "engine/base/file_io.h"

#ifndef KIMI_VERSION
#error "KIMI_VERSION comes from app/CMakeLists.txt"
#endif

typedef enum {
    OPT_MODEL, OPT_SERVER, OPT_SERVER_MODEL, OPT_API_KEY_ENV, OPT_API_KEY_FILE, OPT_BACKEND, OPT_TP, OPT_DCP, OPT_MAX_CONTEXT, OPT_MEM_GIB, OPT_THREADS, OPT_DEVICES, OPT_SPECULATE,
    OPT_KV_CACHE, OPT_CPU_ACTIVATIONS, OPT_CPU_WEIGHTS,
    OPT_VERIFY,
    OPT_PLAIN, OPT_SCRIPT, OPT_KEEP_GOING, OPT_PROMPT,
    OPT_RESUME, OPT_LOAD, OPT_SYSTEM, OPT_NO_SAVE,
    OPT_THINK, OPT_NO_THINK, OPT_TEMPERATURE, OPT_TOP_P, OPT_TOP_K, OPT_MAX_TOKENS, OPT_SEED,
    OPT_TOOLS, OPT_NO_TOOLS, OPT_ALLOW_TOOLS,
    OPT_REASONING, OPT_HIDE_REASONING, OPT_THEME, OPT_NO_COLOR, OPT_MOUSE, OPT_NO_ALT_SCREEN, OPT_VERBOSE,
    OPT_CONFIG, OPT_HELP, OPT_VERSION,
} option_id;

/* One flag. An entry without a name starts a group of --help. */
typedef struct {
    const char *name;       /* without the leading "--" */
    char short_name;        /* 0: none */
    const char *metavar;    /* NULL: takes no value */
    option_id id;
    const char *help;
} flag_def;

static const flag_def flags[] = {
    {NULL, 0, NULL, 0, "Model and engine"},
    {"model", 'm', "DIR", OPT_MODEL, "model directory (default: the bundled demo model)"},
    {"server", 0, "URL", OPT_SERVER, "an OpenAI-compatible server instead of a local model"},
    {"server-model", 0, "NAME", OPT_SERVER_MODEL, "the server's model (default: the first it lists)"},
    {"api-key-env", 0, "NAME", OPT_API_KEY_ENV, "variable with the API key (default: OPENAI_API_KEY)"},
    {"api-key-file", 0, "FILE", OPT_API_KEY_FILE, "file whose first line is the API key"},
    {"backend", 0, "cpu|cuda", OPT_BACKEND, "where the model runs (default: cpu)"},
    {"tp", 0, "N", OPT_TP, "tensor-parallel ranks, 1..8 (default: 1)"},
    {"dcp", 0, "N", OPT_DCP, "KV cache split over N ranks, N divides tp (default 1)"},
    {"max-context", 0, "N", OPT_MAX_CONTEXT, "context in tokens (default 0: as much as fits)"},
    {"mem-gib", 0, "G", OPT_MEM_GIB, "memory budget in GiB (default 0: the engine picks)"},
    {"threads", 0, "N", OPT_THREADS, "CPU threads, 0..4096 (default 0: cores / tp)"},
    {"devices", 0, "LIST", OPT_DEVICES, "GPUs: one per rank, or one for all (default 0..tp-1)"},
    {"speculate", 0, "off|auto|N", OPT_SPECULATE, "draft N tokens by prompt lookup (default auto)"},
    {"kv-cache", 0, "fp16|fp8", OPT_KV_CACHE, "KV cache format (default fp16; fp8 holds ~1.75x)"},
    {"cpu-activations", 0, "fp32|int8", OPT_CPU_ACTIVATIONS, "CPU NVFP4 math (default fp32; int8 is faster)"},
    {"cpu-weights", 0, "huge-pages|mmap", OPT_CPU_WEIGHTS, "faster 2 MiB pages (default) or shared mmap"},
    {"verify", 0, NULL, OPT_VERIFY, "check the backend against the CPU first"},
    {NULL, 0, NULL, 0, "Mode"},
    {"plain", 0, NULL, OPT_PLAIN, "line mode (default off a terminal or with TERM=dumb)"},
    {"script", 0, "FILE", OPT_SCRIPT, "run a script file (- for stdin)"},
    {"keep-going", 0, NULL, OPT_KEEP_GOING, "with --script: go on after a failed line"},
    {"prompt", 'p', "TEXT", OPT_PROMPT, "send one message, print the answer, exit"},
    {NULL, 0, NULL, 0, "Session"},
    {"resume", 0, NULL, OPT_RESUME, "reopen the newest saved session"},
    {"load", 0, "FILE", OPT_LOAD, "open a saved session or JSON export"},
    {"system", 0, "TEXT", OPT_SYSTEM, "system prompt (default: none)"},
    {"no-save", 0, NULL, OPT_NO_SAVE, "do not autosave the session"},
    {NULL, 0, NULL, 0, "Sampling"},
    {"think", 0, "on|off", OPT_THINK, "reasoning before the answer (default: on)"},
    {"no-think", 0, NULL, OPT_NO_THINK, "same as --think off"},
    {"temperature", 0, "T", OPT_TEMPERATURE, "0..100, 0 = greedy (default 1.0; 0.6 not thinking)"},
    {"top-p", 0, "P", OPT_TOP_P, "nucleus sampling, 0 < P <= 1 (default: 0.95)"},
    {"top-k", 0, "K", OPT_TOP_K, "the K likeliest tokens, 0..2^30 (default 0: off)"},
    {"max-tokens", 0, "N", OPT_MAX_TOKENS, "tokens per answer, 0..2^30 (default 0: no cap)"},
    {"seed", 0, "N", OPT_SEED, "random seed, 0..2^64-1 (default: from the clock)"},
    {NULL, 0, NULL, 0, "Tools"},
    {"tools", 0, "FILE", OPT_TOOLS, "tool declarations, JSON (default: the demo's tools)"},
    {"no-tools", 0, NULL, OPT_NO_TOOLS, "declare no tools to the model"},
    {"allow-tools", 0, "LIST", OPT_ALLOW_TOOLS, "NAME,...|all: run without asking (default: ask)"},
    {NULL, 0, NULL, 0, "Display"},
    {"reasoning", 0, "VIEW", OPT_REASONING, "collapsed|expanded|hidden (default: collapsed)"},
    {"hide-reasoning", 0, NULL, OPT_HIDE_REASONING, "no reasoning in plain, script and prompt modes"},
    {"theme", 0, "NAME", OPT_THEME, "colour theme (default: default; NO_COLOR: mono)"},
    {"no-color", 0, NULL, OPT_NO_COLOR, "no colours (the mono theme)"},
    {"mouse", 0, NULL, OPT_MOUSE, "wheel scroll and click-to-fold (default: off)"},
    {"no-alt-screen", 0, NULL, OPT_NO_ALT_SCREEN, "stay inline, in the terminal's scrollback"},
    {"verbose", 0, NULL, OPT_VERBOSE, "say the memory plan at start (it is in /stats)"},
    {NULL, 0, NULL, 0, "Other"},
    {"config", 0, "FILE", OPT_CONFIG, "config file (default: the config under Files)"},
    {"help", 'h', NULL, OPT_HELP, "print this help and exit"},
    {"version", 'V', NULL, OPT_VERSION, "print the version and exit"},
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };

/* The config file's keys. */
static const struct {
    const char *key;
    option_id id;
} config_keys[] = {
    {"model", OPT_MODEL}, {"server", OPT_SERVER}, {"server_model", OPT_SERVER_MODEL},
    {"api_key_env", OPT_API_KEY_ENV}, {"api_key_file", OPT_API_KEY_FILE}, {"backend", OPT_BACKEND}, {"tp", OPT_TP}, {"dcp", OPT_DCP}, {"devices", OPT_DEVICES}, {"speculate", OPT_SPECULATE},
    {"kv_cache", OPT_KV_CACHE}, {"cpu_activations", OPT_CPU_ACTIVATIONS},
    {"cpu_weights", OPT_CPU_WEIGHTS},
    {"max_context", OPT_MAX_CONTEXT}, {"mem_gib", OPT_MEM_GIB}, {"theme", OPT_THEME},
    {"temperature", OPT_TEMPERATURE}, {"top_p", OPT_TOP_P}, {"top_k", OPT_TOP_K},
    {"max_tokens", OPT_MAX_TOKENS}, {"seed", OPT_SEED}, {"thinking", OPT_THINK},
    {"tools", OPT_TOOLS}, {"reasoning", OPT_REASONING},
};

/* What the parse knows besides the options: where a value came from. */
typedef struct {
    const char *config_dir;     /* the config file's directory while its lines apply, else NULL */
    int theme_chosen;           /* --theme or theme = */
} parse_state;

/* ---- values ---- */

/* Replace *field with a copy of value. */
static int set_string(char **field, const char *value, const char *what, kimi_err *err)
{
    char *copy = strdup(value);
    if (!copy)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", what);
    free(*field);
    *field = copy;
    return 0;
}

/* A path value: "~/" expanded; in the config file a relative path is relative to the file. */
static int set_path(char **field, const char *value, const parse_state *ps, const char *what, kimi_err *err)
{
    char *path;
    if (ps->config_dir && value[0] != '/' && value[0] != '~') {
        if (asprintf(&path, "%s/%s", ps->config_dir, value) < 0)
            return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", what);
    } else if (!(path = paths_expand_home(value, err))) {
        return kimi_err_prefix(err, KIMI_ERR_USAGE, "%s", what);
    }
    free(*field);
    *field = path;
    return 0;
}

/* Decimal integer in [lo, hi]: no spaces, no trailing junk, no overflow. */
static int parse_long(const char *s, long lo, long hi, long *out, const char *range, const char *what,
                      kimi_err *err)
{
    char *end;
    errno = 0;
    long v = isspace((unsigned char)s[0]) ? 0 : strtol(s, &end, 10);
    if (isspace((unsigned char)s[0]) || end == s || *end)
        return kimi_fail(err, KIMI_ERR_USAGE, "%s: not an integer (must be %s)", what, range);
    if (errno == ERANGE)
        return kimi_fail(err, KIMI_ERR_USAGE, "%s: out of range (must be %s)", what, range);
    if (v < lo || v > hi)
        return kimi_fail(err, KIMI_ERR_USAGE, "%s: must be %s", what, range);
    *out = v;
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out, const char *range, const char *what, kimi_err *err)
{
    long v;
    int rc = parse_long(s, lo, hi, &v, range, what, err);
    if (rc == 0)
        *out = (int)v;
    return rc;
}

/* A finite number: strtod's syntax, no spaces, no trailing junk, no nan or inf, no overflow. */
static int parse_double(const char *s, double *out, const char *range, const char *what, kimi_err *err)
{
    char *end;
    errno = 0;
    double v = isspace((unsigned char)s[0]) ? 0 : strtod(s, &end);
    if (isspace((unsigned char)s[0]) || end == s || *end)
        return kimi_fail(err, KIMI_ERR_USAGE, "%s: not a number (must be %s)", what, range);
    if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1))
        return kimi_fail(err, KIMI_ERR_USAGE, "%s: must be a finite number, %s", what, range);
    *out = v;
    return 0;
}

/* NAME,NAME,... of tool names (letters, digits, _ . -), or "all" alone. */
static int check_allow_tools(const char *v, const char *what, kimi_err *err)
{
    if (!strcmp(v, "all"))
        return 0;
    for (const char *p = v;;) {
        size_t n = strcspn(p, ",");
        if (n == 0)
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: empty tool name (NAME,... or all)", what);
        for (size_t i = 0; i < n; i++)
            if (!isalnum((unsigned char)p[i]) && !strchr("_.-", p[i]))
                return kimi_fail(err, KIMI_ERR_USAGE, "%s: '%.*s' is not a tool name (NAME,... or all)",
                                 what, (int)n, p);
        if (n == 3 && !memcmp(p, "all", 3))
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: 'all' goes alone", what);
        if (!p[n])
            return 0;
        p += n + 1;
    }
}

/* Apply one setting, from a flag (what = "--tp 0") or a config line (what = "FILE:4: tp = 0"). */
static int apply(app_options *o, parse_state *ps, option_id id, const char *v, int from_config,
                 const char *what, kimi_err *err)
{
    double d;
    uint64_t u;
    if (!from_config) {
        unsigned bit = id == OPT_THINK || id == OPT_NO_THINK ? OPTIONS_SET_THINKING
                     : id == OPT_TEMPERATURE ? OPTIONS_SET_TEMPERATURE
                     : id == OPT_TOP_P ? OPTIONS_SET_TOP_P
                     : id == OPT_TOP_K ? OPTIONS_SET_TOP_K
                     : id == OPT_MAX_TOKENS ? OPTIONS_SET_MAX_TOKENS
                     : id == OPT_SEED ? OPTIONS_SET_SEED : 0;
        o->flag_settings |= bit;
    }
    switch (id) {
    case OPT_MODEL:
        if (!*v)
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: needs a folder name", what);
        return set_path(&o->model_dir, v, ps, what, err);
    case OPT_SERVER:
        if (strncmp(v, "http://", 7) && strncmp(v, "https://", 8))
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: must start with http:// or https://", what);
        return set_string(&o->server_url, v, what, err);
    case OPT_SERVER_MODEL: return set_string(&o->server_model, v, what, err);
    case OPT_API_KEY_ENV: return set_string(&o->api_key_env, v, what, err);
    case OPT_API_KEY_FILE:
        if (!*v)
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: needs a file name", what);
        return set_path(&o->api_key_file, v, ps, what, err);
    case OPT_BACKEND:
        if (!strcmp(v, "cpu"))
            o->backend = BACKEND_CPU;
        else if (!strcmp(v, "cuda"))
            o->backend = BACKEND_CUDA;
        else
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: must be cpu or cuda", what);
        return 0;
    case OPT_TP: return parse_int(v, 1, 8, &o->tp, "1..8", what, err);
    case OPT_DCP: return parse_int(v, 1, 8, &o->dcp, "1..8, dividing --tp", what, err);
    case OPT_MAX_CONTEXT: return parse_long(v, 0, LONG_MAX, &o->max_context, "0 or more", what, err);
    case OPT_MEM_GIB:
        if (parse_double(v, &d, ">= 0", what, err))
            return KIMI_ERR_USAGE;
        /* the budget is a byte count (size_t): under one byte it would round to 0 (the
           engine's default), far past any machine it would overflow the conversion */
        if (d < 0 || (d > 0 && d < 1e-9) || d > 1e9)
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: must be 0 (the engine picks) or 1e-9..1e9 GiB", what);
        o->mem_gib = d;
        return 0;
    case OPT_THREADS: return parse_int(v, 0, 4096, &o->threads, "0..4096", what, err);
    case OPT_DEVICES: {
        int devices[DEVICE_MAX_RANKS], n;
        return device_list_parse(what, v, devices, &n, err) ? KIMI_ERR_USAGE : set_string(&o->devices, v, what, err);
    }
    case OPT_SPECULATE: return speculate_parse(v, &o->speculate, what, err);
    case OPT_KV_CACHE: {
        kv_cache_format format;
        if (kv_cache_format_parse(v, &format))
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: must be fp16 or fp8", what);
        o->kv_cache = (int)format;
        return 0;
    }
    case OPT_CPU_ACTIVATIONS: {
        cpu_activations activations;
        if (cpu_activations_parse(v, &activations))
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: must be fp32 or int8", what);
        o->cpu_activations = (int)activations;
        return 0;
    }
    case OPT_CPU_WEIGHTS: {
        cpu_weights weights;
        if (cpu_weights_parse(v, &weights))
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: must be huge-pages or mmap", what);
        o->cpu_weights = (int)weights;
        return 0;
    }
    case OPT_VERIFY: o->verify = 1; return 0;
    case OPT_SCRIPT:
        if (!*v)
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: needs a file name (- for stdin)", what);
        return strcmp(v, "-") ? set_path(&o->script_path, v, ps, what, err) : set_string(&o->script_path, v, what, err);
    case OPT_KEEP_GOING: o->keep_going = 1; return 0;
    case OPT_PROMPT:
        if (!*v)
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: the message is empty", what);
        return set_string(&o->prompt_text, v, what, err);
    case OPT_RESUME: o->resume = 1; return 0;
    case OPT_LOAD:
        if (!*v)
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: needs a file name", what);
        return set_path(&o->load_path, v, ps, what, err);
    case OPT_SYSTEM: return set_string(&o->system_prompt, v, what, err);
    case OPT_NO_SAVE: o->no_save = 1; return 0;
    case OPT_THINK:
        if (!strcmp(v, "on") || (from_config && !strcmp(v, "true")))
            o->thinking = 1;
        else if (!strcmp(v, "off") || (from_config && !strcmp(v, "false")))
            o->thinking = 0;
        else
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: must be on or off%s", what, from_config ? " (or true or false)" : "");
        return 0;
    case OPT_NO_THINK: o->thinking = 0; return 0;
    case OPT_TEMPERATURE:
        if (sampling_parse(SAMPLING_TEMPERATURE, v, what, KIMI_ERR_USAGE, &d, &u, err))
            return KIMI_ERR_USAGE;
        o->temperature = (float)d;
        o->has_temperature = 1;
        return 0;
    case OPT_TOP_P:
        if (sampling_parse(SAMPLING_TOP_P, v, what, KIMI_ERR_USAGE, &d, &u, err))
            return KIMI_ERR_USAGE;
        o->top_p = (float)d;
        o->has_top_p = 1;
        return 0;
    case OPT_TOP_K:
    case OPT_MAX_TOKENS:
        if (sampling_parse(id == OPT_TOP_K ? SAMPLING_TOP_K : SAMPLING_MAX_TOKENS, v, what, KIMI_ERR_USAGE, &d, &u, err))
            return KIMI_ERR_USAGE;
        *(id == OPT_TOP_K ? &o->top_k : &o->max_tokens) = (int)u;
        return 0;
    case OPT_SEED:
        if (sampling_parse(SAMPLING_SEED, v, what, KIMI_ERR_USAGE, &d, &o->seed, err))
            return KIMI_ERR_USAGE;
        o->has_seed = 1;
        return 0;
    case OPT_TOOLS:
        if (!*v)
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: needs a file name", what);
        return set_path(&o->tools_path, v, ps, what, err);
    case OPT_NO_TOOLS: o->no_tools = 1; return 0;
    case OPT_ALLOW_TOOLS: return check_allow_tools(v, what, err) ? KIMI_ERR_USAGE : set_string(&o->allow_tools, v, what, err);
    case OPT_REASONING:
        if (!strcmp(v, "collapsed"))
            o->reasoning = REASONING_COLLAPSED;
        else if (!strcmp(v, "expanded"))
            o->reasoning = REASONING_EXPANDED;
        else if (!strcmp(v, "hidden"))
            o->reasoning = REASONING_HIDDEN;
        else
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: must be collapsed, expanded or hidden", what);
        return 0;
    case OPT_HIDE_REASONING: o->hide_reasoning = 1; return 0;
    case OPT_THEME:
        /* A theme is a file name under a themes directory, never a path. */
        if (!*v || v[0] == '.' || strchr(v, '/'))
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: not a theme name (themes/NAME.theme)", what);
        ps->theme_chosen = 1;
        {
            /* now, before anything loads: a misspelt theme is a usage error, not a surprise */
            kimi_err why = {0};
            char *file = paths_theme_file(v, &why);
            free(file);
            if (!file)
                return kimi_fail(err, KIMI_ERR_USAGE, "%s: %s", what, why.msg);
        }
        return set_string(&o->theme, v, what, err);
    case OPT_NO_COLOR: o->no_color = 1; return 0;
    case OPT_MOUSE: o->mouse = 1; return 0;
    case OPT_NO_ALT_SCREEN: o->no_alt_screen = 1; return 0;
    case OPT_VERBOSE: o->verbose = 1; return 0;
    case OPT_PLAIN: return 0;   /* pick_mode() weighs it against --script and --prompt */
    case OPT_CONFIG: case OPT_HELP: case OPT_VERSION: return 0;  /* handled before the others */
    }
    return 0;
}

/* ---- the config file ---- */

/* path with a leading $HOME written as "~", for messages; malloc'ed. */
static char *display_path(const char *path)
{
    const char *home = getenv("HOME");
    size_t n = home ? strlen(home) : 0;
    char *out;
    if (n > 1 && !strncmp(path, home, n) && path[n] == '/')
        return asprintf(&out, "~%s", path + n) < 0 ? NULL : out;
    return strdup(path);
}

static char *trim(char *s, char **end)
{
    while (*s == ' ' || *s == '\t')
        s++;
    while (*end > s && ((*end)[-1] == ' ' || (*end)[-1] == '\t'))
        (*end)--;
    **end = 0;
    return s;
}

/* text[0..len) is owned and written into (each line is cut in place). */
static int parse_config_text(app_options *o, parse_state *ps, const char *path, char *text, size_t len,
                             kimi_err *err)
{
    char *shown = display_path(path);
    if (!shown)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", path);
    int rc = 0, line = 0;
    for (char *p = text, *stop = text + len; p < stop && !rc;) {
        char *nl = memchr(p, '\n', (size_t)(stop - p));
        char *end = nl ? nl : stop, *next = nl ? nl + 1 : stop;
        line++;
        if (end > p && end[-1] == '\r')
            end--;
        if (memchr(p, 0, (size_t)(end - p))) {
            rc = kimi_fail(err, KIMI_ERR_USAGE, "%s:%d: NUL byte in the line", shown, line);
            break;
        }
        char *s = trim(p, &end);
        p = next;
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = kimi_fail(err, KIMI_ERR_USAGE, "%s:%d: expected 'key = value'", shown, line);
            break;
        }
        char *key_end = eq, *value_end = end;
        char *key = trim(s, &key_end), *value = trim(eq + 1, &value_end);
        /* "value" in double quotes: the quotes go (for values with a leading '#' or spaces). */
        size_t vn = strlen(value);
        if (vn >= 2 && value[0] == '"' && value[vn - 1] == '"') {
            value[vn - 1] = 0;
            value++;
        }
        int id = -1;
        for (size_t k = 0; k < sizeof config_keys / sizeof config_keys[0]; k++)
            if (!strcmp(key, config_keys[k].key))
                id = (int)config_keys[k].id;
        if (id < 0) {
            rc = kimi_fail(err, KIMI_ERR_USAGE, "%s:%d: unknown key '%s'", shown, line, key);
            break;
        }
        if (!*value) {
            rc = kimi_fail(err, KIMI_ERR_USAGE, "%s:%d: %s: no value", shown, line, key);
            break;
        }
        char what[320];
        snprintf(what, sizeof what, "%s:%d: %s = %s", shown, line, key, value);
        rc = apply(o, ps, (option_id)id, value, 1, what, err);
    }
    free(shown);
    return rc;
}

/* Read the config file: required names it (--config), else the default path if it exists. */
static int load_config(app_options *o, parse_state *ps, const char *required, kimi_err *err)
{
    char *path;
    if (required) {
        if (!*required)
            return kimi_fail(err, KIMI_ERR_USAGE, "--config '': needs a file name");
        if (!(path = paths_expand_home(required, err)))
            return kimi_err_prefix(err, KIMI_ERR_USAGE, "--config");
        if (access(path, F_OK) != 0) {
            kimi_fail(err, KIMI_ERR_USAGE, "--config %s: %s", required, strerror(errno));
            free(path);
            return KIMI_ERR_USAGE;
        }
    } else {
        kimi_err ignored;
        struct stat st;
        path = paths_config_file(&ignored);  /* no HOME and no XDG_CONFIG_HOME: no config */
        if (!path || stat(path, &st) != 0) {
            free(path);
            return 0;
        }
    }
    char *text;
    size_t len;
    int rc = file_read_all(path, &text, &len, err);
    if (rc) {
        /* An unreadable config file is the user's to fix: exit code 2, like a bad flag. */
        rc = rc == KIMI_ERR_NOMEM ? rc : KIMI_ERR_USAGE;
        if (err)
            err->code = rc;
        free(path);
        return rc;
    }
    char *dir = strdup(path), *slash = dir ? strrchr(dir, '/') : NULL;
    if (!dir) {
        free(text);
        free(path);
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    }
    if (slash)
        *slash = 0;
    ps->config_dir = slash ? (slash == dir ? "/" : dir) : ".";
    rc = parse_config_text(o, ps, path, text, len, err);
    ps->config_dir = NULL;
    free(dir);
    free(text);
    if (rc)
        free(path);
    else
        o->config_path = path;
    return rc;
}

/* ---- the command line ---- */

typedef struct {
    const flag_def *def;
    const char *spelled;    /* "--tp", "-m" */
    size_t spelled_len;
    const char *value;      /* NULL for flags without a value */
} occurrence;

static const flag_def *find_long(const char *name, size_t n)
{
    for (int i = 0; i < N_FLAGS; i++)
        if (flags[i].name && strlen(flags[i].name) == n && !strncmp(flags[i].name, name, n))
            return &flags[i];
    return NULL;
}

static const flag_def *find_short(char c)
{
    for (int i = 0; i < N_FLAGS; i++)
        if (flags[i].name && flags[i].short_name == c)
            return &flags[i];
    return NULL;
}

/* Split argv into flag occurrences: unknown flags, missing values and positional arguments are
 * errors here; values are checked later, after the config file. */
static int scan_argv(int argc, char **argv, occurrence *occ, int *n_occ, kimi_err *err)
{
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        occurrence *oc = &occ[n];
        memset(oc, 0, sizeof *oc);
        const char *attached = NULL;
        if (a[0] == '-' && a[1] == '-' && a[2]) {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            oc->def = find_long(a + 2, len);
            oc->spelled = a;
            oc->spelled_len = len + 2;
            if (!oc->def)
                return kimi_fail(err, KIMI_ERR_USAGE, "%.*s: unknown flag (see --help)", (int)(len + 2), a);
            if (eq && !oc->def->metavar)
                return kimi_fail(err, KIMI_ERR_USAGE, "%s: --%s takes no value", a, oc->def->name);
            attached = eq ? eq + 1 : NULL;
        } else if (a[0] == '-' && a[1] && a[1] != '-') {
            oc->def = find_short(a[1]);
            oc->spelled = a;
            oc->spelled_len = 2;
            if (!oc->def || (a[2] && !oc->def->metavar))
                return kimi_fail(err, KIMI_ERR_USAGE, "%s: unknown flag (see --help)", a);
            attached = a[2] ? a + 2 : NULL;
        } else {
            return kimi_fail(err, KIMI_ERR_USAGE, "'%s': unexpected argument (kimi-chat takes only flags; "
                             "--prompt TEXT sends a message; see --help)", a);
        }
        if (oc->def->metavar) {
            if (attached)
                oc->value = attached;
            else if (i + 1 < argc)
                oc->value = argv[++i];
            else
                return kimi_fail(err, KIMI_ERR_USAGE, "%.*s: needs a value (%s)", (int)oc->spelled_len,
                                 oc->spelled, oc->def->metavar);
        }
        n++;
    }
    *n_occ = n;
    return 0;
}

static const occurrence *last_of(const occurrence *occ, int n, option_id id)
{
    const occurrence *found = NULL;
    for (int i = 0; i < n; i++)
        if (occ[i].def->id == id)
            found = &occ[i];
    return found;
}

static int exclusive(const occurrence *occ, int n, option_id a, option_id b, kimi_err *err)
{
    const occurrence *x = last_of(occ, n, a), *y = last_of(occ, n, b);
    if (x && y)
        return kimi_fail(err, KIMI_ERR_USAGE, "--%s and --%s: use one or the other", x->def->name, y->def->name);
    return 0;
}

static int defaults(app_options *o, kimi_err *err)
{
    memset(o, 0, sizeof *o);
    o->backend = BACKEND_CPU;
    o->tp = 1;
    o->dcp = 1;
    o->speculate = SPECULATE_AUTO;
    o->thinking = 1;
    o->reasoning = REASONING_COLLAPSED;
    o->mode = APP_MODE_PLAIN;
    o->theme = strdup("default");
    return o->theme ? 0 : kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
}

static app_mode pick_mode(const app_options *o, int plain)
{
    if (o->script_path)
        return APP_MODE_SCRIPT;
    if (o->prompt_text)
        return APP_MODE_PROMPT;
    if (plain)
        return APP_MODE_PLAIN;
    const char *term = getenv("TERM");
    if (isatty(0) && isatty(1) && term && *term && strcmp(term, "dumb"))
        return APP_MODE_TUI;
    return APP_MODE_PLAIN;
}

int options_parse(app_options *o, int argc, char **argv, kimi_err *err)
{
    int rc = defaults(o, err);
    if (rc)
        return rc;
    occurrence *occ = calloc(argc > 0 ? (size_t)argc : 1, sizeof *occ);
    if (!occ) {
        options_free(o);
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    }
    int n = 0;
    rc = scan_argv(argc, argv, occ, &n, err);
    /* --help and --version answer whatever else the command line says. */
    if (!rc && (last_of(occ, n, OPT_HELP) || last_of(occ, n, OPT_VERSION))) {
        o->show_help = last_of(occ, n, OPT_HELP) != NULL;
        o->show_version = last_of(occ, n, OPT_VERSION) != NULL;
        free(occ);
        return 0;
    }
    if (!rc)
        rc = exclusive(occ, n, OPT_SCRIPT, OPT_PROMPT, err);
    if (!rc)
        rc = exclusive(occ, n, OPT_RESUME, OPT_LOAD, err);
    if (!rc)
        rc = exclusive(occ, n, OPT_TOOLS, OPT_NO_TOOLS, err);
    if (!rc)
        rc = exclusive(occ, n, OPT_THINK, OPT_NO_THINK, err);
    if (!rc)
        rc = exclusive(occ, n, OPT_MODEL, OPT_SERVER, err);
    parse_state ps = {0};
    if (!rc) {
        const occurrence *c = last_of(occ, n, OPT_CONFIG);
        rc = load_config(o, &ps, c ? c->value : NULL, err);
    }
    for (int i = 0; i < n && !rc; i++) {
        char what[320];
        if (occ[i].value)
            snprintf(what, sizeof what, "%.*s %s", (int)occ[i].spelled_len, occ[i].spelled,
                     occ[i].value[0] ? occ[i].value : "''");
        else
            snprintf(what, sizeof what, "%.*s", (int)occ[i].spelled_len, occ[i].spelled);
        rc = apply(o, &ps, occ[i].def->id, occ[i].value ? occ[i].value : "", 0, what, err);
    }
    if (!rc) {
        if (o->no_tools) {
            /* --no-tools overrides tools = in the config. */
            free(o->tools_path);
            o->tools_path = NULL;
        }
        o->mode = pick_mode(o, last_of(occ, n, OPT_PLAIN) != NULL);
        /* NO_COLOR yields to a theme the user chose (no-color.org); --no-color does not. */
        const char *no_color = getenv("NO_COLOR");
        if (no_color && *no_color && !ps.theme_chosen)
            o->no_color = 1;
        if (o->no_color)
            rc = set_string(&o->theme, "mono", "--no-color", err);
    }
    if (!rc && o->tp % o->dcp)
        rc = kimi_fail(err, KIMI_ERR_USAGE, "--dcp %d: must divide --tp %d", o->dcp, o->tp);
    if (!rc && o->verify && o->server_url)
        rc = kimi_fail(err, KIMI_ERR_USAGE, "--verify checks the in-process engine, not a server (%s)", o->server_url);
    free(occ);
    if (rc)
        options_free(o);
    return rc;
}

void options_free(app_options *o)
{
    free(o->model_dir);
    free(o->server_url);
    free(o->server_model);
    free(o->api_key_env);
    free(o->api_key_file);
    free(o->devices);
    free(o->script_path);
    free(o->prompt_text);
    free(o->load_path);
    free(o->system_prompt);
    free(o->tools_path);
    free(o->allow_tools);
    free(o->theme);
    free(o->config_path);
    memset(o, 0, sizeof *o);
}

/* ---- --help and --version ---- */

static const char help_tail[] =
    "\n"
    "Exit status: 0 ok, 1 a script line or --verify failed, 2 usage, 3 model or\n"
    "engine failure, 130 interrupted.\n"
    "\n"
    "Files (unset XDG variables: ~/.config, ~/.local/share, ~/.local/state):\n"
    "  $XDG_CONFIG_HOME/kimi-chat/config     settings, key = value lines\n"
    "  $XDG_DATA_HOME/kimi-chat/sessions/    saved sessions (JSON)\n"
    "  $XDG_STATE_HOME/kimi-chat/history     input history\n"
    "\n"
    "Slash commands, script files and keys: kimi-chat(1), or /help inside.\n";

const char *options_help(void)
{
    static char text[8192];
    if (text[0])
        return text;
    size_t used = 0;
    used += (size_t)snprintf(text + used, sizeof text - used,
                             "usage: kimi-chat [OPTIONS]\n"
                             "A terminal chat with Kimi-K2.5, run in-process.\n");
    for (int i = 0; i < N_FLAGS && used < sizeof text; i++) {
        const flag_def *f = &flags[i];
        if (!f->name) {
            used += (size_t)snprintf(text + used, sizeof text - used, "\n%s:\n", f->help);
            continue;
        }
        char head[64];
        if (f->short_name)
            snprintf(head, sizeof head, "-%c, --%s%s%s", f->short_name, f->name, f->metavar ? " " : "",
                     f->metavar ? f->metavar : "");
        else
            snprintf(head, sizeof head, "    --%s%s%s", f->name, f->metavar ? " " : "", f->metavar ? f->metavar : "");
        used += (size_t)snprintf(text + used, sizeof text - used, "  %-23s %s\n", head, f->help);
    }
    if (used < sizeof text)
        snprintf(text + used, sizeof text - used, "%s", help_tail);
    return text;
}

const char *options_version(void)
{
    return "kimi-chat " KIMI_VERSION;
}
