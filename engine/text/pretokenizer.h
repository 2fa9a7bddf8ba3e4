/* pretokenizer: Kimi's pre-tokenizer regex, matched by hand: splits valid UTF-8 text into the
 * pieces that the byte-pair merge then works on, one piece at a time. */
#ifndef KIMI_PRETOKENIZER_H
#define KIMI_PRETOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/error.h"
#include "engine/text/utf8.h"

/* Character classes of the regex, as bits of one byte (utf8proc general categories, Unicode
 * 15.0, the same version as the Han and White_Space tables of pretokenizer.c). */
enum {
    PRETOK_LETTER = 1,      /* \p{L} */
    PRETOK_NUMBER = 2,      /* \p{N} */
    PRETOK_SPACE = 4,       /* \s: White_Space, as the Rust regex crate reads it */
    PRETOK_HAN = 8,         /* \p{Han} */
    PRETOK_UPPER = 16,      /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] */
    PRETOK_LOWER = 32,      /* [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] */
    PRETOK_NEWLINE = 64,    /* [\r\n] */
};
/* [^\r\n\p{L}\p{N}]: the optional character in front of a word */
#define PRETOK_NOT_PREFIX (PRETOK_NEWLINE | PRETOK_LETTER | PRETOK_NUMBER)
/* [^\s\p{L}\p{N}]: punctuation and symbols */
#define PRETOK_NOT_PUNCT (PRETOK_SPACE | PRETOK_LETTER | PRETOK_NUMBER)

enum { PRETOK_BMP = 0x10000 };     /* code points whose class is cached: the BMP */

/* Read-only once made: pretokenizer_next_piece may run on several threads at once. */
typedef struct {
    uint8_t *bmp_class;         /* [PRETOK_BMP] PRETOK_* bits of every BMP code point */
} pretokenizer;

/* Fill pre's class table (malloc'ed, 64 KiB); pretokenizer_free releases it. */
int pretokenizer_init(pretokenizer *pre, kimi_err *err);
void pretokenizer_free(pretokenizer *pre);

/* PRETOK_* bits of any code point, from utf8proc and the tables (slow: the table is the cache). */
uint8_t pretokenizer_classify(uint32_t cp);

/* The word alternatives from q, after the optional prefix character:
 *   upper_first == 0:  [UPPER]*[LOWER]+ contraction?   (the regex's second alternative)
 *   upper_first == 1:  [UPPER]+[LOWER]* contraction?   (its third)
 * with the regex's backtracking: UPPER and LOWER share Lm, Lo and marks, so when the greedy
 * [UPPER]* run is not followed by a LOWER character, [LOWER]+ takes the last LOWER
 * character inside it. Returns the end of the match, or 0 for none. */
size_t pretokenizer_word_end(const pretokenizer *pre, const uint8_t *s, size_t n, size_t q, int upper_first);

/* PRETOK_* bits of the character at s[p] of valid UTF-8; *next is the byte after it. */
static inline uint8_t pretokenizer_class_at(const pretokenizer *pre, const uint8_t *s, size_t p, size_t *next)
{
    uint32_t cp = utf8_decode_valid(s, p, next);
    return cp < PRETOK_BMP ? pre->bmp_class[cp] : pretokenizer_classify(cp);
}

/* End of the piece that starts at s[p] (p < n) of the valid UTF-8 text s[0..n): the regex's
 * alternatives tried in order, the first that matches wins. Inline because inlined into the
 * encoder's loop it is faster: behind a call, per piece or per batch of pieces, encoding ran
 * 4-9% slower on tests/bench/tokenizer. */
static inline size_t pretokenizer_next_piece(const pretokenizer *pre, const uint8_t *s, size_t n, size_t p)
{
    size_t q, e, next;
    uint8_t c0 = pretokenizer_class_at(pre, s, p, &q);
    uint8_t c1 = q < n ? pretokenizer_class_at(pre, s, q, &next) : 0;

    /* [\p{Han}]+ */
    if (c0 & PRETOK_HAN) {
        e = q;
        while (e < n && (pretokenizer_class_at(pre, s, e, &next) & PRETOK_HAN))
            e = next;
        return e;
    }
    /* [^\r\n\p{L}\p{N}]? then a word: the optional character is tried taken, then not */
    int prefix = !(c0 & PRETOK_NOT_PREFIX);
    if ((c0 & (PRETOK_UPPER | PRETOK_LOWER)) || (prefix && (c1 & (PRETOK_UPPER | PRETOK_LOWER)))) {
        for (int upper_first = 0; upper_first <= 1; upper_first++) {
            if (prefix && (e = pretokenizer_word_end(pre, s, n, q, upper_first)))
                return e;
            if ((e = pretokenizer_word_end(pre, s, n, p, upper_first)))
                return e;
        }
    }
    /* \p{N}{1,3} */
    if (c0 & PRETOK_NUMBER) {
        e = q;
        for (int k = 1; k < 3 && e < n && (pretokenizer_class_at(pre, s, e, &next) & PRETOK_NUMBER); k++)
            e = next;
        return e;
    }
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    if (!(c0 & PRETOK_NOT_PUNCT) || (s[p] == ' ' && q < n && !(c1 & PRETOK_NOT_PUNCT))) {
        e = q;
        while (e < n && !(pretokenizer_class_at(pre, s, e, &next) & PRETOK_NOT_PUNCT))
            e = next;
        while (e < n && (s[e] == '\r' || s[e] == '\n'))
            e++;
        return e;
    }
    /* Only whitespace is left: \s*[\r\n]+ ends after the run's last newline; \s+(?!\S) takes
     * the run up to the end of text, or all but its last character; \s+ takes one. */
    size_t last_newline_end = (c0 & PRETOK_NEWLINE) ? q : 0, last_start = p, count = 1;
    e = q;
    while (e < n) {
        uint8_t c = pretokenizer_class_at(pre, s, e, &next);
        if (!(c & PRETOK_SPACE))
            break;
        if (c & PRETOK_NEWLINE)
            last_newline_end = next;
        last_start = e;
        count++;
        e = next;
    }
    if (last_newline_end)
        return last_newline_end;
    if (e == n || count == 1)
        return e;
    return last_start;
}

#endif
