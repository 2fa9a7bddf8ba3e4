/* tokenizer: Kimi's tiktoken BPE (tiktoken.model + special tokens from tokenizer_config.json):
 * encode, decode, and a streaming decoder that emits only complete UTF-8. */
#ifndef KIMI_TOKENIZER_H
#define KIMI_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/config.h"
#include "engine/base/error.h"

/* A loaded tokenizer is read-only: encode and decode may run on several threads at once. */
typedef struct tokenizer tokenizer;

/* Load model_dir/tiktoken.model (ranks exactly 0..n-1, distinct byte strings, every single byte
 * present); the specials come from cfg (tokenizer_config.json) and must follow the n ranks; an
 * unnamed id among them is "<|reserved_token_{id}|>". Fails when there are more ids than
 * cfg->vocab (when that is set). */
int tokenizer_load(tokenizer **out, const char *model_dir, const model_config *cfg, kimi_err *err);
void tokenizer_free(tokenizer *tok);

/* Number of ids (base vocabulary + specials). */
int tokenizer_vocab_size(const tokenizer *tok);

/* Encode len bytes of text. allow_special: special-token strings (the longest one at the
 * leftmost place) become their ids; otherwise they are encoded as plain text. Invalid UTF-8
 * becomes U+FFFD. *ids is malloc'ed (caller frees), *n_ids its length. */
int tokenizer_encode(const tokenizer *tok, const char *text, size_t len, int allow_special,
                     int32_t **ids, size_t *n_ids, kimi_err *err);

/* Same, appending to a caller's growable array: *ids (malloc'ed or NULL) holds *n_ids ids in
 * room for *cap_ids; it is realloc'ed as needed. On error *n_ids is unchanged. */
int tokenizer_encode_append(const tokenizer *tok, const char *text, size_t len, int allow_special,
                            int32_t **ids, size_t *n_ids, size_t *cap_ids, kimi_err *err);

/* Bytes of one id (a special's text for specials); NULL for an id out of range. */
const char *tokenizer_token_bytes(const tokenizer *tok, int32_t id, size_t *len);

/* Decode ids into a malloc'ed NUL-terminated string (bytes as they are). */
int tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n_ids, char **text,
                     size_t *len, kimi_err *err);

/* Id of a special token by its text ("<|im_end|>"), or -1. */
int32_t tokenizer_special_id(const tokenizer *tok, const char *name);
int tokenizer_is_special(const tokenizer *tok, int32_t id);

/* Streaming decoder: feed ids one by one, get back only complete UTF-8 (an incomplete tail is
 * held back until the next id completes it, or flushed as U+FFFD at the end). */
typedef struct {
    const tokenizer *tok;
    char pending[8];            /* incomplete UTF-8 tail held back */
    int n_pending;
} token_stream;

void token_stream_init(token_stream *ts, const tokenizer *tok);
/* Smallest cap that token_stream_push and token_stream_flush can always fill completely: the
 * longest token, plus a held-back tail, with every byte possibly replaced by U+FFFD. */
size_t token_stream_min_cap(const tokenizer *tok);
/* Append the complete text that id adds to out (cap bytes incl. NUL); returns bytes written.
 * Output is valid UTF-8: bytes that can never form a character become U+FFFD (as Python's
 * errors="replace" does), and so does an id out of range. With cap below token_stream_min_cap
 * the text is cut at a character boundary. */
size_t token_stream_push(token_stream *ts, int32_t id, char *out, size_t cap);
size_t token_stream_flush(token_stream *ts, char *out, size_t cap);

#endif
