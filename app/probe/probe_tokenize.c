/* probe_tokenize: kimi-probe tokenize, stdin JSONL {"text"} -> stdout JSONL {"ids"}; special
 * token texts become their ids unless --no-special is given. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "app/probe/probe.h"
#include "app/probe/probe_args.h"
#include "engine/model/config.h"
#include "engine/text/tokenizer.h"

static int tokenize_line(const tokenizer *tok, const char *line, size_t len, long line_no, int allow_special,
                         kimi_err *err)
{
    json_error_t jerr;
    json_t *request = json_loadb(line, len, JSON_ALLOW_NUL, &jerr);
    if (!request)
        return kimi_fail(err, KIMI_ERR_INPUT, "stdin:%ld: %s", line_no, jerr.text);
    json_t *text = json_object_get(request, "text");
    if (!json_is_string(text)) {
        json_decref(request);
        return kimi_fail(err, KIMI_ERR_INPUT, "stdin:%ld: expected {\"text\": string}", line_no);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = tokenizer_encode(tok, json_string_value(text), json_string_length(text), allow_special, &ids, &n, err);
    json_decref(request);
    if (rc)
        return kimi_err_prefix(err, rc, "stdin:%ld", line_no);
    fputs("{\"ids\": [", stdout);
    for (size_t i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", ids[i]);
    fputs("]}\n", stdout);
    free(ids);
    return 0;
}

int probe_tokenize(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    const char *model_dir;
    model_config cfg;
    tokenizer *tok = NULL;
    if (probe_args_parse(&a, argc, argv, "model,no-special", &err) || probe_arg_required(&a, "model", &model_dir, &err))
        return probe_report(&err);
    const char *no_special = probe_arg(&a, "no-special");
    if (no_special && *no_special) {
        kimi_fail(&err, KIMI_ERR_USAGE, "--no-special takes no value (got '%s')", no_special);
        return probe_report(&err);
    }
    if (config_load(&cfg, model_dir, &err))
        return probe_report(&err);
    int rc = tokenizer_load(&tok, model_dir, &cfg, &err);
    int allow_special = no_special == NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long line_no = 0;
    while (!rc && (len = getline(&line, &cap, stdin)) >= 0) {
        line_no++;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (len)
            rc = tokenize_line(tok, line, (size_t)len, line_no, allow_special, &err);
    }
    if (!rc && ferror(stdin))
        rc = kimi_fail(&err, KIMI_ERR_IO, "stdin: read error");
    if (!rc && fflush(stdout))
        rc = kimi_fail(&err, KIMI_ERR_IO, "stdout: write error");
    free(line);
    tokenizer_free(tok);
    config_free(&cfg);
    return rc ? probe_report(&err) : 0;
}
