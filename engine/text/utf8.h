/* utf8: the UTF-8 the tokenizer and the messages need: decoding a code point of valid text,
 * sizing sequences by Unicode's table of well-formed UTF-8, replacing ill-formed parts with
 * U+FFFD, and text made one line. */
#ifndef KIMI_UTF8_H
#define KIMI_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* U+FFFD REPLACEMENT CHARACTER, UTF8_REPLACEMENT_LEN bytes */
#define UTF8_REPLACEMENT "\xEF\xBF\xBD"
enum { UTF8_REPLACEMENT_LEN = 3 };

enum { UTF8_OK, UTF8_BAD, UTF8_SHORT };

/* Classify the sequence at s[0..n) (n >= 1) by Unicode's table 3-7 of well-formed UTF-8.
 * UTF8_OK: *len is the sequence length. UTF8_BAD: *len is the maximal subpart to replace by
 * one U+FFFD. UTF8_SHORT: s[0..n) is a valid prefix cut by the end of the buffer (*len = n). */
int utf8_sequence(const uint8_t *s, size_t n, size_t *len);

/* Whether s[0..n) is well-formed UTF-8 throughout. */
int utf8_is_valid(const uint8_t *s, size_t n);

/* Copy s[0..n) to out with every ill-formed subpart (and a cut tail) replaced by one U+FFFD,
 * as Python's decode("utf-8", "replace") does; out has room for 3 * n bytes. Returns the
 * bytes written. */
size_t utf8_replace_ill_formed(const uint8_t *s, size_t n, uint8_t *out);

/* s[0..len) in one line into out[cap] (cap >= 4), for messages that quote text from a file,
 * a server or the model: control characters (C0, DEL and C1) and runs of white space become
 * one space (none leading), ill-formed UTF-8 becomes U+FFFD, and a text too long is cut at a
 * character with "…". The one sanitizer of one-line text. */
void utf8_one_line(const char *s, size_t len, char *out, size_t cap);

/* Code point at s[p] of valid UTF-8; *next is the byte after it. Inline: the pre-tokenizer
 * calls it for every character, and a call per character would cost it speed. */
static inline uint32_t utf8_decode_valid(const uint8_t *s, size_t p, size_t *next)
{
    uint32_t b = s[p];
    if (b < 0x80) {
        *next = p + 1;
        return b;
    }
    if (b < 0xE0) {
        *next = p + 2;
        return (b & 0x1F) << 6 | (s[p + 1] & 0x3Fu);
    }
    if (b < 0xF0) {
        *next = p + 3;
        return (b & 0x0F) << 12 | (s[p + 1] & 0x3Fu) << 6 | (s[p + 2] & 0x3Fu);
    }
    *next = p + 4;
    return (b & 0x07) << 18 | (s[p + 1] & 0x3Fu) << 12 | (s[p + 2] & 0x3Fu) << 6 | (s[p + 3] & 0x3Fu);
}

#endif
