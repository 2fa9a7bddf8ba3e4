/* probe_verify: kimi-probe verify, the self-check of engine/runtime/verify.h from the command line: one
 * "PASS|FAIL <metric> <values> (tolerance ...)" line per metric on stdout, then "N passed, M
 * failed"; exit 0 when every metric is within tolerance, 1 when one is not, 2 usage, 3 model. */
#include "app/probe/probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/probe/probe_args.h"
#include "engine/text/tokenizer.h"
#include "engine/runtime/verify.h"

typedef struct {
    model_weights mw, candidate_mw;     /* candidate_mw: --candidate-model, else unused */
    int *token_list, n_token_list;      /* --tokens, as given */
    int devices[8], n_devices;          /* --devices */
    int32_t *tokens;                    /* [n_tokens] the prompt run */
    int n_tokens;
    char source[64];                    /* where the prompt came from, for the header line */
} verify_probe;

static void verify_probe_free(verify_probe *p)
{
    if (p->mw.layers)
        weights_free(&p->mw);
    if (p->candidate_mw.layers)
        weights_free(&p->candidate_mw);
    free(p->token_list);
    free(p->tokens);
}

static void print_phase(void *user, const char *line)
{
    (void)user;
    fprintf(stderr, "kimi-probe: verify: %s\n", line);
}

/* The flags that need no model: backend, ranks, devices, decode steps, the prompt's source. */
static int parse_flags(const probe_args *a, verify_probe *p, verify_options *vo, kimi_err *err)
{
    const char *tokens_text = probe_arg(a, "tokens"), *model_dir;
    long tp, ref_tp, threads, decode;
    if (probe_arg_required(a, "model", &model_dir, err) || probe_arg_int(a, "tp", 1, 8, 1, &tp, err) ||
        probe_arg_int(a, "ref-tp", 1, 8, 1, &ref_tp, err) || probe_arg_int(a, "threads", 0, 4096, 0, &threads, err) ||
        probe_arg_int(a, "decode", 0, VERIFY_MAX_DECODE, VERIFY_DEFAULT_DECODE, &decode, err))
        return err->code;
    backend_kind kind;
    cpu_activations activations;
    if (probe_arg_backend(a, &kind, err) || probe_arg_cpu_activations(a, &activations, err))
        return err->code;
    if (tokens_text && probe_arg(a, "prompt"))
        return kimi_fail(err, KIMI_ERR_USAGE, "give at most one of --tokens 1,2,3 and --prompt TEXT");
    if (tokens_text && probe_parse_int_list("tokens", tokens_text, &p->token_list, &p->n_token_list, err))
        return err->code;
    if (p->n_token_list > VERIFY_MAX_PROMPT)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tokens: %d ids, at most %d", p->n_token_list, VERIFY_MAX_PROMPT);
    if (probe_arg(a, "devices")) {
        if (kind != BACKEND_CUDA)
            return kimi_fail(err, KIMI_ERR_USAGE, "--devices: only with --backend cuda");
        if (probe_arg_devices(a, p->devices, &p->n_devices, err))
            return err->code;
        if (p->n_devices != 1 && p->n_devices != tp)
            return kimi_fail(err, KIMI_ERR_USAGE,
                             "--devices: %d devices for --tp %ld (give one device per rank, or one for every rank)",
                             p->n_devices, tp);
    }
    vo->n_decode = (int)decode;
    vo->reference = (backend_options){.kind = BACKEND_CPU, .tp = (int)ref_tp, .threads_per_rank = (int)threads};
    vo->candidate = (backend_options){.kind = kind, .tp = (int)tp, .threads_per_rank = (int)threads,
                                      .activations = activations, .devices = p->n_devices ? p->devices : NULL,
                                      .n_devices = p->n_devices};
    return 0;
}

/* The prompt: --tokens as given (checked against the vocabulary), else --prompt TEXT or the fixed
 * prompt rendered as one user message in the chat format. */
static int prompt_tokens(const probe_args *a, const char *model_dir, verify_probe *p, kimi_err *err)
{
    int vocab = p->mw.cfg.vocab;
    if (p->token_list) {
        if (!(p->tokens = malloc((size_t)p->n_token_list * sizeof *p->tokens)))
            return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
        for (int i = 0; i < p->n_token_list; i++) {
            if (p->token_list[i] < 0 || p->token_list[i] >= vocab)
                return kimi_fail(err, KIMI_ERR_USAGE, "--tokens: id %d is outside the vocabulary [0, %d) of %s",
                                 p->token_list[i], vocab, model_dir);
            p->tokens[i] = p->token_list[i];
        }
        p->n_tokens = p->n_token_list;
        snprintf(p->source, sizeof p->source, "--tokens");
        return 0;
    }
    const char *text = probe_arg(a, "prompt");
    if (text && !*text)
        return kimi_fail(err, KIMI_ERR_USAGE, "--prompt: the text is empty");
    snprintf(p->source, sizeof p->source, "%s", text ? "--prompt, rendered" : "the fixed prompt, rendered");
    tokenizer *tok = NULL;
    int rc = tokenizer_load(&tok, model_dir, &p->mw.cfg, err);
    if (!rc)
        rc = verify_render_prompt(tok, text ? text : VERIFY_DEFAULT_PROMPT, &p->tokens, &p->n_tokens, err);
    if (rc == KIMI_ERR_INPUT) {     /* the text, not the model: a usage error */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        rc = kimi_fail(err, KIMI_ERR_USAGE, "--prompt: %s", why);
    }
    tokenizer_free(tok);
    return rc;
}

int probe_verify(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    verify_probe p = {0};
    verify_options vo = {0};
    verify_report report;
    const char *model_dir = NULL, *candidate_dir = NULL;
    int status = 0;
    if (probe_args_parse(&a, argc, argv, "model,candidate-model,backend,tp,ref-tp,devices,threads,tokens,prompt,decode,cpu-activations",
                         &err) ||
        parse_flags(&a, &p, &vo, &err))
        goto done;
    model_dir = probe_arg(&a, "model");
    candidate_dir = probe_arg(&a, "candidate-model");
    if (candidate_dir && !*candidate_dir) {
        kimi_fail(&err, KIMI_ERR_USAGE, "--candidate-model: needs a folder");
        goto done;
    }
    if (weights_load(&p.mw, model_dir, &err) || (candidate_dir && weights_load(&p.candidate_mw, candidate_dir, &err)) ||
        prompt_tokens(&a, model_dir, &p, &err))
        goto done;
    vo.tokens = p.tokens;
    vo.n_tokens = p.n_tokens;
    vo.candidate_weights = candidate_dir ? &p.candidate_mw : NULL;
    vo.on_phase = print_phase;
    if (verify_check_options(&p.mw, &vo, &err))
        goto done;
    fprintf(stderr, "kimi-probe: verify: %d prompt tokens (%s) + %d decode steps, reference cpu tp %d, candidate %s tp %d%s%s\n",
            p.n_tokens, p.source, vo.n_decode, vo.reference.tp, vo.candidate.kind == BACKEND_CUDA ? "cuda" : "cpu",
            vo.candidate.tp, candidate_dir ? " on " : "", candidate_dir ? candidate_dir : "");
    if (verify_run(&p.mw, &vo, &report, &err))
        goto done;
    int passed = 0;
    for (int m = 0; m < VERIFY_N_METRICS; m++) {
        char line[768];
        verify_metric_line(&report, (verify_metric)m, line, sizeof line);
        printf("%s\n", line);
        passed += verify_metric_passed(&report, (verify_metric)m);
    }
    printf("%d passed, %d failed\n", passed, VERIFY_N_METRICS - passed);
    status = passed == VERIFY_N_METRICS ? 0 : 1;
done:
    if (err.code)
        status = probe_report(&err);
    verify_probe_free(&p);
    return status;
}
