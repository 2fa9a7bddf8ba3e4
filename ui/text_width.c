/* text_width: grapheme clusters and their widths through utf8proc, and the displayable form. */
#include "ui/text_width.h"

#include <stdint.h>
#include <string.h>

#include <utf8proc.h>

#include "engine/text/utf8.h"

/* Decode the code point at s[p] of valid UTF-8 text, never reading past n. */
static int32_t decode(const char *s, size_t n, size_t p, size_t *next)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t len = 0;
    if (utf8_sequence(u + p, n - p, &len) != UTF8_OK) {
        *next = p + (len ? len : 1);
        return 0xFFFD;
    }
    return (int32_t)utf8_decode_valid(u, p, next);
}

static int is_regional_indicator(int32_t cp)
{
    return cp >= 0x1F1E6 && cp <= 0x1F1FF;
}

static int is_skin_tone(int32_t cp)
{
    return cp >= 0x1F3FB && cp <= 0x1F3FF;
}

static text_terminal terminal;

void text_set_terminal(const text_terminal *t)
{
    terminal = t ? *t : (text_terminal){0};
}

static int clamp_width(int w)
{
    return w < 0 ? 0 : w > 2 ? 2 : w;
}

size_t text_cluster(const char *s, size_t n, size_t pos, int *width)
{
    size_t next;
    int32_t cp = decode(s, n, pos, &next);
    if (cp < 0x300 && (next >= n || (uint8_t)s[next] < 0x80)) {
        /* Latin text: a lone code point followed by ASCII is a cluster of its own (ASCII
         * starts no extension), so skip utf8proc's tables. */
        if (cp >= 0x20 && cp != 0x7F && !(cp >= 0x80 && cp < 0xA0)) {
            *width = 1;
            return next - pos;
        }
    }
    int32_t state = 0;
    /* the cluster is one glyph, or several where the terminal keeps parts apart: total holds
       the finished glyphs, w the widest code point of the current one */
    int total = 0;
    int w = utf8proc_charwidth(cp);
    int regional = is_regional_indicator(cp);
    int32_t prev = cp;
    size_t p = next;
    while (p < n) {
        int32_t c = decode(s, n, p, &next);
        if (utf8proc_grapheme_break_stateful(prev, c, &state))
            break;
        int cw = utf8proc_charwidth(c);
        if (cw > 0 && ((terminal.splits_zwj && prev == 0x200D) ||
                       (terminal.splits_modifiers && is_skin_tone(c)))) {
            total += clamp_width(w);
            w = cw;
        } else {
            if ((c == 0xFE0F && !terminal.narrow_vs16) || (regional && is_regional_indicator(c)))
                cw = 2;
            if (cw > w)
                w = cw;
        }
        prev = c;
        p = next;
    }
    *width = total + clamp_width(w);
    return p - pos;
}

int text_width(const char *s, size_t n)
{
    int total = 0;
    for (size_t p = 0; p < n;) {
        int w;
        p += text_cluster(s, n, p, &w);
        total += w;
    }
    return total;
}

size_t text_fit(const char *s, size_t n, int max_width, int *width)
{
    int total = 0;
    size_t p = 0;
    while (p < n) {
        int w;
        size_t len = text_cluster(s, n, p, &w);
        if (total + w > max_width)
            break;
        total += w;
        p += len;
    }
    if (width)
        *width = total;
    return p;
}

/* The cleaning both forms share: ill-formed UTF-8 and C1 controls as U+FFFD, C0 controls and
 * DEL as caret notation, so that no byte of an escape sequence reaches a terminal as itself.
 * keep_layout (text_terminal_safe): newlines and tabs stay and a CR before a newline goes;
 * else (text_displayable, one line) tabs become spaces to the next stop and a final CR goes. */
static void clean(strbuf *out, const char *s, size_t n, int keep_layout)
{
    const uint8_t *u = (const uint8_t *)s;
    if (!keep_layout && n && s[n - 1] == '\r')
        n--;
    size_t line_start = out->len;
    int col = 0;            /* columns of out since line_start, up to col_upto */
    size_t col_upto = line_start;
    for (size_t p = 0; p < n;) {
        uint8_t b = u[p];
        if (b >= 0x20 && b < 0x7F) {
            size_t q = p + 1;
            while (q < n && u[q] >= 0x20 && u[q] < 0x7F)
                q++;
            strbuf_add(out, s + p, q - p);
            p = q;
            continue;
        }
        if (keep_layout && (b == '\n' || b == '\t' || (b == '\r' && p + 1 < n && u[p + 1] == '\n'))) {
            if (b != '\r')
                strbuf_add(out, s + p, 1);
            p++;
            continue;
        }
        if (b == '\t') {
            if (out->failed)
                return;
            if (col_upto < out->len)
                col += text_width(out->data + col_upto, out->len - col_upto);
            int spaces = TEXT_TAB_STOP - col % TEXT_TAB_STOP;
            strbuf_add(out, "        ", (size_t)spaces);
            col += spaces;
            col_upto = out->len;
            p++;
            continue;
        }
        if (b < 0x20 || b == 0x7F) {
            char caret[2] = {'^', b == 0x7F ? '?' : (char)(b + 0x40)};
            strbuf_add(out, caret, 2);
            p++;
            continue;
        }
        size_t len = 0;
        if (utf8_sequence(u + p, n - p, &len) != UTF8_OK) {
            strbuf_add(out, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
            p += len ? len : 1;
            continue;
        }
        size_t next;
        uint32_t cp = utf8_decode_valid(u, p, &next);
        if (cp >= 0x80 && cp < 0xA0)
            strbuf_add(out, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
        else
            strbuf_add(out, s + p, next - p);
        p = next;
    }
}

void text_displayable(strbuf *out, const char *s, size_t n)
{
    clean(out, s, n, 0);
}

void text_terminal_safe(strbuf *out, const char *s, size_t n)
{
    clean(out, s, n, 1);
}
