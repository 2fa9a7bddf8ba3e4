/* launch_grid: launch geometry against the multiprocessor count the backend reads once at open
 * (gemv_scratch.sm_count): how many parts a one-token GEMV splits its K range into. Plain C,
 * shared by the launchers (linear.cu, ops.cu) and tests/unit/test_launch_grid.c. */
#ifndef KIMI_KERNELS_CUDA_LAUNCH_GRID_H
#define KIMI_KERNELS_CUDA_LAUNCH_GRID_H

/* How evenly `total` equal blocks spread over sm_count multiprocessors: total / (sm_count * the
 * most blocks any one of them runs); 1 when they all run as many. */
static inline double launch_grid_balance(long total, int sm_count)
{
    long most = (total + sm_count - 1) / sm_count;
    return (double)total / ((double)most * sm_count);
}

/* The K split (1: none) of a GEMV whose rows take `blocks` blocks, on sm_count multiprocessors,
 * at most max_split parts. Few rows cannot fill the GPU, so K is split until there are about two
 * blocks per multiprocessor. A decode GEMV streams its weights once, each multiprocessor its
 * blocks' share, and the step waits for the one with the most: the split then grows (up to
 * max_split) to the first whose blocks spread within 10% of evenly, else to the evenest. (Two
 * per multiprocessor alone gave the router 48 x 8 = 384 blocks on sm_120's 188: 8 of them
 * run three, the rest two, 68% even; 11 parts give 528 blocks, 94%.) */
static inline int launch_grid_split(int blocks, int sm_count, int max_split)
{
    if (blocks <= 0 || sm_count <= 0 || max_split <= 1 || blocks >= 2 * sm_count)
        return 1;
    int least = (2 * sm_count + blocks - 1) / blocks;
    if (least >= max_split)
        return max_split;
    int best = least;
    for (int split = least; split <= max_split; split++) {
        double balance = launch_grid_balance((long)blocks * split, sm_count);
        if (balance >= 0.9)
            return split;
        if (balance > launch_grid_balance((long)blocks * best, sm_count))
            best = split;
    }
    return best;
}

#endif
