/* utf8: sequence sizes by Unicode's table 3-7, validation, and U+FFFD replacement of ill-formed
 * parts (the maximal-subpart rule that Python's errors="replace" follows). */
#include "engine/text/utf8.h"

#include <string.h>

int utf8_sequence(const uint8_t *s, size_t n, size_t *len)
{
    uint8_t b = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    if (b < 0x80) {
        *len = 1;
        return UTF8_OK;
    } else if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        lo = b == 0xE0 ? 0xA0 : 0x80;
        hi = b == 0xED ? 0x9F : 0xBF;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        lo = b == 0xF0 ? 0x90 : 0x80;
        hi = b == 0xF4 ? 0x8F : 0xBF;
    } else {
        *len = 1;
        return UTF8_BAD;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *len = n;
            return UTF8_SHORT;
        }
        if (s[i] < lo || s[i] > hi) {
            *len = i;
            return UTF8_BAD;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    *len = need;
    return UTF8_OK;
}

int utf8_is_valid(const uint8_t *s, size_t n)
{
    size_t i = 0, len;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if (utf8_sequence(s + i, n - i, &len) != UTF8_OK)
            return 0;
        i += len;
    }
    return 1;
}

size_t utf8_replace_ill_formed(const uint8_t *s, size_t n, uint8_t *out)
{
    size_t i = 0, o = 0, len;
    while (i < n) {
        if (utf8_sequence(s + i, n - i, &len) == UTF8_OK) {
            memcpy(out + o, s + i, len);
            o += len;
        } else {
            memcpy(out + o, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
            o += UTF8_REPLACEMENT_LEN;
        }
        i += len;
    }
    return o;
}

void utf8_one_line(const char *s, size_t len, char *out, size_t cap)
{
    size_t o = 0, safe = 0;    /* safe: the last piece boundary with room for the ellipsis */
    int space = 0;
    for (size_t i = 0; i < len;) {
        const uint8_t *u = (const uint8_t *)s + i;
        size_t n;
        const char *piece = (const char *)u;
        if (utf8_sequence(u, len - i, &n) != UTF8_OK) {
            piece = UTF8_REPLACEMENT;
            i += n;
            n = UTF8_REPLACEMENT_LEN;
        } else if ((n == 1 && (u[0] <= ' ' || u[0] == 0x7f)) || (n == 2 && u[0] == 0xC2 && u[1] < 0xA0)) {
            /* C0, DEL and C1 (U+0080..U+009F: CSI, OSC, NEL to a terminal reading UTF-8) */
            i += n;
            space = o > 0;
            continue;
        } else {
            i += n;
        }
        if (o + space + n > cap - 1) {
            o = safe;
            while (o > 0 && out[o - 1] == ' ')
                o--;
            memcpy(out + o, "\xE2\x80\xA6", 3);
            out[o + 3] = 0;
            return;
        }
        if (space)
            out[o++] = ' ';
        space = 0;
        memcpy(out + o, piece, n);
        o += n;
        if (o + 3 <= cap - 1)
            safe = o;
    }
    out[o] = 0;
}
