/* self_check: kimi-chat --verify, engine/runtime/verify.h's check on its fixed prompt before the chat:
 * the CPU at TP 1 against the backend the chat will use, every line on stderr. */
#ifndef KIMI_APP_SELF_CHECK_H
#define KIMI_APP_SELF_CHECK_H

#include <stddef.h>

#include "app/chat/options.h"
#include "engine/base/error.h"

/* Run the check on model_dir with o's backend, tp and threads, printing what it does and one
 * "PASS|FAIL <metric> ..." line per metric, then the verdict. *passed: every metric within
 * tolerance; verdict [verdict_cap] receives the verdict in one line with the largest logit
 * and KL differences (for the full screen, which starts after these lines have scrolled by).
 * Returns 0 when the check ran (passed or not), else the error's status with err filled (the
 * checkpoint could not be loaded, the backend could not be opened). */
int self_check_run(const app_options *o, const char *model_dir, int *passed, char *verdict, size_t verdict_cap,
                   kimi_err *err);

#endif
