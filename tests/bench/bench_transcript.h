/* bench_transcript: the synthetic transcript bench_render and bench_view both build: turns of
 * about 600 tokens (a question, reasoning, a markdown answer with a CJK table and code, a tool
 * call), the same words from the same seed. */
#ifndef KIMI_BENCH_TRANSCRIPT_H
#define KIMI_BENCH_TRANSCRIPT_H

#include <stdio.h>
#include <string.h>

#include "ui/render_model.h"

static const char *words[] = {"the", "model", "reads", "every", "weight", "once", "per",
                              "token", "**fast**", "`kv`", "中文", "cache", "and", "so", "on"};
enum { N_WORDS = sizeof words / sizeof words[0] };

/* About 4 bytes per token, as a tokenizer would cut English. */
static inline size_t add_words(render_model *rm, int b, int tokens, unsigned *seed)
{
    char buf[64];
    size_t bytes = 0;
    for (int i = 0; i < tokens; i++) {
        *seed = *seed * 1103515245u + 12345u;
        int n = snprintf(buf, sizeof buf, "%s%s", words[(*seed >> 16) % N_WORDS],
                         (*seed >> 8) % 13 == 0 ? "\n" : " ");
        render_model_append_text(rm, b, buf, (size_t)n, NULL);
        bytes += (size_t)n;
    }
    return bytes;
}

static const char answer_tail[] =
    "\n\n## Table\n\n| name | value | 说明 |\n|---|--:|---|\n| alpha | 1 | 第一 |\n"
    "| beta | 22 | 第二 |\n\n```c\nfor (int i = 0; i < n; i++)\n    sum += x[i];\n```\n"
    "- a list item\n- another one with more words in it\n> a quote\n";

/* One turn of about 600 tokens: question, reasoning, markdown answer, tool call. */
static inline void add_turn(render_model *rm, unsigned *seed, int *tokens)
{
    int u = render_model_append(rm, RM_USER, "", 0, NULL);
    add_words(rm, u, 20, seed);
    int r = render_model_append(rm, RM_REASONING, "", 0, NULL);
    add_words(rm, r, 200, seed);
    render_model_set_reasoning_stats(rm, r, 200, 3.2);
    render_model_finish(rm, r);
    int a = render_model_append(rm, RM_ANSWER, "# Answer\n\n", 10, NULL);
    add_words(rm, a, 250, seed);
    render_model_append_text(rm, a, answer_tail, sizeof answer_tail - 1, NULL);
    render_model_finish(rm, a);
    int t = render_model_append_tool(rm, "word_count", "functions.word_count:0", NULL);
    const char *args = "{\"path\": \"notes.txt\"}";
    render_model_append_text(rm, t, args, strlen(args), NULL);
    render_model_set_tool_state(rm, t, RM_TOOL_DONE, NULL, 0.2, NULL);
    const char *result = "  1204 notes.txt\nline 2\nline 3\nline 4\nline 5\n";
    render_model_set_tool_result(rm, t, result, strlen(result), NULL);
    render_model_finish(rm, t);
    *tokens += 20 + 200 + 250 + 80 + 30;
}

#endif
