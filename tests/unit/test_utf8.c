/* test_utf8: UTF-8 sequence sizes against Unicode's table 3-7 (every scalar value and every
 * two-byte string), U+FFFD replacement against Python's decode("utf-8", "replace"), and
 * decoding of every scalar value. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/utf8.h"
#include "tests/unit/check.h"
#include "tests/unit/utf8_encode.h"

#define R UTF8_REPLACEMENT

static void test_every_scalar_value(void)
{
    int bad = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        uint8_t b[4];
        size_t n = utf8_encode(cp, b), len = 0, next = 0;
        int kind = utf8_sequence(b, n, &len);
        int surrogate = cp >= 0xD800 && cp <= 0xDFFF;
        if (surrogate) {
            /* ED A0..BF: the second byte is out of ED's range, so ED alone is replaced */
            bad += kind != UTF8_BAD || len != 1 || utf8_is_valid(b, n);
            continue;
        }
        bad += kind != UTF8_OK || len != n || !utf8_is_valid(b, n);
        bad += utf8_decode_valid(b, 0, &next) != cp || next != n;
        for (size_t cut = 1; cut < n; cut++)
            bad += utf8_sequence(b, cut, &len) != UTF8_SHORT || len != cut;
    }
    CHECK_INT(bad, 0);
}

/* Every one- and two-byte string: OK, BAD and SHORT exactly where table 3-7 says. */
static void test_every_two_bytes(void)
{
    int bad = 0;
    for (int b0 = 0; b0 < 256; b0++) {
        uint8_t s[2] = {(uint8_t)b0, 0};
        size_t len = 0;
        int lead2 = b0 >= 0xC2 && b0 <= 0xDF, lead = b0 >= 0xC2 && b0 <= 0xF4;
        int kind = utf8_sequence(s, 1, &len);
        if (b0 < 0x80)
            bad += kind != UTF8_OK || len != 1;
        else
            bad += kind != (lead ? UTF8_SHORT : UTF8_BAD) || len != 1;
        for (int b1 = 0; b1 < 256; b1++) {
            s[1] = (uint8_t)b1;
            uint8_t lo = b0 == 0xE0 ? 0xA0 : b0 == 0xF0 ? 0x90 : 0x80;
            uint8_t hi = b0 == 0xED ? 0x9F : b0 == 0xF4 ? 0x8F : 0xBF;
            int second_ok = b1 >= lo && b1 <= hi;
            kind = utf8_sequence(s, 2, &len);
            if (b0 < 0x80 || !lead)
                bad += len != 1 || kind != (b0 < 0x80 ? UTF8_OK : UTF8_BAD);
            else if (!second_ok)
                bad += kind != UTF8_BAD || len != 1;
            else if (lead2)
                bad += kind != UTF8_OK || len != 2;
            else
                bad += kind != UTF8_SHORT || len != 2;
        }
    }
    CHECK_INT(bad, 0);
}

typedef struct {
    const char *in;
    size_t len;
    const char *out;        /* Python: in.decode("utf-8", "replace").encode("utf-8") */
} replace_case;

#define CASE(in, out) {in, sizeof in - 1, out}

static void test_replacement(void)
{
    static const replace_case cases[] = {
        /* Unicode's table 3-8: maximal subparts */
        CASE("a\xF1\x80\x80\xE1\x80\xC2" "b\x80" "c\x80\xBF" "d", "a" R R R "b" R "c" R R "d"),
        CASE("\xC0\xAF", R R),
        CASE("\xE0\x80\xAF", R R R),
        CASE("\xED\xA0\x80", R R R),
        CASE("\xF4\x90\x80\x80", R R R R),
        CASE("\xF0\x90\x80", R),
        CASE("\xF5", R),
        CASE("\xFF\xFE", R R),
        CASE("\xE2\x82", R),
        CASE("x\xC2", "x" R),
        CASE("\xF0\x9F\x98\x80\xE4\xB8\xAD", "\xF0\x9F\x98\x80\xE4\xB8\xAD"),
        CASE("", ""),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const replace_case *c = &cases[i];
        uint8_t out[64];
        size_t n = utf8_replace_ill_formed((const uint8_t *)c->in, c->len, out);
        CHECK_MSG(n == strlen(c->out) && !memcmp(out, c->out, n), "case %zu: %zu bytes out", i, n);
        CHECK_INT(utf8_is_valid((const uint8_t *)c->in, c->len), !strcmp(c->in, c->out) && c->len == strlen(c->in));
    }
}

/* Random strings built from the bytes that matter: the output is valid UTF-8, valid input comes
 * back unchanged, and replacing again changes nothing. */
static void test_random_replacement(void)
{
    static const uint8_t alphabet[] = {'a', 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2,
                                       0xDF, 0xE0, 0xE1, 0xED, 0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF};
    uint64_t state = 0x9E3779B97F4A7C15ull;
    int bad = 0;
    for (int iter = 0; iter < 200000; iter++) {
        uint8_t in[12], out[36], again[108];
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 1 + (size_t)(state >> 60) % 12;
        for (size_t k = 0; k < n; k++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            in[k] = alphabet[(state >> 33) % sizeof alphabet];
        }
        size_t m = utf8_replace_ill_formed(in, n, out);
        size_t m2 = utf8_replace_ill_formed(out, m, again);
        bad += !utf8_is_valid(out, m) || m2 != m || memcmp(again, out, m);
        if (utf8_is_valid(in, n))
            bad += m != n || memcmp(in, out, n);
    }
    CHECK_INT(bad, 0);
}

/* utf8_one_line, the one sanitizer of one-line text (errors quoting a server, a tools file,
 * the model): controls (C0, DEL and C1) and white space runs as one space, U+FFFD for ill-formed bytes, a cut
 * at a character with an ellipsis that still fits. */
static void test_one_line(void)
{
    char tiny[8];
    utf8_one_line("abcdefghij", 10, tiny, sizeof tiny);
    CHECK_STR(tiny, "abcd\xE2\x80\xA6");
    utf8_one_line("abc", 3, tiny, sizeof tiny);
    CHECK_STR(tiny, "abc");
    utf8_one_line("  a \n\n b\xC3", 9, tiny, sizeof tiny);
    CHECK_STR(tiny, "a b\xEF\xBF\xBD");
    char line[32];
    utf8_one_line("a\x1b[31mb\x7f\t", 9, line, sizeof line);
    CHECK_STR(line, "a [31mb");
    utf8_one_line("", 0, tiny, sizeof tiny);
    CHECK_STR(tiny, "");
    /* C1 controls are controls too: U+009B is CSI and U+009D OSC to a terminal that reads UTF-8
       (a server's error reply quoted in kimi-chat's last line on stderr) */
    const char *c1 = "a\xC2\x9B" "2Jb\xC2\x9D" "0;t\xC2\x9C\xC2\x85" "c\xC2\xA0";
    utf8_one_line(c1, strlen(c1), line, sizeof line);
    CHECK_STR(line, "a 2Jb 0;t c\xC2\xA0");
    /* a cut never splits a character and the result is always valid and NUL-terminated */
    char out[16];
    const char *text = "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";
    for (size_t cap = 4; cap <= sizeof out; cap++) {
        utf8_one_line(text, strlen(text), out, cap);
        CHECK_MSG(strlen(out) < cap && utf8_is_valid((const uint8_t *)out, strlen(out)), "cap %zu", cap);
    }
}

int main(void)
{
    test_one_line();
    test_every_scalar_value();
    test_every_two_bytes();
    test_replacement();
    test_random_replacement();
    return check_finish();
}
