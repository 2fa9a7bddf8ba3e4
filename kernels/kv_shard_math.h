/* kv_shard_math: where each position of the latent KV cache lives under decode context
 * parallelism (--dcp N), written once for the CPU backend (C) and the CUDA kernels
 * (__host__ __device__): the TP ranks form groups of N consecutive ranks (rank r is member r % N
 * of group r / N), and position p is stored only by member p % N of every group, in its local
 * slot p / N. Round-robin keeps the members within one position of each other however long the
 * context grows, and each member's positions stay a contiguous run of slots (those below a
 * query's position are slots [0, kv_shard_local_count)). N = 1 is the replicated cache. */
#ifndef KIMI_KERNELS_KV_SHARD_MATH_H
#define KIMI_KERNELS_KV_SHARD_MATH_H

#include "kernels/nvfp4_math.h"

/* The member that stores position pos, and the slot it stores it in. */
static inline KIMI_HOST_DEVICE int kv_shard_owner(long pos, int dcp)
{
    return (int)(pos % dcp);
}

static inline KIMI_HOST_DEVICE long kv_shard_slot(long pos, int dcp)
{
    return pos / dcp;
}

/* How many of positions [0, n_pos) member stores: the slots [0, count) it holds of them. */
static inline KIMI_HOST_DEVICE long kv_shard_local_count(long n_pos, int dcp, int member)
{
    return n_pos > member ? (n_pos - member - 1) / dcp + 1 : 0;
}

/* Slots a member needs for a context of `positions` (the most any member holds). */
static inline KIMI_HOST_DEVICE long kv_shard_slots(long positions, int dcp)
{
    return positions / dcp + (positions % dcp != 0);
}

#endif
