/* check: the assertions unit tests use; each failed check prints file:line and what differed,
 * and check_finish() prints "N passed, M failed" and gives the exit code. */
#ifndef KIMI_CHECK_H
#define KIMI_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (cond) {                                                                    \
            check_passed++;                                                            \
        } else {                                                                       \
            check_failed++;                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
        }                                                                              \
    } while (0)

#define CHECK_MSG(cond, ...)                                                           \
    do {                                                                               \
        if (cond) {                                                                    \
            check_passed++;                                                            \
        } else {                                                                       \
            check_failed++;                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
        }                                                                              \
    } while (0)

#define CHECK_INT(a, b)                                                                \
    do {                                                                               \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);               \
        CHECK_MSG(check_a_ == check_b_, "%s = %lld, %s = %lld", #a, check_a_, #b, check_b_); \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                          \
    do {                                                                               \
        double check_a_ = (double)(a), check_b_ = (double)(b);                         \
        CHECK_MSG(fabs(check_a_ - check_b_) <= (tol), "%s = %.9g, %s = %.9g (tol %g)",  \
                  #a, check_a_, #b, check_b_, (double)(tol));                          \
    } while (0)

#define CHECK_STR(a, b)                                                                \
    do {                                                                               \
        const char *check_a_ = (a), *check_b_ = (b);                                   \
        CHECK_MSG(check_a_ && check_b_ && !strcmp(check_a_, check_b_), "%s = \"%s\", %s = \"%s\"", \
                  #a, check_a_ ? check_a_ : "(null)", #b, check_b_ ? check_b_ : "(null)"); \
    } while (0)

static inline int check_finish(void)
{
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed == 0 && check_passed > 0 ? 0 : 1;
}

#endif
