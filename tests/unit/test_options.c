/* test_options: every flag in both spellings, every kind of bad value with its exact message,
 * the config file (keys, errors naming file:line, precedence, paths), NO_COLOR, the choice of
 * mode (with a pseudo-terminal for the full-screen case), and --help against the man page
 * app/kimi-chat.1: the same flags both ways. */
#include <ctype.h>
#include <math.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/chat/commands.h"
#include "app/chat/options.h"
#include "engine/backend/backend.h"
#include "engine/base/file_io.h"
#include "engine/runtime/speculate.h"
#include "kernels/kv_format.h"
#include "tests/unit/check.h"

static char tmp[PATH_MAX], home[PATH_MAX + 16];

/* Parse a NULL-terminated list of arguments (argv[0] added). */
static int parse(app_options *o, kimi_err *err, ...)
{
    char *argv[64] = {"kimi-chat"};
    int argc = 1;
    va_list ap;
    va_start(ap, err);
    for (char *a; argc < 63 && (a = va_arg(ap, char *));)
        argv[argc++] = a;
    va_end(ap);
    memset(err, 0, sizeof *err);
    return options_parse(o, argc, argv, err);
}

/* The arguments fail with KIMI_ERR_USAGE and exactly msg. */
#define EXPECT_ERROR(want, ...)                                                    \
    do {                                                                          \
        app_options o_;                                                           \
        kimi_err e_;                                                              \
        CHECK_INT(parse(&o_, &e_, __VA_ARGS__, (char *)NULL), KIMI_ERR_USAGE);    \
        CHECK_STR(e_.msg, want);                                                  \
        CHECK(o_.theme == NULL);  /* freed on error */                            \
    } while (0)

#define PARSE_OK(o, ...)                                                          \
    do {                                                                          \
        kimi_err e_;                                                              \
        int rc_ = parse(&(o), &e_, __VA_ARGS__, (char *)NULL);                   \
        CHECK_MSG(rc_ == 0, "%s", e_.msg);                                        \
        if (rc_)                                                                  \
            memset(&(o), 0, sizeof(o));                                           \
    } while (0)

static void write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (f) {
        fwrite(text, 1, len, f);
        fclose(f);
    }
}

static char config_dir[PATH_MAX + 64], config_file[PATH_MAX + 96];

static void write_config(const char *text) { write_file(config_file, text, strlen(text)); }

/* A clean environment: HOME in the temp dir, no XDG, no NO_COLOR, TERM=dumb, no config. */
static void reset_env(void)
{
    setenv("HOME", home, 1);
    unsetenv("XDG_CONFIG_HOME");
    unsetenv("NO_COLOR");
    setenv("TERM", "dumb", 1);
    unlink(config_file);
}

static void test_defaults(void)
{
    reset_env();
    app_options o;
    PARSE_OK(o, NULL);
    CHECK(o.model_dir == NULL);
    CHECK_INT(o.backend, BACKEND_CPU);
    CHECK_INT(o.tp, 1);
    CHECK_INT(o.max_context, 0);
    CHECK_NEAR(o.mem_gib, 0, 0);
    CHECK_INT(o.threads, 0);
    CHECK(o.devices == NULL);
    CHECK_INT(o.speculate, SPECULATE_AUTO);
    CHECK_INT(o.kv_cache, KV_CACHE_FP16);
    CHECK_INT(o.cpu_activations, CPU_ACTIVATIONS_FP32);
    CHECK_INT(o.cpu_weights, CPU_WEIGHTS_HUGE_PAGES);
    CHECK_INT(o.mode, APP_MODE_PLAIN);
    CHECK(o.script_path == NULL && o.prompt_text == NULL && !o.keep_going);
    CHECK(!o.resume && o.load_path == NULL && o.system_prompt == NULL && !o.no_save);
    CHECK_INT(o.thinking, 1);
    CHECK(!o.has_temperature && !o.has_top_p && !o.has_seed);
    CHECK_INT(o.top_k, 0);
    CHECK_INT(o.max_tokens, 0);
    CHECK(o.tools_path == NULL && !o.no_tools && o.allow_tools == NULL);
    CHECK_INT(o.reasoning, REASONING_COLLAPSED);
    CHECK(!o.hide_reasoning && !o.no_color && !o.mouse && !o.no_alt_screen);
    CHECK_STR(o.theme, "default");
    CHECK(!o.show_help && !o.show_version && o.config_path == NULL);
    options_free(&o);
    CHECK(o.theme == NULL);
    options_free(&o);  /* twice is harmless */
}

static void test_every_flag(void)
{
    reset_env();
    app_options o;
    char want[PATH_MAX + 64];

    PARSE_OK(o, "--model", "/m/k25", "--backend", "cuda", "--tp", "8", "--max-context", "131072",
             "--mem-gib", "1.5", "--threads", "12", "--plain", "--keep-going", "--resume", "--system",
             "Be terse.", "--no-save", "--think", "off", "--temperature", "0.7", "--top-p", "0.9",
             "--top-k", "40", "--max-tokens", "256", "--seed", "18446744073709551615", "--tools",
             "/t/tools.json", "--allow-tools", "now,word_count", "--reasoning", "expanded",
             "--hide-reasoning", "--theme", "light", "--mouse", "--no-alt-screen", "--devices", "4,5,6,7,0,1,2,3", "--speculate", "16");
    CHECK_STR(o.model_dir, "/m/k25");
    CHECK_INT(o.speculate, 16);
    CHECK_STR(o.devices, "4,5,6,7,0,1,2,3");
    CHECK_INT(o.backend, BACKEND_CUDA);
    CHECK_INT(o.tp, 8);
    CHECK_INT(o.max_context, 131072);
    CHECK_NEAR(o.mem_gib, 1.5, 0);
    CHECK_INT(o.threads, 12);
    CHECK_INT(o.mode, APP_MODE_PLAIN);
    CHECK_INT(o.keep_going, 1);
    CHECK_INT(o.resume, 1);
    CHECK_STR(o.system_prompt, "Be terse.");
    CHECK_INT(o.no_save, 1);
    CHECK_INT(o.thinking, 0);
    CHECK(o.has_temperature && o.temperature == 0.7f);
    CHECK(o.has_top_p && o.top_p == 0.9f);
    CHECK_INT(o.top_k, 40);
    CHECK_INT(o.flag_settings, OPTIONS_SET_THINKING | OPTIONS_SET_TEMPERATURE | OPTIONS_SET_TOP_P |
                               OPTIONS_SET_TOP_K | OPTIONS_SET_MAX_TOKENS | OPTIONS_SET_SEED);
    CHECK_INT(o.max_tokens, 256);
    CHECK(o.has_seed && o.seed == UINT64_MAX);
    CHECK_STR(o.tools_path, "/t/tools.json");
    CHECK_STR(o.allow_tools, "now,word_count");
    CHECK_INT(o.reasoning, REASONING_EXPANDED);
    CHECK_INT(o.hide_reasoning, 1);
    CHECK_STR(o.theme, "light");
    CHECK(o.mouse && o.no_alt_screen && !o.no_color);
    options_free(&o);

    /* The = spelling, short flags with the value apart and attached, ~/ expansion. */
    PARSE_OK(o, "--model=~/models/k", "--tp=2", "--backend=cpu", "--reasoning=hidden", "--seed=0",
             "--temperature=0", "--top-p=1", "--no-think", "--no-tools", "--allow-tools=all");
    snprintf(want, sizeof want, "%s/models/k", home);
    CHECK_STR(o.model_dir, want);
    CHECK_INT(o.tp, 2);
    CHECK_INT(o.backend, BACKEND_CPU);
    CHECK_INT(o.reasoning, REASONING_HIDDEN);
    CHECK(o.has_seed && o.seed == 0);
    CHECK(o.has_temperature && o.temperature == 0);
    CHECK(o.has_top_p && o.top_p == 1);
    CHECK_INT(o.thinking, 0);
    CHECK_INT(o.no_tools, 1);
    CHECK_STR(o.allow_tools, "all");
    options_free(&o);
    PARSE_OK(o, "-m", "dir", "-p", "hello there");
    CHECK_STR(o.model_dir, "dir");
    CHECK_INT(o.mode, APP_MODE_PROMPT);
    CHECK_STR(o.prompt_text, "hello there");
    options_free(&o);
    PARSE_OK(o, "-mdir2", "-phi", "--think=on");
    CHECK_STR(o.model_dir, "dir2");
    CHECK_STR(o.prompt_text, "hi");
    CHECK_INT(o.thinking, 1);
    options_free(&o);
    /* A value may start with '-'; the last of a repeated flag wins. */
    PARSE_OK(o, "--prompt", "-x is a flag?", "--system", "", "--tp", "3", "--tp", "4");
    CHECK_STR(o.prompt_text, "-x is a flag?");
    CHECK_STR(o.system_prompt, "");
    CHECK_INT(o.tp, 4);
    options_free(&o);
    PARSE_OK(o, "--script", "-", "--plain");
    CHECK_INT(o.mode, APP_MODE_SCRIPT);
    CHECK_STR(o.script_path, "-");
    options_free(&o);
    PARSE_OK(o, "--script", "~/demo.kc", "--load", "~/s.json");
    snprintf(want, sizeof want, "%s/demo.kc", home);
    CHECK_STR(o.script_path, want);
    snprintf(want, sizeof want, "%s/s.json", home);
    CHECK_STR(o.load_path, want);
    options_free(&o);
    PARSE_OK(o, "--no-color", "--theme", "light");
    CHECK_INT(o.no_color, 1);
    CHECK_STR(o.theme, "mono");
    options_free(&o);
}

static void test_help_and_version(void)
{
    reset_env();
    app_options o;
    PARSE_OK(o, "--help");
    CHECK(o.show_help && !o.show_version);
    options_free(&o);
    PARSE_OK(o, "-h");
    CHECK(o.show_help);
    options_free(&o);
    PARSE_OK(o, "-V");
    CHECK(o.show_version && !o.show_help);
    options_free(&o);
    /* --help answers whatever the values; the config is not read. */
    write_config("colour = red\n");
    PARSE_OK(o, "--tp", "0", "--version", "--script", "a", "--prompt", "b");
    CHECK(o.show_version && o.config_path == NULL);
    options_free(&o);
    unlink(config_file);
    /* ... but a malformed command line is still an error. */
    EXPECT_ERROR("--colour: unknown flag (see --help)", "--help", "--colour");
    CHECK(!strncmp(options_version(), "kimi-chat ", 10) && isdigit((unsigned char)options_version()[10]));
}

static void test_flag_errors(void)
{
    reset_env();
    EXPECT_ERROR("--tp 0: must be 1..8", "--tp", "0");
    EXPECT_ERROR("--tp 9: must be 1..8", "--tp=9");
    EXPECT_ERROR("--tp 1x: not an integer (must be 1..8)", "--tp", "1x");
    EXPECT_ERROR("--tp  1: not an integer (must be 1..8)", "--tp", " 1");
    EXPECT_ERROR("--tp '': not an integer (must be 1..8)", "--tp=");
    EXPECT_ERROR("--tp 99999999999999999999: out of range (must be 1..8)", "--tp", "99999999999999999999");
    EXPECT_ERROR("--tp: needs a value (N)", "--tp");
    EXPECT_ERROR("--dcp 0: must be 1..8, dividing --tp", "--dcp", "0");
    EXPECT_ERROR("--dcp -2: must be 1..8, dividing --tp", "--dcp", "-2");
    EXPECT_ERROR("--dcp two: not an integer (must be 1..8, dividing --tp)", "--dcp", "two");
    EXPECT_ERROR("--dcp 16: must be 1..8, dividing --tp", "--tp", "8", "--dcp", "16");
    EXPECT_ERROR("--dcp 2: must divide --tp 1", "--dcp", "2");
    EXPECT_ERROR("--dcp 3: must divide --tp 8", "--tp", "8", "--dcp", "3");
    EXPECT_ERROR("--dcp 8: must divide --tp 4", "--dcp", "8", "--tp", "4");
    {
        app_options o;
        PARSE_OK(o, "--tp", "8", "--dcp", "4");
        CHECK_INT(o.tp, 8);
        CHECK_INT(o.dcp, 4);
        options_free(&o);
        PARSE_OK(o, "--tp", "2");
        CHECK_INT(o.dcp, 1);
        options_free(&o);
    }
    EXPECT_ERROR("--devices 0,,1: not a list of device ordinals 0..1023 like 0,1,2,3", "--devices", "0,,1");
    EXPECT_ERROR("--devices 0,1,2,3,4,5,6,7,8: at most 8 devices (one per rank)", "--devices", "0,1,2,3,4,5,6,7,8");
    EXPECT_ERROR("-m: needs a value (DIR)", "-m");
    EXPECT_ERROR("--colour: unknown flag (see --help)", "--colour");
    EXPECT_ERROR("--colour: unknown flag (see --help)", "--colour=always");
    EXPECT_ERROR("-x: unknown flag (see --help)", "-x");
    EXPECT_ERROR("-hV: unknown flag (see --help)", "-hV");
    EXPECT_ERROR("--plain=1: --plain takes no value", "--plain=1");
    EXPECT_ERROR("'hello': unexpected argument (kimi-chat takes only flags; --prompt TEXT sends a message; "
                 "see --help)", "--plain", "hello");
    EXPECT_ERROR("'-': unexpected argument (kimi-chat takes only flags; --prompt TEXT sends a message; "
                 "see --help)", "-");
    EXPECT_ERROR("'--': unexpected argument (kimi-chat takes only flags; --prompt TEXT sends a message; "
                 "see --help)", "--");
    EXPECT_ERROR("--backend gpu: must be cpu or cuda", "--backend", "gpu");
    EXPECT_ERROR("--max-context -1: must be 0 or more", "--max-context", "-1");
    EXPECT_ERROR("--max-context 4k: not an integer (must be 0 or more)", "--max-context", "4k");
    EXPECT_ERROR("--mem-gib -2: must be 0 (the engine picks) or 1e-9..1e9 GiB", "--mem-gib", "-2");
    EXPECT_ERROR("--mem-gib 1e300: must be 0 (the engine picks) or 1e-9..1e9 GiB", "--mem-gib", "1e300");
    EXPECT_ERROR("--mem-gib 1e-12: must be 0 (the engine picks) or 1e-9..1e9 GiB", "--mem-gib", "1e-12");
    EXPECT_ERROR("--mem-gib inf: must be a finite number, >= 0", "--mem-gib", "inf");
    EXPECT_ERROR("--threads 5000: must be 0..4096", "--threads", "5000");
    EXPECT_ERROR("--speculate 0: must be off, auto or a draft length 1..16", "--speculate", "0");
    EXPECT_ERROR("--speculate 17: must be off, auto or a draft length 1..16", "--speculate", "17");
    EXPECT_ERROR("--speculate on: must be off, auto or a draft length 1..16", "--speculate", "on");
    EXPECT_ERROR("--speculate '': must be off, auto or a draft length 1..16", "--speculate", "");
    EXPECT_ERROR("--kv-cache fp4: must be fp16 or fp8", "--kv-cache", "fp4");
    EXPECT_ERROR("--kv-cache FP8: must be fp16 or fp8", "--kv-cache", "FP8");
    EXPECT_ERROR("--kv-cache '': must be fp16 or fp8", "--kv-cache", "");
    EXPECT_ERROR("--cpu-activations int4: must be fp32 or int8", "--cpu-activations", "int4");
    EXPECT_ERROR("--cpu-activations INT8: must be fp32 or int8", "--cpu-activations", "INT8");
    EXPECT_ERROR("--cpu-activations '': must be fp32 or int8", "--cpu-activations", "");
    EXPECT_ERROR("--cpu-weights huge: must be huge-pages or mmap", "--cpu-weights", "huge");
    EXPECT_ERROR("--cpu-weights MMAP: must be huge-pages or mmap", "--cpu-weights", "MMAP");
    EXPECT_ERROR("--cpu-weights '': must be huge-pages or mmap", "--cpu-weights", "");
    EXPECT_ERROR("--think maybe: must be on or off", "--think", "maybe");
    EXPECT_ERROR("--think true: must be on or off", "--think", "true");
    EXPECT_ERROR("--temperature 150: must be a number in [0, 100]", "--temperature", "150");
    EXPECT_ERROR("--temperature 1e308: must be a number in [0, 100]", "--temperature", "1e308");
    EXPECT_ERROR("--temperature nan: must be a number in [0, 100]", "--temperature", "nan");
    EXPECT_ERROR("--temperature -inf: must be a number in [0, 100]", "--temperature", "-inf");
    EXPECT_ERROR("--temperature 1e999: must be a number in [0, 100]", "--temperature", "1e999");
    EXPECT_ERROR("--temperature 1e39: must be a number in [0, 100]", "--temperature", "1e39");
    EXPECT_ERROR("--temperature -0.1: must be a number in [0, 100]", "--temperature", "-0.1");
    EXPECT_ERROR("--temperature 0.5x: must be a number in [0, 100]", "--temperature", "0.5x");
    EXPECT_ERROR("--temperature '': must be a number in [0, 100]", "--temperature=");
    EXPECT_ERROR("--top-p 0: must be a number in (0, 1]", "--top-p", "0");
    EXPECT_ERROR("--top-p 1.01: must be a number in (0, 1]", "--top-p", "1.01");
    EXPECT_ERROR("--top-p NaN: must be a number in (0, 1]", "--top-p", "NaN");
    EXPECT_ERROR("--top-k -1: must be a whole number from 0 to 1073741824", "--top-k", "-1");
    EXPECT_ERROR("--max-tokens 2147483648: must be a whole number from 0 to 1073741824", "--max-tokens", "2147483648");
    EXPECT_ERROR("--seed -1: must be a whole number from 0 to 18446744073709551615", "--seed", "-1");
    EXPECT_ERROR("--seed 0x10: must be a whole number from 0 to 18446744073709551615", "--seed", "0x10");
    EXPECT_ERROR("--seed 18446744073709551616: must be a whole number from 0 to 18446744073709551615",
                 "--seed", "18446744073709551616");
    EXPECT_ERROR("--reasoning full: must be collapsed, expanded or hidden", "--reasoning", "full");
    EXPECT_ERROR("--theme ../x: not a theme name (themes/NAME.theme)", "--theme", "../x");
    EXPECT_ERROR("--theme neon: theme 'neon' not found (themes: default, high-contrast, light, mono)",
                 "--theme", "neon");
    EXPECT_ERROR("--theme a/b: not a theme name (themes/NAME.theme)", "--theme", "a/b");
    EXPECT_ERROR("--allow-tools a,,b: empty tool name (NAME,... or all)", "--allow-tools", "a,,b");
    EXPECT_ERROR("--allow-tools now,: empty tool name (NAME,... or all)", "--allow-tools", "now,");
    EXPECT_ERROR("--allow-tools a b: 'a b' is not a tool name (NAME,... or all)", "--allow-tools", "a b");
    EXPECT_ERROR("--allow-tools now,all: 'all' goes alone", "--allow-tools", "now,all");
    EXPECT_ERROR("--prompt '': the message is empty", "--prompt", "");
    EXPECT_ERROR("--script '': needs a file name (- for stdin)", "--script", "");
    EXPECT_ERROR("--load '': needs a file name", "--load=");
    EXPECT_ERROR("--tools '': needs a file name", "--tools", "");
    EXPECT_ERROR("--model '': needs a folder name", "--model", "");
    EXPECT_ERROR("--api-key-file '': needs a file name", "--api-key-file=");
    EXPECT_ERROR("--config '': needs a file name", "--config", "");
    EXPECT_ERROR("--script and --prompt: use one or the other", "--script", "a.kc", "-p", "hi");
    EXPECT_ERROR("--resume and --load: use one or the other", "--load", "s.json", "--resume");
    EXPECT_ERROR("--model and --server: use one or the other", "--server", "http://127.0.0.1:8000", "--model", "m");
    EXPECT_ERROR("--server localhost:8000: must start with http:// or https://", "--server", "localhost:8000");
    EXPECT_ERROR("--tools and --no-tools: use one or the other", "--no-tools", "--tools", "t.json");
    EXPECT_ERROR("--think and --no-think: use one or the other", "--think", "on", "--no-think");
    unsetenv("HOME");
    EXPECT_ERROR("--model ~/k: ~/k: HOME is not set", "--model", "~/k");
    setenv("HOME", home, 1);
}

/* --verify sets its flag; against a server (from the flags or the config) it is refused, also
 * when --no-color has work to do after the flags are read. */
static void test_verify_flag(void)
{
    reset_env();
    app_options o;
    PARSE_OK(o, "--verify", "--backend", "cuda", "--tp", "8");
    CHECK_INT(o.verify, 1);
    options_free(&o);
    PARSE_OK(o, "--tp", "2");
    CHECK_INT(o.verify, 0);
    options_free(&o);
    EXPECT_ERROR("--verify checks the in-process engine, not a server (http://gpu:8000)", "--verify", "--server",
                 "http://gpu:8000");
    EXPECT_ERROR("--verify checks the in-process engine, not a server (http://gpu:8000)", "--no-color", "--verify",
                 "--server", "http://gpu:8000");
    write_config("server = http://gpu:8000\n");
    EXPECT_ERROR("--verify checks the in-process engine, not a server (http://gpu:8000)", "--verify");
    reset_env();
}

static void test_config(void)
{
    reset_env();
    char want[2 * PATH_MAX];
    app_options o;
    write_config("# kimi-chat settings\r\n"
                 "\n"
                 "model = ~/models/k25\r\n"
                 "  backend\t=\tcuda  \n"
                 "tp = 8\n"
                 "devices = 0,1,2,3\n"
                 "max_context = 65536\n"
                 "mem_gib = 80\n"
                 "theme = \"high-contrast\"\n"
                 "temperature = 0.6\n"
                 "top_p = 0.95\n"
                 "top_k = 20\n"
                 "max_tokens = 4096\n"
                 "seed = 42\n"
                 "thinking = false\n"
                 "tools = tools/mine.json\n"
                 "reasoning = hidden");
    PARSE_OK(o, NULL);
    CHECK_STR(o.config_path, config_file);
    snprintf(want, sizeof want, "%s/models/k25", home);
    CHECK_STR(o.model_dir, want);
    CHECK_INT(o.backend, BACKEND_CUDA);
    CHECK_INT(o.tp, 8);
    CHECK_STR(o.devices, "0,1,2,3");
    CHECK_INT(o.max_context, 65536);
    CHECK_NEAR(o.mem_gib, 80, 0);
    CHECK_STR(o.theme, "high-contrast");
    CHECK(o.has_temperature && o.temperature == 0.6f);
    CHECK(o.has_top_p && o.top_p == 0.95f);
    CHECK_INT(o.top_k, 20);
    CHECK_INT(o.max_tokens, 4096);
    CHECK(o.has_seed && o.seed == 42);
    CHECK_INT(o.thinking, 0);
    CHECK_INT(o.flag_settings, 0);   /* the config's settings do not override a loaded session */
    /* A relative path in the config file is relative to the file. */
    snprintf(want, sizeof want, "%s/tools/mine.json", config_dir);
    CHECK_STR(o.tools_path, want);
    CHECK_INT(o.reasoning, REASONING_HIDDEN);
    options_free(&o);

    /* Flags override the file; --no-tools drops its tools. */
    PARSE_OK(o, "--tp", "2", "--think", "on", "--theme", "light", "--no-tools", "-m", "rel");
    CHECK_INT(o.tp, 2);
    CHECK_INT(o.thinking, 1);
    CHECK_STR(o.theme, "light");
    CHECK(o.no_tools && o.tools_path == NULL);
    CHECK_STR(o.model_dir, "rel");  /* relative to the current directory, as typed */
    CHECK_INT(o.backend, BACKEND_CUDA);
    options_free(&o);

    write_config("thinking = true\nthinking = on\n");
    PARSE_OK(o, NULL);
    CHECK_INT(o.thinking, 1);
    options_free(&o);

    /* speculate = off|auto|N, and the flag over it */
    write_config("speculate = off\n");
    PARSE_OK(o, NULL);
    CHECK_INT(o.speculate, SPECULATE_OFF);
    options_free(&o);
    PARSE_OK(o, "--speculate", "auto");
    CHECK_INT(o.speculate, SPECULATE_AUTO);
    options_free(&o);
    write_config("speculate = 3\n");
    PARSE_OK(o, NULL);
    CHECK_INT(o.speculate, 3);
    options_free(&o);

    /* kv_cache = fp16|fp8, cpu_activations = fp32|int8, cpu_weights = huge-pages|mmap: the key
     * sets it, and the flag (with the other value) wins over the key. */
#define CONFIG_THEN_FLAG(line, field, config_value, flag, flag_arg, flag_value) \
    do {                                                                        \
        write_config(line);                                                     \
        PARSE_OK(o, NULL);                                                      \
        CHECK_INT(o.field, config_value);                                       \
        options_free(&o);                                                       \
        PARSE_OK(o, flag, flag_arg);                                            \
        CHECK_INT(o.field, flag_value);                                         \
        options_free(&o);                                                       \
    } while (0)
    CONFIG_THEN_FLAG("kv_cache = fp8\n", kv_cache, KV_CACHE_FP8, "--kv-cache", "fp16", KV_CACHE_FP16);
    CONFIG_THEN_FLAG("cpu_activations = int8\n", cpu_activations, CPU_ACTIVATIONS_INT8, "--cpu-activations", "fp32",
                     CPU_ACTIVATIONS_FP32);
    CONFIG_THEN_FLAG("cpu_weights = mmap\n", cpu_weights, CPU_WEIGHTS_MMAP, "--cpu-weights", "huge-pages",
                     CPU_WEIGHTS_HUGE_PAGES);
#undef CONFIG_THEN_FLAG

    /* XDG_CONFIG_HOME moves the default file. */
    char xdg[PATH_MAX + 64], other[PATH_MAX + 96];
    snprintf(xdg, sizeof xdg, "%s/xdg", tmp);
    snprintf(other, sizeof other, "%s/xdg/kimi-chat", tmp);
    mkdir(xdg, 0700);
    mkdir(other, 0700);
    snprintf(other, sizeof other, "%s/xdg/kimi-chat/config", tmp);
    write_file(other, "tp = 3\n", 7);
    setenv("XDG_CONFIG_HOME", xdg, 1);
    PARSE_OK(o, NULL);
    CHECK_INT(o.tp, 3);
    CHECK_STR(o.config_path, other);
    options_free(&o);
    unsetenv("XDG_CONFIG_HOME");

    /* --config replaces the default file (a broken default is then not read). */
    write_config("colour = red\n");
    PARSE_OK(o, "--config", other);
    CHECK_INT(o.tp, 3);
    CHECK_STR(o.config_path, other);
    options_free(&o);
    snprintf(want, sizeof want, "--config %s/none: No such file or directory", tmp);
    char missing[PATH_MAX + 16];
    snprintf(missing, sizeof missing, "%s/none", tmp);
    {
        app_options o2;
        kimi_err e;
        CHECK_INT(parse(&o2, &e, "--config", missing, (char *)NULL), KIMI_ERR_USAGE);
        CHECK_STR(e.msg, want);
    }
    /* No HOME and no XDG_CONFIG_HOME: no config, no error. */
    unsetenv("HOME");
    PARSE_OK(o, NULL);
    CHECK(o.config_path == NULL);
    options_free(&o);
    setenv("HOME", home, 1);
}

/* The config text fails with msg; "CFG" in msg stands for the file as shown ("~/..."). */
static void expect_config_error(const char *text, size_t len, const char *msg)
{
    write_file(config_file, text, len);
    char want[1024];
    const char *at = strstr(msg, "CFG");
    snprintf(want, sizeof want, "%.*s~/.config/kimi-chat/config%s", (int)(at - msg), msg, at + 3);
    app_options o;
    kimi_err e;
    CHECK_INT(parse(&o, &e, (char *)NULL), KIMI_ERR_USAGE);
    CHECK_STR(e.msg, want);
}

/* text is a string literal: its length counts NUL bytes inside it. */
#define CONFIG_ERROR(text, msg) expect_config_error(text, sizeof text - 1, msg)

static void test_config_errors(void)
{
    reset_env();
    CONFIG_ERROR("tp = 4\n\n# c\ncolour = red\n", "CFG:4: unknown key 'colour'");
    CONFIG_ERROR("# c\ntp = 0\n", "CFG:2: tp = 0: must be 1..8");
    CONFIG_ERROR("tp = 4\ndcp = 0\n", "CFG:2: dcp = 0: must be 1..8, dividing --tp");
    {
        /* checked once the flags are in: a config's dcp may pair with a --tp flag */
        app_options o;
        kimi_err e;
        write_file(config_file, "tp = 4\ndcp = 8\n", 15);
        CHECK_INT(parse(&o, &e, (char *)NULL), KIMI_ERR_USAGE);
        CHECK_STR(e.msg, "--dcp 8: must divide --tp 4");
        PARSE_OK(o, "--tp", "8");
        CHECK_INT(o.dcp, 8);
        options_free(&o);
    }
    CONFIG_ERROR("temperature = nan\n", "CFG:1: temperature = nan: must be a number in [0, 100]");
    CONFIG_ERROR("top_p = 0.95 # cooler\n", "CFG:1: top_p = 0.95 # cooler: must be a number in (0, 1]");
    CONFIG_ERROR("model\n", "CFG:1: expected 'key = value'");
    CONFIG_ERROR(" = x\n", "CFG:1: unknown key ''");
    CONFIG_ERROR("x\r\ntp =\r\n", "CFG:1: expected 'key = value'");
    CONFIG_ERROR("tp =   \n", "CFG:1: tp: no value");
    CONFIG_ERROR("thinking = yes\n", "CFG:1: thinking = yes: must be on or off (or true or false)");
    CONFIG_ERROR("backend = gpu\n", "CFG:1: backend = gpu: must be cpu or cuda");
    CONFIG_ERROR("cpu_weights = thp\n", "CFG:1: cpu_weights = thp: must be huge-pages or mmap");
    CONFIG_ERROR("devices = 0 1\n", "CFG:1: devices = 0 1: not a list of device ordinals 0..1023 like 0,1,2,3");
    CONFIG_ERROR("seed = 1.5\n", "CFG:1: seed = 1.5: must be a whole number from 0 to 18446744073709551615");
    CONFIG_ERROR("reasoning = folded\n", "CFG:1: reasoning = folded: must be collapsed, expanded or hidden");
    CONFIG_ERROR("tp = 1\nmodel = a\0b\n", "CFG:2: NUL byte in the line");
    CONFIG_ERROR("Model = x\n", "CFG:1: unknown key 'Model'");
    CONFIG_ERROR("max-context = 5\n", "CFG:1: unknown key 'max-context'");
    /* The file is not a file. */
    unlink(config_file);
    CHECK(mkdir(config_file, 0700) == 0);
    app_options o;
    kimi_err e;
    CHECK_INT(parse(&o, &e, (char *)NULL), KIMI_ERR_USAGE);
    CHECK_MSG(strstr(e.msg, config_file) != NULL, "%s", e.msg);
    rmdir(config_file);
}

static void test_no_color(void)
{
    reset_env();
    app_options o;
    setenv("NO_COLOR", "1", 1);
    PARSE_OK(o, NULL);
    CHECK(o.no_color && !strcmp(o.theme, "mono"));
    options_free(&o);
    /* A theme the user chose wins over NO_COLOR (no-color.org); --no-color does not yield. */
    PARSE_OK(o, "--theme", "light");
    CHECK(!o.no_color && !strcmp(o.theme, "light"));
    options_free(&o);
    write_config("theme = light\n");
    PARSE_OK(o, NULL);
    CHECK(!o.no_color && !strcmp(o.theme, "light"));
    options_free(&o);
    PARSE_OK(o, "--no-color");
    CHECK(o.no_color && !strcmp(o.theme, "mono"));
    options_free(&o);
    unlink(config_file);
    setenv("NO_COLOR", "", 1);
    PARSE_OK(o, NULL);
    CHECK(!o.no_color && !strcmp(o.theme, "default"));
    options_free(&o);
    unsetenv("NO_COLOR");
}

/* The mode from isatty and TERM: stdin and stdout are pointed at a pseudo-terminal for it. */
static app_mode mode_on_terminal(const char *term, const char *flag)
{
    app_options o;
    kimi_err e;
    if (term)
        setenv("TERM", term, 1);
    else
        unsetenv("TERM");
    fflush(stdout);
    int saved_in = dup(0), saved_out = dup(1);
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    int slave = -1;
    if (master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0)
        slave = open(ptsname(master), O_RDWR | O_NOCTTY);
    CHECK_MSG(slave >= 0, "no pseudo-terminal");
    app_mode mode = (app_mode)-1;
    if (slave >= 0) {
        dup2(slave, 0);
        dup2(slave, 1);
        int rc = parse(&o, &e, flag, (char *)NULL);
        dup2(saved_in, 0);
        dup2(saved_out, 1);
        CHECK_MSG(rc == 0, "%s", e.msg);
        mode = rc ? mode : o.mode;
        if (!rc)
            options_free(&o);
        close(slave);
    }
    if (master >= 0)
        close(master);
    close(saved_in);
    close(saved_out);
    return mode;
}

static void test_mode(void)
{
    reset_env();
    CHECK_INT(mode_on_terminal("xterm-256color", NULL), APP_MODE_TUI);
    CHECK_INT(mode_on_terminal("xterm-256color", "--plain"), APP_MODE_PLAIN);
    CHECK_INT(mode_on_terminal("dumb", NULL), APP_MODE_PLAIN);
    CHECK_INT(mode_on_terminal("", NULL), APP_MODE_PLAIN);
    CHECK_INT(mode_on_terminal(NULL, NULL), APP_MODE_PLAIN);
    CHECK_INT(mode_on_terminal("xterm", "--prompt=hi"), APP_MODE_PROMPT);
    CHECK_INT(mode_on_terminal("xterm", "--script=x.kc"), APP_MODE_SCRIPT);
    /* Not on a terminal (stdin from /dev/null): plain whatever TERM says. */
    setenv("TERM", "xterm", 1);
    int saved_in = dup(0), null_fd = open("/dev/null", O_RDONLY);
    dup2(null_fd, 0);
    app_options o;
    PARSE_OK(o, NULL);
    dup2(saved_in, 0);
    close(null_fd);
    close(saved_in);
    CHECK_INT(o.mode, APP_MODE_PLAIN);
    options_free(&o);
    setenv("TERM", "dumb", 1);
}

/* ---- --help and the man page ---- */

typedef struct {
    char names[128][32];
    int n;
} flag_set;

static void add_flag(flag_set *s, const char *name, size_t len)
{
    if (len >= sizeof s->names[0] || s->n == 128)
        return;
    for (int i = 0; i < s->n; i++)
        if (strlen(s->names[i]) == len && !strncmp(s->names[i], name, len))
            return;
    memcpy(s->names[s->n], name, len);
    s->names[s->n++][len] = 0;
}

static int has_flag(const flag_set *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name))
            return 1;
    return 0;
}

/* Every "--word-word" and every lone "-X" in text. */
static void collect_flags(const char *text, flag_set *s)
{
    for (const char *p = text; *p; p++) {
        int starts = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '-' || p[-1] == '/');
        if (!starts || p[0] != '-')
            continue;
        if (p[1] == '-' && islower((unsigned char)p[2])) {
            size_t n = 2;
            while (islower((unsigned char)p[n]) || (p[n] == '-' && islower((unsigned char)p[n + 1])))
                n++;
            add_flag(s, p, n);
        } else if (isalpha((unsigned char)p[1]) && !isalnum((unsigned char)p[2]) && p[2] != '-') {
            add_flag(s, p, 2);
        }
    }
}

/* The man page as plain text: \- is '-', font and other escapes go, request names go. */
static char *man_text(void)
{
    char *raw;
    size_t len;
    kimi_err err = {0};
    if (file_read_all("app/kimi-chat.1", &raw, &len, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return NULL;
    }
    char *out = malloc(len + 1), *w = out;
    for (size_t i = 0; i < len; i++) {
        if (raw[i] == '\\' && raw[i + 1] == '-') {
            *w++ = '-';
            i++;
        } else if (raw[i] == '\\' && raw[i + 1] == 'f') {
            i += 2;  /* \fB, \fI, \fR, \fP */
        } else if (raw[i] == '\\' && raw[i + 1] == '(') {
            *w++ = ' ';
            i += 3;  /* \(dq and the like */
        } else if (raw[i] == '.' && (i == 0 || raw[i - 1] == '\n')) {
            while (i + 1 < len && raw[i + 1] != ' ' && raw[i + 1] != '\n')
                i++;  /* the request name: .TP, .BR */
        } else {
            *w++ = raw[i];
        }
    }
    *w = 0;
    free(raw);
    return out;
}

static void test_help_matches_man_page(void)
{
    const char *help = options_help();
    /* One line per flag, and every line fits 80 columns. */
    int width_ok = 1;
    for (const char *line = help; *line;) {
        size_t n = strcspn(line, "\n");
        if (n > 79)
            width_ok = 0, fprintf(stderr, "too wide: %.*s\n", (int)n, line);
        line += n + (line[n] == '\n');
    }
    CHECK(width_ok);
    static const char *const brief[] = {
        "--model", "--server", "--server-model", "--api-key-env", "--api-key-file", "--backend", "--tp", "--dcp", "--max-context", "--mem-gib", "--threads", "--devices", "--speculate", "--kv-cache", "--cpu-activations", "--cpu-weights", "--verify", "--plain", "--script",
        "--keep-going", "--prompt", "--resume", "--load", "--system", "--no-save", "--think", "--no-think",
        "--temperature", "--top-p", "--top-k", "--max-tokens", "--seed", "--tools", "--no-tools",
        "--allow-tools", "--reasoning", "--hide-reasoning", "--theme", "--no-color", "--mouse",
        "--no-alt-screen", "--verbose", "--config", "--help", "--version", "-m", "-p", "-h", "-V"};
    flag_set in_help = {0}, in_man = {0};
    collect_flags(help, &in_help);
    for (size_t i = 0; i < sizeof brief / sizeof brief[0]; i++)
        CHECK_MSG(has_flag(&in_help, brief[i]), "%s is not in --help", brief[i]);
    CHECK_INT(in_help.n, (int)(sizeof brief / sizeof brief[0]));
    /* Each flag has its own line that starts with it ("  -m, --model DIR", "      --tp N"). */
    for (int i = 0; i < in_help.n; i++) {
        const char *f = in_help.names[i];
        int lines = 0;
        for (const char *line = help; *line; line += strcspn(line, "\n") + (line[strcspn(line, "\n")] == '\n')) {
            const char *p = line + strspn(line, " ");
            if (p[0] == '-' && p[1] != '-' && p[2] == ',' && f[1] == '-')
                p += 4;
            size_t n = strlen(f);
            lines += !strncmp(p, f, n) && (p[n] == ' ' || p[n] == ',');
        }
        CHECK_MSG(lines == 1, "%s starts %d lines of --help", f, lines);
    }
    CHECK(strstr(help, "0 ok, 1 a script line or --verify failed, 2 usage, 3 model or\nengine failure") != NULL);
    CHECK(strstr(help, "130 interrupted") != NULL);
    CHECK(strstr(help, "kimi-chat/config") && strstr(help, "kimi-chat/sessions/") && strstr(help, "kimi-chat/history"));

    char *man = man_text();
    if (!man)
        return;
    collect_flags(man, &in_man);
    for (int i = 0; i < in_help.n; i++)
        CHECK_MSG(has_flag(&in_man, in_help.names[i]), "%s is in --help but not in app/kimi-chat.1",
                  in_help.names[i]);
    /* words of slash commands the page documents, not program flags (/export md PATH --force) */
    flag_set command_words = {0};
    collect_flags("--force", &command_words);
    for (int i = 0; i < in_man.n; i++)
        CHECK_MSG(has_flag(&in_help, in_man.names[i]) || has_flag(&command_words, in_man.names[i]),
                  "%s is in app/kimi-chat.1 but not in --help", in_man.names[i]);
    /* The page's version line is the program's. */
    CHECK_MSG(strstr(man, options_version()) != NULL, "app/kimi-chat.1 does not say \"%s\"", options_version());
    static const char *const sections[] = {"SH NAME", "SH SYNOPSIS", "SH DESCRIPTION", "SH OPTIONS",
                                           "SH SLASH COMMANDS", "SH SCRIPT FILES", "SH KEYS", "SH FILES",
                                           "SH ENVIRONMENT", "SH EXIT STATUS"};
    free(man);
    char *raw;
    size_t len;
    kimi_err err = {0};
    if (file_read_all("app/kimi-chat.1", &raw, &len, &err) == 0) {
        for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
            CHECK_MSG(strstr(raw, sections[i]) != NULL, "app/kimi-chat.1 has no .%s", sections[i]);
        static const char *const env[] = {"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "NO_COLOR",
                                          "KIMI_DEMO_DIR", "KIMI_TOOL_ARGS"};
        for (size_t i = 0; i < sizeof env / sizeof env[0]; i++)
            CHECK_MSG(strstr(raw, env[i]) != NULL, "app/kimi-chat.1 does not mention %s", env[i]);
        free(raw);
    }
}

/* The text of a message after the name of where the value came from: "must be ...". */
static const char *verdict(const char *msg)
{
    const char *m = strstr(msg, ": must be ");
    return m ? m + 2 : msg;
}

/* One validator: for every setting and value, the flag, the config file and /set accept it
 * alike, with the same value, or refuse it with the same words (--temperature 150 was accepted
 * while /set temperature 150 was not; --temperature 1e308 said "must be a finite number").
 * Numbers are decimal: hex (0x10, 0x1p3) is refused everywhere; -0 is 0. */
static void test_flags_match_set(void)
{
    static const struct {
        const char *flag, *key;
    } settings[] = {{"--temperature", "temperature"}, {"--top-p", "top_p"}, {"--top-k", "top_k"},
                    {"--max-tokens", "max_tokens"}, {"--seed", "seed"}};
    static const char *values[] = {"0", "0.7", "1", "2", "100", "100.0", "100.0001", "100.5", "150",
                                   "1e308", "-0", "-0.0", "-1", "nan", "NaN", "inf", "-inf", "infinity",
                                   "0x10", "0x1p3", "0X1", "1e", "1e3", "1e-3", "+1", ".5", "5.",
                                   "7", "1073741824", "1073741825", "2147483648",
                                   "18446744073709551615", "18446744073709551616", "", "abc"};
    reset_env();
    for (size_t i = 0; i < sizeof settings / sizeof *settings; i++)
        for (size_t k = 0; k < sizeof values / sizeof *values; k++) {
            app_options o, oc;
            kimi_err e = {0}, ec = {0};
            char flag[64], line[128], cfg[128];
            snprintf(flag, sizeof flag, "%s=%s", settings[i].flag, values[k]);
            int flag_ok = parse(&o, &e, flag, (char *)NULL) == 0;
            snprintf(cfg, sizeof cfg, "%s = %s\n", settings[i].key, values[k]);
            write_config(cfg);
            int cfg_ok = parse(&oc, &ec, (char *)NULL) == 0;
            unlink(config_file);
            snprintf(line, sizeof line, "/set %s %s", settings[i].key, values[k]);
            command c;
            kimi_err ce = {0};
            int set_ok = command_parse(line, strlen(line), &c, &ce) == 0;
            CHECK_MSG(flag_ok == set_ok && cfg_ok == set_ok, "%s %s, config: %s, /set: %s", flag,
                      flag_ok ? "accepted" : e.msg, cfg_ok ? "accepted" : ec.msg,
                      set_ok ? "accepted" : ce.msg);
            if (strchr(values[k], 'x') || strchr(values[k], 'X'))
                CHECK_MSG(!set_ok, "%s: hex accepted", line);
            /* an empty value is a missing one: "/set seed: give one value", "config:1: seed: no
               value"; every other refusal says the same "must be ..." and names the value */
            if (!flag_ok && !cfg_ok && !set_ok && *values[k]) {
                CHECK_MSG(!strcmp(verdict(e.msg), verdict(ce.msg)) && !strcmp(verdict(ec.msg), verdict(ce.msg)),
                          "%s: \"%s\", config: \"%s\", /set: \"%s\"", flag, e.msg, ec.msg, ce.msg);
                char flag_given[64];
                snprintf(flag_given, sizeof flag_given, "%s %s: must be ", settings[i].flag, values[k]);
                snprintf(cfg, sizeof cfg, ":1: %s = %s: must be ", settings[i].key, values[k]);
                CHECK_MSG(strstr(ce.msg, line) == ce.msg && strstr(e.msg, flag_given) == e.msg &&
                              strstr(ec.msg, cfg),
                          "messages name the value as given: \"%s\", \"%s\", \"%s\"", e.msg, ec.msg, ce.msg);
            }
            if (flag_ok && set_ok && cfg_ok) {
                double flag_value = i == 0 ? o.temperature : i == 1 ? o.top_p : i == 2 ? o.top_k
                                    : i == 3 ? o.max_tokens : (double)o.seed;
                double cfg_value = i == 0 ? oc.temperature : i == 1 ? oc.top_p : i == 2 ? oc.top_k
                                   : i == 3 ? oc.max_tokens : (double)oc.seed;
                double set_value = i < 2 ? (double)(float)c.number : (double)c.integer;
                CHECK_MSG(flag_value == set_value && cfg_value == set_value && !signbit(set_value) &&
                              !signbit(flag_value),
                          "%s: %g, config: %g, /set: %g", flag, flag_value, cfg_value, set_value);
            }
            if (flag_ok)
                options_free(&o);
            if (cfg_ok)
                options_free(&oc);
        }
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "%s/kimi-test-options-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(home, sizeof home, "%s/home", tmp);
    snprintf(config_dir, sizeof config_dir, "%s/.config/kimi-chat", home);
    snprintf(config_file, sizeof config_file, "%s/config", config_dir);
    char cmd[2 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", config_dir);
    CHECK(system(cmd) == 0);

    test_defaults();
    test_every_flag();
    test_help_and_version();
    test_flag_errors();
    test_verify_flag();
    test_config();
    test_config_errors();
    test_no_color();
    test_mode();
    test_help_matches_man_page();
    test_flags_match_set();

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    return check_finish();
}
