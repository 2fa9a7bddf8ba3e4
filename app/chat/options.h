/* options: what the user asked for, from the config file ($XDG_CONFIG_HOME/kimi-chat/config,
 * `key = value` lines) overridden by the command-line flags; --help text and the man page
 * list the same flags. docs/UI.md "Modes" and "Configuration and conventions". */
#ifndef KIMI_APP_OPTIONS_H
#define KIMI_APP_OPTIONS_H

#include <stdint.h>

#include "engine/base/error.h"

typedef enum {
    APP_MODE_TUI,           /* full screen: stdin and stdout are terminals and TERM is not dumb */
    APP_MODE_PLAIN,         /* --plain, or stdout is not a terminal, or TERM=dumb */
    APP_MODE_SCRIPT,        /* --script FILE */
    APP_MODE_PROMPT,        /* --prompt TEXT */
} app_mode;

typedef enum { REASONING_COLLAPSED, REASONING_EXPANDED, REASONING_HIDDEN } reasoning_view;

typedef struct {
    /* the model and engine */
    char *model_dir;        /* --model / model =; NULL: the bundled demo model */
    int model_is_demo;      /* set by main when model_dir was filled with the demo model */
    char *server_url;       /* --server / server =: answers from this OpenAI-compatible server */
    char *server_model;     /* --server-model / server_model = (NULL: the first it lists) */
    char *api_key_env;      /* --api-key-env / api_key_env = (NULL: OPENAI_API_KEY); the key
                               itself is never a flag, never stored */
    char *api_key_file;     /* --api-key-file / api_key_file = */
    int backend;            /* --backend / backend =: BACKEND_CPU (default) or BACKEND_CUDA */
    int tp;                 /* --tp / tp = (default 1) */
    int dcp;                /* --dcp / dcp = (default 1): ranks the KV cache is sharded over, divides tp */
    long max_context;       /* --max-context / max_context = (0: as much as fits) */
    double mem_gib;         /* --mem-gib / mem_gib = (0: the engine's default) */
    int threads;            /* --threads (0: cores / tp) */
    int speculate;          /* --speculate / speculate =: SPECULATE_AUTO, _OFF or a draft length */
    int kv_cache;           /* --kv-cache / kv_cache =: KV_CACHE_FP16 (default: the reference the
                               tolerances are stated against, whatever the checkpoint asks) or
                               KV_CACHE_FP8 (README "FP8 latent cache") */
    int cpu_activations;    /* --cpu-activations / cpu_activations =: CPU_ACTIVATIONS_FP32 (default,
                               the reference) or CPU_ACTIVATIONS_INT8 (README "int8 activations") */
    int cpu_weights;        /* --cpu-weights / cpu_weights =: CPU_WEIGHTS_HUGE_PAGES (default: moved
                               into 2 MiB pages, faster) or CPU_WEIGHTS_MMAP (left in the mmap:
                               shared between processes, droppable under memory pressure) */
    char *devices;          /* --devices / devices =: which GPUs, as written ("0,1,2,3", checked
                               by device_list_parse); NULL: the engine's choice */
    int verify;             /* --verify: the self-check (engine/runtime/verify.h) before the chat */

    /* the mode */
    app_mode mode;
    char *script_path;      /* --script FILE ("-" = stdin) */
    int keep_going;         /* --keep-going */
    char *prompt_text;      /* --prompt TEXT */

    /* the session */
    int resume;             /* --resume: reopen the newest saved session */
    char *load_path;        /* --load FILE */
    char *system_prompt;    /* --system TEXT */
    int no_save;            /* --no-save: no autosave */

    /* sampling; the has_ flags say what the user set (the rest follow thinking on/off:
       docs/CHAT_FORMAT.md "Sampling defaults") */
    int thinking;           /* --think on|off / thinking = (default on) */
    float temperature;      int has_temperature;    /* --temperature / temperature = */
    float top_p;            int has_top_p;          /* --top-p / top_p = */
    int top_k;                                      /* --top-k / top_k = (0 = off) */
    int max_tokens;                                 /* --max-tokens / max_tokens = (0 = no cap) */
    uint64_t seed;          int has_seed;           /* --seed / seed = (else from the clock) */
    unsigned flag_settings; /* OPTIONS_SET_* bits: the settings the command line gave, which
                               override a loaded session's (--load, --resume, /load); the
                               config file's do not (they are defaults for new sessions) */

    /* tools */
    char *tools_path;       /* --tools FILE / tools =; NULL: the demo model's tools.json when
                               the demo model runs, else none */
    int no_tools;           /* --no-tools */
    char *allow_tools;      /* --allow-tools NAME,...|all: run without asking */

    /* the view */
    reasoning_view reasoning;   /* --reasoning / reasoning = (default collapsed) */
    int hide_reasoning;     /* --hide-reasoning: plain/script/prompt modes print no reasoning */
    char *theme;            /* --theme / theme = (default "default"; NO_COLOR: "mono") */
    int no_color;           /* NO_COLOR set (non-empty) or --no-color */
    int mouse;              /* --mouse */
    int no_alt_screen;      /* --no-alt-screen */
    int verbose;            /* --verbose: the memory plan said at start, not only in /stats */

    int show_help;          /* --help: print options_help() and exit 0 */
    int show_version;       /* --version */
    char *config_path;      /* the config file read (~ expanded), or NULL when there was none */
} app_options;

enum {
    OPTIONS_SET_THINKING = 1u << 0,
    OPTIONS_SET_TEMPERATURE = 1u << 1,
    OPTIONS_SET_TOP_P = 1u << 2,
    OPTIONS_SET_TOP_K = 1u << 3,
    OPTIONS_SET_MAX_TOKENS = 1u << 4,
    OPTIONS_SET_SEED = 1u << 5,
};

/* Fill o: defaults, then the config file (--config FILE, else $XDG_CONFIG_HOME/kimi-chat/config
 * when it exists), then argv. Errors are KIMI_ERR_USAGE, one line naming the flag
 * ("--tp 0: must be 1..8") or the config line ("~/.config/kimi-chat/config:4: unknown key
 * 'colour'"); o is then already freed. isatty/TERM decide between TUI and plain when no mode
 * flag is given. --help or --version anywhere on a well-formed command line return at once with
 * show_help / show_version set (the config is not read, the other values are not checked).
 * Path values ("~/" expanded; relative ones in the config file are relative to its directory):
 * model, script, load, tools, config. */
int options_parse(app_options *o, int argc, char **argv, kimi_err *err);
void options_free(app_options *o);

/* The --help text: every flag, one line each, grouped as above, with the defaults, the exit
 * codes and the files. app/kimi-chat.1 lists the same flags (tests/unit/test_options.c checks). */
const char *options_help(void);

/* The --version line: "kimi-chat 0.1.0" (the project's version in CMakeLists.txt). */
const char *options_version(void);

#endif
