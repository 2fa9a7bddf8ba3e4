/* test_ui_search: smart case (ASCII and beyond), matches in order and never overlapping, texts
 * with ill-formed UTF-8, the empty query, and stepping between matches with wrap-around. */
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"
#include "ui/search.h"

static search_result run(const char *query, const char *const *texts, int n)
{
    search_query q;
    search_result r = {0};
    kimi_err err = {0};
    CHECK(search_query_init(&q, query, strlen(query), &err) == 0);
    for (int i = 0; i < n; i++)
        CHECK(search_add_text(&r, &q, i, texts[i], strlen(texts[i]), &err) == 0);
    search_query_free(&q);
    return r;
}

static void check_match(const search_result *r, int i, int text, size_t offset, size_t len)
{
    CHECK_MSG(i < r->n && r->matches[i].text == text && r->matches[i].offset == offset && r->matches[i].len == len,
              "match %d: text %d offset %zu len %zu", i, i < r->n ? r->matches[i].text : -1,
              i < r->n ? r->matches[i].offset : 0, i < r->n ? r->matches[i].len : 0);
}

int main(void)
{
    const char *texts[] = {"The cache, the CACHE and thecache.", "no hit here", "Cache"};
    search_result r = run("cache", texts, 3);
    CHECK_INT(r.n, 4);                          /* lower case: every case matches */
    check_match(&r, 0, 0, 4, 5);
    check_match(&r, 1, 0, 15, 5);
    check_match(&r, 2, 0, 28, 5);
    check_match(&r, 3, 2, 0, 5);
    search_result_free(&r);
    r = run("Cache", texts, 3);                 /* a capital: case counts */
    CHECK_INT(r.n, 1);
    check_match(&r, 0, 2, 0, 5);
    search_result_free(&r);
    r = run("CACHE", texts, 3);
    CHECK_INT(r.n, 1);
    check_match(&r, 0, 0, 15, 5);
    search_result_free(&r);

    /* beyond ASCII: Ä and ä are one letter in two cases; CJK has no case */
    const char *intl[] = {"Ärger und ärger", "東京と東京"};
    r = run("ärger", intl, 2);
    CHECK_INT(r.n, 2);
    check_match(&r, 0, 0, 0, 6);
    check_match(&r, 1, 0, 11, 6);
    search_result_free(&r);
    r = run("Ärger", intl, 2);
    CHECK_INT(r.n, 1);
    search_result_free(&r);
    r = run("東京", intl, 2);
    CHECK_INT(r.n, 2);
    check_match(&r, 1, 1, 9, 6);
    search_result_free(&r);

    /* never overlapping: "aa" in "aaaaa" twice */
    const char *as[] = {"aaaaa"};
    r = run("aa", as, 1);
    CHECK_INT(r.n, 2);
    check_match(&r, 1, 0, 2, 2);
    search_result_free(&r);

    /* a partial match that fails restarts on the next character: "aab" in "aaab" */
    const char *aab[] = {"aaab"};
    r = run("aab", aab, 1);
    CHECK_INT(r.n, 1);
    check_match(&r, 0, 0, 1, 3);
    search_result_free(&r);

    /* ill-formed bytes in a text are skipped over, never matched, never read past the end */
    const char *bad[] = {"x\xff" "cat\xe2\x82", "cat\xc3"};
    r = run("cat", bad, 2);
    CHECK_INT(r.n, 2);
    check_match(&r, 0, 0, 2, 3);
    check_match(&r, 1, 1, 0, 3);
    search_result_free(&r);
    r = run("\xff", bad, 2);                    /* and a query's own never match */
    CHECK_INT(r.n, 0);
    search_result_free(&r);

    /* the empty query matches nothing; no match is a result with n 0 */
    r = run("", texts, 3);
    CHECK(r.n == 0 && search_step(&r, -1, 1) == -1);
    search_result_free(&r);
    r = run("absent", texts, 3);
    CHECK_INT(r.n, 0);
    search_result_free(&r);

    /* where to start from, and n / N with wrap-around */
    r = run("cache", texts, 3);
    CHECK_INT(search_first_from(&r, 0, 0), 0);
    CHECK_INT(search_first_from(&r, 0, 5), 1);
    CHECK_INT(search_first_from(&r, 1, 0), 3);
    CHECK_INT(search_first_from(&r, 2, 1), 4);  /* none after: r.n */
    CHECK_INT(search_step(&r, -1, 1), 0);
    CHECK_INT(search_step(&r, -1, -1), 3);
    CHECK_INT(search_step(&r, 3, 1), 0);
    CHECK_INT(search_step(&r, 0, -1), 3);
    CHECK_INT(search_step(&r, 1, 1), 2);
    search_result_clear(&r);
    CHECK(r.n == 0 && search_step(&r, 0, 1) == -1);
    search_result_free(&r);
    return check_finish();
}
