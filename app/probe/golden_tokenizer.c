/* golden_tokenizer: the tokenizer section of kimi-probe golden; every text of
 * reference/tokenizer_cases.jsonl encodes (special tokens allowed) to exactly the reference ids,
 * and those ids decode back to the text. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "app/probe/golden.h"
#include "engine/model/config.h"
#include "engine/text/tokenizer.h"

/* The first characters of a case's text, escaped onto one line, for the report. */
static void preview(const char *text, size_t len, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n')
            o += (size_t)snprintf(out + o, cap - o, "\\n");
        else if (c < 0x20 || c == 0x7F)
            o += (size_t)snprintf(out + o, cap - o, "\\x%02X", c);
        else
            out[o++] = (char)c;
        if (o > 40 && (c < 0x80 || c >= 0xC0) && i + 1 < len && ((unsigned char)text[i + 1] & 0xC0) != 0x80) {
            o += (size_t)snprintf(out + o, cap - o, "...");
            break;
        }
    }
    out[o] = 0;
}

static void check_case(golden_run *g, const tokenizer *tok, int line_no, json_t *c)
{
    char name[32], shown[96];
    snprintf(name, sizeof name, "tokenizer:%d", line_no);
    json_t *text = json_object_get(c, "text"), *want = json_object_get(c, "ids");
    if (!json_is_string(text) || !json_is_array(want)) {
        golden_case(g, 0, name, "malformed case (needs \"text\" and \"ids\")");
        return;
    }
    const char *s = json_string_value(text);
    size_t len = json_string_length(text);
    preview(s, len, shown, sizeof shown);
    int32_t *ids = NULL;
    size_t n = 0;
    kimi_err err = {0};
    if (tokenizer_encode(tok, s, len, 1, &ids, &n, &err)) {
        golden_case(g, 0, name, "\"%s\": %s", shown, err.msg);
        return;
    }
    size_t want_n = json_array_size(want), same = 0;
    while (same < n && same < want_n && json_integer_value(json_array_get(want, same)) == ids[same])
        same++;
    char *back = NULL;
    size_t back_len = 0;
    int decoded = !tokenizer_decode(tok, ids, n, &back, &back_len, &err);
    if (same != n || same != want_n)
        golden_case(g, 0, name, "\"%s\": %zu ids, reference %zu; first difference at index %zu (got %d, want %lld)",
                    shown, n, want_n, same, same < n ? ids[same] : -1,
                    same < want_n ? (long long)json_integer_value(json_array_get(want, same)) : -1LL);
    else if (!decoded || back_len != len || memcmp(back, s, len))
        golden_case(g, 0, name, "\"%s\": ids match but do not decode back to the text", shown);
    else
        golden_case(g, 1, name, "\"%s\" (%zu ids)", shown, n);
    free(back);
    free(ids);
}

int golden_tokenizer(golden_run *g, kimi_err *err)
{
    model_config cfg;
    tokenizer *tok = NULL;
    char *data = NULL;
    size_t size = 0;
    int rc = config_load(&cfg, g->model_dir, err);
    if (rc)
        return rc;
    rc = tokenizer_load(&tok, g->model_dir, &cfg, err);
    if (!rc)
        rc = golden_read_file(g, "tokenizer_cases.jsonl", (void **)&data, &size, err);
    int line_no = 0;
    for (char *line = data; !rc && line < data + size;) {
        char *eol = memchr(line, '\n', (size_t)(data + size - line));
        size_t len = eol ? (size_t)(eol - line) : (size_t)(data + size - line);
        line_no++;
        if (len) {
            json_error_t jerr;
            json_t *c = json_loadb(line, len, JSON_ALLOW_NUL, &jerr);
            if (!c) {
                char name[32];
                snprintf(name, sizeof name, "tokenizer:%d", line_no);
                golden_case(g, 0, name, "tokenizer_cases.jsonl:%d: %s", line_no, jerr.text);
            } else {
                check_case(g, tok, line_no, c);
                json_decref(c);
            }
        }
        line += len + 1;
    }
    if (!rc && line_no == 0)
        rc = kimi_fail(err, KIMI_ERR_INPUT, "%s/tokenizer_cases.jsonl: no cases", g->reference_dir);
    free(data);
    tokenizer_free(tok);
    config_free(&cfg);
    return rc;
}
