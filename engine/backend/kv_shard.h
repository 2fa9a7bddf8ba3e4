/* kv_shard: decode context parallelism (--dcp N) on the engine's side: the check of N and the
 * context a sharded cache holds. Which member stores which position is kernels/kv_shard_math.h
 * (kv_shard_owner, kv_shard_slot, kv_shard_local_count, kv_shard_slots), shared with the CUDA
 * kernels that write and read the sharded cache. */
#ifndef KIMI_KV_SHARD_H
#define KIMI_KV_SHARD_H

#include "engine/base/error.h"
#include "kernels/kv_shard_math.h"

enum { KV_SHARD_MAX = 8 };

/* 0 when dcp divides tp (so 1 <= dcp <= tp); otherwise a one-line error naming --dcp. */
int kv_shard_check(int tp, int dcp, kimi_err *err);

/* The context that `slots` per member hold (slots x dcp, capped at LONG_MAX). */
long kv_shard_context(long slots, int dcp);

#endif
