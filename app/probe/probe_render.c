/* probe_render: kimi-probe render, JSON lines of conversations on stdin -> their rendered prompt
 * text and token ids on stdout, one line each. */
#include "app/probe/probe.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/probe/probe_args.h"
#include "engine/text/chat.h"
#include "engine/model/config.h"
#include "engine/text/tokenizer.h"

/* Render one request line into one output line; err names the field at fault. */
static int render_line(const tokenizer *tok, const char *line, size_t len, char **out, kimi_err *err)
{
    json_error_t jerr;
    json_t *req = json_loadb(line, len, 0, &jerr);
    if (!req)
        return kimi_fail(err, KIMI_ERR_INPUT, "invalid JSON: %s (column %d)", jerr.text, jerr.column);
    chat_conversation conv;
    chat_render_options opt;
    chat_rendering r = {0};
    chat_conversation_init(&conv);
    int rc = chat_request_from_json(req, &conv, &opt, err);
    if (!rc)
        rc = chat_render(tok, &conv, &opt, &r, err);
    if (!rc && r.tools_note[0])
        fprintf(stderr, "kimi-probe: %s\n", r.tools_note);
    json_t *result = NULL, *ids = NULL;
    if (!rc) {
        result = json_object();
        ids = json_array();
        int bad = !result || !ids || json_object_set_new(result, "text", json_stringn(r.text, r.text_len));
        for (size_t i = 0; !bad && i < r.n_ids; i++)
            bad = json_array_append_new(ids, json_integer(r.ids[i]));
        bad = bad || json_object_set_new(result, "ids", ids);
        ids = NULL;
        *out = bad ? NULL : json_dumps(result, JSON_COMPACT);
        if (!*out)
            rc = kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    }
    json_decref(ids);
    json_decref(result);
    chat_rendering_free(&r);
    chat_conversation_free(&conv);
    json_decref(req);
    return rc;
}

int probe_render(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    const char *model_dir;
    if (probe_args_parse(&a, argc, argv, "model", &err) ||
        probe_arg_required(&a, "model", &model_dir, &err))
        return probe_report(&err);
    model_config cfg;
    tokenizer *tok = NULL;
    if (config_load(&cfg, model_dir, &err))
        return probe_report(&err);
    if (tokenizer_load(&tok, model_dir, &cfg, &err)) {
        config_free(&cfg);
        return probe_report(&err);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    long line_no = 0;
    int status = 0;
    while (!status && (got = getline(&line, &cap, stdin)) > 0) {
        line_no++;
        if (strspn(line, " \t\r\n") == (size_t)got)
            continue;
        char *out = NULL;
        if (render_line(tok, line, (size_t)got, &out, &err)) {
            status = err.code == KIMI_ERR_NOMEM ? 1 : 2;
            fprintf(stderr, "kimi-probe: render: stdin line %ld: %s\n", line_no, err.msg);
            break;
        }
        printf("%s\n", out);
        fflush(stdout);
        free(out);
    }
    free(line);
    tokenizer_free(tok);
    config_free(&cfg);
    if (!status && ferror(stdin)) {
        fprintf(stderr, "kimi-probe: render: cannot read stdin\n");
        status = 2;
    }
    return status;
}
