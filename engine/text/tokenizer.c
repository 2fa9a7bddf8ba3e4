/* tokenizer: Kimi's tiktoken BPE. Loads tiktoken.model and the special tokens into a rank table,
 * merges each pre-tokenizer piece with a heap-driven byte-pair merge (O(n log n) in the piece
 * length), decodes, and streams complete UTF-8. */
#include "engine/text/tokenizer.h"
#include "engine/base/array.h"
#include "engine/base/file_io.h"
#include "engine/text/pretokenizer.h"
#include "engine/text/utf8.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FILTER_BITS = 1 << 21 };

typedef struct {
    uint64_t head;              /* load_short of the key: tokens of up to 8 bytes are compared
                                 * here, without touching the blob */
    int32_t id;                 /* -1: empty slot */
    uint32_t check;             /* high hash bits, low 8 bits the key length (255: longer) */
} rank_slot;

struct tokenizer {
    int n_base;                 /* ranks of tiktoken.model: ids 0..n_base-1 */
    int n_ids;                  /* n_base + the special range */
    char *blob;                 /* bytes of every id, concatenated */
    size_t blob_used;           /* bytes of blob filled */
    uint32_t *tok_off;          /* [n_ids] offset of each id's bytes in blob */
    uint32_t *tok_len;          /* [n_ids] byte length of each id */
    size_t max_base_len;        /* longest base token, in bytes */
    size_t max_len;             /* longest token including specials, in bytes */
    rank_slot *table;           /* [table_mask + 1] open addressing: base token bytes -> rank */
    uint32_t table_mask;
    uint64_t *filter;           /* [FILTER_BITS / 64] one bit per hash value of a base token: most
                                 * byte strings that are no token are rejected here, in cache */
    int32_t *pair_rank;         /* [65536] rank of each two-byte token by (first << 8 | second), or -1 */
    int32_t *specials;          /* [n_specials] special ids sorted by their bytes */
    int n_specials;
    uint8_t special_first[256]; /* whether a byte starts some special's text */
    pretokenizer pre;           /* splits text into the pieces that are merged */
};

/* ---- rank table --------------------------------------------------------------------------- */

/* The bytes of a key of up to 8 bytes as one word, distinct for distinct keys of one length,
 * read with whole-word loads (a byte loop into a word stalls store forwarding); for a
 * longer key, its first 8 bytes. */
static inline uint64_t load_short(const uint8_t *s, size_t n)
{
    uint64_t v;
    uint32_t a, b;
    if (n >= 8) {
        memcpy(&v, s, 8);
        return v;
    }
    if (n >= 4) {
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        return (uint64_t)a << 32 | b;
    }
    return n ? (uint64_t)s[0] << 16 | (uint64_t)s[n / 2] << 8 | s[n - 1] : 0;
}

static inline uint64_t hash_bytes(const uint8_t *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull), v;
    while (n > 8) {
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    h = (h ^ load_short(s, n)) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

static inline uint32_t slot_check(uint64_t h, size_t n)
{
    return ((uint32_t)(h >> 32) & ~0xFFu) | (uint32_t)(n < 255 ? n : 255);
}

static inline int slot_matches(const tokenizer *t, rank_slot slot, uint32_t check, uint64_t head,
                               const uint8_t *s, size_t n)
{
    if (slot.check != check || slot.head != head)
        return 0;
    return n <= 8 || (t->tok_len[slot.id] == n && !memcmp(t->blob + t->tok_off[slot.id], s, n));
}

/* Rank of a base token by its bytes, or -1. */
static int32_t rank_of(const tokenizer *t, const uint8_t *s, size_t n)
{
    if (n > t->max_base_len)
        return -1;
    uint64_t h = hash_bytes(s, n), head = load_short(s, n);
    uint32_t bit = (uint32_t)(h >> 40) & (FILTER_BITS - 1);
    if (!(t->filter[bit / 64] >> (bit % 64) & 1))
        return -1;
    uint32_t check = slot_check(h, n);
    for (uint32_t i = (uint32_t)h & t->table_mask;; i = (i + 1) & t->table_mask) {
        rank_slot slot = t->table[i];
        if (slot.id < 0)
            return -1;
        if (slot_matches(t, slot, check, head, s, n))
            return slot.id;
    }
}

/* Insert rank id (its bytes already in blob); returns the rank already holding those bytes, or -1. */
static int32_t rank_insert(tokenizer *t, int32_t id)
{
    const uint8_t *s = (const uint8_t *)t->blob + t->tok_off[id];
    size_t n = t->tok_len[id];
    uint64_t h = hash_bytes(s, n), head = load_short(s, n);
    uint32_t check = slot_check(h, n);
    for (uint32_t i = (uint32_t)h & t->table_mask;; i = (i + 1) & t->table_mask) {
        rank_slot slot = t->table[i];
        if (slot.id < 0) {
            uint32_t bit = (uint32_t)(h >> 40) & (FILTER_BITS - 1);
            t->table[i] = (rank_slot){head, id, check};
            t->filter[bit / 64] |= 1ull << (bit % 64);
            return -1;
        }
        if (slot_matches(t, slot, check, head, s, n))
            return slot.id;
    }
}

/* ---- loading ------------------------------------------------------------------------------ */

static int base64_value(uint8_t c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict standard base64 (padded to a multiple of 4, no stray bits) into out; returns the
 * decoded length, or -1 when malformed. */
static long base64_decode(const uint8_t *s, size_t n, uint8_t *out)
{
    if (n == 0 || n % 4)
        return -1;
    size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    long o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int last = i + 4 == n;
        int v[4];
        for (int k = 0; k < 4; k++) {
            int is_pad = last && k >= 4 - (int)pad;
            v[k] = is_pad ? 0 : base64_value(s[i + k]);
            if (v[k] < 0)
                return -1;
        }
        uint32_t bits = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        int bytes = last ? 3 - (int)pad : 3;
        if (last && pad && (bits & ((1u << (8 * (int)pad)) - 1)))
            return -1;
        for (int k = 0; k < bytes; k++)
            out[o++] = (uint8_t)(bits >> (16 - 8 * k));
    }
    return o;
}

/* Parse tiktoken.model: "base64 rank" per line; ranks must be exactly 0..n-1. Sizes the id
 * arrays for ids up to max_special and the blob for special_bytes more bytes. */
static int load_ranks(tokenizer *t, const char *path, const char *data, size_t size, int max_special,
                      size_t special_bytes, kimi_err *err)
{
    size_t lines = 0;
    for (size_t i = 0; i < size;) {
        const char *eol = memchr(data + i, '\n', size - i);
        size_t end = eol ? (size_t)(eol - data) : size;
        if (end > i && !(end == i + 1 && data[i] == '\r'))
            lines++;
        i = end + 1;
    }
    if (lines == 0)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: no tokens", path);
    if (lines > INT32_MAX / 4 || size > UINT32_MAX / 2)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: too large", path);
    size_t n_ids = max_special >= 0 && (size_t)max_special >= lines ? (size_t)max_special + 1 : lines;
    if (n_ids - lines > 1u << 20)
        return kimi_fail(err, KIMI_ERR_MODEL, "tokenizer_config.json: special id %d is far beyond the %zu ranks of %s",
                         max_special, lines, path);
    /* every id of the special range may need a reserved name: "<|reserved_token_%d|>" + NUL < 32 */
    size_t blob_bytes = size + special_bytes + 32 * (n_ids - lines) + 1;
    if (blob_bytes > UINT32_MAX)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: too large", path);
    uint32_t table_size = 1;
    while (table_size < 2 * lines)
        table_size *= 2;
    t->n_base = (int)lines;
    t->n_ids = (int)n_ids;
    t->tok_off = malloc(n_ids * sizeof *t->tok_off);
    t->tok_len = calloc(n_ids, sizeof *t->tok_len);
    t->blob = malloc(blob_bytes);
    t->table = malloc((size_t)table_size * sizeof *t->table);
    t->filter = calloc(FILTER_BITS / 64, sizeof *t->filter);
    if (!t->tok_off || !t->tok_len || !t->blob || !t->table || !t->filter)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", path);
    t->table_mask = table_size - 1;
    for (uint32_t i = 0; i < table_size; i++)
        t->table[i] = (rank_slot){0, -1, 0};

    size_t line_no = 0;
    for (size_t i = 0; i < size;) {
        const char *line = data + i;
        const char *eol = memchr(line, '\n', size - i);
        size_t len = eol ? (size_t)(eol - line) : size - i;
        i += len + 1;
        line_no++;
        if (len && line[len - 1] == '\r')
            len--;
        if (len == 0)
            continue;
        const char *space = memchr(line, ' ', len);
        if (!space)
            return kimi_fail(err, KIMI_ERR_MODEL, "%s:%zu: expected \"base64 rank\"", path, line_no);
        size_t b64_len = (size_t)(space - line), rank_len = len - b64_len - 1;
        unsigned long long rank = 0;
        if (rank_len == 0 || rank_len > 10)
            return kimi_fail(err, KIMI_ERR_MODEL, "%s:%zu: bad rank", path, line_no);
        for (size_t k = 0; k < rank_len; k++) {
            char d = space[1 + k];
            if (d < '0' || d > '9')
                return kimi_fail(err, KIMI_ERR_MODEL, "%s:%zu: bad rank '%.*s'", path, line_no, (int)rank_len, space + 1);
            rank = rank * 10 + (unsigned)(d - '0');
        }
        if (rank >= lines)
            return kimi_fail(err, KIMI_ERR_MODEL, "%s:%zu: rank %llu out of range (%zu tokens, ranks must be 0..%zu)",
                             path, line_no, rank, lines, lines - 1);
        if (t->tok_len[rank])
            return kimi_fail(err, KIMI_ERR_MODEL, "%s:%zu: rank %llu appears twice", path, line_no, rank);
        long n = base64_decode((const uint8_t *)line, b64_len, (uint8_t *)t->blob + t->blob_used);
        if (n <= 0)
            return kimi_fail(err, KIMI_ERR_MODEL, "%s:%zu: invalid base64 '%.*s'", path, line_no,
                             (int)(b64_len < 64 ? b64_len : 64), line);
        t->tok_off[rank] = (uint32_t)t->blob_used;
        t->tok_len[rank] = (uint32_t)n;
        t->blob_used += (size_t)n;
        if ((size_t)n > t->max_base_len)
            t->max_base_len = (size_t)n;
        int32_t twin = rank_insert(t, (int32_t)rank);
        if (twin >= 0)
            return kimi_fail(err, KIMI_ERR_MODEL, "%s:%zu: rank %llu has the same bytes as rank %d", path,
                             line_no, rank, twin);
    }
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        if (rank_of(t, &byte, 1) < 0)
            return kimi_fail(err, KIMI_ERR_MODEL, "%s: no token for the single byte 0x%02X", path, b);
    }
    t->pair_rank = malloc(65536 * sizeof *t->pair_rank);
    if (!t->pair_rank)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", path);
    for (int pair = 0; pair < 65536; pair++) {
        uint8_t bytes[2] = {(uint8_t)(pair >> 8), (uint8_t)pair};
        t->pair_rank[pair] = rank_of(t, bytes, 2);
    }
    t->max_len = t->max_base_len;
    return 0;
}

static int compare_bytes(const char *a, size_t la, const char *b, size_t lb)
{
    int c = memcmp(a, b, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

typedef struct {
    const char *bytes;
    size_t len;
    int32_t id;
} special_key;

static int special_key_order(const void *pa, const void *pb)
{
    const special_key *a = pa, *b = pb;
    return compare_bytes(a->bytes, a->len, b->bytes, b->len);
}

/* The special range: ids n_base .. highest listed id; an id the config does not name is
 * "<|reserved_token_{id}|>", as Kimi's tokenizer names it. */
static int load_specials(tokenizer *t, const model_config *cfg, kimi_err *err)
{
    int n_base = t->n_base;
    for (int i = 0; i < cfg->n_specials; i++) {
        const special_token *sp = &cfg->specials[i];
        size_t len = sp->content ? strlen(sp->content) : 0;
        if (sp->id < n_base)
            return kimi_fail(err, KIMI_ERR_MODEL, "tokenizer_config.json: special token %d (%s) is not after the %d ranks of tiktoken.model",
                             sp->id, sp->content ? sp->content : "", n_base);
        if (len == 0)
            return kimi_fail(err, KIMI_ERR_MODEL, "tokenizer_config.json: special token %d has empty content", sp->id);
        if (t->tok_len[sp->id])
            return kimi_fail(err, KIMI_ERR_MODEL, "tokenizer_config.json: special token id %d appears twice", sp->id);
        memcpy(t->blob + t->blob_used, sp->content, len);
        t->tok_off[sp->id] = (uint32_t)t->blob_used;
        t->tok_len[sp->id] = (uint32_t)len;
        t->blob_used += len;
    }
    t->n_specials = t->n_ids - n_base;
    size_t n_keys = t->n_specials ? (size_t)t->n_specials : 1;
    special_key *keys = malloc(n_keys * sizeof *keys);
    t->specials = malloc(n_keys * sizeof *t->specials);
    if (!keys || !t->specials) {
        free(keys);
        return kimi_fail(err, KIMI_ERR_NOMEM, "tokenizer: out of memory for special tokens");
    }
    for (int id = n_base; id < t->n_ids; id++) {
        if (!t->tok_len[id]) {
            int len = sprintf(t->blob + t->blob_used, "<|reserved_token_%d|>", id);
            t->tok_off[id] = (uint32_t)t->blob_used;
            t->tok_len[id] = (uint32_t)len;
            t->blob_used += (size_t)len;
        }
        if (t->tok_len[id] > t->max_len)
            t->max_len = t->tok_len[id];
        keys[id - n_base] = (special_key){t->blob + t->tok_off[id], t->tok_len[id], id};
        t->special_first[(uint8_t)t->blob[t->tok_off[id]]] = 1;
    }
    qsort(keys, (size_t)t->n_specials, sizeof *keys, special_key_order);
    int rc = 0;
    for (int i = 0; i < t->n_specials; i++) {
        t->specials[i] = keys[i].id;
        if (i && !rc && !special_key_order(&keys[i - 1], &keys[i]))
            rc = kimi_fail(err, KIMI_ERR_MODEL, "tokenizer_config.json: special tokens %d and %d have the same text '%.*s'",
                           keys[i - 1].id, keys[i].id, (int)keys[i].len, keys[i].bytes);
    }
    free(keys);
    return rc;
}

int tokenizer_load(tokenizer **out, const char *model_dir, const model_config *cfg, kimi_err *err)
{
    char path[4096];
    char *data = NULL;
    size_t size = 0;
    *out = NULL;
    if ((size_t)snprintf(path, sizeof path, "%s/tiktoken.model", model_dir) >= sizeof path)
        return kimi_fail(err, KIMI_ERR_USAGE, "%s: model path too long", model_dir);
    int rc = file_read_all(path, &data, &size, err);
    if (rc)
        return rc;
    int max_special = -1;
    size_t special_bytes = 0;
    for (int i = 0; i < cfg->n_specials; i++) {
        if (cfg->specials[i].id > max_special)
            max_special = cfg->specials[i].id;
        if (cfg->specials[i].content)
            special_bytes += strlen(cfg->specials[i].content);
    }
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        free(data);
        return kimi_fail(err, KIMI_ERR_NOMEM, "tokenizer: out of memory");
    }
    rc = load_ranks(t, path, data, size, max_special, special_bytes, err);
    free(data);
    if (!rc)
        rc = load_specials(t, cfg, err);
    if (!rc && cfg->vocab > 0 && t->n_ids > cfg->vocab)
        rc = kimi_fail(err, KIMI_ERR_MODEL, "tokenizer has %d ids (tiktoken.model and tokenizer_config.json) but config.json vocab_size is %d",
                       t->n_ids, cfg->vocab);
    if (!rc)
        rc = pretokenizer_init(&t->pre, err);
    if (rc) {
        tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void tokenizer_free(tokenizer *tok)
{
    if (!tok)
        return;
    free(tok->blob);
    free(tok->tok_off);
    free(tok->tok_len);
    free(tok->table);
    free(tok->pair_rank);
    free(tok->filter);
    free(tok->specials);
    pretokenizer_free(&tok->pre);
    free(tok);
}

int tokenizer_vocab_size(const tokenizer *tok)
{
    return tok->n_ids;
}

/* ---- byte-pair merge ---------------------------------------------------------------------- */

typedef struct {
    int32_t rank;               /* rank of the merged bytes [left, end) */
    int32_t left;               /* start of the left part */
    int32_t end;                /* end of the right part */
} merge_candidate;

typedef struct {
    int32_t *part_end;          /* [piece] end of the part starting here; 0 once merged away */
    int32_t *part_prev;         /* [piece] start of the part before the one starting here */
    int32_t *part_rank;         /* [piece] rank of the part starting here */
    merge_candidate *heap;      /* [3 * piece] min-heap by (rank, left) */
    size_t cap;                 /* piece bytes the arrays have room for */
} bpe_scratch;

typedef struct {
    int32_t *ids;
    size_t n, cap;
} id_vec;

static int push_id(id_vec *v, int32_t id, kimi_err *err)
{
    if (array_reserve(&v->ids, &v->cap, v->n + 1, sizeof *v->ids))
        return kimi_fail(err, KIMI_ERR_NOMEM, "tokenizer: out of memory for %zu ids", v->n + 1);
    v->ids[v->n++] = id;
    return 0;
}

static int scratch_reserve(bpe_scratch *b, size_t n, kimi_err *err)
{
    if (n <= b->cap)
        return 0;
    if (n > INT32_MAX / 4)
        return kimi_fail(err, KIMI_ERR_INPUT, "tokenizer: a piece of %zu bytes is too long", n);
    size_t cap = n < 256 ? 256 : n;
    free(b->part_end);
    free(b->part_prev);
    free(b->part_rank);
    free(b->heap);
    b->part_end = malloc(cap * sizeof *b->part_end);
    b->part_prev = malloc(cap * sizeof *b->part_prev);
    b->part_rank = malloc(cap * sizeof *b->part_rank);
    b->heap = malloc(3 * cap * sizeof *b->heap);
    b->cap = b->part_end && b->part_prev && b->part_rank && b->heap ? cap : 0;
    if (!b->cap)
        return kimi_fail(err, KIMI_ERR_NOMEM, "tokenizer: out of memory for a piece of %zu bytes", n);
    return 0;
}

static void scratch_free(bpe_scratch *b)
{
    free(b->part_end);
    free(b->part_prev);
    free(b->part_rank);
    free(b->heap);
}

static inline int candidate_before(merge_candidate a, merge_candidate b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.left < b.left);
}

static void heap_push(merge_candidate *h, size_t *n, merge_candidate c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!candidate_before(c, h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = c;
}

static merge_candidate heap_pop(merge_candidate *h, size_t *n)
{
    merge_candidate top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n)
            break;
        if (child + 1 < *n && candidate_before(h[child + 1], h[child]))
            child++;
        if (!candidate_before(h[child], last))
            break;
        h[i] = h[child];
        i = child;
    }
    h[i] = last;
    return top;
}

static void push_candidate(const tokenizer *t, const uint8_t *s, merge_candidate *heap, size_t *n_heap,
                           int32_t left, int32_t end)
{
    int32_t rank = rank_of(t, s + left, (size_t)(end - left));
    if (rank >= 0)
        heap_push(heap, n_heap, (merge_candidate){rank, left, end});
}

/* tiktoken's merge: repeatedly join the adjacent pair whose bytes have the lowest rank (the
 * leftmost on ties) until no adjacent pair is a token. The heap holds every adjacent pair
 * that is a token; pairs that a merge destroyed are skipped when they surface. */
static int byte_pair_merge(const tokenizer *t, const uint8_t *s, size_t n, bpe_scratch *b, id_vec *out,
                           kimi_err *err)
{
    int rc = scratch_reserve(b, n, err);
    if (rc)
        return rc;
    int32_t len = (int32_t)n, *part_end = b->part_end, *part_prev = b->part_prev, *part_rank = b->part_rank;
    size_t n_heap = 0;
    for (int32_t i = 0; i < len; i++) {
        part_end[i] = i + 1;
        part_prev[i] = i - 1;
        part_rank[i] = rank_of(t, s + i, 1);
    }
    for (int32_t i = 0; i + 1 < len; i++) {
        int32_t rank = t->pair_rank[s[i] << 8 | s[i + 1]];
        if (rank >= 0)
            heap_push(b->heap, &n_heap, (merge_candidate){rank, i, i + 2});
    }
    while (n_heap) {
        merge_candidate c = heap_pop(b->heap, &n_heap);
        int32_t mid = part_end[c.left];
        if (mid == 0 || mid >= len || part_end[mid] != c.end)
            continue;
        part_end[c.left] = c.end;
        part_end[mid] = 0;
        part_rank[c.left] = c.rank;
        if (c.end < len)
            part_prev[c.end] = c.left;
        if (c.left > 0)
            push_candidate(t, s, b->heap, &n_heap, part_prev[c.left], c.end);
        if (c.end < len)
            push_candidate(t, s, b->heap, &n_heap, c.left, part_end[c.end]);
    }
    for (int32_t i = 0; i < len; i = part_end[i])
        if ((rc = push_id(out, part_rank[i], err)))
            return rc;
    return 0;
}

/* ---- encoding ----------------------------------------------------------------------------- */

static int encode_ordinary(const tokenizer *t, const uint8_t *s, size_t n, bpe_scratch *b, id_vec *out,
                           kimi_err *err)
{
    int rc = 0;
    for (size_t p = 0; p < n && !rc;) {
        size_t e = pretokenizer_next_piece(&t->pre, s, n, p);
        int32_t whole = rank_of(t, s + p, e - p);
        rc = whole >= 0 ? push_id(out, whole, err) : byte_pair_merge(t, s + p, e - p, b, out, err);
        p = e;
    }
    return rc;
}

/* Id of the longest special whose text starts at s[0..n), or -1. specials are sorted by bytes,
 * so those sharing the first d matched bytes form one range, ordered by their byte d. */
static int32_t special_at(const tokenizer *t, const uint8_t *s, size_t n)
{
    size_t lo = 0, hi = (size_t)t->n_specials;
    int32_t best = -1;
    for (size_t d = 0; d < n && lo < hi; d++) {
        size_t a = lo, z = hi;
        while (a < z) {     /* first entry whose byte d is >= s[d] (shorter entries sort first) */
            size_t mid = (a + z) / 2;
            int32_t id = t->specials[mid];
            if (t->tok_len[id] <= d || (uint8_t)t->blob[t->tok_off[id] + d] < s[d])
                a = mid + 1;
            else
                z = mid;
        }
        lo = a;
        z = hi;
        while (a < z) {     /* first entry whose byte d is > s[d] */
            size_t mid = (a + z) / 2;
            int32_t id = t->specials[mid];
            if ((uint8_t)t->blob[t->tok_off[id] + d] <= s[d])
                a = mid + 1;
            else
                z = mid;
        }
        hi = a;
        if (lo < hi && t->tok_len[t->specials[lo]] == d + 1)
            best = t->specials[lo];
    }
    return best;
}

int tokenizer_encode_append(const tokenizer *tok, const char *text, size_t len, int allow_special,
                            int32_t **ids, size_t *n_ids, size_t *cap_ids, kimi_err *err)
{
    const uint8_t *s = (const uint8_t *)text;
    uint8_t *clean = NULL;
    size_t n = len;
    int rc = 0;
    if (len && !utf8_is_valid(s, len)) {
        if (len > (SIZE_MAX - 1) / 3)
            return kimi_fail(err, KIMI_ERR_NOMEM, "tokenizer: text of %zu bytes is too large", len);
        if (!(clean = malloc(len * 3 + 1)))     /* every byte may become a 3-byte U+FFFD */
            return kimi_fail(err, KIMI_ERR_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        n = utf8_replace_ill_formed(s, len, clean);
        s = clean;
    }
    id_vec out = {*ids, *n_ids, *cap_ids};
    bpe_scratch scratch = {0};
    size_t start = 0;
    if (allow_special && tok->n_specials) {
        for (size_t i = 0; i < n && !rc; i++) {
            if (!tok->special_first[s[i]])
                continue;
            int32_t id = special_at(tok, s + i, n - i);
            if (id < 0)
                continue;
            rc = encode_ordinary(tok, s + start, i - start, &scratch, &out, err);
            if (!rc)
                rc = push_id(&out, id, err);
            start = i + tok->tok_len[id];
            i = start - 1;
        }
    }
    if (!rc)
        rc = encode_ordinary(tok, s + start, n - start, &scratch, &out, err);
    scratch_free(&scratch);
    free(clean);
    *ids = out.ids;
    *cap_ids = out.cap;
    if (!rc)
        *n_ids = out.n;
    return rc;
}

int tokenizer_encode(const tokenizer *tok, const char *text, size_t len, int allow_special,
                     int32_t **ids, size_t *n_ids, kimi_err *err)
{
    int32_t *out = NULL;
    size_t n = 0, cap = 0;
    int rc = tokenizer_encode_append(tok, text, len, allow_special, &out, &n, &cap, err);
    if (rc) {
        free(out);
        return rc;
    }
    *ids = out;
    *n_ids = n;
    return 0;
}

/* ---- decoding ----------------------------------------------------------------------------- */

const char *tokenizer_token_bytes(const tokenizer *tok, int32_t id, size_t *len)
{
    if (id < 0 || id >= tok->n_ids)
        return NULL;
    *len = tok->tok_len[id];
    return tok->blob + tok->tok_off[id];
}

int tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n_ids, char **text, size_t *len,
                     kimi_err *err)
{
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_ids)
            return kimi_fail(err, KIMI_ERR_INPUT, "tokenizer: id %d at position %zu is outside the vocabulary (0..%d)",
                             ids[i], i, tok->n_ids - 1);
        total += tok->tok_len[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out)
        return kimi_fail(err, KIMI_ERR_NOMEM, "tokenizer: out of memory decoding %zu ids", n_ids);
    size_t o = 0;
    for (size_t i = 0; i < n_ids; i++) {
        memcpy(out + o, tok->blob + tok->tok_off[ids[i]], tok->tok_len[ids[i]]);
        o += tok->tok_len[ids[i]];
    }
    out[o] = 0;
    *text = out;
    *len = o;
    return 0;
}

int32_t tokenizer_special_id(const tokenizer *tok, const char *name)
{
    size_t n = strlen(name), lo = 0, hi = (size_t)tok->n_specials;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int32_t id = tok->specials[mid];
        int c = compare_bytes(tok->blob + tok->tok_off[id], tok->tok_len[id], name, n);
        if (c == 0)
            return tok->specials[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

int tokenizer_is_special(const tokenizer *tok, int32_t id)
{
    return id >= tok->n_base && id < tok->n_ids;
}

/* ---- streaming decoder -------------------------------------------------------------------- */

void token_stream_init(token_stream *ts, const tokenizer *tok)
{
    memset(ts, 0, sizeof *ts);
    ts->tok = tok;
}

size_t token_stream_min_cap(const tokenizer *tok)
{
    return 3 * (tok->max_len + sizeof ((token_stream *)0)->pending) + 1;
}

typedef struct {
    char *out;
    size_t cap, n;              /* n < cap: room is kept for the NUL */
    int full;                   /* a character did not fit: the text is cut there */
} text_sink;

static void sink_put(text_sink *k, const void *bytes, size_t n)
{
    if (k->full || k->n + n >= k->cap) {
        k->full = 1;
        return;
    }
    memcpy(k->out + k->n, bytes, n);
    k->n += n;
}

/* Emit the complete characters of s[0..n) (ill-formed parts as U+FFFD) and hold back a cut
 * tail in ts->pending. */
static void stream_bytes(token_stream *ts, const uint8_t *s, size_t n, text_sink *k)
{
    size_t i = 0, len;
    while (i < n) {
        int kind = utf8_sequence(s + i, n - i, &len);
        if (kind == UTF8_SHORT) {
            memcpy(ts->pending, s + i, len);
            ts->n_pending = (int)len;
            return;
        }
        if (kind == UTF8_OK)
            sink_put(k, s + i, len);
        else
            sink_put(k, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
        i += len;
    }
}

size_t token_stream_push(token_stream *ts, int32_t id, char *out, size_t cap)
{
    text_sink k = {out, cap, 0, 0};
    size_t n;
    const uint8_t *s = (const uint8_t *)tokenizer_token_bytes(ts->tok, id, &n);
    if (!s) {
        s = (const uint8_t *)UTF8_REPLACEMENT;
        n = UTF8_REPLACEMENT_LEN;
    }
    if (ts->n_pending) {
        /* complete (or reject) the held-back character with the first bytes of this token */
        uint8_t head[8];
        size_t held = (size_t)ts->n_pending, take = n < 4 ? n : 4, len;
        memcpy(head, ts->pending, held);
        memcpy(head + held, s, take);
        ts->n_pending = 0;
        int kind = utf8_sequence(head, held + take, &len);
        if (kind == UTF8_SHORT) {
            memcpy(ts->pending, head, len);
            ts->n_pending = (int)len;
            s += take;
            n -= take;
        } else {
            if (kind == UTF8_OK)
                sink_put(&k, head, len);
            else
                sink_put(&k, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
            s += len - held;
            n -= len - held;
        }
    }
    if (!ts->n_pending)
        stream_bytes(ts, s, n, &k);
    if (cap)
        out[k.n] = 0;
    return k.n;
}

size_t token_stream_flush(token_stream *ts, char *out, size_t cap)
{
    text_sink k = {out, cap, 0, 0};
    if (ts->n_pending)
        sink_put(&k, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
    ts->n_pending = 0;
    if (cap)
        out[k.n] = 0;
    return k.n;
}
