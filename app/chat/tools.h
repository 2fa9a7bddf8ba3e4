/* tools: the tools file (OpenAI function definitions, each with a kimi-chat "exec" block) and
 * running one call: argv with {name} placeholders filled from the call's arguments, never a
 * shell, in its own process group, with a timeout that kills the whole group and a 64 KiB cap
 * on the captured stdout+stderr. docs/UI.md, "Tools". */
#ifndef KIMI_APP_TOOLS_H
#define KIMI_APP_TOOLS_H

#include <stdatomic.h>
#include <stddef.h>

#include <jansson.h>

#include "engine/base/error.h"

#define TOOL_OUTPUT_CAP (64 * 1024)  /* bytes of stdout+stderr kept; the rest is cut with a note */
#define TOOL_ARGS_CAP (1024 * 1024)  /* bytes of arguments a call may carry; a call over it is not
                                        run (a model does not write a megabyte of JSON by design) */
#define TOOL_ARGS_ENV_MAX (64 * 1024) /* arguments up to this size are also in KIMI_TOOL_ARGS;
                                        larger ones are on stdin only (the kernel refuses one
                                        environment string over 128 KiB, and with it the exec) */

/* Placeholders: every "{name}" in an argv element, whole ("{path}") or embedded
 * ("--path={path}"), whose name is a property in function.parameters.properties is replaced by
 * the call's top-level argument of that name: a string as it is, a number as its shortest
 * decimal text (5.0 → "5"). Substituted text is not scanned again, and no shell ever sees it.
 * Other braces stay as written ("{}", "{print $1}"); a whole element "{name}" whose name is not
 * a property is an error when loading (a typo, most likely). */
typedef struct {
    char *name;             /* function.name */
    char **argv;            /* [argc] exec.argv as written, with placeholders */
    int argc;
    double timeout_s;       /* exec.timeout_s (default 30) */
    char **env;             /* [n_env] exec.env: the names of the variables passed on besides
                               the default ones (see tools_run) */
    int n_env;
    char *withheld_env;     /* a variable never passed on, even when named (the API key's), or
                               NULL: tools_withhold_env */
    int enabled;            /* /tools enable|disable NAME; 1 after loading */
    json_t *definition;     /* {"type":"function","function":{...}} without "exec" (owned) */
} tool_def;

typedef struct {
    tool_def *tools;        /* [n_tools] in file order */
    int n_tools;
    char *path;             /* the file they came from */
    char *notes;            /* warnings from loading, one a line without a final newline ("tools.json:
                               tools[1] (word_count): exec.argv[2] \"{path}\" substitutes an
                               argument without a \"--\" before it: ..."), or NULL */
} tool_set;

/* Read and validate a tools file. Every problem is one error naming the file and the entry
 * ("tools.json: tools[1] (word_count): exec.argv must be a non-empty array of strings").
 * An argv element after argv[0] that substitutes a placeholder with no "--" element before it
 * is loaded with a note in ts->notes: the model could pass "--files0-from=..." as an option
 * (a note, not a refusal: some programs have no "--"). */
int tools_load(tool_set *ts, const char *path, kimi_err *err);

/* The variable name is never passed to a tool, even one whose exec.env names it (the API key's
 * variable). 0, or KIMI_ERR_NOMEM. */
int tools_withhold_env(tool_set *ts, const char *name, kimi_err *err);
void tools_free(tool_set *ts);

/* The tool named name, or NULL (disabled tools are found too: check ->enabled). */
tool_def *tools_find(const tool_set *ts, const char *name);

/* New reference: the OpenAI definitions of the enabled tools (exec removed), for the chat
 * template's tool declaration and for OpenAI-compatible servers; NULL when none is enabled. */
json_t *tools_declaration(const tool_set *ts);

typedef enum {
    TOOL_RUN_DONE,          /* it ran and exited (exit_status says how) */
    TOOL_RUN_FAILED_START,  /* exec failed (no such program, permission): error says why */
    TOOL_RUN_TIMEOUT,       /* killed (the whole process group) after timeout_s */
    TOOL_RUN_CANCELLED,     /* killed because *cancel became nonzero */
    TOOL_RUN_BAD_ARGUMENTS, /* not run: arguments are not a JSON object, or a placeholder's
                               argument is missing or not a string/number (error says which) */
} tool_run_status;

typedef struct {
    tool_run_status status;
    int exit_status;        /* DONE: the exit code, or 128 + signal when it died of a signal */
    int term_signal;        /* the signal it died of, 0 when it exited */
    char *output;           /* [output_len] stdout and stderr as they interleaved, at most
                               TOOL_OUTPUT_CAP bytes, NUL-terminated (may contain NULs) */
    size_t output_len;
    size_t output_total;    /* bytes the tool wrote in all (> output_len when cut) */
    double seconds;         /* wall clock from fork to reaping; 0 when not run */
    char error[256];        /* one line for FAILED_START / BAD_ARGUMENTS / TIMEOUT, else "" */
    size_t stdin_only;      /* the arguments' size when it was over TOOL_ARGS_ENV_MAX (they were
                               on stdin only, KIMI_TOOL_ARGS empty); 0 otherwise */
} tool_result;

/* Run one call of t with the argument JSON args[0..args_len). Blocks until the tool exits, times
 * out or *cancel becomes nonzero (checked at least every 50 ms); call it from a worker thread
 * when the caller must stay responsive. The tool's environment is PATH, HOME, USER, LANG,
 * LC_*, TZ, TMPDIR and the variables its exec.env names, as the app has them (never
 * withheld_env), and KIMI_TOOL_ARGS: nothing else (no API key, no token a shell profile
 * exported). The arguments are given on stdin, and also in KIMI_TOOL_ARGS up to
 * TOOL_ARGS_ENV_MAX bytes (over it the variable is empty and the result says so in a note);
 * over TOOL_ARGS_CAP the call is not run (BAD_ARGUMENTS). Empty (or all blank) arguments count
 * as "{}". Returns 0 with *out filled
 * whatever the tool did; nonzero (err set) only when the system refused (pipe, fork, out of
 * memory). When the tool exits, what it left running in its process group is killed (after
 * reading their output for up to 0.2 s). The caller must not ignore SIGCHLD nor reap children it
 * did not start (waitpid(-1)): the exit status would be lost. */
int tools_run(const tool_def *t, const char *args, size_t args_len, const atomic_int *cancel,
              tool_result *out, kimi_err *err);
void tool_result_free(tool_result *r);

/* The text that goes back to the model as the tool message's content for a result: the output
 * exactly as it is for exit status 0 (the demo model was trained on raw output), followed by one
 * note per line, in square brackets, for anything else:
 *   [output cut: 70000 bytes, first 65536 shown]     [exit status 2]
 *   [killed by signal 11 (Segmentation fault)]       [killed after 30 s timeout]
 *   [cancelled by the user]                          [could not start wc: No such file or directory]
 *   [not run: argument path missing]  (and the other BAD_ARGUMENTS errors)
 *   [the arguments (200000 bytes) were on stdin only: KIMI_TOOL_ARGS is empty over 65536 bytes]
 * No newline after the last note. Malloc'ed, *len set (len may be NULL); NULL when out of memory. */
char *tool_result_message(const tool_result *r, size_t *len);

/* The tool message's content for calls that did not run because of the tool's name or the user
 * (arguments that are not valid JSON come back from tools_run as TOOL_RUN_BAD_ARGUMENTS). One
 * line; the name as the model wrote it, control characters as '?', cut after 64 bytes. Malloc'ed.
 *   unknown tool 'foo'
 *   unknown tool 'foo'; available: now, word_count, list_dir   (tools_message_unknown: enabled ones)
 *   unknown tool 'foo'; no tools are available
 *   The user denied this call to word_count.
 * tool_message_not_asked: a call no policy allows where there is no one to ask (--prompt,
 * --script, input from a pipe):
 *   Not run: nobody could be asked to approve this call to word_count (no terminal to ask on);
 *   --allow-tools word_count would allow it.   (one line) */
char *tool_message_unknown(const char *name);
char *tools_message_unknown(const tool_set *ts, const char *name);
char *tool_message_denied(const char *name);
char *tool_message_not_asked(const char *name);

#endif
