/* kv_shard: checks and the context a sharded cache holds. */
#include "engine/backend/kv_shard.h"

#include <limits.h>

int kv_shard_check(int tp, int dcp, kimi_err *err)
{
    if (dcp < 1 || dcp > KV_SHARD_MAX || tp % dcp)
        return kimi_fail(err, KIMI_ERR_USAGE, "--dcp %d: must divide --tp %d (1 <= dcp <= tp)", dcp, tp);
    return 0;
}

long kv_shard_context(long slots, int dcp)
{
    return slots > LONG_MAX / dcp ? LONG_MAX : slots * dcp;
}
