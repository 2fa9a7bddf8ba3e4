/* test_tokenizer: the tokenizer against ids made by real tiktoken (the golden reference and
 * tests/unit/data, see tests/unit/tokenizer_extra_cases.py), round trips on random UTF-8,
 * invalid UTF-8, the byte-pair merge against tiktoken's quadratic algorithm, long pieces, the
 * streaming decoder, a vocabulary of another size, and malformed tiktoken.model files. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/model/config.h"
#include "engine/text/tokenizer.h"
#include "tests/unit/check.h"
#include "tests/unit/utf8_encode.h"
#include "tests/unit/xorshift.h"

#define TINY "tests/golden/fixtures/tiny-k25"

typedef struct {
    char *text;         /* malloc'ed, may hold NUL bytes */
    size_t len;
    int32_t *ids;       /* [n_ids] expected */
    size_t n_ids;
} text_case;

typedef struct {
    text_case *v;
    size_t n;
} case_list;

static char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        *size = (size_t)n;
    }
    return buf;
}

/* JSONL of {"text"?, "ids"} lines appended to list (text NULL when the line has none). */
static int read_cases(const char *path, case_list *list)
{
    size_t size;
    char *data = read_file(path, &size);
    if (!data) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    size_t before = list->n;
    for (char *line = data; line < data + size;) {
        char *eol = memchr(line, '\n', (size_t)(data + size - line));
        size_t len = eol ? (size_t)(eol - line) : (size_t)(data + size - line);
        if (len) {
            json_error_t jerr;
            json_t *c = json_loadb(line, len, JSON_ALLOW_NUL, &jerr);
            json_t *text = json_object_get(c, "text"), *ids = json_object_get(c, "ids");
            if (!c || !json_is_array(ids)) {
                fprintf(stderr, "%s: bad line: %s\n", path, c ? "no ids" : jerr.text);
                json_decref(c);
                free(data);
                return -1;
            }
            list->v = realloc(list->v, (list->n + 1) * sizeof *list->v);
            text_case *tc = &list->v[list->n++];
            tc->len = text ? json_string_length(text) : 0;
            tc->text = text ? malloc(tc->len + 1) : NULL;
            if (text)
                memcpy(tc->text, json_string_value(text), tc->len + 1);
            tc->n_ids = json_array_size(ids);
            tc->ids = malloc((tc->n_ids + 1) * sizeof *tc->ids);
            for (size_t i = 0; i < tc->n_ids; i++)
                tc->ids[i] = (int32_t)json_integer_value(json_array_get(ids, i));
            json_decref(c);
        }
        line += len + 1;
    }
    free(data);
    return (int)(list->n - before);
}

static void free_cases(case_list *list)
{
    for (size_t i = 0; i < list->n; i++) {
        free(list->v[i].text);
        free(list->v[i].ids);
    }
    free(list->v);
    list->v = NULL;
    list->n = 0;
}

static int same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

static void show_text(const char *text, size_t len)
{
    for (size_t i = 0; i < len && i < 80; i++)
        fputc((unsigned char)text[i] < 0x20 ? '?' : text[i], stderr);
    fputc('\n', stderr);
}

/* Every case encodes to its ids and decodes back to its text. */
static void check_cases(const tokenizer *tok, const case_list *list, const char *what)
{
    size_t bad = 0;
    for (size_t i = 0; i < list->n; i++) {
        const text_case *c = &list->v[i];
        int32_t *ids = NULL;
        size_t n = 0;
        kimi_err err = {0};
        int rc = tokenizer_encode(tok, c->text, c->len, 1, &ids, &n, &err);
        CHECK_MSG(rc == 0, "%s case %zu: %s", what, i, err.msg);
        int ok = !rc && same_ids(ids, n, c->ids, c->n_ids);
        if (!ok && bad++ < 5) {
            fprintf(stderr, "%s case %zu differs (%zu ids, want %zu): ", what, i, n, c->n_ids);
            show_text(c->text, c->len);
        }
        CHECK(ok);
        char *back = NULL;
        size_t back_len = 0;
        CHECK(tokenizer_decode(tok, ids, n, &back, &back_len, &err) == 0);
        CHECK(back && back_len == c->len && !memcmp(back, c->text, c->len));
        free(back);
        free(ids);
    }
    printf("%s: %zu cases, %zu differ\n", what, list->n, bad);
}

static int load_tiny(model_config *cfg, tokenizer **tok)
{
    kimi_err err = {0};
    if (config_load(cfg, TINY, &err)) {
        fprintf(stderr, "config_load: %s\n", err.msg);
        return -1;
    }
    if (tokenizer_load(tok, TINY, cfg, &err)) {
        fprintf(stderr, "tokenizer_load: %s\n", err.msg);
        config_free(cfg);
        return -1;
    }
    return 0;
}

/* ---- special tokens ------------------------------------------------------------------------- */

static void test_specials(const tokenizer *tok, const model_config *cfg)
{
    static const char *names[] = {"[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>",
                                  "<|im_system|>", "<|im_middle|>", "<think>", "</think>",
                                  "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                                  "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int32_t id = tokenizer_special_id(tok, names[i]);
        CHECK_INT(id, config_special_id(cfg, names[i]));
        CHECK(id >= 0 && tokenizer_is_special(tok, id));
        size_t len = 0;
        const char *bytes = tokenizer_token_bytes(tok, id, &len);
        CHECK(bytes && len == strlen(names[i]) && !memcmp(bytes, names[i], len));
    }
    CHECK_INT(tokenizer_special_id(tok, "<|im_end"), -1);
    CHECK_INT(tokenizer_special_id(tok, ""), -1);
    CHECK_INT(tokenizer_vocab_size(tok), cfg->specials[cfg->n_specials - 1].id + 1);
    CHECK(!tokenizer_is_special(tok, 0));
    CHECK(!tokenizer_is_special(tok, tokenizer_vocab_size(tok)));
    size_t len;
    CHECK(tokenizer_token_bytes(tok, -1, &len) == NULL);
    CHECK(tokenizer_token_bytes(tok, tokenizer_vocab_size(tok), &len) == NULL);

    /* Without specials allowed, their text is plain text: no special id comes out, and the text
     * splits as the regex splits it ("<|" then "im" then "_end" then "|>"). */
    const char *text = "<|im_user|>user<|im_middle|>hi<|im_end|>";
    int32_t *ids = NULL, *part = NULL;
    size_t n = 0, n_part = 0;
    kimi_err err = {0};
    CHECK(tokenizer_encode(tok, text, strlen(text), 0, &ids, &n, &err) == 0);
    int any_special = 0;
    for (size_t i = 0; i < n; i++)
        any_special |= tokenizer_is_special(tok, ids[i]);
    CHECK(!any_special);
    char *back = NULL;
    size_t back_len;
    CHECK(tokenizer_decode(tok, ids, n, &back, &back_len, &err) == 0 && back_len == strlen(text) && !strcmp(back, text));
    free(back);
    CHECK(tokenizer_encode(tok, "<|", 2, 0, &part, &n_part, &err) == 0);
    CHECK(n >= n_part && same_ids(ids, n_part, part, n_part));
    free(part);
    free(ids);

    /* encode_append grows the caller's array and keeps what was there */
    int32_t *acc = NULL;
    size_t n_acc = 0, cap = 0;
    CHECK(tokenizer_encode_append(tok, "<|im_end|>", 10, 1, &acc, &n_acc, &cap, &err) == 0);
    CHECK(tokenizer_encode_append(tok, "hi there", 8, 1, &acc, &n_acc, &cap, &err) == 0);
    CHECK(tokenizer_encode(tok, "hi there", 8, 1, &part, &n_part, &err) == 0);
    CHECK(n_acc == 1 + n_part && acc[0] == tokenizer_special_id(tok, "<|im_end|>") && cap >= n_acc &&
          same_ids(acc + 1, n_part, part, n_part));
    free(part);
    free(acc);
}

/* ---- invalid UTF-8 -------------------------------------------------------------------------- */

static void test_invalid_utf8(const tokenizer *tok)
{
    /* Each input and its replacement as Python 3 gives it: bytes.decode("utf-8", "replace"). */
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"a\xff" "b", "a\xEF\xBF\xBD" "b"},
        {"\xc0\xaf", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xed\xa0\x80x", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDx"},
        {"\xe0\x80\xaf", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xf0\x9f\x98", "\xEF\xBF\xBD"},
        {"\xf0\x9f\x98 x", "\xEF\xBF\xBD x"},
        {"\xe4\xb8", "\xEF\xBF\xBD"},
        {"\xf4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\x80\x80\xe4\xb8\xad", "\xEF\xBF\xBD\xEF\xBF\xBD\xe4\xb8\xad"},
        {"\xf8\x88\x80\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"Hello\xe2\x82world", "Hello\xEF\xBF\xBDworld"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        kimi_err err = {0};
        CHECK(tokenizer_encode(tok, cases[i].in, strlen(cases[i].in), 1, &a, &na, &err) == 0);
        CHECK(tokenizer_encode(tok, cases[i].out, strlen(cases[i].out), 1, &b, &nb, &err) == 0);
        CHECK_MSG(same_ids(a, na, b, nb), "invalid UTF-8 case %zu", i);
        char *back = NULL;
        size_t len = 0;
        CHECK(tokenizer_decode(tok, a, na, &back, &len, &err) == 0);
        CHECK_MSG(back && len == strlen(cases[i].out) && !memcmp(back, cases[i].out, len), "case %zu decodes", i);
        free(back);
        free(a);
        free(b);
    }
}

/* ---- random round trips --------------------------------------------------------------------- */

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint32_t rng_next(void)
{
    return (uint32_t)(xorshift64(&rng_state) >> 16);
}

/* A random code point: mostly from the kinds the regex treats differently, sometimes any
 * scalar value at all. */
static uint32_t random_code_point(void)
{
    static const uint32_t picks[] = {' ', '\n', '\r', '\t', '\'', 's', 'S', 'a', 'Z', '0', '9', '!', '<', '|', '>',
                                     0x17F, 0x301, 0x2B0, 0x1C5, 0xA0, 0x3000, 0x2003, 0x85, 0x4E2D, 0x3005, 0x2E80,
                                     0x3007, 0x16FF0, 0x1F642, 0x200D, 0x661, 0x216B, 0xBD, 0xD55C, 0x30AB, 0xFFFD};
    uint32_t r = rng_next() % 8;
    if (r < 5)
        return picks[rng_next() % (sizeof picks / sizeof picks[0])];
    if (r < 6)
        return 0x20 + rng_next() % 0x5F;
    for (;;) {
        uint32_t cp = rng_next() % 0x110000;
        if (cp < 0xD800 || cp > 0xDFFF)
            return cp;
    }
}

static void test_random_round_trips(const tokenizer *tok)
{
    char text[4 * 200];
    int failures = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = 0, chars = rng_next() % 200;
        for (size_t i = 0; i < chars; i++)
            len += utf8_encode(random_code_point(), (uint8_t *)text + len);
        for (int allow = 0; allow <= 1; allow++) {
            int32_t *ids = NULL;
            size_t n = 0, back_len = 0;
            char *back = NULL;
            kimi_err err = {0};
            int ok = tokenizer_encode(tok, text, len, allow, &ids, &n, &err) == 0 &&
                     tokenizer_decode(tok, ids, n, &back, &back_len, &err) == 0 && back_len == len &&
                     !memcmp(back, text, len);
            if (!ok && failures++ < 3) {
                fprintf(stderr, "round trip failed (allow_special %d): ", allow);
                show_text(text, len);
            }
            CHECK(ok);
            free(back);
            free(ids);
        }
    }
}

/* ---- byte-pair merge against tiktoken's algorithm ------------------------------------------- */

typedef struct {
    const char *bytes;
    size_t len;
    int32_t rank;
} vocab_entry;

static int vocab_order(const void *pa, const void *pb)
{
    const vocab_entry *a = pa, *b = pb;
    int c = memcmp(a->bytes, b->bytes, a->len < b->len ? a->len : b->len);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

static int32_t vocab_rank(const vocab_entry *v, size_t n, const char *s, size_t len)
{
    vocab_entry key = {s, len, 0};
    const vocab_entry *hit = bsearch(&key, v, n, sizeof *v, vocab_order);
    return hit ? hit->rank : -1;
}

/* tiktoken's _byte_pair_merge as written there: rescan for the lowest-ranked adjacent pair,
 * leftmost on ties, after every merge (quadratic). Returns the number of ids. */
static size_t naive_bpe(const vocab_entry *v, size_t nv, const char *s, size_t len, int32_t *out)
{
    size_t *start = malloc((len + 1) * sizeof *start), parts = len;
    for (size_t i = 0; i <= len; i++)
        start[i] = i;
    for (;;) {
        int32_t best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < parts; i++) {
            int32_t r = vocab_rank(v, nv, s + start[i], start[i + 2] - start[i]);
            if (r >= 0 && (best < 0 || r < best)) {
                best = r;
                at = i;
            }
        }
        if (best < 0)
            break;
        memmove(start + at + 1, start + at + 2, (parts - at - 1) * sizeof *start);
        parts--;
    }
    for (size_t i = 0; i < parts; i++)
        out[i] = vocab_rank(v, nv, s + start[i], start[i + 1] - start[i]);
    free(start);
    return parts;
}

static void test_bpe_against_naive(const tokenizer *tok)
{
    int n_base = 0;
    while (!tokenizer_is_special(tok, n_base))
        n_base++;
    vocab_entry *v = malloc((size_t)n_base * sizeof *v);
    for (int i = 0; i < n_base; i++) {
        v[i].bytes = tokenizer_token_bytes(tok, i, &v[i].len);
        v[i].rank = i;
    }
    qsort(v, (size_t)n_base, sizeof *v, vocab_order);
    /* Runs of lowercase letters, or of Han characters, are one pre-tokenizer piece each. */
    static const char *han[] = {"\xe4\xb8\xad", "\xe6\x96\x87", "\xe4\xba\xba", "\xe7\x9a\x84", "\xe4\xb8\x80"};
    char text[4 * 600];
    int32_t want[4 * 600];
    int failures = 0;
    for (int iter = 0; iter < 400; iter++) {
        size_t len = 0, chars = 1 + rng_next() % 600;
        int use_han = iter % 4 == 3;
        const char *letters = iter % 2 ? "etaoinshr" : "xyzxq";
        for (size_t i = 0; i < chars; i++) {
            if (use_han) {
                memcpy(text + len, han[rng_next() % 5], 3);
                len += 3;
            } else {
                text[len++] = letters[rng_next() % strlen(letters)];
            }
        }
        size_t n_want = naive_bpe(v, (size_t)n_base, text, len, want);
        int32_t *ids = NULL;
        size_t n = 0;
        kimi_err err = {0};
        CHECK(tokenizer_encode(tok, text, len, 1, &ids, &n, &err) == 0);
        int whole = vocab_rank(v, (size_t)n_base, text, len) >= 0;  /* then tiktoken skips the merge */
        int ok = whole ? n == 1 : same_ids(ids, n, want, n_want);
        if (!ok && failures++ < 3) {
            fprintf(stderr, "merge differs from tiktoken's algorithm (%zu vs %zu ids): ", n, n_want);
            show_text(text, len);
        }
        CHECK(ok);
        free(ids);
    }
    free(v);
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 100 KB pieces: a quadratic merge would take minutes; a generous bound catches it. */
static void test_long_pieces(const tokenizer *tok)
{
    size_t len = 100000;
    char *text = malloc(len);
    static const char *kinds[] = {"letters", "one letter", "Han"};
    for (int kind = 0; kind < 3; kind++) {
        for (size_t i = 0; i < len; i++)
            text[i] = kind == 0 ? (char)('a' + rng_next() % 26) : 'x';
        if (kind == 2)
            for (size_t i = 0; i + 3 <= len; i += 3)
                memcpy(text + i, (rng_next() & 1) ? "\xe4\xb8\xad" : "\xe6\x96\x87", 3);
        size_t used = kind == 2 ? len - len % 3 : len;
        int32_t *ids = NULL;
        size_t n = 0, back_len = 0;
        char *back = NULL;
        kimi_err err = {0};
        double t0 = seconds_now();
        CHECK(tokenizer_encode(tok, text, used, 1, &ids, &n, &err) == 0);
        double dt = seconds_now() - t0;
        printf("100 KB piece of %s: %zu ids in %.3f s\n", kinds[kind], n, dt);
        CHECK_MSG(dt < 2.0, "%s: %.2f s", kinds[kind], dt);
        CHECK(tokenizer_decode(tok, ids, n, &back, &back_len, &err) == 0 && back_len == used &&
              !memcmp(back, text, used));
        free(back);
        free(ids);
    }
    free(text);
}

/* ---- streaming decoder ---------------------------------------------------------------------- */

static int valid_utf8(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!len || i + len > n)
            return 0;
        for (size_t k = 1; k < len; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

/* Id of the token that is exactly one byte b. */
static int32_t byte_id(const tokenizer *tok, unsigned char b)
{
    for (int32_t id = 0; id < tokenizer_vocab_size(tok); id++) {
        size_t len;
        const char *s = tokenizer_token_bytes(tok, id, &len);
        if (len == 1 && (unsigned char)s[0] == b)
            return id;
    }
    return -1;
}

/* Stream ids; the output of every push must be valid UTF-8; returns the whole text. */
static size_t stream_all(const tokenizer *tok, const int32_t *ids, size_t n, char *out, size_t cap, int *all_valid)
{
    token_stream ts;
    token_stream_init(&ts, tok);
    size_t min_cap = token_stream_min_cap(tok), total = 0;
    char *piece = malloc(min_cap);
    *all_valid = 1;
    for (size_t i = 0; i <= n; i++) {
        size_t got = i < n ? token_stream_push(&ts, ids[i], piece, min_cap) : token_stream_flush(&ts, piece, min_cap);
        *all_valid &= valid_utf8(piece, got) && piece[got] == 0;
        if (total + got <= cap)
            memcpy(out + total, piece, got);
        total += got;
    }
    free(piece);
    return total;
}

static void test_stream(const tokenizer *tok, const case_list *cases)
{
    char out[1 << 16];
    for (size_t i = 0; i < cases->n; i++) {
        const text_case *c = &cases->v[i];
        int valid;
        size_t got = stream_all(tok, c->ids, c->n_ids, out, sizeof out, &valid);
        CHECK(valid);
        CHECK_MSG(got == c->len && !memcmp(out, c->text, got), "stream case %zu", i);
    }
    /* Ill-formed and cut bytes, one id per byte: 0x80 alone, then 0xE4 0xB8 cut by 'a', then an
     * incomplete tail at the end. Python: b"\x80\xe4\xb8a\xf0\x9f".decode("utf-8", "replace")
     * gives "\ufffd\ufffda\ufffd". */
    const unsigned char bytes[] = {0x80, 0xE4, 0xB8, 'a', 0xF0, 0x9F};
    int32_t ids[sizeof bytes];
    for (size_t i = 0; i < sizeof bytes; i++)
        ids[i] = byte_id(tok, bytes[i]);
    int valid;
    size_t got = stream_all(tok, ids, sizeof bytes, out, sizeof out, &valid);
    const char *want = "\xEF\xBF\xBD\xEF\xBF\xBD" "a" "\xEF\xBF\xBD";
    CHECK(valid);
    CHECK(got == strlen(want) && !memcmp(out, want, got));
    /* A character split over three ids comes out whole, with the last of them. */
    token_stream ts;
    char piece[256];
    token_stream_init(&ts, tok);
    CHECK_INT(token_stream_push(&ts, byte_id(tok, 0xF0), piece, sizeof piece), 0);
    CHECK_INT(token_stream_push(&ts, byte_id(tok, 0x9F), piece, sizeof piece), 0);
    CHECK_INT(token_stream_push(&ts, byte_id(tok, 0x99), piece, sizeof piece), 0);
    CHECK_INT(token_stream_push(&ts, byte_id(tok, 0x82), piece, sizeof piece), 4);
    CHECK(!strcmp(piece, "\xF0\x9F\x99\x82"));
    CHECK_INT(token_stream_flush(&ts, piece, sizeof piece), 0);
    /* An out-of-range id shows as U+FFFD; a special shows as its text. */
    CHECK_INT(token_stream_push(&ts, -5, piece, sizeof piece), 3);
    CHECK(token_stream_push(&ts, tokenizer_special_id(tok, "<|im_end|>"), piece, sizeof piece) == 10 &&
          !strcmp(piece, "<|im_end|>"));
    /* A cap too small cuts at a character boundary and stays NUL-terminated. */
    int32_t im_end = tokenizer_special_id(tok, "<|im_end|>");
    CHECK(token_stream_push(&ts, im_end, piece, 4) == 3 && !strcmp(piece, "<|i"));
}

/* ---- a vocabulary of another size ----------------------------------------------------------- */

typedef struct {
    const char *s;
    size_t len;
} byte_run;

static int run_order(const void *pa, const void *pb)
{
    const byte_run *a = pa, *b = pb;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return memcmp(a->s, b->s, a->len);
}

static size_t char_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* The vocabulary of tests/unit/tokenizer_extra_cases.py: the 256 bytes, then every distinct
 * run of 2..4 characters of the case texts by (byte length, bytes); specials after it, with
 * the tiny checkpoint's names in the tiny checkpoint's order. Every piece of up to four
 * characters is one token, so the ids show where the pre-tokenizer split. */
static void test_run_vocabulary(const model_config *tiny, const case_list *texts)
{
    size_t n_runs = 0, cap = 1024;
    byte_run *runs = malloc(cap * sizeof *runs);
    for (size_t t = 0; t < texts->n; t++) {
        const char *s = texts->v[t].text;
        size_t len = texts->v[t].len;
        for (size_t i = 0; i < len; i += char_len((unsigned char)s[i])) {
            size_t e = i;
            for (int chars = 1; chars <= 4 && e < len; chars++) {
                e += char_len((unsigned char)s[e]);
                if (chars >= 2) {
                    if (n_runs == cap)
                        runs = realloc(runs, (cap *= 2) * sizeof *runs);
                    runs[n_runs++] = (byte_run){s + i, e - i};
                }
            }
        }
    }
    qsort(runs, n_runs, sizeof *runs, run_order);
    char dir[] = "/tmp/kimi_tok_vocab_XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    FILE *f = fopen(path, "w");
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    int rank = 0;
    for (size_t i = 0; i < 256 + n_runs; i++) {
        unsigned char one = (unsigned char)i;
        const unsigned char *s = i < 256 ? &one : (const unsigned char *)runs[i - 256].s;
        size_t len = i < 256 ? 1 : runs[i - 256].len;
        if (i > 256 && !run_order(&runs[i - 256], &runs[i - 257]))
            continue;
        for (size_t k = 0; k < len; k += 3) {
            uint32_t v = (uint32_t)s[k] << 16 | (k + 1 < len ? (uint32_t)s[k + 1] << 8 : 0) | (k + 2 < len ? s[k + 2] : 0);
            fprintf(f, "%c%c%c%c", b64[v >> 18], b64[v >> 12 & 63], k + 1 < len ? b64[v >> 6 & 63] : '=',
                    k + 2 < len ? b64[v & 63] : '=');
        }
        fprintf(f, " %d\n", rank++);
    }
    fclose(f);
    /* specials renumbered after the new base vocabulary, keeping their names */
    model_config cfg = *tiny;
    cfg.vocab = 0;
    cfg.specials = malloc((size_t)tiny->n_specials * sizeof *cfg.specials);
    for (int i = 0; i < tiny->n_specials; i++)
        cfg.specials[i] = (special_token){tiny->specials[i].id - tiny->specials[0].id + rank, tiny->specials[i].content};
    tokenizer *tok = NULL;
    kimi_err err = {0};
    CHECK_MSG(tokenizer_load(&tok, dir, &cfg, &err) == 0, "%s", err.msg);
    case_list want = {0};
    CHECK(read_cases("tests/unit/data/tokenizer_run_vocab_ids.jsonl", &want) == (int)texts->n);
    if (tok && want.n == texts->n) {
        printf("run vocabulary: %d base tokens, %d ids\n", rank, tokenizer_vocab_size(tok));
        CHECK_INT(tokenizer_vocab_size(tok), rank + tiny->n_specials);
        CHECK_INT(tokenizer_special_id(tok, "<|im_end|>"), config_special_id(tiny, "<|im_end|>") - tiny->specials[0].id + rank);
        for (size_t i = 0; i < texts->n; i++) {
            want.v[i].text = texts->v[i].text;
            want.v[i].len = texts->v[i].len;
        }
        check_cases(tok, &want, "run vocabulary");
        for (size_t i = 0; i < texts->n; i++)
            want.v[i].text = NULL;
    }
    free_cases(&want);
    tokenizer_free(tok);
    free(cfg.specials);
    unlink(path);
    rmdir(dir);
    free(runs);
}

/* ---- malformed tiktoken.model --------------------------------------------------------------- */

static void expect_load_error(const char *what, const char *contents, const char *needle)
{
    char dir[] = "/tmp/kimi_tok_bad_XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    if (contents) {
        FILE *f = fopen(path, "w");
        fputs(contents, f);
        fclose(f);
    }
    model_config cfg;
    config_init(&cfg);
    tokenizer *tok = NULL;
    kimi_err err = {0};
    int rc = tokenizer_load(&tok, dir, &cfg, &err);
    CHECK_MSG(rc == KIMI_ERR_MODEL && tok == NULL, "%s: rc %d", what, rc);
    CHECK_MSG(strstr(err.msg, "tiktoken.model") && strstr(err.msg, needle), "%s: message '%s'", what, err.msg);
    tokenizer_free(tok);
    unlink(path);
    rmdir(dir);
}

/* A valid model of the 256 single bytes, with `extra` appended. */
static char *byte_model(const char *extra)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc(256 * 16 + strlen(extra) + 1);
    size_t o = 0;
    for (int b = 0; b < 256; b++)
        o += (size_t)sprintf(out + o, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    strcpy(out + o, extra);
    return out;
}

static void test_bad_models(void)
{
    struct {
        const char *what, *extra, *needle;
    } bad[] = {
        {"bad base64", "YW!i 256\n", "invalid base64"},
        {"stray bits", "YR== 256\n", "invalid base64"},
        {"unpadded", "YWI 256\n", "invalid base64"},
        {"duplicate rank", "YWI= 255\n", "appears twice"},
        {"rank gap", "YWI= 257\n", "out of range"},
        {"duplicate bytes", "YWI= 256\nYWI= 257\n", "same bytes"},
        {"no rank", "YWI=\n", "base64 rank"},
        {"bad rank", "YWI= 2x6\n", "bad rank"},
        {"empty token", " 256\n", "invalid base64"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *model = byte_model(bad[i].extra);
        expect_load_error(bad[i].what, model, bad[i].needle);
        free(model);
    }
    expect_load_error("missing byte", "YQ== 0\n", "single byte");
    expect_load_error("empty file", "", "no tokens");
    expect_load_error("no file", NULL, "cannot open");

    /* a valid one, to show the checks above fail for their own reason */
    char dir[] = "/tmp/kimi_tok_ok_XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    char *model = byte_model("YWI= 256\r\n\n");
    FILE *f = fopen(path, "w");
    fputs(model, f);
    fclose(f);
    free(model);
    model_config cfg;
    config_init(&cfg);
    tokenizer *tok = NULL;
    kimi_err err = {0};
    CHECK_MSG(tokenizer_load(&tok, dir, &cfg, &err) == 0, "%s", err.msg);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(tok && tokenizer_encode(tok, "abc", 3, 1, &ids, &n, &err) == 0 && n == 2 && ids[0] == 256 && ids[1] == 'c');
    CHECK(tok && tokenizer_vocab_size(tok) == 257);
    free(ids);
    tokenizer_free(tok);

    /* special tokens that clash with the base vocabulary or with each other */
    special_token clash[] = {{100, "<a>"}};
    cfg.specials = clash;
    cfg.n_specials = 1;
    CHECK(tokenizer_load(&tok, dir, &cfg, &err) == KIMI_ERR_MODEL && strstr(err.msg, "special token 100"));
    special_token twins[] = {{257, "<a>"}, {258, "<a>"}};
    cfg.specials = twins;
    cfg.n_specials = 2;
    CHECK(tokenizer_load(&tok, dir, &cfg, &err) == KIMI_ERR_MODEL && strstr(err.msg, "same text"));
    special_token gap[] = {{260, "<b>"}};
    cfg.specials = gap;
    cfg.n_specials = 1;
    CHECK(tokenizer_load(&tok, dir, &cfg, &err) == 0);
    CHECK(tok && tokenizer_vocab_size(tok) == 261 && tokenizer_special_id(tok, "<|reserved_token_258|>") == 258);
    tokenizer_free(tok);
    cfg.vocab = 260;
    CHECK(tokenizer_load(&tok, dir, &cfg, &err) == KIMI_ERR_MODEL && strstr(err.msg, "vocab_size"));
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    model_config cfg;
    tokenizer *tok = NULL;
    if (load_tiny(&cfg, &tok))
        return 1;
    case_list reference = {0}, extra = {0}, all_texts = {0};
    CHECK(read_cases("tests/golden/reference/tiny-k25/tokenizer_cases.jsonl", &reference) > 80);
    CHECK(read_cases("tests/unit/data/tokenizer_extra_cases.jsonl", &extra) > 400);
    check_cases(tok, &reference, "reference");
    check_cases(tok, &extra, "extra");
    test_specials(tok, &cfg);
    test_invalid_utf8(tok);
    test_random_round_trips(tok);
    test_bpe_against_naive(tok);
    test_long_pieces(tok);
    test_stream(tok, &reference);
    test_stream(tok, &extra);
    all_texts.n = reference.n + extra.n;
    all_texts.v = malloc(all_texts.n * sizeof *all_texts.v);
    memcpy(all_texts.v, reference.v, reference.n * sizeof *reference.v);
    memcpy(all_texts.v + reference.n, extra.v, extra.n * sizeof *extra.v);
    test_run_vocabulary(&cfg, &all_texts);
    free(all_texts.v);
    test_bad_models();
    free_cases(&reference);
    free_cases(&extra);
    tokenizer_free(tok);
    config_free(&cfg);
    return check_finish();
}
